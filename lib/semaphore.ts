import { EventEmitter } from 'node:events';
import { nanoid } from 'nanoid';
import { createClient } from 'redis';
import { BlockingPool } from './blocking-pool';
import { checkpoint } from './checkpoint';
import { DeadlineExceeded, withDeadline } from './deadline';
import { describe } from './describe';
import { assertDuration, localTimeArgument, toBlockingTimeout, toExpireArgument, toSeconds } from './durations';
import { LockTimeoutError, ReplicationError, SemaphoreClosedError, SemaphoreError, SemaphoreRedisError } from './errors';
import { decodeStatus, grantIdOf, type HolderInfo } from './holder-info';
import { Holding, holderLeaseMs, type HoldingHost } from './holding';
import { createLease, type AcquireOptions, type Lease, type LockOptions } from './lease';
import { semaphoreKeys, type SemaphoreKeys } from './keys';
import {
  assertName,
  resolveOptions,
  type LockLostReason,
  type ResolvedOptions,
  type SemaphoreOptions,
} from './options';
import {
  adaptClient,
  disconnectQuietly,
  isConnectionError,
  replyErrorCode,
  sendPinned,
  topologyOf,
  wasNeverSent,
  wasRefusedForNow,
  type RedisClientLike,
} from './redis-client';
import { evalArguments, runScript, scripts, type Script } from './scripts';
import { checkEvictionPolicy, explainConnectionFailure } from './server-checks';
import { debug, Telemetry, type SemaphoreEvents, type SemaphoreStats } from './telemetry';
import { warn } from './warn';

/** What `startWatchdog` returns. */
export interface Watchdog {
  /** Stops the timer and resolves once a run in progress has finished. */
  stop(): Promise<void>;
}

/** What `startWatchdog` takes. */
export interface WatchdogOptions {
  /** Called when a run fails (the next run tries again). Default: `process.emitWarning`. */
  readonly onError?: (error: Error) => void;
}

/** A grant Redis made: the token, the id it records as the owner (OWNERS), and the fencing number. */
interface Grant {
  readonly token: string;
  readonly id: string;
  readonly fence: number;
  /**
   * When the lease starts, on `performance.now()`: no later than Redis stamped the grant, as far as
   * this process can tell (see `Holding`).
   */
  readonly anchor: number;
}

/**
 * The callback form's function: runs while `token` is held. `signal` aborts (with a `LockLostError`)
 * if the token is lost meanwhile; `fence` is the acquisition's fencing number.
 */
export type LockCallback<T> = (token: string, signal: AbortSignal, fence: number) => T | PromiseLike<T>;

/** One call that wants a token: how its holding is released, when it started, and what may cancel it. */
interface Attempt {
  /** Released by the callback form or a `Lease` itself; `unlock()` without a token skips it. */
  readonly scoped: boolean;
  readonly startedAt: number;
  readonly signal: AbortSignal | undefined;
}

/**
 * A waiter's registration in WAITING (see tryLock-9.lua, claim-10.lua): the grant id its inbox is
 * named after, and until when it surely lasts by this process's clock (`performance.now()`; the
 * lease is counted from when the request was sent, before Redis ran it, so this errs early).
 */
interface Registration {
  readonly id: string;
  readonly until: number;
  /** A spare (see `#spares`): its first slice is short, in case the semaphore was reset meanwhile. */
  readonly spare?: boolean;
}

/**
 * How many registration leases an abandoned grant id stays marked (recover-10.lua): long enough for a
 * pipeline delayed in the network (TCP retransmits after a healed partition) to arrive and be refused.
 */
const ABANDONED_LEASES = 4;

/**
 * A spare registration (see `#spares`) nobody took within this long is removed: a busy loop takes
 * it within microseconds, and an idle one must not look like a waiter to `waiting()` for long.
 */
const SPARE_IDLE_MS = 200;

/**
 * The first slice under a spare registration. Nothing created the semaphore before that BLMOVE: if it
 * was reset meanwhile (deleted, flushed, a restart without persistence), the claim that ends this
 * slice re-creates it and re-registers, so the wait loses at most this long.
 */
const SPARE_FIRST_SLICE_MS = 1000;

/**
 * How long `recover` waits for Redis' answer. A client with an offline queue (node-redis' default)
 * holds commands while Redis is unreachable: past this, the step gives up (the queued command may
 * still run later, and its outcome is then settled in the background).
 */
const ANSWER_MS = 3000;

/**
 * How long one release try waits for its answer before the call rejects (a try with no answer is not
 * repeated: an offline queue still holds it). Longer than a failover (a Sentinel promotion takes a
 * few seconds), during which the release is held and then runs on the new primary.
 */
const RELEASE_ANSWER_MS = 10_000;

/** How long one `CLIENT UNBLOCK` waits for its answer before the connection is closed instead. */
const UNBLOCK_ANSWER_MS = 500;

/** How long close() waits for blocked waits to settle by themselves before it closes their connections. */
const CLOSE_SETTLE_MS = 1500;

/** How often a semaphore on the caller's client checks whether the caller closed it. */
const CLIENT_WATCH_MS = 250;

/** Most `CLIENT UNBLOCK`s sent for one cancelled slice (5 ms doubling: about 2.5 s) before its connection is closed. */
const UNBLOCK_TRIES = 9;

/** What one blocking slice ended with: a grant, or the registration for the next slice, and whether the connection failed. */
interface SliceOutcome {
  readonly grant: Grant | null;
  /** null: none left (make a new one). */
  readonly registration: Registration | null;
  readonly failure?: unknown;
}

/** How often a semaphore's own client retries its first connection before the call fails. */
const INITIAL_CONNECT_RETRIES = 3;

/** Most tries of a release whose connection failed (each after a backoff): about 3 s in all. */
const RELEASE_TRIES = 6;

/** A blocking wait gave up on its connection after this many failures in a row. */
const MAX_CONNECTION_FAILURES = 5;

/**
 * A distributed counting semaphore on a Redis token list: `resources` tokens, taken with `lock()`
 * (blocking, first come first served across processes) and put back with `unlock()`.
 */
export class Semaphore extends EventEmitter<SemaphoreEvents> {
  /** The name given to the constructor; the keys are `SEMAPHORE:<name>:…`. */
  readonly name: string;
  /** How many tokens the semaphore is created with. */
  readonly resources: number;

  readonly #options: ResolvedOptions;
  readonly #keys: SemaphoreKeys;
  readonly #client: RedisClientLike;
  readonly #ownsClient: boolean;
  readonly #pool: BlockingPool;
  /** This instance's held tokens, oldest first. */
  readonly #holdings: Holding[] = [];
  readonly #holdingHost: HoldingHost;
  readonly #telemetry: Telemetry;
  readonly #inFlight = new Set<Promise<unknown>>();
  readonly #watchdogs = new Set<Watchdog>();
  #connecting: Promise<void> | undefined;
  /**
   * Whether the last answer from Redis said others wait too (a tryLock miss, or a claim that left
   * registrations behind): the next lock() then skips tryLock, which would only miss.
   */
  #contended = false;
  /**
   * Registrations a claim made for this instance's next waits while others waited (claim-10.lua), so
   * that a contended lock skips prepareWait too: newest last.
   */
  readonly #spares: Registration[] = [];
  #sparesTimer: NodeJS.Timeout | undefined;
  /** Aborted when close() starts: settling steps stop waiting for a Redis that does not answer. */
  readonly #closeController = new AbortController();
  /** Watches the caller's client while this semaphore has connections (see #watchClient). */
  #clientWatch: NodeJS.Timeout | undefined;
  /** Ends each blocked slice early (see #interrupt); close() calls them all. */
  readonly #interrupts = new Set<() => void>();
  /** Pending drains of abandoned inboxes (see #drainAbandoned), by timer, with their grant ids. */
  readonly #drains = new Map<NodeJS.Timeout, string>();
  /** The eviction-policy check runs at first use, not on every command. */
  #evictionChecked = false;
  #closing: Promise<void> | undefined;

  constructor(name: string, options: SemaphoreOptions = {}) {
    // An async listener that rejects is reported (below), not left as an unhandled rejection.
    super({ captureRejections: true });
    assertName(name);
    this.#options = resolveOptions(options);
    this.name = name;
    this.resources = this.#options.resources;
    const given = this.#options.redis;
    this.#keys = semaphoreKeys(name, { cluster: given !== undefined && topologyOf(given) === 'cluster' });
    this.#ownsClient = given === undefined;
    this.#client = given === undefined ? createOwnClient(this.#options.url) : adaptClient(given, this.#keys.available);
    this.#pool = new BlockingPool(this.#client, this.#options.maxBlockingConnections, prepareConnection);
    this.#telemetry = new Telemetry(name);
    this.#holdingHost = {
      name,
      refreshHolding: (holding) => this.#refreshHolding(holding),
      holdingLost: (holding, reason) => this.#holdingLost(holding, reason),
    };
  }

  /** Blocks until a token is free and resolves it. */
  lock(): Promise<string>;
  /** Resolves a token, or `null` if none came within `timeout` ms; `0` never blocks; `null`, `undefined` and `Infinity` wait forever. */
  lock(timeout: number | null | undefined): Promise<string | null>;
  /** Like `lock(timeout)`; `signal` ends the wait and rejects with its reason (a token arriving meanwhile goes back). */
  lock(timeout: number | null | undefined, options: LockOptions): Promise<string | null>;
  /**
   * Runs `fn(token, signal, fence)` while holding a token and releases it afterwards, whatever
   * happens; resolves what `fn` resolves. `signal` aborts if the token is lost while `fn` runs.
   */
  lock<T>(fn: LockCallback<T>): Promise<Awaited<T>>;
  /** Like `lock(fn)`, but rejects with `LockTimeoutError` (and does not run `fn`) if no token came within `timeout` ms. */
  lock<T>(timeout: number | null | undefined, fn: LockCallback<T>): Promise<Awaited<T>>;
  lock<T>(
    ...args:
      | []
      | [number | null | undefined | LockCallback<T>]
      | [number | null | undefined, LockCallback<T> | LockOptions]
  ) {
    const [first, second] = args;
    try {
      if (typeof first === 'function') return this.#track(this.#withToken(null, first));
      const timeout = checkTimeout(first);
      if (typeof second === 'function') return this.#track(this.#withToken(timeout, second));
      if (second !== undefined && (typeof second !== 'object' || second === null || isAbortSignal(second))) {
        throw new TypeError(
          `Expected the second argument of lock to be a function or { signal }, got ${describe(second)}`,
        );
      }
      const attempt = this.#attempt(false, checkSignal(second?.signal));
      return this.#track(this.#acquire(timeout, attempt).then((holding) => holding?.token ?? null));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Acquires a token as a `Lease`, released with `lease.release()` or at the end of an
   * `await using` scope. Rejects with `LockTimeoutError` when `timeout` runs out, and with the
   * signal's reason when `signal` aborts.
   */
  acquire(options: AcquireOptions = {}): Promise<Lease> {
    try {
      if (typeof options !== 'object' || options === null || isAbortSignal(options)) {
        throw new TypeError(`Expected acquire options to be { timeout?, signal? }, got ${describe(options)}`);
      }
      const timeout = checkTimeout(options.timeout);
      const attempt = this.#attempt(true, checkSignal(options.signal));
      return this.#track(
        this.#acquire(timeout, attempt).then((holding) => {
          if (!holding) throw new LockTimeoutError(this.name, timeout ?? Infinity);
          return createLease(
            holding,
            async (held) => (await this.#release(held, true)) !== false,
            (held) => this.#refreshAndConfirm(held),
          );
        }),
      );
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Releases `token`, or the token this instance acquired most recently. Resolves the new number of
   * available tokens, or `false` when there is nothing to release or the token is no longer held by
   * this acquisition (reclaimed as stale, or wiped by a Redis reset); then nothing is put back.
   */
  async unlock(token?: string): Promise<number | false> {
    const holding = await this.#findHolding(token, 'unlock');
    if (!holding) return false;
    await checkpoint('unlock:before');
    const available = await this.#release(holding, true);
    await checkpoint('unlock:after');
    return available;
  }

  /**
   * Ends a held token's acquisition without putting the token back: how a consumer finishes a job it
   * took with `wait()`. Resolves `false` when this acquisition no longer holds it.
   */
  async consume(token?: string): Promise<boolean> {
    const holding = await this.#findHolding(token, 'consume');
    if (!holding) return false;
    return (await this.#release(holding, false)) !== false;
  }

  /**
   * Puts `token` on the semaphore, or any string (a job for a consumer blocked in `wait()`), or a new
   * unique token when none is given. Resolves the new number of available tokens.
   */
  async signal(token: string = nanoid()): Promise<number> {
    assertToken(token, 'signal');
    await checkpoint('signal:before');
    const available = (await this.#run('signal', scripts.signal, [
      token,
      String(this.resources),
      this.#expiration(),
    ])) as number;
    // A token signalled back is no longer this instance's to release.
    for (const holding of this.#holdings.filter((held) => held.token === token)) holding.lose('reclaimed');
    return available;
  }

  /**
   * Renews a held token's timestamp so a long holder is not reclaimed as stale. Resolves `false` if
   * this acquisition had already lost it.
   */
  async refresh(token?: string): Promise<boolean> {
    const holding = await this.#findHolding(token, 'refresh');
    if (!holding) return false;
    await checkpoint('refresh:before');
    return this.#refreshAndConfirm(holding);
  }

  /** Counters since this instance was made, and how long recent acquisitions waited. */
  stats(): SemaphoreStats {
    return this.#telemetry.stats();
  }

  /** The fencing number of `token`'s acquisition by this instance, or of the latest one; `undefined` if not held. */
  fence(token?: string): number | undefined {
    if (token !== undefined) assertToken(token, 'fence');
    const held = this.#holdings.filter((holding) => !holding.lost);
    const holding = token === undefined ? held.at(-1) : held.findLast((h) => h.token === token);
    return holding?.fence;
  }

  /** Every held token with its holder, as Redis records them, oldest first. */
  async holders(): Promise<HolderInfo[]> {
    return [...decodeStatus(await this.#run('holders', scripts.status, ['0'])).holders];
  }

  /** How many waiters (of this library, in any process) are registered and waiting for a token right now. */
  async waiting(): Promise<number> {
    return decodeStatus(await this.#run('waiting', scripts.status, ['0'])).waiting;
  }

  /**
   * With a token: whether anyone holds it. Without: whether this instance holds a token (one it
   * acquired and that was not lost since).
   */
  async isLocked(token?: string): Promise<boolean> {
    if (token !== undefined) {
      assertToken(token, 'isLocked');
      return (await this.#command('isLocked', ['HEXISTS', this.#keys.grabbed, token])) === 1;
    }
    const holdings = this.#holdings.filter((holding) => !holding.lost);
    if (holdings.length === 0) return false;
    const records = (await this.#command('isLocked', ['HMGET', this.#keys.grabbed, ...holdings.map((h) => h.token)])) as
      | Array<string | null>;
    return holdings.some((holding, i) => grantIdOf(records[i]) === holding.id);
  }

  /** Whether the semaphore has been created in Redis. */
  async exists(): Promise<boolean> {
    return (await this.#command('exists', ['EXISTS', this.#keys.exists])) === 1;
  }

  /** How many tokens are free right now; `resources` before the semaphore exists. */
  async availableCount(): Promise<number> {
    const [exists, count] = (await this.#run('availableCount', scripts.inspect, ['0'])) as [number, number];
    return exists === 1 ? count : this.resources;
  }

  /**
   * Creates the semaphore in Redis unless it exists; never touches an existing one (but sets a
   * missing VERSION, as the gem does). A large semaphore is created in batches, one script each.
   */
  async existsOrCreate(): Promise<void> {
    // 2: batches remain (see includes/ensure.lua).
    while ((await this.#run('existsOrCreate', scripts.create, [String(this.resources), this.#expiration()])) === 2);
  }

  /** Every token, free ones first, then held ones. */
  async allTokens(): Promise<string[]> {
    const [, , available, held] = (await this.#run('allTokens', scripts.inspect, ['1'])) as [
      number,
      number,
      string[],
      string[],
    ];
    return [...available, ...held];
  }

  /** Removes every key of the semaphore. Holders' later `unlock` and `refresh` resolve `false`. */
  async delete(): Promise<void> {
    const registrations = (await this.#command('delete', ['ZRANGE', this.#keys.waiting, '0', '-1'])) as string[];
    const inboxes = registrations.map(this.#keys.inboxOfRegistration);
    await this.#command('delete', ['DEL', ...this.#keys.scriptKeys, this.#keys.gemReleaseGuard, ...inboxes]);
    this.#spares.length = 0; // their registrations went with WAITING
    for (const holding of [...this.#holdings]) holding.lose('reclaimed');
  }

  /**
   * Returns tokens held longer than `staleClientTimeout` to the pool, waking blocked waiters, and
   * returns tokens stranded by waiters that died mid-hand-off. Resolves how many tokens it returned.
   */
  async releaseStaleLocks(): Promise<number> {
    await checkpoint('reclaim:before');
    const [reclaimed, ...expired] = (await this.#run('releaseStaleLocks', scripts.releaseStale, [
      this.#now(),
      this.#leaseArgument(),
      this.#expiration(),
    ])) as [number, ...string[]];
    const count = reclaimed + (await this.#reapWaiters(expired));
    if (count > 0) {
      this.#telemetry.reclaimed({ count });
      this.#emit('reclaimed', { count });
    }
    return count;
  }

  /** Runs `releaseStaleLocks` every `intervalMs` until `stop()`; the timer does not keep the process alive. */
  startWatchdog(intervalMs = 1000, options: WatchdogOptions = {}): Watchdog {
    assertDuration('intervalMs', intervalMs, true);
    this.#assertOpen();
    const report = options.onError ?? ((error: Error) => this.#emitError(error, 'The watchdog'));
    const onError = (error: Error) => {
      try {
        report(error);
      } catch (thrown) {
        warn(`onError of the watchdog of semaphore "${this.name}" threw`, thrown);
      }
    };
    let running: Promise<void> | undefined;
    const timer = setInterval(() => {
      running ??= this.releaseStaleLocks().then(
        () => undefined,
        (error: unknown) => onError(error instanceof Error ? error : new Error(String(error))),
      ).finally(() => (running = undefined));
    }, intervalMs);
    timer.unref();
    const watchdog: Watchdog = {
      stop: async () => {
        clearInterval(timer);
        this.#watchdogs.delete(watchdog);
        await running;
      },
    };
    this.#watchdogs.add(watchdog);
    return watchdog;
  }

  /**
   * Stops watchdogs, ends blocked waits (they reject with `SemaphoreClosedError`; a token that reached
   * one goes back), closes the blocking connections, and quits the client if the semaphore made it.
   * Tokens still held stay held.
   */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#closeController.abort();
      clearInterval(this.#clientWatch);
      await Promise.all([...this.#watchdogs].map((watchdog) => watchdog.stop()));
      // Waiters queued for a connection stop; blocked ones are unblocked (their claims settle them,
      // and a token that reached one goes back) before their connections close. Waits that do not
      // settle in time (Redis unreachable) have their connections closed, which ends them too.
      this.#pool.stopServing();
      for (const interrupt of this.#interrupts) interrupt();
      const settled = Promise.allSettled([...this.#inFlight]);
      await withDeadline(settled, CLOSE_SETTLE_MS, 'close').catch(() => undefined);
      this.#pool.close();
      await settled;
      const abandoned = [...this.#drains].map(([timer, id]) => {
        clearTimeout(timer);
        return `~${id}`;
      });
      this.#drains.clear();
      if (abandoned.length > 0 && this.#client.isReady) {
        await withDeadline(this.#reapWaiters([...new Set(abandoned)]), UNBLOCK_ANSWER_MS, 'drain').catch(() => undefined);
      }
      // Spare registrations go now rather than lapse, so nobody counts them as waiters.
      clearTimeout(this.#sparesTimer);
      const spares = this.#spares.splice(0).map((spare) => spare.id);
      if (this.#client.isReady) await withDeadline(this.#endRegistrations(spares), UNBLOCK_ANSWER_MS, 'ZREM').catch(() => undefined);
      // Tokens still held stay held, but nobody refreshes them any more: their holders hear
      // 'expired' when their leases end.
      for (const holding of this.#holdings) holding.stopRefreshing();
      if (this.#ownsClient && this.#client.isOpen) {
        // A client whose connection is gone (reconnecting) cannot QUIT; closing must still settle.
        const quit = this.#client.isReady ? this.#client.quit() : Promise.reject(new Error('not ready'));
        await quit.catch(() => disconnectQuietly(this.#client));
      }
    })();
    return this.#closing;
  }

  async #withToken<T>(timeout: number | null, fn: LockCallback<T>): Promise<Awaited<T>> {
    const holding = await this.#acquire(timeout, this.#attempt(true, undefined));
    if (!holding) throw new LockTimeoutError(this.name, timeout ?? Infinity);
    let result: Awaited<T>;
    try {
      result = await fn(holding.token, holding.signal, holding.fence);
    } catch (error) {
      await this.#release(holding, true).catch(() => undefined);
      throw error;
    }
    await this.#release(holding, true);
    return result;
  }

  #attempt(scoped: boolean, signal: AbortSignal | undefined): Attempt {
    return { scoped, startedAt: performance.now(), signal };
  }

  async #acquire(timeout: number | null, attempt: Attempt): Promise<Holding | null> {
    try {
      const holding = await this.#acquireOrAbort(timeout, attempt);
      if (holding === null) this.#telemetry.timedOut();
      return holding;
    } catch (error) {
      if (attempt.signal?.aborted && error === attempt.signal.reason) this.#telemetry.aborted();
      throw error;
    }
  }

  async #acquireOrAbort(timeout: number | null, attempt: Attempt): Promise<Holding | null> {
    attempt.signal?.throwIfAborted();
    await this.#ready();
    const deadline = timeout === null ? Infinity : performance.now() + timeout;
    let registration: Registration | null = null;
    // Local waiters queued for a connection are not blocked in Redis yet; a newcomer queues behind
    // them. While the semaphore is contended, tryLock would miss: the wait starts at once, under a
    // spare registration or with one in its pipeline (see DESIGN "Contended mode"). lock(0) always tries.
    if (timeout !== 0 && (this.#pool.hasQueue || this.#contended)) registration = this.#takeSpare();
    else {
      await checkpoint('lock:before-try');
      const id = nanoid();
      const sent = performance.now();
      let reply: [string | null, number, ...string[]];
      let acknowledged: number | null;
      const trying = this.#runAndWait('lock', scripts.tryLock, [
        String(this.resources),
        id,
        this.#now(),
        this.#leaseArgument(),
        this.#expiration(),
        timeout === 0 ? '' : toSeconds(this.#registrationLeaseMs()),
        this.#options.owner,
      ]) as Promise<[[string | null, number, ...string[]], number | null]>;
      try {
        [reply, acknowledged] = await raceAbort(trying, attempt.signal);
      } catch (error) {
        if (attempt.signal?.aborted && error === attempt.signal.reason) {
          // Aborted while the script was on its way: whatever it did is undone in the background.
          void this.#track(this.#undoTryLock(trying, id));
          throw error;
        }
        // The script may have run and its reply been lost: adopt its grant, or retire its registration.
        if (!isConnectionError(error) || wasNeverSent(error)) throw error;
        const adopted = await this.#recover(id).catch(() => null);
        if (adopted === null) throw error;
        return this.#granted(adopted, attempt);
      }
      const [token, fence, ...expired] = reply;
      debug('%s tryLock %s: %s', this.name, id, token === null ? 'miss' : `token ${token}, fence ${fence}`);
      this.#reapInBackground(expired);
      this.#contended = token === null;
      if (token !== null) {
        const grant = { token, id, fence, anchor: sent };
        await this.#checkReplicated('lock', acknowledged, grant);
        return this.#granted(grant, attempt);
      }
      if (timeout === 0) return null;
      registration = { id, until: sent + this.#registrationLeaseMs() };
    }
    await checkpoint('lock:before-wait');
    try {
      const holding = await this.#waitForToken(deadline, attempt, registration);
      // A wait that timed out (or failed, below) proves nothing about contention: try first next time.
      if (holding === null) this.#contended = false;
      return holding;
    } catch (error) {
      this.#contended = false;
      throw error;
    }
  }

  /** The blocking path: BLMOVE slices on a dedicated connection until a token comes or `deadline` passes. */
  async #waitForToken(deadline: number, attempt: Attempt, registered: Registration | null): Promise<Holding | null> {
    const { signal } = attempt;
    this.#watchClient();
    let registration = registered;
    let failures = 0;
    let lastError: unknown;
    for (;;) {
      this.#stopIfClosedOrAborted(signal, registration);
      if (failures >= MAX_CONNECTION_FAILURES) {
        throw new SemaphoreRedisError(this.name, 'lock', await explainConnectionFailure(this.#client, lastError));
      }
      if (failures > 0) {
        await sleep(backoffMs(failures), signal);
        this.#stopIfClosedOrAborted(signal, registration);
      }
      let connection: RedisClientLike | null;
      try {
        connection = await this.#pool.acquire(deadline, signal);
      } catch (error) {
        failures++;
        lastError = error;
        continue;
      }
      if (connection === null) {
        // Queued for a connection past the deadline (or until aborted or closed): no BLMOVE was sent
        // for this registration, so just end it.
        this.#stopIfClosedOrAborted(signal, registration);
        void this.#endRegistrations([registration?.id]);
        return null;
      }
      let broken = false;
      // Whether this call still answers for `connection`: an abort hands it to the settling below.
      let owned = true;
      try {
        for (;;) {
          if (this.#closing) {
            // On the waiter's own connection, which works when the caller closed its client too, and
            // before that connection closes.
            await this.#endRegistrations([registration?.id], connection);
            throw new SemaphoreClosedError(this.name);
          }
          this.#stopIfClosedOrAborted(signal, registration, connection);
          const remaining = deadline - performance.now();
          // Past the deadline, a live registration still gets a last (1 ms) slice, whose claim ends it.
          if (remaining <= 0 && registration === null) return null;
          const longest = registration?.spare ? Math.min(SPARE_FIRST_SLICE_MS, this.#options.waitSlice) : this.#options.waitSlice;
          const slice = Math.min(Math.max(remaining, 1), longest);
          registration ??= { id: nanoid(), until: 0 };
          broken = true; // until #blockOnce says otherwise: a throw leaves the connection in doubt
          const lastSlice = remaining <= this.#options.waitSlice;
          const pending = this.#blockOnce(connection, registration, slice, lastSlice, signal, deadline);
          let outcome: SliceOutcome;
          try {
            outcome = await raceAbort(pending, signal);
          } catch (error) {
            if (!signal?.aborted || error !== signal.reason) throw error;
            // The caller is told at once; the slice, cut short by CLIENT UNBLOCK (#interrupt), settles
            // in the background: a token its claim granted goes back, its registration ends, and the
            // connection returns to the pool. close() waits for it.
            owned = false;
            void this.#track(this.#settleAbandonedSlice(pending, connection));
            throw error;
          }
          broken = outcome.failure !== undefined;
          if (outcome.grant !== null) {
            // waitReplicas: the claim wrote the grant on this connection, so WAIT there.
            if (this.#options.waitReplicas) {
              await this.#checkReplicated('lock', await this.#waitOn(connection), outcome.grant);
            }
            return await this.#granted(outcome.grant, attempt, connection);
          }
          registration = outcome.registration;
          if (broken) {
            failures++;
            lastError = outcome.failure;
            break;
          }
          failures = 0;
        }
      } finally {
        if (owned) this.#pool.release(connection, broken);
      }
    }
  }

  /**
   * The caller may close its own client (quit, disconnect, destroy) while this semaphore waits or
   * keeps connections: nothing could then settle those waits, and the connections would keep the
   * process alive. While it has connections, the semaphore checks every CLIENT_WATCH_MS and closes
   * itself (waits reject with SemaphoreClosedError) once the caller's client is closed.
   */
  #watchClient(): void {
    if (this.#ownsClient || this.#clientWatch !== undefined || this.#closing) return;
    this.#clientWatch = setInterval(() => {
      if (!this.#client.isOpen) {
        debug('%s: the caller closed its client; closing', this.name);
        void this.close();
      } else if (this.#pool.size === 0 && this.#interrupts.size === 0) {
        clearInterval(this.#clientWatch);
        this.#clientWatch = undefined;
      }
    }, CLIENT_WATCH_MS);
    this.#clientWatch.unref();
  }

  /** What a slice abandoned by its caller (an abort) leaves: the token goes back, the registration ends. */
  async #settleAbandonedSlice(pending: Promise<SliceOutcome>, connection: RedisClientLike): Promise<void> {
    let broken = true;
    try {
      const outcome = await pending;
      broken = outcome.failure !== undefined;
      // On the waiter's own connection, free now, which works even when the caller closed its client.
      const via = broken ? undefined : connection;
      if (outcome.grant !== null) await this.#releaseGrant(outcome.grant, true, { via });
      await this.#endRegistrations([outcome.registration?.id], via);
    } catch {
      // A refused slice settled itself (#blockOnce gives back what its claim kept).
    } finally {
      this.#pool.release(connection, broken);
    }
  }

  /**
   * Ends a blocked slice early, as if it had timed out, by `CLIENT UNBLOCK` from the main connection:
   * the connection stays open and the claim pipelined behind BLMOVE still runs, in the order Redis
   * chose, so it settles the wait itself (a token that arrived first is granted, and given back by
   * the caller). Redis orders this, not the moment it notices a closed socket, and no connection is
   * lost. UNBLOCK answers 0 while the BLMOVE is still on its way (or already served): it is sent
   * again, with backoff, until the slice settles. Closing the connection is the fallback, where the
   * id is unknown, the main connection fails, or the BLMOVE never shows up blocked.
   */
  async #interrupt(connection: RedisClientLike, settled: Promise<unknown>): Promise<void> {
    let done = false;
    void settled.then(() => (done = true));
    const id = this.#pool.idOf(connection);
    if (id !== undefined) {
      for (let attempt = 0; attempt < UNBLOCK_TRIES && !done; attempt++) {
        try {
          // The main client, or (the caller closed it) a control connection of the pool's own.
          const control = this.#client.isOpen ? this.#client : await this.#pool.control();
          const unblocked = control.sendCommand(['CLIENT', 'UNBLOCK', id]);
          if (Number(await withDeadline(unblocked, UNBLOCK_ANSWER_MS, 'CLIENT UNBLOCK')) === 1) return;
        } catch {
          break;
        }
        await Promise.race([settled, sleep(5 * 2 ** attempt)]);
      }
      if (done) return;
    }
    await disconnectQuietly(connection);
  }

  /**
   * One slice: `BLMOVE AVAILABLE INBOX:<id>` and `claim` in one pipeline, so Redis claims the token
   * the moment BLMOVE moves it; preceded by `prepareWait` when the registration may have lapsed. When
   * the connection fails or goes silent past the slice, `recover` settles the attempt on the main
   * connection. Resolves the token, or the registration to use for the next slice (null: make a new one).
   */
  async #blockOnce(
    connection: RedisClientLike,
    registration: Registration,
    sliceMs: number,
    lastSlice: boolean,
    signal: AbortSignal | undefined,
    deadline: number,
  ): Promise<SliceOutcome> {
    const { id } = registration;
    debug('%s wait %s: BLMOVE for up to %d ms', this.name, id, sliceMs);
    const keys = this.#keys.scriptKeys;
    const inbox = this.#keys.inbox(id);
    const lease = toSeconds(this.#registrationLeaseMs());
    const grace = this.#graceMs();
    const sent = performance.now();
    const prepared =
      registration.until - sent >= sliceMs + grace / 2
        ? undefined
        : connection.sendCommand(
            evalArguments(scripts.prepareWait, keys, [
              id,
              this.#expiration(),
              lease,
              String(this.resources),
              this.#leaseArgument(),
              this.#now(),
            ]),
          );
    const moved = connection.sendCommand(['BLMOVE', this.#keys.available, inbox, 'LEFT', 'RIGHT', toBlockingTimeout(sliceMs)]);
    // A spare registration for this caller's next wait, made by the claim if others wait too; not
    // with `expiration`, whose deadlines it would stretch to its lease.
    const spare = this.#options.expiration === null ? nanoid() : '';
    const claimArgs = () => [
      id,
      this.#now(),
      this.#expiration(),
      String(this.resources),
      this.#leaseArgument(),
      lastSlice ? '' : lease,
      this.#options.owner,
      spare,
      lease,
    ];
    // With local time the claim must stamp the moment the token arrived, so it waits for BLMOVE.
    const claimed = this.#options.useLocalTime
      ? moved.then(() => runScript(connection, scripts.claim, [...keys, inbox], claimArgs()))
      : connection.sendCommand(['EVALSHA', scripts.claim.sha1, String(keys.length + 1), ...keys, inbox, ...claimArgs()]);
    const waiting = checkpoint('lock:waiting');
    const settled = Promise.allSettled([prepared, moved, claimed, waiting]);
    // A silent connection (black hole, half-open TCP) must not hold a waiter forever: `recover` then
    // settles what the pipeline may have done.
    const guard = setTimeout(() => void disconnectQuietly(connection), sliceMs + grace / 2);
    // An abort or close() ends the slice early (#interrupt), keeping the connection.
    let interrupting: Promise<void> | undefined;
    const interrupt = () => void (interrupting ??= this.#interrupt(connection, settled));
    signal?.addEventListener('abort', interrupt, { once: true });
    this.#interrupts.add(interrupt);
    if (this.#closing || signal?.aborted) interrupt();
    const [prepare, move, claim] = await settled;
    clearTimeout(guard);
    signal?.removeEventListener('abort', interrupt);
    this.#interrupts.delete(interrupt);
    // An UNBLOCK still on its way must not end the next wait this connection serves.
    await interrupting;

    const results = [prepare, move, claim];
    // A connection failure, or a cluster or failover refusing for now (TRYAGAIN mid-migration,
    // CLUSTERDOWN, READONLY from a demoted primary): settle the attempt and retry on a new connection.
    const failure = results.find(
      (result): result is PromiseRejectedResult =>
        result.status === 'rejected' && (isConnectionError(result.reason) || wasRefusedForNow(result.reason)),
    );
    // The claim may have run and made a spare that this client never heard of: remove it (a ZREM of
    // a missing member does nothing).
    if (failure) void this.#endRegistrations([spare]);
    if (failure && (signal?.aborted || this.#closing)) {
      // Its caller has gone: recover settles the attempt, giving back a token the pipeline may have
      // claimed (close() waits for it).
      const grant = await this.#recover(id, sent + sliceMs).catch(() => null);
      if (grant) await this.#releaseGrant(grant, true).catch(() => undefined);
      return { grant: null, registration: null, failure: failure.reason };
    }
    if (failure) {
      // Redis may not answer (an outage, with an offline queue): past the caller's deadline (at least
      // a moment, at most ANSWER_MS) the attempt counts as failed, and a late answer settles itself.
      const wait = Math.max(250, Math.min(ANSWER_MS, deadline - performance.now()));
      const grant = await this.#recover(id, sent + sliceMs, wait).catch((error: unknown) => {
        if ((error as { cause?: unknown }).cause instanceof DeadlineExceeded) return null;
        throw error;
      });
      return { grant, registration: null, failure: failure.reason };
    }
    const error = [prepare, move].find((result): result is PromiseRejectedResult => result.status === 'rejected');
    if (claim.status === 'fulfilled') {
      const [token, renewed, fence, others, ...expired] = claim.value as [
        string | null,
        number,
        number,
        number,
        ...string[],
      ];
      this.#reapInBackground(expired);
      // The claim ran when BLMOVE returned, at some moment after `sent`: the lease counts from `sent`
      // (#granted refreshes the grant first when that leaves too little of it).
      const grant = token === null ? null : { token, id, fence, anchor: sent };
      const until = sent + this.#registrationLeaseMs();
      const registration = renewed === 1 ? { id, until } : null;
      // The claim registered the spare id (claim-10.lua) when it granted while others waited.
      const madeSpare = grant !== null && others > 0 && spare !== '';
      if (!error) {
        if (grant !== null) this.#contended = others > 0;
        if (madeSpare) this.#keepSpare({ id: spare, until });
        return { grant, registration };
      }
      // prepareWait or BLMOVE was refused (OOM, NOPERM, WRONGTYPE…) on a healthy connection. The claim
      // ran after it and settled the inbox, so no recover is needed: undo what the claim kept, report.
      if (grant !== null) await this.#releaseGrant(grant, true).catch(() => undefined);
      void this.#endRegistrations([registration?.id, madeSpare ? spare : undefined]);
      throw new SemaphoreRedisError(this.name, 'lock', error.reason);
    }
    // The claim failed (NOSCRIPT, OOM…): settle what BLMOVE may have moved, then report the first
    // error unless the claim was all that failed.
    if (replyErrorCode(claim.reason) === 'NOSCRIPT') {
      await loadClaimScript(connection).catch(() => undefined);
    }
    const grant = await this.#recover(id);
    if (error) {
      if (grant !== null) await this.#releaseGrant(grant, true).catch(() => undefined);
      throw new SemaphoreRedisError(this.name, 'lock', error.reason);
    }
    return { grant, registration: null };
  }

  /**
   * Adopts the grant of an attempt whose reply was lost, or marks it abandoned (recover-10.lua). After
   * a blocking slice (`blockedUntil`: when its BLMOVE times out at the latest), a BLMOVE the server
   * still runs for the closed connection may yet deliver into the abandoned inbox: that inbox is
   * drained soon and again once the slice is surely over (#drainAbandoned).
   */
  async #recover(id: string, blockedUntil?: number, answerMs = ANSWER_MS): Promise<Grant | null> {
    debug('%s recover %s', this.name, id);
    let attempt = 0;
    for (;;) {
      try {
        const client = await this.#ready(true);
        const sent = performance.now();
        const running = runScript(client, scripts.recover, [...this.#keys.scriptKeys, this.#keys.inbox(id)], [
          id,
          this.#now(),
          this.#expiration(),
          toSeconds(ABANDONED_LEASES * this.#registrationLeaseMs()),
          this.#options.owner,
          this.#leaseArgument(),
        ]) as Promise<[string, number, number] | null>;
        const adopted = await this.#answerOrGiveUp(running, 'recover', answerMs, (late) => {
          // Queued while Redis was unreachable, it ran later: a grant it adopted goes back.
          if (late) void this.#releaseGrant({ token: late[0], id }, true).catch(() => undefined);
        });
        if (adopted === null) {
          if (blockedUntil !== undefined) this.#drainAbandoned(id, blockedUntil);
          return null;
        }
        // The grant may be older than this call: its lease counts from `age` ms before the call was sent.
        const [token, fence, age] = adopted;
        return { token, id, fence, anchor: sent - age };
      } catch (error) {
        if (error instanceof SemaphoreError) throw error;
        if (++attempt >= MAX_CONNECTION_FAILURES || !isConnectionError(error)) {
          throw new SemaphoreRedisError(this.name, 'lock', error);
        }
        await sleep(backoffMs(attempt));
      }
    }
  }

  /**
   * `running`'s answer, or a rejection after `answerMs` (at once once close() starts) while Redis does
   * not answer: a step must not wait forever in an offline queue. `late` gets the answer if it comes
   * after all.
   */
  async #answerOrGiveUp<T>(running: Promise<T>, what: string, answerMs: number, late: (answer: T) => void): Promise<T> {
    const closing = this.#closeController.signal;
    try {
      return await raceAbort(withDeadline(running, closing.aborted ? 0 : answerMs, what), closing);
    } catch (error) {
      if (error instanceof DeadlineExceeded || (closing.aborted && error === closing.reason)) {
        running.then(late, () => undefined);
        throw new SemaphoreRedisError(this.name, what, new DeadlineExceeded(what, answerMs));
      }
      throw error;
    }
  }

  async #granted(grant: Grant, attempt: Attempt, via?: RedisClientLike): Promise<Holding> {
    // A token that arrives as the caller goes (closed, aborted) goes straight back: Redis hands it
    // to the next waiter. `via`: the waiter's connection, still ours until #waitForToken returns it.
    if (this.#closing) {
      await this.#releaseGrant(grant, true, { via }).catch(() => undefined);
      throw new SemaphoreClosedError(this.name);
    }
    if (attempt.signal?.aborted) {
      // The caller is told at once; the release runs on (close() waits for it).
      void this.#track(this.#releaseGrant(grant, true).catch(() => undefined));
      attempt.signal.throwIfAborted();
    }
    const stale = this.#options.staleClientTimeout;
    const terms = stale === null ? null : { ms: stale, autoRefresh: this.#options.autoRefresh };
    // A grant whose lease is mostly spent (a long blocking wait counts from when the pipeline was
    // sent; see DESIGN "Leases") is refreshed once before it is handed out, which restarts its
    // lease from a known send time, or finds it already reclaimed.
    let anchor = grant.anchor;
    let renewed: boolean | null = null;
    const lease = terms === null ? 0 : holderLeaseMs(terms.ms);
    if (terms !== null && anchor + lease - performance.now() < (2 / 3) * lease) {
      const sentAt = performance.now();
      renewed = await this.#refreshHolding(grant).catch(() => null);
      if (renewed) anchor = sentAt;
    }
    const holding = new Holding(this.#holdingHost, { ...grant, scoped: attempt.scoped }, terms, anchor);
    this.#holdings.push(holding);
    const acquired = { token: holding.token, fence: holding.fence, waitedMs: performance.now() - attempt.startedAt };
    this.#telemetry.acquired(acquired);
    this.#emit('acquired', acquired);
    if (renewed === false) holding.lose('reclaimed');
    else holding.loseIfExpired();
    await checkpoint('lock:granted');
    return holding;
  }

  /** Gives back what an abandoned tryLock took: its token, or its waiter registration. */
  async #undoTryLock(trying: Promise<[[string | null, ...unknown[]], unknown]>, id: string): Promise<void> {
    try {
      const [[token]] = await trying;
      if (token !== null) await this.#releaseGrant({ token, id }, true);
      else void this.#endRegistrations([id]);
    } catch {
      const grant = await this.#recover(id).catch(() => null);
      if (grant) await this.#releaseGrant(grant, true).catch(() => undefined);
    }
  }

  /**
   * An aborted wait, or one whose semaphore is closing, ends here, between Redis steps: its
   * registration goes (best effort: it also lapses).
   */
  #stopIfClosedOrAborted(
    signal: AbortSignal | undefined,
    registration: Registration | null,
    via?: RedisClientLike,
  ): void {
    if (!this.#closing && !signal?.aborted) return;
    void this.#endRegistrations([registration?.id], via);
    if (this.#closing) throw new SemaphoreClosedError(this.name);
    signal?.throwIfAborted();
  }

  /**
   * Returns a token that reached an abandoned inbox to AVAILABLE (reapWaiters.lua drains an abandoned
   * inbox at any time: nothing may claim from it): a quarter second after it was abandoned (Redis
   * served the BLMOVE of a closing connection before it read the EOF), and once the slice is over
   * (a half-open connection's BLMOVE runs until its timeout). close() runs the pending drains at once.
   */
  #drainAbandoned(id: string, blockedUntil: number): void {
    for (const at of [performance.now() + 250, blockedUntil + this.#graceMs()]) {
      const timer = setTimeout(() => {
        this.#drains.delete(timer);
        void this.#reapWaiters([`~${id}`]).catch(() => undefined);
      }, Math.max(0, at - performance.now()));
      timer.unref();
      this.#drains.set(timer, id);
    }
  }

  /** Keeps a spare registration for the next contended wait; removed once idle (or beyond what can be used). */
  #keepSpare(registration: Registration): void {
    this.#spares.push(registration);
    if (this.#spares.length > this.#options.maxBlockingConnections) {
      void this.#endRegistrations([this.#spares.shift()?.id]);
    }
    this.#sparesTimer ??= setTimeout(() => this.#sweepSpares(), SPARE_IDLE_MS).unref();
  }

  /** The newest spare registration, or null (then the wait registers in its pipeline). */
  #takeSpare(): Registration | null {
    const spare = this.#spares.pop();
    return spare === undefined ? null : { ...spare, spare: true };
  }

  /** Ends the spares made more than SPARE_IDLE_MS ago (a spare's lease started when its pipeline was sent). */
  #sweepSpares(): void {
    this.#sparesTimer = undefined;
    // Made before now - SPARE_IDLE_MS, that is: leased until no later than this.
    const cutoff = performance.now() - SPARE_IDLE_MS + this.#registrationLeaseMs();
    const idle = this.#spares.filter((spare) => spare.until <= cutoff);
    this.#spares.splice(0, idle.length); // oldest first, so the idle ones lead
    void this.#endRegistrations(idle.map((spare) => spare.id));
    if (this.#spares.length > 0) this.#sparesTimer = setTimeout(() => this.#sweepSpares(), SPARE_IDLE_MS).unref();
  }

  /**
   * Ends registrations in one ZREM. Best effort (a registration also lapses), and also while closing,
   * so close() leaves none behind. Ids that are undefined or '' are skipped.
   */
  #endRegistrations(ids: ReadonlyArray<string | undefined>, via?: RedisClientLike): Promise<void> {
    const live = ids.filter((id): id is string => id !== undefined && id !== '');
    if (live.length === 0) return Promise.resolve();
    return (via ? Promise.resolve(via) : this.#ready(true))
      .then((client) => client.sendCommand(['ZREM', this.#keys.waiting, ...live]))
      .then(
        () => undefined,
        () => undefined,
      );
  }

  async #release(holding: Holding, putBack: boolean): Promise<number | false> {
    // A holding lost to another grant is known to be over: nothing to ask Redis.
    if (holding.lostReason === 'reclaimed') {
      holding.end();
      this.#forget(holding);
      return false;
    }
    holding.beginRelease();
    let available: number | false;
    let acknowledged: number | null;
    try {
      [available, acknowledged] = await this.#releaseGrant(holding, putBack, { replicated: true });
    } catch (error) {
      // The token may still be held in Redis: it goes stale (no more refreshes), and the holding
      // stays, so a later unlock can try again.
      holding.releaseFailed();
      throw error;
    }
    debug('%s %s %s: %s', this.name, putBack ? 'unlock' : 'consume', holding.token, available === false ? 'not held' : 'done');
    holding.end();
    this.#forget(holding);
    if (available !== false) {
      const released = { token: holding.token, fence: holding.fence, heldMs: performance.now() - holding.acquiredAt };
      this.#telemetry.released(released);
      this.#emit('released', released);
      // waitReplicas: the release took effect on the primary either way; a shortfall is reported.
      await this.#checkReplicated(putBack ? 'unlock' : 'consume', acknowledged);
    }
    return available;
  }

  async #refreshAndConfirm(holding: Holding): Promise<boolean> {
    // A lost holding stays lost: after 'expired' only unlock() may still give the token back. One
    // being released is no longer the caller's to renew.
    if (holding.lost || holding.releasing) return false;
    const sentAt = performance.now();
    const renewed = await this.#refreshHolding(holding);
    if (renewed) holding.confirm(sentAt);
    else holding.lose('reclaimed'); // a no-op when a release crossed it
    return renewed;
  }

  /**
   * The release script. With `replicated` and `waitReplicas`, a WAIT follows it on the same
   * connection: resolves the new length of AVAILABLE (false when the grant no longer held the token)
   * and how many replicas acknowledged (null: no WAIT).
   */
  async #releaseGrant(
    grant: { token: string; id: string },
    putBack: boolean,
    { replicated = false, via }: { replicated?: boolean; via?: RedisClientLike } = {},
  ): Promise<[number | false, number | null]> {
    const operation = putBack ? 'unlock' : 'consume';
    // A try whose reply was lost may have run: then a retry finds the grant already ended.
    let mayHaveRun = false;
    for (let attempt = 1; ; attempt++) {
      try {
        // Runs while closing too: close() waits for callbacks and hand-offs in flight to give tokens
        // back. A try that gets no answer in time is not repeated: an offline queue still holds it.
        const [reply, acknowledged] = await withDeadline(
          this.#runAndWait(operation, scripts.release, [grant.token, grant.id, putBack ? '1' : '0', this.#expiration()], {
            whileClosing: true,
            wait: replicated,
            via,
          }),
          RELEASE_ANSWER_MS,
          operation,
        ).catch((error: unknown) => {
          throw error instanceof DeadlineExceeded ? new SemaphoreRedisError(this.name, operation, error) : error;
        });
        if (!Array.isArray(reply) || typeof reply[0] !== 'number' || typeof reply[1] !== 'number') {
          // Another command's answer (node-redis v5 can pair replies wrongly after a reset during its
          // reconnect handshake): this try's outcome is unknown.
          throw new SemaphoreRedisError(this.name, operation, new Error(`unexpected reply ${describe(reply)}`));
        }
        const [ended, available] = reply as [number, number];
        return [ended === 1 || mayHaveRun ? available : false, acknowledged];
      } catch (error) {
        // Retrying is safe, since the script only ever ends this grant (idempotent by grant id), and
        // needed: a release that never ran would leave the token held by a live process that gave it
        // up. So anything but a refusal that a retry would meet again is retried.
        const cause = error instanceof SemaphoreRedisError ? error.cause : error;
        if (attempt >= RELEASE_TRIES || cause instanceof DeadlineExceeded || isPermanentRefusal(cause)) throw error;
        if (!wasNeverSent(cause)) mayHaveRun = true;
        await sleep(backoffMs(attempt));
      }
    }
  }

  async #refreshHolding(grant: { token: string; id: string }): Promise<boolean> {
    const renewed = await this.#run('refresh', scripts.refresh, [grant.token, grant.id, this.#now()], {
      whileClosing: true,
    });
    return renewed === 1;
  }

  #holdingLost(holding: Holding, reason: LockLostReason): void {
    // A lost holding stays in the registry until its holder releases it: an expired lease may still
    // be held in Redis (unlock() then gives the token back), and a reclaimed one must be what its
    // holder's unlock(token) finds, never a later acquisition of the same token (see #findHolding).
    const lost = { token: holding.token, fence: holding.fence, reason };
    this.#telemetry.lost(lost);
    this.#emit('lost', lost);
    const { onLockLost } = this.#options;
    if (!onLockLost) return;
    const report = (error: unknown) => warn(`onLockLost of semaphore "${this.name}" threw`, error);
    try {
      const result: unknown = onLockLost(holding.token, reason);
      if (isThenable(result)) result.then(undefined, report);
    } catch (error) {
      report(error);
    }
  }

  /**
   * `#run`, and with `waitReplicas` (unless `wait` is false) a `WAIT` right behind the script on the
   * same connection: resolves the script's reply and how many replicas acknowledged (null: no WAIT).
   */
  async #runAndWait(
    operation: string,
    script: Script,
    args: readonly string[],
    {
      whileClosing = false,
      wait = true,
      via,
    }: { whileClosing?: boolean; wait?: boolean; via?: RedisClientLike | undefined } = {},
  ): Promise<[unknown, number | null]> {
    const replicas = this.#options.waitReplicas;
    if (!replicas || !wait || via) return [await this.#run(operation, script, args, { whileClosing, via }), null];
    const client = await this.#ready(whileClosing);
    const keys = this.#keys.scriptKeys;
    const waitCommand = ['WAIT', String(replicas.replicas), String(replicas.timeoutMs)];
    try {
      const [reply, acknowledged] = await sendPinned(client, [
        ['EVALSHA', script.sha1, String(keys.length), ...keys, ...args],
        waitCommand,
      ]).catch((error: unknown) => {
        if (replyErrorCode(error) !== 'NOSCRIPT') throw error;
        return sendPinned(client, [evalArguments(script, keys, args), waitCommand]);
      });
      return [reply, Number(acknowledged)];
    } catch (error) {
      throw new SemaphoreRedisError(this.name, operation, error);
    }
  }

  /** WAIT on `connection` (with `waitReplicas`): how many replicas have its writes. */
  async #waitOn(connection: RedisClientLike): Promise<number> {
    const { replicas, timeoutMs } = this.#options.waitReplicas!;
    try {
      return Number(await connection.sendCommand(['WAIT', String(replicas), String(timeoutMs)]));
    } catch (error) {
      throw new SemaphoreRedisError(this.name, 'lock', error);
    }
  }

  /**
   * A shortfall of acknowledging replicas (`waitReplicas`) rejects with ReplicationError, after giving
   * `grant` back when a lock made one; with `onShortfall: 'warn'` it only emits a warning.
   */
  async #checkReplicated(
    operation: string,
    acknowledged: number | null,
    grant?: { token: string; id: string },
  ): Promise<void> {
    const wanted = this.#options.waitReplicas;
    if (!wanted || acknowledged === null || acknowledged >= wanted.replicas) return;
    const error = new ReplicationError(this.name, operation, wanted.replicas, acknowledged);
    if (wanted.onShortfall === 'warn') {
      // By message and name: an Error from another realm (a VM context) is not accepted as is.
      process.emitWarning(error.message, error.name);
      return;
    }
    if (grant) await this.#releaseGrant(grant, true).catch(() => undefined);
    throw error;
  }

  async #reapWaiters(registrations: readonly string[]): Promise<number> {
    if (registrations.length === 0) return 0;
    const inboxes = registrations.map(this.#keys.inboxOfRegistration);
    return (await this.#run('releaseStaleLocks', scripts.reapWaiters, [this.#expiration(), ...registrations], {
      extraKeys: inboxes,
      whileClosing: true,
    })) as number;
  }

  /** Expired registrations are rare (a waiter died mid-hand-off); returning their tokens is off the hot path. */
  #reapInBackground(registrations: readonly string[]): void {
    if (registrations.length > 0) void this.#reapWaiters(registrations).catch(() => undefined);
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

  /**
   * The holding `unlock(token)`, `consume(token)` or `refresh(token)` acts on. When this instance
   * holds `token` under several acquisitions (one was reclaimed and the token granted again to
   * another caller), the ones Redis no longer records come first, newest first: a call can then only
   * ever end a grant that is already over, never another caller's live one.
   */
  async #findHolding(token: string | undefined, operation: string): Promise<Holding | undefined> {
    if (token === undefined) return this.#holdings.findLast((holding) => !holding.scoped);
    assertToken(token, operation);
    // A holding whose release is on its way is its releaser's, not this caller's.
    const candidates = this.#holdings.filter((holding) => holding.token === token && !holding.releasing);
    if (candidates.length <= 1) return candidates[0];
    const known = candidates.findLast((holding) => holding.lostReason === 'reclaimed');
    if (known) return known;
    // A grant id never holds again once it stopped, so this read needs no atomicity with the call.
    const current = grantIdOf((await this.#command(operation, ['HGET', this.#keys.grabbed, token])) as string | null);
    return candidates.findLast((holding) => holding.id !== current) ?? candidates.at(-1);
  }

  #forget(holding: Holding): void {
    const index = this.#holdings.lastIndexOf(holding);
    if (index >= 0) this.#holdings.splice(index, 1);
  }

  async #run(
    operation: string,
    script: Script,
    args: readonly string[],
    {
      extraKeys = [],
      whileClosing = false,
      via,
    }: { extraKeys?: readonly string[]; whileClosing?: boolean; via?: RedisClientLike | undefined } = {},
  ) {
    // `via`: a waiter's own connection, which can settle its wait when the main client is gone.
    const client = via ?? (await this.#ready(whileClosing));
    try {
      return await runScript(client, script, [...this.#keys.scriptKeys, ...extraKeys], args);
    } catch (error) {
      throw new SemaphoreRedisError(this.name, operation, error);
    }
  }

  async #command(operation: string, args: string[]): Promise<unknown> {
    const client = await this.#ready();
    try {
      return await client.sendCommand(args);
    } catch (error) {
      throw new SemaphoreRedisError(this.name, operation, error);
    }
  }

  /** The main client, connected on first use when the semaphore made it. `whileClosing` lets waiters settle. */
  async #ready(whileClosing = false): Promise<RedisClientLike> {
    if (this.#closing && (!whileClosing || (this.#ownsClient && !this.#client.isOpen))) {
      throw new SemaphoreClosedError(this.name);
    }
    if (this.#ownsClient && !this.#client.isOpen) {
      this.#connecting ??= this.#client.connect().then(
        () => undefined,
        (error: unknown) => {
          this.#connecting = undefined;
          throw new SemaphoreRedisError(this.name, 'connect', error);
        },
      );
    }
    await this.#connecting;
    if (!this.#evictionChecked) {
      this.#evictionChecked = true;
      checkEvictionPolicy(this.#client, this.#options.redis ?? this.#client, this.name, this.#options.expiration !== null);
    }
    return this.#client;
  }

  #track<T>(promise: Promise<T>): Promise<T> {
    this.#inFlight.add(promise);
    const untrack = () => this.#inFlight.delete(promise);
    promise.then(untrack, untrack);
    return promise;
  }

  #assertOpen(): void {
    if (this.#closing) throw new SemaphoreClosedError(this.name);
  }

  #now(): string {
    return localTimeArgument(this.#options.useLocalTime);
  }

  /**
   * The lease recorded with each grant of this instance, in whole ms ('0': never stale), which every
   * reclaimer honours; also the stale timeout this instance applies to Ruby holders (plain stamps).
   */
  #leaseArgument(): string {
    const stale = this.#options.staleClientTimeout;
    return stale === null ? '0' : String(Math.ceil(stale));
  }

  /** Extra time a waiter's registration outlives its BLMOVE slice. */
  #graceMs(): number {
    return Math.max(1000, this.#options.waitSlice / 2);
  }

  /**
   * A registration's lease: two slices and the grace, so one registration (renewed by each claim)
   * covers the next slice too, and a waiter re-registers (prepareWait) only after waiting elsewhere.
   */
  #registrationLeaseMs(): number {
    return 2 * this.#options.waitSlice + this.#graceMs();
  }

  #expiration(): string {
    return toExpireArgument(this.#options.expiration);
  }
}

export interface Semaphore {
  /** `lock` under the semaphore's traditional name (the consumer's side of `signal`). */
  wait: Semaphore['lock'];
}
Semaphore.prototype.wait = Semaphore.prototype.lock;

function checkTimeout(timeout: unknown): number | null {
  if (timeout === null || timeout === undefined || timeout === Infinity) return null;
  assertDuration('timeout', timeout);
  return timeout;
}

/**
 * Failures a retry would meet again: the ACL, a wrong key type, too few replicas, no memory, or a
 * client that is closed (the semaphore's, or the caller's).
 */
function isPermanentRefusal(error: unknown): boolean {
  if (error instanceof SemaphoreClosedError || (error as { name?: unknown } | null)?.name === 'ClientClosedError') {
    return true;
  }
  return PERMANENT_REFUSALS.has(replyErrorCode(error) ?? '');
}

/** Error codes of refusals that a retry meets again. */
const PERMANENT_REFUSALS = new Set('NOPERM WRONGTYPE NOREPLICAS OOM'.split(' '));

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}

/** By shape, not instanceof: a signal may come from another realm. */
function isAbortSignal(value: unknown): value is AbortSignal {
  const { aborted, addEventListener } = (value ?? {}) as Partial<AbortSignal>;
  return typeof aborted === 'boolean' && typeof addEventListener === 'function';
}

function checkSignal(signal: unknown): AbortSignal | undefined {
  if (signal === undefined) return undefined;
  if (!isAbortSignal(signal)) {
    throw new TypeError(`Expected \`signal\` to be an AbortSignal, got ${describe(signal)}`);
  }
  return signal as AbortSignal;
}

function assertToken(token: unknown, operation: string): asserts token is string {
  if (typeof token !== 'string') {
    throw new TypeError(`Expected the token given to ${operation} to be a string, got ${describe(token)}`);
  }
}

/**
 * The client a semaphore makes when given none. It fails fast rather than hang: commands sent while
 * disconnected reject at once, and a first connection that cannot be made gives up after a few tries
 * (the next call tries again). Once connected, it reconnects with backoff for as long as it is open.
 */
function createOwnClient(url: string): RedisClientLike {
  let connected = false;
  const client = createClient({
    url,
    disableOfflineQueue: true,
    socket: {
      // A new Error, not `cause`: node-redis tells "give up" from a delay with instanceof, and `cause`
      // may come from another realm (a socket error under jest's VM) and not pass.
      reconnectStrategy: (retries: number, cause: Error) =>
        connected || retries < INITIAL_CONNECT_RETRIES ? backoffMs(retries) : new Error(cause.message),
    },
  });
  client.on('ready', () => (connected = true));
  client.on('error', () => undefined); // failures reach callers as rejected calls
  return client as unknown as RedisClientLike;
}

/**
 * Blocking connections call claim by SHA1 only (a fallback would cost a round trip on the hand-off).
 * Best effort: where an ACL forbids SCRIPT, the claim fails with NOSCRIPT and `recover` claims instead.
 */
function loadClaimScript(connection: RedisClientLike): Promise<unknown> {
  return connection.sendCommand(['SCRIPT', 'LOAD', scripts.claim.source]).catch(() => undefined);
}

/**
 * Readies a new blocking connection: loads the claim, and learns the connection's id, which
 * `CLIENT UNBLOCK` needs to end its wait without closing it. Without an id (an ACL that forbids
 * CLIENT ID), a cancelled wait closes its connection instead.
 */
async function prepareConnection(connection: RedisClientLike): Promise<string | undefined> {
  const [, id] = await Promise.all([
    loadClaimScript(connection),
    connection.sendCommand(['CLIENT', 'ID']).then(
      (reply) => String(reply),
      () => undefined,
    ),
  ]);
  return id;
}

/** Exponential backoff for retries after connection failures: 50 ms doubling, at most 2 s. */
function backoffMs(attempt: number): number {
  return Math.min(2000, 50 * 2 ** attempt);
}

/** Settles as `promise` does, or rejects with `signal`'s reason as soon as it aborts. */
function raceAbort<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  return new Promise<T>((resolve, reject) => {
    const abort = () => reject(signal.reason);
    signal.addEventListener('abort', abort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', abort));
  });
}

/** Resolves after `ms`, or as soon as `signal` aborts. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}
