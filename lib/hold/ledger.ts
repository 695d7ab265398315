// This instance's holdings: a grant becomes one (or is declined); found, released, refreshed, handed over, lost.
import type { Connection } from '../redis/client/connection';
import { checkpoint } from '../util/checkpoint';
import type { SemaphoreContext } from '../context';
import { withDeadline } from '../util/deadline';
import { LockLostError, SemaphoreClosedError } from '../errors';
import { grantIdOf } from '../redis/status';
import { Holding, leaseTerms, type HoldingHost, type LeaseTerms } from './holding';
import type { LockLostReason } from '../options';
import { MAX_TIMER_MS, mostlySpent, RENEW_ANSWER_MS } from '../lock/timing';
import { checkReplicated } from './replication';
import { REPLICATED, Releaser, type GrantRef, type Released } from './release';
import { refresh } from '../redis/commands';
import type { LeaseHost, LockCallback } from '../lease';
import { debug, debugEnabled } from '../telemetry';
import { warn } from '../util/warn';

/** A grant Redis made: the token, the grant id its GRABBED record names, and the fencing number. */
export interface Grant {
  readonly token: string;
  /** A weighted grant's tokens, all of them (`token` is the first); absent for a grant of one. */
  readonly tokens?: readonly string[];
  readonly id: string;
  readonly fence: number;
  /**
   * When the lease starts, on `performance.now()`: no later than Redis stamped the grant, as far as
   * this process can tell (see `Holding`).
   */
  readonly anchor: number;
}

/** One call that wants a token: how its holding is released, when it started, and what may cancel it. */
export interface Attempt {
  /** Released by the callback form or a `Lease` itself; `unlock()` without a token skips it. */
  readonly scoped: boolean;
  readonly startedAt: number;
  readonly signal: AbortSignal | undefined;
  /** How many tokens it takes as one grant (the `permits` option). */
  readonly permits: number;
}

/** What `release` resolves for a holding already known to be over. */
const NOT_HELD: Promise<false> = Promise.resolve(false);

export class Ledger {
  readonly #ctx: SemaphoreContext;
  /** This instance's held tokens, oldest first. */
  readonly #holdings: Holding[] = [];
  readonly #host: HoldingHost;
  /** Every holding's lease terms (the options do not change). */
  readonly #terms: LeaseTerms | null;
  /** The one timer of all the holdings (see `Holding.tick`), and when it fires (`performance.now()`). */
  #timer: NodeJS.Timeout | undefined;
  #timerAt = Infinity;
  readonly #releaser: Releaser;
  /** What every `Lease` of this instance asks of it. */
  readonly leaseHost: LeaseHost;

  constructor(ctx: SemaphoreContext) {
    this.#ctx = ctx;
    this.#terms = leaseTerms(ctx.options.staleClientTimeout, ctx.options.autoRefresh);
    this.#host = {
      name: ctx.name,
      refreshHolding: (holding) => this.refreshGrant(holding),
      holdingLost: (holding, reason) => this.#holdingLost(holding, reason),
      wake: (at) => this.#wake(at),
    };
    this.#releaser = new Releaser(ctx);
    this.leaseHost = {
      name: ctx.name,
      leaseMs: ctx.options.staleClientTimeout,
      release: async (held) => (await this.release(held, true)) !== false,
      refresh: (held) => this.refresh(held),
      handOver: (held) => this.handOver(held),
    };
  }

  live(): Holding[] {
    return this.#holdings.filter((holding) => !holding.lost);
  }

  /** The fencing number of `token`'s acquisition, or of the latest one; `undefined` if not held. */
  fence(token: string | undefined): number | undefined {
    const held = this.live();
    const holding = token === undefined ? held.at(-1) : held.findLast((h) => h.token === token);
    return holding?.fence;
  }

  /** Every holding of `token` (one of a weighted grant's, or every holding) is lost to `reason`: signalled back, or deleted. */
  loseAll(reason: LockLostReason, token?: string): void {
    const lost = this.#holdings.filter(
      (held) => token === undefined || held.token === token || held.tokens?.includes(token) === true,
    );
    for (const holding of lost) holding.lose(reason);
  }

  /** At close(): tokens still held stay held, but nobody refreshes them any more. */
  stopRefreshing(): void {
    for (const holding of this.#holdings) holding.stopRefreshing();
  }

  /**
   * A grant Redis made for `attempt` becomes a holding, or goes back when its caller has gone. The
   * usual grant is the holding itself, at once; a promise where something must happen first.
   */
  granted(grant: Grant, attempt: Attempt, via?: Connection): Holding | Promise<Holding> {
    // A token that arrives as the caller goes (closed, aborted) goes straight back: Redis hands it
    // to the next waiter. `via`: the waiter's connection, still ours until the wait returns it.
    if (this.#ctx.closing || attempt.signal?.aborted) return this.#decline(grant, attempt.signal, via);
    const terms = this.#terms;
    const now = performance.now();
    // A grant whose lease is mostly spent (a long blocking wait counts from when the pipeline was
    // sent; see DESIGN "Leases") is refreshed once before it is handed out, which restarts its
    // lease from a known send time, or finds it already reclaimed.
    if (terms !== null && mostlySpent(grant.anchor, terms.holderMs, now)) {
      return this.#renewThenHold(grant, attempt);
    }
    try {
      return this.#hold(grant, attempt, grant.anchor, null, now);
    } catch (error) {
      return Promise.reject(error as Error);
    }
  }

  /** A grant for a caller who has gone: closed (the token goes back first), or aborted (told at once). */
  async #decline(grant: Grant, signal: AbortSignal | undefined, via: Connection | undefined): Promise<never> {
    const ctx = this.#ctx;
    if (!ctx.closing && signal) {
      // The release runs on (close() waits for it).
      void ctx.track(this.giveBack(grant));
      signal.throwIfAborted();
    }
    await this.giveBack(grant, via);
    throw new SemaphoreClosedError(ctx.name);
  }

  async #renewThenHold(grant: Grant, attempt: Attempt): Promise<Holding> {
    const sentAt = performance.now();
    // Bounded: a main client that does not answer (stuck reconnecting) must not hold up the grant.
    const renewed = await withDeadline(this.refreshGrant(grant), RENEW_ANSWER_MS, 'refresh').catch(() => null);
    return this.#hold(grant, attempt, renewed ? sentAt : grant.anchor, renewed, performance.now());
  }

  /**
   * The holding, got at `now`, its `acquired` event and `lock:granted` checkpoint; `renewed` false:
   * the refresh found it ended.
   */
  #hold(
    grant: Grant,
    attempt: Attempt,
    anchor: number,
    renewed: boolean | null,
    now: number,
  ): Holding | Promise<Holding> {
    const holding = new Holding(this.#host, grant, attempt.scoped, this.#terms, anchor, now);
    this.#holdings.push(holding);
    this.#ctx.telemetry.acquired(holding.token, holding.fence, now - attempt.startedAt);
    if (renewed === false) holding.lose('reclaimed');
    else holding.loseIfExpired(now);
    const hook = checkpoint('lock:granted');
    return hook ? Promise.resolve(hook).then(() => holding) : holding;
  }

  /**
   * The callback form once granted: runs `fn` and releases the token, whatever happens. A token lost
   * while `fn` ran (its signal aborted, or the release found it no longer held) rejects with a
   * `LockLostError` carrying `fn`'s result: never a plain success.
   */
  async runThenRelease<T>(holding: Holding, fn: LockCallback<T>): Promise<Awaited<T>> {
    let result: Awaited<T>;
    try {
      result = await fn(holding.token, holding.signal, holding.fence);
    } catch (error) {
      await this.release(holding, true).catch(() => undefined);
      throw error;
    }
    const released = await this.release(holding, true);
    const lost = holding.lostReason ?? (released === false ? 'reclaimed' : undefined);
    if (lost !== undefined) throw new LockLostError(this.#ctx.name, holding.token, lost, { result });
    return result;
  }

  /** Ends `holding` (its token back, or consumed): the new length of AVAILABLE, or false if it was no longer held. */
  release(holding: Holding, putBack: boolean): Promise<number | false> {
    // A holding lost to another grant is known to be over: nothing to ask Redis (but a weighted
    // grant may have lost only some of its tokens: the release gives back the rest).
    if (holding.lostReason === 'reclaimed' && holding.tokens === undefined) {
      holding.end();
      this.#forget(holding);
      return NOT_HELD;
    }
    holding.beginRelease();
    return this.#releaser.release(
      holding,
      putBack,
      REPLICATED,
      (released) => this.#released(holding, putBack, released),
      (error) => {
        // The token may still be held in Redis: it goes stale (no more refreshes), and the holding
        // stays, so a later unlock can try again.
        holding.releaseFailed();
        throw error;
      },
    );
  }

  /** What follows a release that Redis answered. */
  #released(
    holding: Holding,
    putBack: boolean,
    { available, acknowledged }: Released,
  ): Promise<number | false> | number | false {
    const ctx = this.#ctx;
    if (debugEnabled) {
      debug(
        '%s %s %s: %s',
        ctx.name,
        putBack ? 'unlock' : 'consume',
        holding.token,
        available === false ? 'not held' : 'done',
      );
    }
    holding.end();
    this.#forget(holding);
    if (available === false) return false;
    ctx.telemetry.released(holding.token, holding.fence, holding.acquiredAt);
    // waitReplicas: the release took effect on the primary either way; a shortfall is reported.
    if (acknowledged === null) return available;
    return checkReplicated(ctx, putBack ? 'unlock' : 'consume', acknowledged).then(() => available);
  }

  async refresh(holding: Holding): Promise<boolean> {
    // A lost holding stays lost: after 'expired' only unlock() may still give the token back. One
    // being released is no longer the caller's to renew.
    if (holding.lost || holding.releasing) return false;
    const sentAt = performance.now();
    const renewed = await this.refreshGrant(holding);
    if (renewed) holding.confirm(sentAt);
    else holding.lose('reclaimed'); // a no-op when a release crossed it
    return renewed;
  }

  /**
   * Hands `holding` over (`Lease.handOver`): it stays held in Redis, but this instance forgets it: no
   * refreshes, no lease end or "lost" report, and `unlock(token)` no longer finds it. `false` if its
   * release has begun, or it is no longer this instance's (released).
   */
  handOver(holding: Holding): boolean {
    if (holding.releasing || !this.#holdings.includes(holding)) return false;
    holding.stopRefreshing();
    holding.end();
    this.#forget(holding);
    return true;
  }

  /** This instance's holding of grant `grantId` of `token`, unless its release is on its way (the releaser's). */
  holdingOf(grantId: string, token: string): Holding | undefined {
    return this.#holdings.find((holding) => holding.id === grantId && holding.token === token && !holding.releasing);
  }

  /**
   * Releases a grant this instance does not hold (a handed-over one) by its grant id, retried as
   * `release` is. Resolves whether it ended the grant (false: it had already ended).
   */
  async releaseHandedOver(grant: GrantRef): Promise<boolean> {
    const { available, acknowledged } = await this.#releaser.release(grant, true, REPLICATED);
    debug(
      '%s release %s (grant %s): %s',
      this.#ctx.name,
      grant.token,
      grant.id,
      available === false ? 'not held' : 'done',
    );
    if (available === false) return false;
    if (acknowledged !== null) await checkReplicated(this.#ctx, 'release', acknowledged);
    return true;
  }

  /** Gives a grant back (the token goes to the next waiter) when nobody will hold it; failures are ignored. */
  giveBack(grant: GrantRef, via?: Connection): Promise<void> {
    return this.#releaser.giveBack(grant, via);
  }

  async refreshGrant(grant: GrantRef): Promise<boolean> {
    const ctx = this.#ctx;
    return ctx.call('refresh', refresh(ctx, grant.token, grant.id, grant.tokens?.slice(1)), { whileClosing: true });
  }

  /**
   * The holding `unlock(token)`, `consume(token)` or `refresh(token)` acts on. `unlock` and `consume`
   * (`ends`) find only grants `lock()` took without a callback and already resolved to its caller:
   * never one of `lock(fn)` or `acquire()` (their holders release them), nor one a caller has not
   * received yet (a late or repeated call made before cannot be its holder's). When this instance
   * holds `token` under several acquisitions (one was reclaimed and the token granted again to
   * another caller), the ones Redis no longer records come first, newest first: a call can then only
   * ever end a grant that is already over, never another caller's live one.
   */
  find(
    token: string | undefined,
    operation: string,
    ends: boolean,
  ): Holding | undefined | Promise<Holding | undefined> {
    const holdings = this.#holdings;
    if (token === undefined) {
      for (let i = holdings.length - 1; i >= 0; i--) if (isLinear(holdings[i]!)) return holdings[i];
      return undefined;
    }
    // A holding whose release is on its way is its releaser's, not this caller's.
    let found: Holding | undefined;
    for (const holding of holdings) {
      if (holding.token !== token || holding.releasing || (ends && !isLinear(holding))) continue;
      if (found !== undefined) return this.#findAmong(token, operation, ends);
      found = holding;
    }
    return found;
  }

  /** `find` when this instance holds `token` under several acquisitions. */
  async #findAmong(token: string, operation: string, ends: boolean): Promise<Holding | undefined> {
    const candidates = this.#holdings.filter(
      (holding) => holding.token === token && !holding.releasing && (!ends || isLinear(holding)),
    );
    const known = candidates.findLast((holding) => holding.lostReason === 'reclaimed');
    if (known) return known;
    // A grant id never holds again once it stopped, so this read needs no atomicity with the call.
    const current = grantIdOf(
      (await this.#ctx.command(operation, ['HGET', this.#ctx.keys.grabbed, token])) as string | null,
    );
    // Not the candidates' statuses from before the read: a holding released meanwhile is not found.
    const live = candidates.filter((holding) => !holding.releasing && this.#holdings.includes(holding));
    return live.findLast((holding) => holding.id !== current) ?? live.at(-1);
  }

  #holdingLost(holding: Holding, reason: LockLostReason): void {
    const ctx = this.#ctx;
    // A lost holding stays in the registry until its holder releases it: an expired lease may still
    // be held in Redis (unlock() then gives the token back), and a reclaimed one must be what its
    // holder's unlock(token) finds, never a later acquisition of the same token (see `find`).
    ctx.telemetry.lost(holding.token, holding.fence, reason);
    // A weighted grant that lost some of its tokens gives back the others at once.
    if (reason === 'reclaimed' && holding.tokens !== undefined) void ctx.track(this.giveBack(holding));
    const { onLockLost } = ctx.options;
    if (!onLockLost) return;
    const report = (error: unknown) => warn(`onLockLost of semaphore "${ctx.name}" threw`, error);
    try {
      const result: unknown = onLockLost(holding.token, reason);
      if (isThenable(result)) result.then(undefined, report);
    } catch (error) {
      report(error);
    }
  }

  #forget(holding: Holding): void {
    const index = this.#holdings.lastIndexOf(holding);
    if (index >= 0) this.#holdings.splice(index, 1);
  }

  /** Makes the holdings' one timer fire by `at` (see `Holding.tick`). */
  #wake(at: number): void {
    if (at >= this.#timerAt) return;
    clearTimeout(this.#timer);
    this.#timerAt = at;
    this.#timer = setTimeout(this.#onTimer, Math.min(MAX_TIMER_MS, Math.max(0, at - performance.now())));
    this.#timer.unref();
  }

  /** Ends the leases that are over and starts the refreshes that are due, then waits for the next. */
  readonly #onTimer = (): void => {
    this.#timer = undefined;
    this.#timerAt = Infinity;
    const now = performance.now();
    let next = Infinity;
    // A copy: a lost holding's callback may release (and so remove) holdings.
    for (const holding of [...this.#holdings]) next = Math.min(next, holding.tick(now));
    if (next !== Infinity) this.#wake(next);
  };
}

/** Taken by `lock()` without a callback and resolved to its caller: what `unlock` and `consume` may end. */
function isLinear(holding: Holding): boolean {
  return !holding.scoped && holding.delivered;
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}
