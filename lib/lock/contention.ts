// Whether the next lock() skips tryLock (others wait too), and the advance registrations kept for the next waits.
import type { SemaphoreContext } from '../context';
import { endRegistrations, type Registration } from './registration';
import { ADVANCE_IDLE_MS } from './timing';

/** Idle sweeps (half ADVANCE_IDLE_MS apart) before the sweep's interval stops: a second. */
const IDLE_SWEEPS = 10;

export class Contention {
  readonly #ctx: SemaphoreContext;
  /**
   * Whether the last answer from Redis said others wait too (a tryLock miss, or a claim that left
   * registrations behind): the next lock() then skips tryLock, which would only miss.
   */
  contended = false;
  /**
   * How many tryLocks of this instance were left unanswered (take.ts) and have not settled yet.
   * While any is, the main client may be stuck (node-redis can stay "not ready" after a reconnect):
   * a lock goes straight to its blocking wait rather than queue another try behind them.
   */
  unanswered = 0;
  /**
   * Advance registrations: registrations kept by a claim for this instance's next waits while no token
   * was left free (claim.lua; DESIGN "Contended mode"), so that a contended lock skips tryLock and
   * prepareWait: newest last, each with when it was kept (`#now()`).
   */
  readonly #advance: { registration: Registration; keptAt: number }[] = [];
  #sweepTimer: NodeJS.Timeout | undefined;
  /** Sweeps in a row that found nothing kept and nothing left: at IDLE_SWEEPS the interval stops. */
  #idleSweeps = 0;
  /** Milliseconds on a monotonic clock; a spec passes its own to decide which registrations are idle. */
  readonly #now: () => number;

  constructor(ctx: SemaphoreContext, now: () => number = () => performance.now()) {
    this.#ctx = ctx;
    this.#now = now;
  }

  /**
   * Local waiters queued for a connection are not blocked in Redis yet; a newcomer queues behind
   * them. While the semaphore is contended, tryLock would miss: the wait starts at once, under an
   * advance registration or with one in its pipeline (see DESIGN "Contended mode"). So does it while
   * an earlier try goes unanswered (`unanswered`). lock(0) always tries.
   */
  skipsTryLock(timeout: number | null): boolean {
    return timeout !== 0 && (this.#ctx.pool.queued > 0 || this.contended || this.unanswered > 0);
  }

  /** Keeps an advance registration for the next contended wait; removed once idle (or beyond what can be used). */
  keepAdvanceRegistration(registration: Registration): void {
    this.#advance.push({ registration, keptAt: this.#now() });
    if (this.#advance.length > this.#ctx.options.maxBlockingConnections) {
      void endRegistrations(this.#ctx, [this.#advance.shift()?.registration.id]);
    }
    this.#idleSweeps = 0;
    // One interval while registrations come and go, not a timer per registration: an idle one ends
    // between ADVANCE_IDLE_MS and half as much again after it was kept.
    this.#sweepTimer ??= setInterval(() => this.#sweepAdvanceRegistrations(), ADVANCE_IDLE_MS / 2).unref();
  }

  /** The newest advance registration, or null (then the wait registers in its pipeline). */
  takeAdvanceRegistration(): Registration | null {
    const kept = this.#advance.pop();
    return kept === undefined ? null : { id: kept.registration.id, until: kept.registration.until, advance: true };
  }

  /** Forgets every advance registration without ending it (delete(): their registrations went with WAITING). */
  forgetAdvanceRegistrations(): void {
    this.#advance.length = 0;
  }

  /** Takes every advance registration at close(), to end them now: lapsing, they would count as waiters. */
  takeAllAdvanceRegistrations(): string[] {
    clearInterval(this.#sweepTimer);
    this.#sweepTimer = undefined;
    return this.#advance.splice(0).map((kept) => kept.registration.id);
  }

  /** Ends the advance registrations kept more than ADVANCE_IDLE_MS ago (the oldest lead: kept in order). */
  #sweepAdvanceRegistrations(): void {
    const cutoff = this.#now() - ADVANCE_IDLE_MS;
    const idle = this.#advance.findIndex((kept) => kept.keptAt > cutoff);
    const ended = this.#advance.splice(0, idle === -1 ? this.#advance.length : idle);
    if (ended.length > 0) {
      void endRegistrations(
        this.#ctx,
        ended.map((kept) => kept.registration.id),
      );
    }
    // Stops once nothing was kept for a while and nothing is left (a busy semaphore keeps its interval).
    if (this.#advance.length > 0) this.#idleSweeps = 0;
    else if (++this.#idleSweeps >= IDLE_SWEEPS) {
      clearInterval(this.#sweepTimer);
      this.#sweepTimer = undefined;
    }
  }
}
