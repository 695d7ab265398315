import type { SemaphoreOptions } from './options';
import { Semaphore } from './semaphore';

export type MutexOptions = Omit<SemaphoreOptions, 'resources'>;

/** A semaphore with exactly one resource: one holder at a time. */
export class Mutex extends Semaphore {
  constructor(name: string, options: MutexOptions = {}) {
    if (typeof options === 'object' && options !== null && 'resources' in options) {
      throw new TypeError('A Mutex has exactly one resource; use Semaphore for more');
    }
    super(name, { ...options, resources: 1 });
  }
}
