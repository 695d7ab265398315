// The call types of lock() and acquire(), and the Lease a caller holds: release, refresh, hand-over, scope end.
import { describe } from './util/describe';
import type { Holding } from './hold/holding';

/**
 * The callback form's function: runs while `token` is held. `signal` aborts (with a `LockLostError`)
 * if the token is lost meanwhile; `fence` is the acquisition's fencing number.
 */
export type LockCallback<T> = (token: string, signal: AbortSignal, fence: number) => T | PromiseLike<T>;

/** What `lock(timeout, options)` takes. */
export interface LockOptions {
  /** Ends the wait (even a blocked one) and rejects with the signal's reason. */
  readonly signal?: AbortSignal | undefined;
  /**
   * How many tokens to take as one grant (default 1): all together or none, in arrival order with
   * every other waiter; at most the semaphore's `resources` (a `RangeError` otherwise).
   */
  readonly permits?: number | undefined;
}

/** What `acquire()` takes. */
export interface AcquireOptions {
  /** Rejects with `LockTimeoutError` when no token came within this many ms; `0` never blocks. Default: forever. */
  readonly timeout?: number | null | undefined;
  /** Ends the wait (even a blocked one) and rejects with the signal's reason. */
  readonly signal?: AbortSignal | undefined;
  /** How many tokens to take as one grant (default 1), as for `lock`. */
  readonly permits?: number | undefined;
}

/**
 * A held token, from `sem.acquire()`. `await using lease = await sem.acquire()` releases it when the
 * scope ends.
 */
export interface Lease extends AsyncDisposable {
  /** The token held (the first of `tokens`). */
  readonly token: string;
  /** Every token of the grant: `permits` of them, released, refreshed and lost together. */
  readonly tokens: readonly string[];
  /** The acquisition's fencing number: larger than any earlier acquisition's of this semaphore. */
  readonly fence: number;
  /** The acquisition's grant id: what Redis records as the token's holder, and what every release and refresh names. */
  readonly grantId: string;
  /**
   * Aborts (with a `LockLostError`) if the token is lost while held; not on release, and no longer
   * once the lease is handed over.
   */
  readonly signal: AbortSignal;
  /** Renews the token's timestamp; resolves `false` if it had been lost (or was handed over). */
  refresh(): Promise<boolean>;
  /**
   * Puts the token back. Idempotent: later calls resolve what the first resolved, `true` if the
   * token went back, `false` if it had been lost. A call that rejected (Redis unreachable) can be
   * repeated; meanwhile the token is no longer refreshed, so it goes stale rather than stay held.
   * After `handOver()`, resolves `false` and leaves the grant to whoever has the handle.
   */
  release(): Promise<boolean>;
  /**
   * Hands the grant over to another process (or instance) without releasing it: this process stops
   * refreshing it and forgets it (its `release()`, `refresh()`, scope end and `unlock(token)` no
   * longer touch it, and `signal` no longer aborts), and the returned handle, plain data that
   * survives `JSON.stringify`, lets any `Semaphore` of the same name `release(handle)` or
   * `refresh(handle)` exactly this grant. Idempotent: later calls return the same handle. Throws
   * once a release has begun. The lease keeps running in Redis: the receiver must release or
   * refresh within `leaseMs`, or the grant is reclaimed as stale.
   */
  handOver(): GrantHandle;
}

/**
 * A grant handed over with `lease.handOver()`: names one acquisition, for `sem.release(handle)` and
 * `sem.refresh(handle)` in any process. Plain data: send it as JSON.
 */
export interface GrantHandle {
  /** The semaphore's name. */
  readonly semaphore: string;
  /** The token held (the first of a weighted grant's). */
  readonly token: string;
  /** A weighted grant's tokens, all of them (absent for a grant of one token). */
  readonly tokens?: readonly string[];
  /** The grant id Redis records as the token's holder: release and refresh act only while it still holds. */
  readonly grantId: string;
  /** The acquisition's fencing number, to pass with writes to the protected resource. */
  readonly fence: number;
  /**
   * The grant's lease (the acquiring semaphore's `staleClientTimeout`): refresh within this many
   * ms or the grant may be reclaimed; `null`: no lease.
   */
  readonly leaseMs: number | null;
}

/**
 * Checks a handle given to `operation` of semaphore `name`: the fields `handOver()` fills, with their
 * types, and the same semaphore name. A handle of another semaphore is a mistake that would
 * otherwise only ever resolve `false`.
 */
export function assertGrantHandle(handle: unknown, name: string, operation: string): asserts handle is GrantHandle {
  const expected = `Expected the handle given to ${operation} to be { semaphore, token, grantId, fence, leaseMs } from lease.handOver()`;
  if (typeof handle !== 'object' || handle === null || Array.isArray(handle)) {
    throw new TypeError(`${expected}, got ${describe(handle)}`);
  }
  const { semaphore, token, grantId, fence, leaseMs } = handle as Record<string, unknown>;
  const bad = (field: string, what: string, value: unknown) =>
    new TypeError(`${expected}: \`${field}\` must be ${what}, got ${describe(value)}`);
  if (typeof semaphore !== 'string') throw bad('semaphore', 'a string', semaphore);
  if (semaphore !== name) {
    throw new TypeError(
      `The handle given to ${operation} is a grant of semaphore ${JSON.stringify(semaphore)}, not of ${JSON.stringify(name)}`,
    );
  }
  if (typeof token !== 'string') throw bad('token', 'a string', token);
  const { tokens } = handle as { tokens?: unknown };
  if (
    tokens !== undefined &&
    (!Array.isArray(tokens) || tokens[0] !== token || !tokens.every((t) => typeof t === 'string'))
  )
    throw bad('tokens', 'an array of strings that starts with `token`', tokens);
  if (typeof grantId !== 'string' || !/^\S+$/.test(grantId))
    throw bad('grantId', 'a non-empty string without whitespace', grantId);
  if (!Number.isSafeInteger(fence) || (fence as number) < 0) throw bad('fence', 'a non-negative integer', fence);
  if (leaseMs !== null && (typeof leaseMs !== 'number' || !(leaseMs > 0)))
    throw bad('leaseMs', 'a positive number or null', leaseMs);
}

/** Node defines `Symbol.asyncDispose` as this registered symbol; other realms (VM contexts) may lack it. */
const asyncDispose: typeof Symbol.asyncDispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');

/** What a `Lease` asks of its semaphore. */
export interface LeaseHost {
  release(holding: Holding): Promise<boolean>;
  refresh(holding: Holding): Promise<boolean>;
  /** Forgets the holding without releasing it (no more refreshes); `false` once a release has begun or ended. */
  handOver(holding: Holding): boolean;
  /** The handle's `semaphore` and `leaseMs`. */
  readonly name: string;
  readonly leaseMs: number | null;
}

const HANDED_OVER: Promise<boolean> = Promise.resolve(false);

export function createLease(holding: Holding, host: LeaseHost): Lease {
  let released: Promise<boolean> | undefined;
  let handle: GrantHandle | undefined;
  const lease: Lease = {
    token: holding.token,
    tokens: holding.tokens ?? [holding.token],
    fence: holding.fence,
    grantId: holding.id,
    get signal() {
      return holding.signal;
    },
    refresh: () => (released || handle ? Promise.resolve(false) : host.refresh(holding)),
    // A release that failed (Redis unreachable) may be tried again; one that settled is final.
    release: () =>
      handle
        ? HANDED_OVER
        : (released ??= host.release(holding).catch((error: unknown) => {
            released = undefined;
            throw error;
          })),
    handOver: () => {
      if (handle) return handle;
      if (released || !host.handOver(holding)) {
        throw new Error(
          `The lease of token ${JSON.stringify(holding.token)} of semaphore ${JSON.stringify(host.name)} was released: nothing to hand over`,
        );
      }
      return (handle = Object.freeze({
        semaphore: host.name,
        token: holding.token,
        ...(holding.tokens && { tokens: holding.tokens }),
        grantId: holding.id,
        fence: holding.fence,
        leaseMs: host.leaseMs,
      }));
    },
    [asyncDispose]: async () => {
      await lease.release();
    },
  };
  return lease;
}
