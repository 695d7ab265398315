// Time limits on promises: a deadline, an abort signal, a sleep, and the retry backoff.
/** What `withDeadline` rejects with when the time is up. */
export class DeadlineExceeded extends Error {
  constructor(what: string, ms: number) {
    super(`${what}: no answer within ${ms} ms`);
    this.name = 'DeadlineExceeded';
  }
}

/**
 * Settles as `promise` does, or rejects with `DeadlineExceeded` after `ms` (or what `expired` makes
 * of it). The promise itself runs on (a command queued offline may still run later): callers that
 * care settle it in the background. One promise and one timer, cleared as soon as `promise` settles.
 */
export function withDeadline<T>(
  promise: Promise<T>,
  ms: number,
  what: string,
  expired?: (error: DeadlineExceeded) => Error,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      const error = new DeadlineExceeded(what, ms);
      reject(expired ? expired(error) : error);
    }, ms);
    timer.unref();
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}

/** Settles as `promise` does, or rejects with `signal`'s reason as soon as it aborts. */
export function raceAbort<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  return new Promise<T>((resolve, reject) => {
    const abort = () => reject(signal.reason);
    signal.addEventListener('abort', abort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', abort));
  });
}

/** Resolves after `ms`, or as soon as `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
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

/** Exponential backoff for retries after connection failures: 50 ms doubling, at most 2 s. */
export function backoffMs(attempt: number): number {
  return Math.min(2000, 50 * 2 ** attempt);
}
