// Returning tokens nobody will give back: stale holders (releaseStaleLocks, watchdog), dead waiters, abandoned inboxes.
import { checkpoint } from '../util/checkpoint';
import type { SemaphoreContext } from '../context';
import { reapWaiters, releaseStale } from '../redis/commands';
import { drainTimes } from '../lock/timing';
import { warn } from '../util/warn';

/** What `startWatchdog` returns. */
export interface Watchdog {
  /** Stops the timer and resolves once a run in progress has finished. */
  stop(): Promise<void>;
}

/** What `startWatchdog` takes. */
export interface WatchdogOptions {
  /** Called when a run fails (the next run tries again). Default: `process.emitWarning`. */
  readonly onError?: (error: Error) => void;
}

export class Reclaim {
  readonly #ctx: SemaphoreContext;
  readonly #watchdogs = new Set<Watchdog>();
  /** Pending drains of abandoned inboxes (see drainAbandoned), by timer, with their grant ids. */
  readonly #drains = new Map<NodeJS.Timeout, string>();

  constructor(ctx: SemaphoreContext) {
    this.#ctx = ctx;
  }

  /** See `Semaphore.releaseStaleLocks`. */
  async releaseStaleLocks(): Promise<number> {
    const ctx = this.#ctx;
    await checkpoint('reclaim:before');
    const { reclaimed, expired } = await ctx.call('releaseStaleLocks', releaseStale(ctx));
    const count = reclaimed + (await this.reapWaiters(expired));
    if (count > 0) {
      ctx.telemetry.reclaimed({ count });
      ctx.emit('reclaimed', { count });
    }
    return count;
  }

  /** Runs `releaseStaleLocks` every `intervalMs` until `stop()`; `report` hears of failed runs (a throw: a warning). */
  startWatchdog(intervalMs: number, report: (error: Error) => void): Watchdog {
    const onError = (error: Error) => {
      try {
        report(error);
      } catch (thrown) {
        warn(`onError of the watchdog of semaphore "${this.#ctx.name}" threw`, thrown);
      }
    };
    let running: Promise<void> | undefined;
    const timer = setInterval(() => {
      running ??= this.releaseStaleLocks()
        .then(
          () => undefined,
          (error: unknown) => onError(error instanceof Error ? error : new Error(String(error))),
        )
        .finally(() => (running = undefined));
    }, intervalMs);
    timer.unref();
    const watchdog: Watchdog = {
      stop: async () => {
        clearInterval(timer);
        this.#watchdogs.delete(watchdog);
        await running;
      },
    };
    this.#watchdogs.add(watchdog);
    return watchdog;
  }

  /** Stops every watchdog (close()). */
  async stopWatchdogs(): Promise<void> {
    await Promise.all([...this.#watchdogs].map((watchdog) => watchdog.stop()));
  }

  async reapWaiters(registrations: readonly string[]): Promise<number> {
    if (registrations.length === 0) return 0;
    return this.#ctx.call('releaseStaleLocks', reapWaiters(this.#ctx, registrations), { whileClosing: true });
  }

  /** Expired registrations are rare (a waiter died mid-hand-off); returning their tokens is off the hot path. */
  reapInBackground(registrations: readonly string[]): void {
    if (registrations.length > 0) void this.reapWaiters(registrations).catch(() => undefined);
  }

  /**
   * Returns a token that reached an abandoned inbox to AVAILABLE (reapWaiters.lua drains an abandoned
   * inbox at any time: nothing may claim from it): a quarter second after it was abandoned (Redis
   * served the BLMOVE of a closing connection before it read the EOF), and once the slice is over
   * (a half-open connection's BLMOVE runs until its timeout). close() runs the pending drains at once.
   */
  drainAbandoned(id: string, blockedUntil: number): void {
    for (const at of drainTimes(performance.now(), blockedUntil, this.#ctx.options.waitSlice)) {
      const timer = setTimeout(
        () => {
          this.#drains.delete(timer);
          void this.reapWaiters([`~${id}`]).catch(() => undefined);
        },
        Math.max(0, at - performance.now()),
      );
      timer.unref();
      this.#drains.set(timer, id);
    }
  }

  /** Whether drains of abandoned inboxes are still scheduled (a lock manager keeps such a name). */
  get drainsPending(): boolean {
    return this.#drains.size > 0;
  }

  /** Cancels the pending drains and resolves the abandoned marks they were for (close() drains them at once). */
  takePendingDrains(): string[] {
    const abandoned = [...this.#drains].map(([timer, id]) => {
      clearTimeout(timer);
      return `~${id}`;
    });
    this.#drains.clear();
    return [...new Set(abandoned)];
  }
}
