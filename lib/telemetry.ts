import { channel, type Channel } from 'node:diagnostics_channel';
import { debuglog } from 'node:util';
import type { LockLostReason } from './options';

/** The events a `Semaphore` emits, with what each passes to its listeners. */
export interface SemaphoreEvents {
  /** A token was acquired; `waitedMs` counts from the call to the grant. */
  acquired: [event: { token: string; fence: number; waitedMs: number }];
  /** A held token was released (unlock, consume, or the end of the callback form). */
  released: [event: { token: string; fence: number; heldMs: number }];
  /** A held token was lost (see `LockLostReason`). */
  lost: [event: { token: string; fence: number; reason: LockLostReason }];
  /** This instance returned stale holders' tokens to the pool (`releaseStaleLocks`, the watchdog). */
  reclaimed: [event: { count: number }];
  /** A background step failed (a watchdog run). Without a listener it becomes a process warning. */
  error: [error: Error];
}

/** What `sem.stats()` reports: counters since the semaphore was made, and recent waits. */
export interface SemaphoreStats {
  readonly acquisitions: number;
  readonly releases: number;
  /** `lock(timeout)` calls that got no token in time. */
  readonly timeouts: number;
  /** Waits ended by an `AbortSignal`. */
  readonly aborts: number;
  readonly losses: number;
  /** Tokens this instance returned to the pool as stale. */
  readonly reclaims: number;
  /** How long the last (up to) 1,000 acquisitions waited, in milliseconds. */
  readonly waits: { readonly count: number; readonly p50: number; readonly p99: number; readonly max: number };
}

/** Diagnostics channel names, for tracers (`diagnostics_channel.subscribe('redis-token-semaphore:acquired', …)`). */
export const CHANNELS = {
  acquired: 'redis-token-semaphore:acquired',
  released: 'redis-token-semaphore:released',
  lost: 'redis-token-semaphore:lost',
  reclaimed: 'redis-token-semaphore:reclaimed',
} as const;

type Published = keyof typeof CHANNELS;

const WAIT_SAMPLES = 1000;

/** `NODE_DEBUG=redis-token-semaphore` prints each step. */
export const debug = debuglog('redis-token-semaphore');

const channels = Object.fromEntries(
  Object.entries(CHANNELS).map(([event, name]) => [event, channel(name)]),
) as Record<Published, Channel>;

/** Counts what a semaphore does and publishes it on diagnostics channels; the semaphore emits the events. */
export class Telemetry {
  readonly #semaphore: string;
  readonly #counters = { acquisitions: 0, releases: 0, timeouts: 0, aborts: 0, losses: 0, reclaims: 0 };
  readonly #waits: number[] = [];
  #nextWait = 0;

  constructor(semaphore: string) {
    this.#semaphore = semaphore;
  }

  acquired(event: SemaphoreEvents['acquired'][0]): void {
    this.#counters.acquisitions++;
    this.#waits[this.#nextWait] = event.waitedMs;
    this.#nextWait = (this.#nextWait + 1) % WAIT_SAMPLES;
    this.#publish('acquired', event);
  }

  released(event: SemaphoreEvents['released'][0]): void {
    this.#counters.releases++;
    this.#publish('released', event);
  }

  lost(event: SemaphoreEvents['lost'][0]): void {
    this.#counters.losses++;
    this.#publish('lost', event);
  }

  reclaimed(event: SemaphoreEvents['reclaimed'][0]): void {
    this.#counters.reclaims += event.count;
    this.#publish('reclaimed', event);
  }

  timedOut(): void {
    this.#counters.timeouts++;
  }

  aborted(): void {
    this.#counters.aborts++;
  }

  stats(): SemaphoreStats {
    const waits = [...this.#waits].sort((a, b) => a - b);
    const at = (q: number) => (waits.length === 0 ? 0 : (waits[Math.min(waits.length - 1, Math.floor(q * waits.length))] ?? 0));
    return {
      ...this.#counters,
      waits: { count: waits.length, p50: at(0.5), p99: at(0.99), max: waits.at(-1) ?? 0 },
    };
  }

  #publish(event: Published, payload: object): void {
    debug('%s %s %j', this.#semaphore, event, payload);
    const target = channels[event];
    if (target.hasSubscribers) target.publish({ semaphore: this.#semaphore, ...payload });
  }
}
