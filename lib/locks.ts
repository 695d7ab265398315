// The lock manager (createLocks): any number of names on one client and one bounded pool of blocking connections.
import { BlockingPool } from './pool/blocking-pool';
import type { Connection } from './redis/client/connection';
import { adaptClient, topologyOf } from './redis/client/adapt';
import type { SupportedRedisClient } from './redis/client/types';
import { withDeadline } from './util/deadline';
import { describe } from './util/describe';
import { assertDuration } from './util/durations';
import { CLIENT_WATCH_MS, CLOSE_OPENING_MS, MAX_TIMER_MS } from './lock/timing';
import { SemaphoreClosedError } from './errors';
import type { AcquireOptions, Lease, LockCallback, LockOptions } from './lease';
import { assertName, resolveOptions, SHARED_POOL, type SemaphoreOptions } from './options';
import { IS_CLOSED, IS_IDLE, Semaphore } from './semaphore';
import { prepareConnection } from './lock/slice';

/** The options of `createLocks`: those of every semaphore it serves, and the pool's. */
export interface LocksOptions extends Omit<SemaphoreOptions, 'redis' | 'url' | 'maxBlockingConnections'> {
  /** The client every name shares (node-redis or ioredis, standalone or Sentinel; not a Cluster). */
  readonly redis: SupportedRedisClient;
  /**
   * Most connections open for blocking waits, across all names. Further waiters queue in this
   * process, in arrival order whatever their name; while they do, each blocked waiter takes turns of
   * at most a second.
   * @default 50
   */
  readonly maxBlockingConnections?: number;
  /**
   * After this many milliseconds unused, a blocking connection closes, and so does the semaphore of
   * a name (made by `lock` or `acquire`) that holds and awaits nothing; both come back when needed.
   * @default 30000
   */
  readonly idleTimeout?: number;
  /** How many tokens each name has unless `semaphore(name, { resources })` says otherwise. @default 1 */
  readonly resources?: number;
  /**
   * Every key of a name expires this many milliseconds after the name was last used, so names that
   * come and go leave nothing in Redis; never while a token of the name is held, nor while a waiter
   * is registered (see `SemaphoreOptions.expiration`). `null` keeps the keys for good.
   * @default 60000
   */
  readonly expiration?: number | null;
}

/** What `locks.stats()` reports. */
export interface LocksStats {
  /** Names with a semaphore in this process now (idle ones close after `idleTimeout`). */
  readonly names: number;
  /** Blocking connections open or opening. */
  readonly connections: number;
  /** Blocking connections open and unused. */
  readonly idleConnections: number;
  /** Callers (of any name) waiting in this process for a blocking connection. */
  readonly queued: number;
}

interface Entry {
  readonly semaphore: Semaphore;
  /** Returned by `semaphore()` or `mutex()`: the caller may keep it, so it lives until `close()`. */
  pinned: boolean;
  /** When a sweep first found it idle (performance.now()), or undefined. */
  idleSince: number | undefined;
}

const DEFAULT_MAX_CONNECTIONS = 50;
const DEFAULT_IDLE_TIMEOUT = 30_000;
/** A lock manager's names are many and short-lived: unlike a `Semaphore`'s, their keys expire by default. */
export const DEFAULT_LOCKS_EXPIRATION = 60_000;

/**
 * Any number of semaphore names on one client: `locks.lock(name, fn)` for a lock per user, order or
 * file, without a `Semaphore` (and its connections) per name. Blocking waits of every name share
 * one pool of at most `maxBlockingConnections`, served in arrival order; names and connections
 * unused for `idleTimeout` are dropped. One `close()` ends it all.
 */
export class Locks {
  readonly #defaults: SemaphoreOptions & { [SHARED_POOL]: BlockingPool };
  readonly #idleTimeout: number;
  readonly #pool: BlockingPool;
  /** The caller's client as the library talks to it: watched for the caller closing it. */
  readonly #source: Connection;
  #clientWatch: NodeJS.Timeout | undefined;
  readonly #entries = new Map<string, Entry>();
  /** Semaphores being closed by a sweep: close() waits for them too. */
  readonly #closing = new Set<Promise<void>>();
  #sweep: NodeJS.Timeout | undefined;
  #closed: Promise<void> | undefined;

  constructor(options: LocksOptions) {
    if (typeof options !== 'object' || options === null) {
      throw new TypeError(
        `Expected createLocks options to be an object with a \`redis\` client, got ${describe(options)}`,
      );
    }
    const {
      redis,
      maxBlockingConnections = DEFAULT_MAX_CONNECTIONS,
      idleTimeout = DEFAULT_IDLE_TIMEOUT,
      expiration = DEFAULT_LOCKS_EXPIRATION,
      ...rest
    } = options;
    const semaphoreOptions = { ...rest, expiration };
    if (redis === undefined) throw new TypeError('createLocks needs the `redis` client its names share');
    if ('url' in semaphoreOptions) throw new TypeError('createLocks takes a connected `redis` client, not a `url`');
    assertDuration('idleTimeout', idleTimeout, true);
    if (idleTimeout < 10 || idleTimeout > MAX_TIMER_MS) {
      throw new RangeError(
        `Expected \`idleTimeout\` to be from 10 ms to ${MAX_TIMER_MS} ms (about 24.8 days), got ${idleTimeout}`,
      );
    }
    // Checks every option (and the client) now rather than at the first name.
    const resolved = resolveOptions({ ...semaphoreOptions, redis, maxBlockingConnections });
    if (topologyOf(redis) === 'cluster') {
      throw new TypeError(
        'createLocks does not take a Cluster client: a shared pool would block on one node for every slot. ' +
          'On a Cluster, use a Semaphore per name.',
      );
    }
    this.#idleTimeout = idleTimeout;
    this.#source = adaptClient(redis, '');
    this.#pool = new BlockingPool(this.#source, resolved.maxBlockingConnections, prepareConnection, idleTimeout);
    this.#defaults = { ...semaphoreOptions, redis, [SHARED_POOL]: this.#pool };
  }

  /** Runs `fn` while holding a token of `name` (waiting as long as it takes) and releases it afterwards (see `Semaphore.lock(fn)`). */
  lock<T>(name: string, fn: LockCallback<T>, options?: LockOptions): Promise<Awaited<T>>;
  /** Like `lock(name, fn)`, but rejects with `LockTimeoutError` if no token came within `timeout` ms (`0`: no wait). */
  lock<T>(
    name: string,
    timeout: number | null | undefined,
    fn: LockCallback<T>,
    options?: LockOptions,
  ): Promise<Awaited<T>>;
  lock<T>(
    name: string,
    ...args: [LockCallback<T>, LockOptions?] | [number | null | undefined, LockCallback<T>, LockOptions?]
  ): Promise<Awaited<T>> {
    try {
      // The callback decides the form; the semaphore checks the rest (options, timeout, extra arguments).
      if (typeof args[0] !== 'function' && typeof args[1] !== 'function') {
        throw new TypeError(
          `Expected the last argument of lock to be a function (lock(name, fn) or lock(name, timeout, fn)), got ${describe(args.at(-1))}`,
        );
      }
      const { semaphore } = this.#entry(name);
      return (semaphore.lock as (...rest: unknown[]) => Promise<Awaited<T>>).apply(semaphore, args);
    } catch (error) {
      return Promise.reject(error as Error);
    }
  }

  /** A token of `name` as a `Lease` (see `Semaphore.acquire`). */
  acquire(name: string, options?: AcquireOptions): Promise<Lease>;
  acquire(name: string, ...args: [AcquireOptions?]): Promise<Lease> {
    try {
      const { semaphore } = this.#entry(name);
      return (semaphore.acquire as (...rest: unknown[]) => Promise<Lease>).apply(semaphore, args);
    } catch (error) {
      return Promise.reject(error as Error);
    }
  }

  /**
   * The semaphore of `name`, with `resources` tokens (the manager's default unless given), for
   * everything else a `Semaphore` does (events, `holders()`, `signal()`…). It shares the manager's
   * connections and stays until `close()`; asking again returns the same one.
   * @throws TypeError if this manager already serves `name` with another number of resources.
   */
  semaphore(name: string, { resources }: { resources?: number } = {}): Semaphore {
    const entry = this.#entry(name, resources);
    entry.pinned = true;
    return entry.semaphore;
  }

  /** `semaphore(name, { resources: 1 })`. */
  mutex(name: string): Semaphore {
    return this.semaphore(name, { resources: 1 });
  }

  /** How many names and blocking connections the manager has now. */
  stats(): LocksStats {
    return {
      names: this.#entries.size,
      connections: this.#pool.size,
      idleConnections: this.#pool.idle,
      queued: this.#pool.queued,
    };
  }

  /**
   * Closes every name's semaphore (blocked waits reject with `SemaphoreClosedError`; tokens still held
   * stay held) and the shared connections. The client stays open: it is the caller's.
   */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      clearTimeout(this.#sweep);
      clearInterval(this.#clientWatch);
      const semaphores = [...this.#entries.values()].map((entry) => entry.semaphore.close());
      this.#entries.clear();
      await Promise.allSettled([...semaphores, ...this.#closing]);
      this.#pool.close();
      // A connection still opening closes as it opens: closed means nothing of ours is left open.
      await withDeadline(this.#pool.openingSettled(), CLOSE_OPENING_MS, 'close').catch(() => undefined);
    })();
    return this.#closed;
  }

  #entry(name: string, resources?: number): Entry {
    assertName(name);
    if (this.#closed) throw new SemaphoreClosedError(name);
    let entry = this.#entries.get(name);
    // Closed by its caller (`semaphore(name).close()`), or by itself when the caller closed the client:
    // a new one serves the name (or says why it cannot).
    if (entry !== undefined && entry.semaphore[IS_CLOSED]()) {
      this.#entries.delete(name);
      entry = undefined;
    }
    if (entry !== undefined) {
      if (resources !== undefined && resources !== entry.semaphore.resources) {
        throw new TypeError(
          `This lock manager already serves "${name}" with ${entry.semaphore.resources} resource(s), not ${resources}`,
        );
      }
      entry.idleSince = undefined;
      return entry;
    }
    const options = resources === undefined ? this.#defaults : { ...this.#defaults, resources };
    const created: Entry = { semaphore: new Semaphore(name, options), pinned: false, idleSince: undefined };
    this.#entries.set(name, created);
    this.#sweepLater();
    this.#watchClient();
    return created;
  }

  /**
   * The caller may close its client without closing the manager: nothing could then end the shared
   * connections (the pool's control connection among them) and they would keep the process alive.
   * While it serves names or has connections, the manager checks every CLIENT_WATCH_MS and closes
   * itself once the client is closed.
   */
  #watchClient(): void {
    if (this.#clientWatch !== undefined || this.#closed) return;
    this.#clientWatch = setInterval(() => {
      if (!this.#source.isOpen) void this.close();
      else if (this.#entries.size === 0 && this.#pool.size === 0) {
        clearInterval(this.#clientWatch);
        this.#clientWatch = undefined;
      }
    }, CLIENT_WATCH_MS);
    this.#clientWatch.unref();
  }

  /** Closes the semaphores of names found idle by two sweeps in a row, `idleTimeout` apart. */
  #sweepLater(): void {
    if (this.#sweep !== undefined || this.#closed) return;
    this.#sweep = setTimeout(() => {
      this.#sweep = undefined;
      const now = performance.now();
      for (const [name, entry] of this.#entries) {
        if (entry.pinned || !entry.semaphore[IS_IDLE]()) entry.idleSince = undefined;
        else if (entry.idleSince === undefined) entry.idleSince = now;
        else if (now - entry.idleSince >= this.#idleTimeout) {
          this.#entries.delete(name);
          const closing = entry.semaphore.close();
          this.#closing.add(closing);
          const untrack = () => this.#closing.delete(closing);
          closing.then(untrack, untrack);
        }
      }
      if ([...this.#entries.values()].some((entry) => !entry.pinned)) this.#sweepLater();
    }, this.#idleTimeout);
    this.#sweep.unref();
  }
}

/**
 * A lock manager: any number of names on the `redis` client, their blocking waits sharing one pool
 * of at most `maxBlockingConnections` connections.
 *
 * @example
 * ```ts
 * const locks = createLocks({ redis, staleClientTimeout: 30_000 });
 * await locks.lock(`order:${order.id}`, () => ship(order)); // one holder per order, across processes
 * await locks.close();
 * ```
 */
export function createLocks(options: LocksOptions): Locks {
  return new Locks(options);
}
