import type { Holding } from './holding';

/** What `lock(timeout, options)` takes. */
export interface LockOptions {
  /** Ends the wait (even a blocked one) and rejects with the signal's reason. */
  readonly signal?: AbortSignal | undefined;
}

/** What `acquire()` takes. */
export interface AcquireOptions {
  /** Rejects with `LockTimeoutError` when no token came within this many ms; `0` never blocks. Default: wait forever. */
  readonly timeout?: number | null | undefined;
  /** Ends the wait (even a blocked one) and rejects with the signal's reason. */
  readonly signal?: AbortSignal | undefined;
}

/**
 * A held token, from `sem.acquire()`. `await using lease = await sem.acquire()` releases it when the
 * scope ends.
 */
export interface Lease extends AsyncDisposable {
  /** The token held. */
  readonly token: string;
  /** The acquisition's fencing number: larger than any earlier acquisition's of this semaphore. */
  readonly fence: number;
  /** Aborts (with a `LockLostError`) if the token is lost while held; not on release. */
  readonly signal: AbortSignal;
  /** Renews the token's timestamp; resolves `false` if it had been lost. */
  refresh(): Promise<boolean>;
  /**
   * Puts the token back. Idempotent: later calls resolve what the first resolved, `true` if the
   * token went back, `false` if it had been lost. A call that rejected (Redis unreachable) can be
   * repeated; meanwhile the token is no longer refreshed, so it goes stale rather than stay held.
   */
  release(): Promise<boolean>;
}

/** Node defines `Symbol.asyncDispose` as this registered symbol; other realms (VM contexts) may lack it. */
const asyncDispose: typeof Symbol.asyncDispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');

export function createLease(
  holding: Holding,
  release: (holding: Holding) => Promise<boolean>,
  refresh: (holding: Holding) => Promise<boolean>,
): Lease {
  let released: Promise<boolean> | undefined;
  const lease: Lease = {
    token: holding.token,
    fence: holding.fence,
    get signal() {
      return holding.signal;
    },
    refresh: () => (released ? Promise.resolve(false) : refresh(holding)),
    // A release that failed (Redis unreachable) may be tried again; one that settled is final.
    release: () =>
      (released ??= release(holding).catch((error: unknown) => {
        released = undefined;
        throw error;
      })),
    [asyncDispose]: async () => {
      await lease.release();
    },
  };
  return lease;
}
