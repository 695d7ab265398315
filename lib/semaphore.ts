// The public Semaphore class: overloads, argument checks, wiring and events; each step lives in a module of its own.
import { EventEmitter } from 'node:events';
import { nanoid } from 'nanoid';
import { SemaphoreContext } from './context';
import { LockTimeoutError } from './errors';
import { Ledger, type Attempt } from './hold/ledger';
import type { GrantRef } from './hold/release';
import type { Holding } from './hold/holding';
import { Reclaim, type Watchdog, type WatchdogOptions } from './hold/reclaim';
import {
  assertGrantHandle,
  createLease,
  type AcquireOptions,
  type GrantHandle,
  type Lease,
  type LockCallback,
  type LockOptions,
} from './lease';
import { BlockingWait } from './lock/blocking-wait';
import { closeSemaphore } from './lock/close';
import { Contention } from './lock/contention';
import { Interrupts } from './lock/interrupts';
import { prepareConnection } from './lock/slice';
import { take, type TakeParts } from './lock/take';
import { assertName, resolveOptions, type SemaphoreOptions } from './options';
import * as inspect from './redis/inspect';
import { create, signal } from './redis/commands';
import type { HolderInfo } from './redis/status';
import { holdTraced, traceHold, type SemaphoreEvents, type SemaphoreStats } from './telemetry';
import { acquireArguments, assertToken, lockArguments } from './util/arguments';
import { checkpoint, hasCheckpointHook } from './util/checkpoint';
import { assertDuration } from './util/durations';
import { warn } from './util/warn';

export type { Watchdog, WatchdogOptions } from './hold/reclaim';

/** What `unlock` resolves when this instance holds nothing to release. */
const NOT_HELD: Promise<false> = Promise.resolve(false);

/** lock()'s answer: the token, its holding now its caller's to `unlock(token)` (see `Ledger.find`). */
function tokenOf(holding: Holding | null): string | null {
  if (holding === null) return null;
  holding.delivered = true;
  return holding.token;
}

const holdingOf = (holding: Holding | null): Holding | null => holding;

/** A lock manager's question (lib/locks.ts): whether this semaphore holds, awaits and keeps nothing. */
export const IS_IDLE = Symbol('redis-token-semaphore.isIdle');

/** A lock manager's question: whether this semaphore was closed (by its caller, or with the caller's client). */
export const IS_CLOSED = Symbol('redis-token-semaphore.isClosed');

/** The grant a handle names, as the release and refresh scripts name it. */
function grantOf(handle: GrantHandle): GrantRef {
  return { token: handle.token, id: handle.grantId, ...(handle.tokens && { tokens: handle.tokens }) };
}

/**
 * A distributed counting semaphore on a Redis token list: `resources` tokens, taken with `lock()`
 * (blocking, first come first served across processes) and put back with `unlock()`.
 */
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging -- `wait` (below) is `lock` under its traditional name
export class Semaphore extends EventEmitter<SemaphoreEvents> {
  /** The name given to the constructor; the keys are `SEMAPHORE:<name>:…`. */
  readonly name: string;
  /** How many tokens the semaphore is created with. */
  readonly resources: number;

  readonly #ctx: SemaphoreContext;
  readonly #ledger: Ledger;
  readonly #contention: Contention;
  readonly #reclaim: Reclaim;
  readonly #parts: TakeParts;

  constructor(name: string, options: SemaphoreOptions = {}) {
    super({ captureRejections: true }); // a rejecting async listener is reported, see nodejs.rejection
    assertName(name);
    const resolved = resolveOptions(options);
    this.name = name;
    this.resources = resolved.resources;
    const ctx = new SemaphoreContext(
      name,
      resolved,
      (event, ...args) => this.#emit(event, ...args),
      prepareConnection,
      (event) => this.listenerCount(event) > 0,
    );
    this.#ctx = ctx;
    this.#ledger = new Ledger(ctx);
    this.#contention = new Contention(ctx);
    this.#reclaim = new Reclaim(ctx);
    const parts = {
      ctx,
      ledger: this.#ledger,
      contention: this.#contention,
      reclaim: this.#reclaim,
      interrupts: new Interrupts(ctx),
    };
    this.#parts = { ...parts, blocking: new BlockingWait(parts, () => void this.close()) };
  }

  /** Blocks until a token is free and resolves it. */
  lock(): Promise<string>;
  /**
   * Resolves a token, or `null` if none came within `timeout` ms; `0` never blocks; `null`, `undefined`
   * and `Infinity` wait forever. `signal` ends the wait and rejects with its reason (a token arriving
   * then goes back).
   */
  lock(timeout: number | null | undefined, options?: LockOptions): Promise<string | null>;
  /**
   * Runs `fn(token, signal, fence)` while holding a token and releases it afterwards, whatever
   * happens; resolves what `fn` resolves. `signal` aborts if the token is lost while `fn` runs, and
   * then `lock` rejects with a `LockLostError` (its `result`: what `fn` resolved) even if `fn` resolved.
   * `options.signal` ends the wait for the token (as for `lock(timeout, options)`).
   */
  lock<T>(fn: LockCallback<T>, options?: LockOptions): Promise<Awaited<T>>;
  /** Like `lock(fn)`, but rejects with `LockTimeoutError` (not running `fn`) if no token came within `timeout` ms. */
  lock<T>(timeout: number | null | undefined, fn: LockCallback<T>, options?: LockOptions): Promise<Awaited<T>>;
  lock<T>(
    ...args:
      | []
      | [number | null | undefined | LockCallback<T>, LockOptions?]
      | [number | null | undefined, LockCallback<T>, LockOptions?]
  ) {
    try {
      const { timeout, fn, signal, permits } = lockArguments<LockCallback<T>>(args, this.resources);
      if (fn !== null) return this.#ctx.track(this.#withToken(timeout, fn, signal, permits));
      return take(this.#parts, timeout, this.#attempt(false, signal, permits), tokenOf);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Acquires a token as a `Lease`, released with `lease.release()` or at the end of an
   * `await using` scope. Rejects with `LockTimeoutError` when `timeout` runs out, and with the
   * signal's reason when `signal` aborts.
   */
  acquire(options?: AcquireOptions): Promise<Lease>;
  acquire(...args: [AcquireOptions?]): Promise<Lease> {
    try {
      const { timeout, signal, permits } = acquireArguments(args, this.resources);
      const attempt = this.#attempt(true, signal, permits);
      const lease = (holding: Holding | null): Lease => {
        if (!holding) throw new LockTimeoutError(this.name, timeout ?? Infinity);
        return createLease(holding, this.#ledger.leaseHost);
      };
      return take(this.#parts, timeout, attempt, lease, 'lease');
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Releases `token`, or the token this instance acquired most recently. Resolves the new number of
   * available tokens, or `false` when there is nothing to release or the token is no longer held by
   * this acquisition (reclaimed as stale, or wiped by a Redis reset); then nothing is put back.
   */
  unlock(token?: string): Promise<number | false> {
    try {
      const found = this.#findHolding(token, 'unlock', true);
      if (found instanceof Promise || hasCheckpointHook()) return this.#unlock(found);
      return found ? this.#ledger.release(found, true) : NOT_HELD;
    } catch (error) {
      return Promise.reject(error as Error);
    }
  }

  /** `unlock` when it must wait: for Redis to tell which holding (see `Ledger.find`), or for a test's checkpoint. */
  async #unlock(found: Holding | undefined | Promise<Holding | undefined>): Promise<number | false> {
    const holding = await found;
    if (!holding) return false;
    await checkpoint('unlock:before');
    const available = await this.#ledger.release(holding, true);
    await checkpoint('unlock:after');
    return available;
  }

  /**
   * Ends a held token's acquisition without putting the token back: how a consumer finishes a job it
   * took with `wait()`. Resolves `false` when this acquisition no longer holds it.
   */
  async consume(token?: string): Promise<boolean> {
    const holding = await this.#findHolding(token, 'consume', true);
    if (!holding) return false;
    return (await this.#ledger.release(holding, false)) !== false;
  }

  /**
   * Puts `token` on the semaphore, or any string (a job for a consumer blocked in `wait()`), or a new
   * unique token when none is given. Resolves the new number of available tokens.
   */
  async signal(token: string = nanoid()): Promise<number> {
    assertToken(token, 'signal');
    await checkpoint('signal:before');
    const available = await this.#ctx.call('signal', signal(this.#ctx, token));
    // A token signalled back is no longer this instance's to release.
    this.#ledger.loseAll('reclaimed', token);
    return available;
  }

  /**
   * Releases the grant `handle` names (from `lease.handOver()`, in this process or another), and only
   * that grant: the token goes back. Resolves `true` if this call ended the grant, `false` if it had
   * already ended (released, reclaimed, signalled back, deleted; the token may be another grant's
   * now, which stays). Retried like `unlock`'s release when the connection fails; safe to repeat.
   */
  release(handle: GrantHandle): Promise<boolean> {
    try {
      assertGrantHandle(handle, this.name, 'release');
      // A grant this instance holds itself goes through its holding, so the holding ends too.
      const holding = this.#ledger.holdingOf(handle.grantId, handle.token);
      if (holding) return this.#ledger.leaseHost.release(holding);
      return this.#ctx.track(this.#ledger.releaseHandedOver(grantOf(handle)));
    } catch (error) {
      return Promise.reject(error as Error);
    }
  }

  /**
   * Renews a held token's timestamp so a long holder is not reclaimed as stale. Resolves `false` if
   * this acquisition had already lost it.
   */
  refresh(token?: string): Promise<boolean>;
  /**
   * Renews the lease of the grant `handle` names (from `lease.handOver()`, in this process or
   * another) so it is not reclaimed as stale. Resolves `false` if that grant had already ended.
   */
  refresh(handle: GrantHandle): Promise<boolean>;
  async refresh(target?: string | GrantHandle): Promise<boolean> {
    if (typeof target === 'object' && target !== null) return this.#refreshHandedOver(target);
    if (target !== undefined) assertToken(target, 'refresh', ' or a handle from lease.handOver()');
    const holding = await this.#findHolding(target, 'refresh', false);
    if (!holding) return false;
    await checkpoint('refresh:before');
    return this.#ledger.refresh(holding);
  }

  async #refreshHandedOver(handle: GrantHandle): Promise<boolean> {
    assertGrantHandle(handle, this.name, 'refresh');
    const holding = this.#ledger.holdingOf(handle.grantId, handle.token);
    await checkpoint('refresh:before');
    return holding ? this.#ledger.refresh(holding) : this.#ledger.refreshGrant(grantOf(handle));
  }

  /** Counters since this instance was made, recent acquisitions' waits, and what it holds and waits for now. */
  stats(): SemaphoreStats {
    const { pool } = this.#ctx;
    return this.#ctx.telemetry.stats({
      held: this.#ledger.live().length,
      queued: pool.queued,
      connections: pool.size,
    });
  }

  /** The fencing number of `token`'s acquisition by this instance, or of the latest one; `undefined` if not held. */
  fence(token?: string): number | undefined {
    if (token !== undefined) assertToken(token, 'fence');
    return this.#ledger.fence(token);
  }

  /** Every held token with its holder, as Redis records them, oldest first. */
  holders(): Promise<HolderInfo[]> {
    return inspect.holders(this.#ctx);
  }

  /** How many waiters (of this library, in any process) are registered and waiting for a token right now. */
  waiting(): Promise<number> {
    return inspect.waiting(this.#ctx);
  }

  /**
   * With a token: whether anyone holds it. Without: whether this instance holds a token (one it
   * acquired and that was not lost since).
   */
  async isLocked(token?: string): Promise<boolean> {
    if (token !== undefined) assertToken(token, 'isLocked');
    return inspect.isLocked(this.#ctx, this.#ledger, token);
  }

  /** Whether the semaphore has been created in Redis. */
  exists(): Promise<boolean> {
    return inspect.exists(this.#ctx);
  }

  /** How many tokens are free right now; `resources` before the semaphore exists. */
  availableCount(): Promise<number> {
    return inspect.availableCount(this.#ctx);
  }

  /**
   * Creates the semaphore in Redis unless it exists; never touches an existing one (but sets a
   * missing VERSION, as the gem does). A large semaphore is created in batches, one script each.
   */
  async existsOrCreate(): Promise<void> {
    while ((await this.#ctx.call('existsOrCreate', create(this.#ctx))) === 'batches-remain');
  }

  /** Every token: free ones first, then held ones, then those set aside for a weighted waiter. */
  allTokens(): Promise<string[]> {
    return inspect.allTokens(this.#ctx);
  }

  /** Removes every key of the semaphore. Holders' later `unlock` and `refresh` resolve `false`. */
  delete(): Promise<void> {
    return inspect.deleteAll(this.#ctx, this.#ledger, this.#contention);
  }

  /**
   * Returns tokens held longer than `staleClientTimeout` to the pool, waking blocked waiters, and
   * returns tokens stranded by waiters that died mid-hand-off. Resolves how many tokens it returned.
   */
  releaseStaleLocks(): Promise<number> {
    return this.#reclaim.releaseStaleLocks();
  }

  /** Runs `releaseStaleLocks` every `intervalMs` until `stop()`; the timer does not keep the process alive. */
  startWatchdog(intervalMs = 1000, options: WatchdogOptions = {}): Watchdog {
    assertDuration('intervalMs', intervalMs, true);
    this.#ctx.assertOpen();
    return this.#reclaim.startWatchdog(
      intervalMs,
      options.onError ?? ((error) => this.#emitError(error, 'The watchdog')),
    );
  }

  /**
   * Stops watchdogs, ends blocked waits (they reject with `SemaphoreClosedError`; a token that reached
   * one goes back), closes the blocking connections, and quits the client if the semaphore made it.
   * Tokens still held stay held.
   */
  close(): Promise<void> {
    this.#ctx.closing ??= closeSemaphore(this.#parts);
    return this.#ctx.closing;
  }

  /** See IS_IDLE. */
  [IS_IDLE](): boolean {
    return (
      this.#ctx.inFlight === 0 &&
      this.#ctx.pool.size === 0 &&
      this.#ledger.live().length === 0 &&
      !this.#reclaim.drainsPending
    );
  }

  /** See IS_CLOSED. */
  [IS_CLOSED](): boolean {
    return this.#ctx.closing !== undefined;
  }

  async #withToken<T>(
    timeout: number | null,
    fn: LockCallback<T>,
    signal: AbortSignal | undefined,
    permits: number,
  ): Promise<Awaited<T>> {
    const holding = await take(this.#parts, timeout, this.#attempt(true, signal, permits), holdingOf, 'callback');
    if (!holding) throw new LockTimeoutError(this.name, timeout ?? Infinity);
    const ledger = this.#ledger;
    if (holdTraced()) return traceHold(this.name, this.resources, holding, () => ledger.runThenRelease(holding, fn));
    // Awaited, not returned: two ticks fewer (DESIGN "Costs").
    return await ledger.runThenRelease(holding, fn);
  }

  #attempt(scoped: boolean, signal: AbortSignal | undefined, permits: number): Attempt {
    return { scoped, startedAt: performance.now(), signal, permits };
  }

  /** The holding `unlock(token)`, `consume(token)` (`ends`) or `refresh(token)` acts on (see `Ledger.find`). */
  #findHolding(token: string | undefined, operation: string, ends: boolean) {
    if (token !== undefined) assertToken(token, operation);
    return this.#ledger.find(token, operation, ends);
  }

  /** Where an async listener's rejection goes (captureRejections): a warning, never a crash. */
  [Symbol.for('nodejs.rejection')](error: unknown, event: string | symbol): void {
    warn(`A "${String(event)}" listener of semaphore "${this.name}" rejected`, error);
  }

  /** Emits an event; a listener that throws must not break the step that emitted (a token would be stranded). */
  #emit<E extends keyof SemaphoreEvents>(event: E, ...args: SemaphoreEvents[E]): void {
    try {
      (this.emit as (event: E, ...args: SemaphoreEvents[E]) => boolean)(event, ...args);
    } catch (error) {
      warn(`A "${event}" listener of semaphore "${this.name}" threw`, error);
    }
  }

  /** An 'error' event when someone listens; a process warning otherwise (an unheard 'error' event would crash). */
  #emitError(error: Error, what: string): void {
    if (this.listenerCount('error') > 0) this.#emit('error', error);
    else warn(`${what} of semaphore "${this.name}" failed`, error);
  }
}

// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging -- declares the `wait` alias set on the prototype
export interface Semaphore {
  /** `lock` under the semaphore's traditional name (the consumer's side of `signal`). */
  wait: Semaphore['lock'];
}
Semaphore.prototype.wait = Semaphore.prototype.lock;
