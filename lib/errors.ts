// The error classes every call rejects with: SemaphoreError and the subclasses a caller branches on.
import type { LockLostReason } from './options';

/** The base of every error this library rejects with, except bad arguments (`TypeError`, `RangeError`). */
export class SemaphoreError extends Error {
  /** `'SemaphoreError'`, or the subclass' name: a literal, so it survives minifiers. */
  override readonly name: string = 'SemaphoreError';
  /** The name of the semaphore the failed call was made on. */
  readonly semaphore: string;

  constructor(semaphore: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.semaphore = semaphore;
  }
}

/** `lock(timeout, fn)` (the callback form) got no token within `timeout`; `fn` did not run. */
export class LockTimeoutError extends SemaphoreError {
  /** Always `'LockTimeoutError'`. */
  override readonly name = 'LockTimeoutError';
  /** The timeout that ran out, in milliseconds. */
  readonly timeout: number;

  constructor(semaphore: string, timeout: number) {
    super(semaphore, `No token of semaphore "${semaphore}" became available within ${timeout} ms`);
    this.timeout = timeout;
  }
}

/** A Redis command failed; `cause` holds the error node-redis reported. */
export class SemaphoreRedisError extends SemaphoreError {
  /** Always `'SemaphoreRedisError'`. */
  override readonly name = 'SemaphoreRedisError';

  constructor(semaphore: string, operation: string, cause: unknown) {
    const message = (cause as { message?: unknown } | null)?.message;
    const reason = typeof message === 'string' ? message : String(cause);
    super(semaphore, `${operation} on semaphore "${semaphore}" failed: ${reason}`, { cause });
  }
}

/** The semaphore was closed, before or while the call was waiting. */
export class SemaphoreClosedError extends SemaphoreError {
  /** Always `'SemaphoreClosedError'`. */
  override readonly name = 'SemaphoreClosedError';

  constructor(semaphore: string) {
    super(semaphore, `Semaphore "${semaphore}" is closed`);
  }
}

/**
 * A held token was lost (see `LockLostReason`): the reason an acquisition's `AbortSignal` aborts
 * with, and what `lock(fn)` rejects with when the token was lost while `fn` ran, even if `fn`
 * resolved (its value is then in `result`): a callback that ran without its lock never looks like a
 * plain success.
 */
export class LockLostError extends SemaphoreError {
  override readonly name = 'LockLostError';
  /** The token that was lost. */
  readonly token: string;
  /** Why: `'reclaimed'` or `'expired'`. */
  readonly reason: LockLostReason;
  /** What the callback resolved, when `lock(fn)` rejects with this error after `fn` resolved; else `undefined`. */
  readonly result: unknown;

  constructor(semaphore: string, token: string, reason: LockLostReason, options?: { result: unknown }) {
    const why =
      reason === 'reclaimed'
        ? 'Redis no longer records this holder'
        : 'no refresh was confirmed within staleClientTimeout';
    const when = options ? ' while the callback ran (its result is on `result`)' : '';
    super(semaphore, `Token "${token}" of semaphore "${semaphore}" was lost${when}: ${why}`);
    this.token = token;
    this.reason = reason;
    this.result = options?.result;
  }
}

/**
 * `waitReplicas`: fewer replicas than asked acknowledged a grant or a release within `timeoutMs`,
 * so a failover could still undo it. A lock that fails this way gave its token back first; an unlock
 * or consume did take effect on the primary.
 */
export class ReplicationError extends SemaphoreError {
  override readonly name = 'ReplicationError';
  /** `lock`, `unlock` or `consume`. */
  readonly operation: string;
  /** Replicas asked for (`waitReplicas.replicas`). */
  readonly replicas: number;
  /** Replicas that acknowledged in time (Redis' WAIT reply). */
  readonly acknowledged: number;

  constructor(semaphore: string, operation: string, replicas: number, acknowledged: number) {
    super(
      semaphore,
      `${operation} on semaphore "${semaphore}" reached ${acknowledged} of ${replicas} replicas in time: a failover could undo it`,
    );
    this.operation = operation;
    this.replicas = replicas;
    this.acknowledged = acknowledged;
  }
}

/**
 * The Redis server is older than this library needs (`minimum`, 6.2.0: waiters block with `BLMOVE`).
 * Found at a semaphore's first use, from INFO's `redis_version`, before any key is written; every
 * later call of that semaphore rejects with it too. Not raised when INFO is refused (an ACL without
 * `+info`): then nothing is checked.
 */
export class UnsupportedServerError extends SemaphoreError {
  /** Always `'UnsupportedServerError'`. */
  override readonly name = 'UnsupportedServerError';
  /** The server's version, as INFO reported it (`redis_version`). */
  readonly version: string;
  /** The oldest version this library runs on. */
  readonly minimum: string;

  constructor(semaphore: string, version: string, minimum: string) {
    super(
      semaphore,
      `Semaphore "${semaphore}" needs Redis ${minimum} or later (for BLMOVE), but the server runs Redis ${version}`,
    );
    this.version = version;
    this.minimum = minimum;
  }
}
