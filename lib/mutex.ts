// The public Mutex class: a Semaphore with exactly one token.
import type { SemaphoreOptions } from './options';
import { Semaphore } from './semaphore';

/** The options of a {@link Mutex}: every {@link SemaphoreOptions} option except `resources`, which is always 1. */
export type MutexOptions = Omit<SemaphoreOptions, 'resources'>;

/**
 * A semaphore with exactly one resource: one holder at a time. It is a {@link Semaphore} in every
 * other way, with the same methods, keys and guarantees, so `new Mutex('x')` and
 * `new Semaphore('x', { resources: 1 })` share one lock.
 *
 * @example
 * ```ts
 * const mutex = new Mutex('nightly-report', { redis, staleClientTimeout: 60_000 });
 * await mutex.lock(0, () => buildReport()).catch((error) => {
 *   if (!(error instanceof LockTimeoutError)) throw error; // another instance is running it
 * });
 * ```
 */
export class Mutex extends Semaphore {
  /**
   * @param name - any non-empty string; the keys are `<keyPrefix><name>:…` (`SEMAPHORE:<name>:…` by default).
   * @param options - as for {@link Semaphore}, without `resources`.
   * @throws TypeError if `options` has a `resources` field, or for a bad name or option.
   */
  constructor(name: string, options: MutexOptions = {}) {
    if (typeof options === 'object' && options !== null && 'resources' in options) {
      throw new TypeError('A Mutex has exactly one resource; use Semaphore for more');
    }
    super(name, { ...options, resources: 1 });
  }
}
