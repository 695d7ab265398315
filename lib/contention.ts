// Whether the next lock() skips tryLock (others wait too), and the spare registrations a claim made for this instance's next waits.
import type { SemaphoreContext } from './context';
import { endRegistrations, type Registration } from './registration';

/**
 * A spare registration (see `Contention`) nobody took within this long is removed: a busy loop takes
 * it within microseconds, and an idle one must not look like a waiter to `waiting()` for long.
 */
const SPARE_IDLE_MS = 200;

export class Contention {
  readonly #ctx: SemaphoreContext;
  /**
   * Whether the last answer from Redis said others wait too (a tryLock miss, or a claim that left
   * registrations behind): the next lock() then skips tryLock, which would only miss.
   */
  contended = false;
  /**
   * Registrations a claim made for this instance's next waits while others waited (claim-10.lua), so
   * that a contended lock skips prepareWait too: newest last.
   */
  readonly #spares: Registration[] = [];
  #sparesTimer: NodeJS.Timeout | undefined;

  constructor(ctx: SemaphoreContext) {
    this.#ctx = ctx;
  }

  /**
   * Local waiters queued for a connection are not blocked in Redis yet; a newcomer queues behind
   * them. While the semaphore is contended, tryLock would miss: the wait starts at once, under a
   * spare registration or with one in its pipeline (see DESIGN "Contended mode"). lock(0) always tries.
   */
  skipsTryLock(timeout: number | null): boolean {
    return timeout !== 0 && (this.#ctx.pool.hasQueue || this.contended);
  }

  /** Keeps a spare registration for the next contended wait; removed once idle (or beyond what can be used). */
  keepSpare(registration: Registration): void {
    this.#spares.push(registration);
    if (this.#spares.length > this.#ctx.options.maxBlockingConnections) {
      void endRegistrations(this.#ctx, [this.#spares.shift()?.id]);
    }
    this.#sparesTimer ??= setTimeout(() => this.#sweepSpares(), SPARE_IDLE_MS).unref();
  }

  /** The newest spare registration, or null (then the wait registers in its pipeline). */
  takeSpare(): Registration | null {
    const spare = this.#spares.pop();
    return spare === undefined ? null : { ...spare, spare: true };
  }

  /** Forgets every spare without ending it (delete(): their registrations went with WAITING). */
  forgetSpares(): void {
    this.#spares.length = 0;
  }

  /** Ends every spare now, at close(), rather than let them lapse, so nobody counts them as waiters. */
  takeAllSpares(): string[] {
    clearTimeout(this.#sparesTimer);
    return this.#spares.splice(0).map((spare) => spare.id);
  }

  /** Ends the spares made more than SPARE_IDLE_MS ago (a spare's lease started when its pipeline was sent). */
  #sweepSpares(): void {
    this.#sparesTimer = undefined;
    // Made before now - SPARE_IDLE_MS, that is: leased until no later than this.
    const cutoff = performance.now() - SPARE_IDLE_MS + this.#ctx.registrationLeaseMs();
    const idle = this.#spares.filter((spare) => spare.until <= cutoff);
    this.#spares.splice(0, idle.length); // oldest first, so the idle ones lead
    void endRegistrations(this.#ctx, idle.map((spare) => spare.id));
    if (this.#spares.length > 0) this.#sparesTimer = setTimeout(() => this.#sweepSpares(), SPARE_IDLE_MS).unref();
  }
}
