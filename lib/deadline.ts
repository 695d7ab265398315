/** What `withDeadline` rejects with when the time is up. */
export class DeadlineExceeded extends Error {
  constructor(what: string, ms: number) {
    super(`${what}: no answer within ${ms} ms`);
    this.name = 'DeadlineExceeded';
  }
}

/**
 * Settles as `promise` does, or rejects with `DeadlineExceeded` after `ms`. The promise itself runs
 * on (a command queued offline may still run later): callers that care settle it in the background.
 */
export function withDeadline<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineExceeded(what, ms)), ms);
    timer.unref();
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}
