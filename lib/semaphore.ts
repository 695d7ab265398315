import { nanoid } from 'nanoid';
import { createClient } from 'redis';
import { BlockingPool } from './blocking-pool';
import { checkpoint } from './checkpoint';
import { describe } from './describe';
import { assertDuration, localTimeArgument, toBlockingTimeout, toExpireArgument, toSeconds } from './durations';
import { LockTimeoutError, ReplicationError, SemaphoreClosedError, SemaphoreRedisError } from './errors';
import { semaphoreKeys, type SemaphoreKeys } from './keys';
import { assertName, resolveOptions, type ResolvedOptions, type SemaphoreOptions } from './options';
import {
  adaptClient,
  isConnectionError,
  replyErrorCode,
  sendPinned,
  topologyOf,
  wasNeverSent,
  wasRefusedForNow,
  type RedisClientLike,
} from './redis-client';
import { evalArguments, runScript, scripts, type Script } from './scripts';

/** What `startWatchdog` returns. */
export interface Watchdog {
  /** Stops the timer and resolves once a run in progress has finished. */
  stop(): Promise<void>;
}

export interface WatchdogOptions {
  /** Called when a run fails (the next run tries again). Default: `process.emitWarning`. */
  readonly onError?: (error: Error) => void;
}

/** One acquisition: the token, and the id Redis records as its owner (OWNERS). */
interface Grant {
  readonly token: string;
  readonly id: string;
  /** Taken by the callback form, which releases it itself; `unlock()` without a token skips it. */
  readonly scoped: boolean;
}

type Holder<T> = (token: string) => T | PromiseLike<T>;

/**
 * A waiter's registration in WAITING (see tryLock-6.lua, claim-7.lua): the grant id its inbox is
 * named after, and until when it surely lasts by this process's clock (`performance.now()`; the
 * lease is counted from when the request was sent, before Redis ran it, so this errs early).
 */
interface Registration {
  readonly id: string;
  readonly until: number;
}

/**
 * How many registration leases an abandoned grant id stays marked (recover-7.lua): long enough for a
 * pipeline delayed in the network (TCP retransmits after a healed partition) to arrive and be refused.
 */
const ABANDONED_LEASES = 4;

/** How often a semaphore's own client retries its first connection before the call fails. */
const INITIAL_CONNECT_RETRIES = 3;

/** A blocking wait gave up on its connection after this many failures in a row. */
const MAX_CONNECTION_FAILURES = 5;

/**
 * A distributed counting semaphore on a Redis token list: `resources` tokens, taken with `lock()`
 * (blocking, first come first served across processes) and put back with `unlock()`.
 */
export class Semaphore {
  /** The name given to the constructor; the keys are `SEMAPHORE:<name>:…`. */
  readonly name: string;
  /** How many tokens the semaphore is created with. */
  readonly resources: number;

  readonly #options: ResolvedOptions;
  readonly #keys: SemaphoreKeys;
  readonly #client: RedisClientLike;
  readonly #ownsClient: boolean;
  readonly #pool: BlockingPool;
  /** This instance's held grants, oldest first. */
  readonly #grants: Grant[] = [];
  readonly #inFlight = new Set<Promise<unknown>>();
  readonly #watchdogs = new Set<Watchdog>();
  #connecting: Promise<void> | undefined;
  #closing: Promise<void> | undefined;

  constructor(name: string, options: SemaphoreOptions = {}) {
    assertName(name);
    this.#options = resolveOptions(options);
    this.name = name;
    this.resources = this.#options.resources;
    const given = this.#options.redis;
    this.#keys = semaphoreKeys(name, { cluster: given !== undefined && topologyOf(given) === 'cluster' });
    this.#ownsClient = given === undefined;
    this.#client = given === undefined ? createOwnClient(this.#options.url) : adaptClient(given, this.#keys.available);
    this.#pool = new BlockingPool(this.#client, this.#options.maxBlockingConnections, loadClaimScript);
  }

  /** Blocks until a token is free and resolves it. */
  lock(): Promise<string>;
  /** Resolves a token, or `null` if none came within `timeout` ms; `0` never blocks; `null`, `undefined` and `Infinity` wait forever. */
  lock(timeout: number | null | undefined): Promise<string | null>;
  /** Runs `fn(token)` while holding a token and releases it afterwards, whatever happens; resolves what `fn` resolves. */
  lock<T>(fn: Holder<T>): Promise<Awaited<T>>;
  /** Like `lock(fn)`, but rejects with `LockTimeoutError` (and does not run `fn`) if no token came within `timeout` ms. */
  lock<T>(timeout: number | null | undefined, fn: Holder<T>): Promise<Awaited<T>>;
  lock<T>(...args: [] | [number | null | undefined | Holder<T>] | [number | null | undefined, Holder<T>]) {
    const [first, second] = args;
    try {
      if (typeof first === 'function') return this.#track(this.#withToken(null, first));
      const timeout = checkTimeout(first);
      if (args.length < 2) return this.#track(this.#acquire(timeout, false).then((grant) => grant?.token ?? null));
      if (typeof second !== 'function') {
        throw new TypeError(`Expected the second argument of lock to be a function, got ${describe(second)}`);
      }
      return this.#track(this.#withToken(timeout, second));
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
    const grant = this.#findGrant(token, 'unlock');
    if (!grant) return false;
    await checkpoint('unlock:before');
    const available = await this.#release(grant, true);
    await checkpoint('unlock:after');
    return available;
  }

  /**
   * Ends a held token's acquisition without putting the token back: how a consumer finishes a job it
   * took with `wait()`. Resolves `false` when this acquisition no longer holds it.
   */
  async consume(token?: string): Promise<boolean> {
    const grant = this.#findGrant(token, 'consume');
    if (!grant) return false;
    return (await this.#release(grant, false)) !== false;
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
    for (const grant of this.#grants.filter((held) => held.token === token)) this.#forget(grant);
    return available;
  }

  /**
   * Renews a held token's timestamp so a long holder is not reclaimed as stale. Resolves `false` if
   * this acquisition had already lost it.
   */
  async refresh(token?: string): Promise<boolean> {
    const grant = this.#findGrant(token, 'refresh');
    if (!grant) return false;
    await checkpoint('refresh:before');
    const renewed = await this.#run('refresh', scripts.refresh, [grant.token, grant.id, this.#now()]);
    if (renewed !== 1) this.#forget(grant);
    return renewed === 1;
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
    const grants = [...this.#grants];
    if (grants.length === 0) return false;
    const owners = (await this.#command('isLocked', ['HMGET', this.#keys.owners, ...grants.map((g) => g.token)])) as
      | Array<string | null>;
    return grants.some((grant, i) => owners[i] === grant.id);
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

  /** Creates the semaphore in Redis unless it exists; never touches an existing one. */
  async existsOrCreate(): Promise<void> {
    await this.#run('existsOrCreate', scripts.create, [String(this.resources), this.#expiration()]);
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
    this.#grants.length = 0;
  }

  /**
   * Returns tokens held longer than `staleClientTimeout` to the pool, waking blocked waiters, and
   * returns tokens stranded by waiters that died mid-hand-off. Resolves how many tokens it returned.
   */
  async releaseStaleLocks(): Promise<number> {
    const stale = this.#staleSeconds();
    if (stale === '') {
      throw new TypeError('releaseStaleLocks needs the `staleClientTimeout` option to know what is stale');
    }
    await checkpoint('reclaim:before');
    const [reclaimed, ...expired] = (await this.#run('releaseStaleLocks', scripts.releaseStale, [
      this.#now(),
      stale,
      this.#expiration(),
    ])) as [number, ...string[]];
    return reclaimed + (await this.#reapWaiters(expired));
  }

  /** Runs `releaseStaleLocks` every `intervalMs` until `stop()`; the timer does not keep the process alive. */
  startWatchdog(intervalMs = 1000, options: WatchdogOptions = {}): Watchdog {
    assertDuration('intervalMs', intervalMs, true);
    if (this.#staleSeconds() === '') {
      throw new TypeError('startWatchdog needs the `staleClientTimeout` option to know what is stale');
    }
    this.#assertOpen();
    const onError = options.onError ?? ((error: Error) => process.emitWarning(error));
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
      await Promise.all([...this.#watchdogs].map((watchdog) => watchdog.stop()));
      this.#pool.close();
      await Promise.allSettled([...this.#inFlight]);
      if (this.#ownsClient && this.#client.isOpen) {
        // A client whose connection is already gone cannot QUIT; closing must still settle.
        await this.#client.quit().catch(() => this.#client.disconnect().catch(() => undefined));
      }
    })();
    return this.#closing;
  }

  async #withToken<T>(timeout: number | null, fn: Holder<T>): Promise<Awaited<T>> {
    const grant = await this.#acquire(timeout, true);
    if (!grant) throw new LockTimeoutError(this.name, timeout ?? Infinity);
    let result: Awaited<T>;
    try {
      result = await fn(grant.token);
    } catch (error) {
      await this.#release(grant, true).catch(() => undefined);
      throw error;
    }
    await this.#release(grant, true);
    return result;
  }

  async #acquire(timeout: number | null, scoped: boolean): Promise<Grant | null> {
    await this.#ready();
    const deadline = timeout === null ? Infinity : performance.now() + timeout;
    let registration: Registration | null = null;
    // Local waiters queued for a connection are not blocked in Redis yet; a newcomer queues behind them.
    if (timeout === 0 || !this.#pool.hasQueue) {
      await checkpoint('lock:before-try');
      const id = nanoid();
      const sent = performance.now();
      let reply: [string | null, ...string[]];
      let acknowledged: number | null = null;
      try {
        [reply, acknowledged] = (await this.#runAndWait('lock', scripts.tryLock, [
          String(this.resources),
          id,
          this.#now(),
          this.#staleSeconds(),
          this.#expiration(),
          timeout === 0 ? '' : toSeconds(this.#leaseMs()),
        ])) as [[string | null, ...string[]], number | null];
      } catch (error) {
        // The script may have run and its reply been lost: adopt its grant, or retire its registration.
        if (!isConnectionError(error) || wasNeverSent(error)) throw error;
        const adopted = await this.#recover(id).catch(() => null);
        if (adopted === null) throw error;
        reply = [adopted];
      }
      const [token, ...expired] = reply;
      this.#reapInBackground(expired);
      if (token !== null) {
        await this.#checkReplicated('lock', acknowledged, { token, id, scoped });
        return this.#granted({ token, id, scoped });
      }
      if (timeout === 0) return null;
      registration = { id, until: sent + this.#leaseMs() };
    }
    await checkpoint('lock:before-wait');
    return this.#waitForToken(deadline, scoped, registration);
  }

  /** The blocking path: BLMOVE slices on a dedicated connection until a token comes or `deadline` passes. */
  async #waitForToken(deadline: number, scoped: boolean, registered: Registration | null): Promise<Grant | null> {
    let registration = registered;
    let failures = 0;
    let lastError: unknown;
    for (;;) {
      this.#assertOpen();
      if (failures >= MAX_CONNECTION_FAILURES) throw new SemaphoreRedisError(this.name, 'lock', lastError);
      if (failures > 0) await sleep(backoffMs(failures));
      let connection: RedisClientLike | null;
      try {
        connection = await this.#pool.acquire(deadline);
      } catch (error) {
        failures++;
        lastError = error;
        continue;
      }
      if (connection === null) {
        // Timed out queued for a connection: no BLMOVE was sent for this registration, so just end it.
        if (registration) void this.#command('lock', ['ZREM', this.#keys.waiting, registration.id]).catch(() => null);
        this.#assertOpen();
        return null;
      }
      let broken = false;
      try {
        for (;;) {
          const remaining = deadline - performance.now();
          // Past the deadline, a live registration still gets a last (1 ms) slice, whose claim ends it.
          if (remaining <= 0 && registration === null) return null;
          const slice = Math.min(Math.max(remaining, 1), this.#options.waitSlice);
          registration ??= { id: nanoid(), until: 0 };
          broken = true; // until #blockOnce says otherwise: a throw leaves the connection in doubt
          const outcome = await this.#blockOnce(connection, registration, slice, remaining <= this.#options.waitSlice);
          broken = outcome.failure !== undefined;
          if (outcome.token !== null) {
            const grant = { token: outcome.token, id: registration.id, scoped };
            // waitReplicas: the claim wrote the grant on this connection, so WAIT there.
            if (this.#options.waitReplicas) await this.#checkReplicated('lock', await this.#waitOn(connection), grant);
            return await this.#granted(grant);
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
        this.#pool.release(connection, broken);
      }
    }
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
  ): Promise<{ token: string | null; registration: Registration | null; failure?: unknown }> {
    const { id } = registration;
    const keys = this.#keys.scriptKeys;
    const inbox = this.#keys.inbox(id);
    const lease = toSeconds(this.#leaseMs());
    const grace = this.#graceMs();
    const sent = performance.now();
    const prepared =
      registration.until - sent >= sliceMs + grace / 2
        ? undefined
        : connection.sendCommand(
            evalArguments(scripts.prepareWait, keys, [id, this.#expiration(), lease]),
          );
    const moved = connection.sendCommand(['BLMOVE', this.#keys.available, inbox, 'LEFT', 'RIGHT', toBlockingTimeout(sliceMs)]);
    const claimArgs = () => [
      id,
      this.#now(),
      this.#expiration(),
      String(this.resources),
      this.#staleSeconds(),
      lastSlice ? '' : lease,
    ];
    // With local time the claim must stamp the moment the token arrived, so it waits for BLMOVE.
    const claimed = this.#options.useLocalTime
      ? moved.then(() => runScript(connection, scripts.claim, [...keys, inbox], claimArgs()))
      : connection.sendCommand(['EVALSHA', scripts.claim.sha1, '7', ...keys, inbox, ...claimArgs()]);
    const waiting = checkpoint('lock:waiting');
    // A silent connection (black hole, half-open TCP) must not hold a waiter forever.
    const guard = setTimeout(() => void connection.disconnect().catch(() => undefined), sliceMs + grace / 2);
    const [prepare, move, claim] = await Promise.allSettled([prepared, moved, claimed, waiting]);
    clearTimeout(guard);

    const results = [prepare, move, claim];
    // A connection failure, or a cluster or failover refusing for now (TRYAGAIN mid-migration,
    // CLUSTERDOWN, READONLY from a demoted primary): settle the attempt and retry on a new connection.
    const failure = results.find(
      (result): result is PromiseRejectedResult =>
        result.status === 'rejected' && (isConnectionError(result.reason) || wasRefusedForNow(result.reason)),
    );
    if (failure) return { token: await this.#recover(id), registration: null, failure: failure.reason };
    if (claim.status === 'fulfilled' && move.status === 'fulfilled' && prepare.status === 'fulfilled') {
      const [token, renewed, ...expired] = claim.value as [string | null, number, ...string[]];
      this.#reapInBackground(expired);
      return { token, registration: renewed === 1 ? { id, until: sent + this.#leaseMs() } : null };
    }
    // A command failed on a healthy connection (NOSCRIPT for the claim, OOM, NOPERM, WRONGTYPE…):
    // settle what BLMOVE may have moved, then report the first error unless the claim was all that failed.
    if (claim.status === 'rejected' && replyErrorCode(claim.reason) === 'NOSCRIPT') {
      await loadClaimScript(connection).catch(() => undefined);
    }
    const token = await this.#recover(id);
    const error = [prepare, move].find((result): result is PromiseRejectedResult => result.status === 'rejected');
    if (error) {
      if (token !== null) await this.#release({ token, id, scoped: false }, true).catch(() => undefined);
      throw new SemaphoreRedisError(this.name, 'lock', error.reason);
    }
    return { token, registration: null };
  }

  /** Adopts the grant of an attempt whose reply was lost, or marks it abandoned (recover-7.lua). */
  async #recover(id: string): Promise<string | null> {
    let attempt = 0;
    for (;;) {
      try {
        const client = await this.#ready(true);
        return (await runScript(client, scripts.recover, [...this.#keys.scriptKeys, this.#keys.inbox(id)], [
          id,
          this.#now(),
          this.#expiration(),
          toSeconds(ABANDONED_LEASES * this.#leaseMs()),
        ])) as string | null;
      } catch (error) {
        if (++attempt >= MAX_CONNECTION_FAILURES || !isConnectionError(error)) {
          throw new SemaphoreRedisError(this.name, 'lock', error);
        }
        await sleep(backoffMs(attempt));
      }
    }
  }

  async #granted(grant: Grant): Promise<Grant> {
    if (this.#closing) {
      await this.#release(grant, true).catch(() => undefined);
      throw new SemaphoreClosedError(this.name);
    }
    this.#grants.push(grant);
    await checkpoint('lock:granted');
    return grant;
  }

  /** `replicated`: with `waitReplicas`, WAIT after the release and reject on a shortfall (it still took effect). */
  async #release(grant: Grant, putBack: boolean, replicated = true): Promise<number | false> {
    const operation = putBack ? 'unlock' : 'consume';
    // Runs while closing too: close() waits for callbacks and hand-offs in flight to give tokens back.
    const [available, acknowledged] = (await this.#runAndWait(
      operation,
      scripts.release,
      [grant.token, grant.id, putBack ? '1' : '0', this.#expiration()],
      { whileClosing: true, wait: replicated },
    )) as [number, number | null];
    this.#forget(grant);
    if (available >= 0) await this.#checkReplicated(operation, acknowledged);
    return available < 0 ? false : available;
  }

  /**
   * `#run`, and with `waitReplicas` (unless `wait` is false) a `WAIT` right behind the script on the
   * same connection: resolves the script's reply and how many replicas acknowledged (null: no WAIT).
   */
  async #runAndWait(
    operation: string,
    script: Script,
    args: readonly string[],
    { whileClosing = false, wait = true }: { whileClosing?: boolean; wait?: boolean } = {},
  ): Promise<[unknown, number | null]> {
    const replicas = this.#options.waitReplicas;
    if (!replicas || !wait) return [await this.#run(operation, script, args, { whileClosing }), null];
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
  async #checkReplicated(operation: string, acknowledged: number | null, grant?: Grant): Promise<void> {
    const wanted = this.#options.waitReplicas;
    if (!wanted || acknowledged === null || acknowledged >= wanted.replicas) return;
    const error = new ReplicationError(this.name, operation, wanted.replicas, acknowledged);
    if (wanted.onShortfall === 'warn') {
      // By message and name: an Error from another realm (a VM context) is not accepted as is.
      process.emitWarning(error.message, error.name);
      return;
    }
    if (grant) await this.#release(grant, true, false).catch(() => undefined);
    throw error;
  }

  async #reapWaiters(registrations: readonly string[]): Promise<number> {
    if (registrations.length === 0) return 0;
    const inboxes = registrations.map(this.#keys.inboxOfRegistration);
    return (await this.#run('releaseStaleLocks', scripts.reapWaiters, [this.#expiration(), ...registrations], {
      extraKeys: inboxes,
    })) as number;
  }

  /** Expired registrations are rare (a waiter died mid-hand-off); returning their tokens is off the hot path. */
  #reapInBackground(registrations: readonly string[]): void {
    if (registrations.length > 0) void this.#reapWaiters(registrations).catch(() => undefined);
  }

  #findGrant(token: string | undefined, operation: string): Grant | undefined {
    if (token === undefined) return this.#grants.findLast((grant) => !grant.scoped);
    assertToken(token, operation);
    return this.#grants.findLast((grant) => grant.token === token);
  }

  #forget(grant: Grant): void {
    const index = this.#grants.lastIndexOf(grant);
    if (index >= 0) this.#grants.splice(index, 1);
  }

  async #run(
    operation: string,
    script: Script,
    args: readonly string[],
    { extraKeys = [], whileClosing = false }: { extraKeys?: readonly string[]; whileClosing?: boolean } = {},
  ) {
    const client = await this.#ready(whileClosing);
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

  #staleSeconds(): string {
    const stale = this.#options.staleClientTimeout;
    return stale === null ? '' : toSeconds(stale);
  }

  /** Extra time a waiter's registration outlives its BLMOVE slice. */
  #graceMs(): number {
    return Math.max(1000, this.#options.waitSlice / 2);
  }

  /**
   * A registration's lease: two slices and the grace, so one registration (renewed by each claim)
   * covers the next slice too, and a waiter re-registers (prepareWait) only after waiting elsewhere.
   */
  #leaseMs(): number {
    return 2 * this.#options.waitSlice + this.#graceMs();
  }

  #expiration(): string {
    return toExpireArgument(this.#options.expiration);
  }
}

/** `wait` is `lock` under the semaphore's traditional name. */
export interface Semaphore {
  wait: Semaphore['lock'];
}
Semaphore.prototype.wait = Semaphore.prototype.lock;

function checkTimeout(timeout: unknown): number | null {
  if (timeout === null || timeout === undefined || timeout === Infinity) return null;
  assertDuration('timeout', timeout);
  return timeout;
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

/** Exponential backoff for retries after connection failures: 50 ms doubling, at most 2 s. */
function backoffMs(attempt: number): number {
  return Math.min(2000, 50 * 2 ** attempt);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
