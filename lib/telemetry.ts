import { channel, type Channel } from 'node:diagnostics_channel';
import { debuglog } from 'node:util';
import type { LockLostReason } from './options';

/** What the `acquired`, `released` and `lost` events say about the acquisition. */
export interface AcquisitionEvent {
  /** The token. */
  readonly token: string;
  /** The acquisition's fencing number. */
  readonly fence: number;
}

/** The `acquired` event. */
export interface AcquiredEvent extends AcquisitionEvent {
  /** Milliseconds from the call to the grant. */
  readonly waitedMs: number;
}

/** The `released` event. */
export interface ReleasedEvent extends AcquisitionEvent {
  /** Milliseconds from the grant to the release. */
  readonly heldMs: number;
}

/** The `lost` event. */
export interface LostEvent extends AcquisitionEvent {
  /** Why the token was lost. */
  readonly reason: LockLostReason;
}

/** The `reclaimed` event. */
export interface ReclaimedEvent {
  /** How many tokens this instance returned to the pool. */
  readonly count: number;
}

/** The events a `Semaphore` emits, with what each passes to its listeners. */
export interface SemaphoreEvents {
  /** A token was acquired. */
  acquired: [event: AcquiredEvent];
  /** A held token was released (unlock, consume, a lease's release, or the end of the callback form). */
  released: [event: ReleasedEvent];
  /** A held token was lost (see `LockLostReason`). */
  lost: [event: LostEvent];
  /** This instance returned stale holders' tokens to the pool (`releaseStaleLocks`, the watchdog). */
  reclaimed: [event: ReclaimedEvent];
  /** A background step failed (a watchdog run). Without a listener it becomes a process warning. */
  error: [error: Error];
}

/** What `sem.stats()` reports: counters since the semaphore was made, and recent waits. */
export interface SemaphoreStats {
  /** Tokens acquired. */
  readonly acquisitions: number;
  /** Tokens released (those already lost are not counted). */
  readonly releases: number;
  /** `lock(timeout)` calls that got no token in time. */
  readonly timeouts: number;
  /** Waits ended by an `AbortSignal`. */
  readonly aborts: number;
  /** Held tokens lost (`lost` events). */
  readonly losses: number;
  /** Tokens this instance returned to the pool as stale. */
  readonly reclaims: number;
  /** How long the last (up to) 1,000 acquisitions waited, in milliseconds. */
  readonly waits: WaitStats;
}

/** Percentiles of recent acquisitions' waits, in milliseconds (0 when there were none). */
export interface WaitStats {
  /** How many waits the figures cover. */
  readonly count: number;
  /** The median. */
  readonly p50: number;
  /** The 99th percentile. */
  readonly p99: number;
  /** The longest. */
  readonly max: number;
}

/** Diagnostics channel names, for tracers (`diagnostics_channel.subscribe('redis-token-semaphore:acquired', …)`). */
export const CHANNELS = {
  /** Each acquisition: an `AcquiredEvent` with `semaphore` (the name). */
  acquired: 'redis-token-semaphore:acquired',
  /** Each release: a `ReleasedEvent` with `semaphore`. */
  released: 'redis-token-semaphore:released',
  /** Each loss: a `LostEvent` with `semaphore`. */
  lost: 'redis-token-semaphore:lost',
  /** Each reclaim by this process: a `ReclaimedEvent` with `semaphore`. */
  reclaimed: 'redis-token-semaphore:reclaimed',
} as const;

type Published = keyof typeof CHANNELS;

const WAIT_SAMPLES = 1000;

const logger = debuglog('redis-token-semaphore');

/** Whether `NODE_DEBUG=redis-token-semaphore` was set when the process started (Node reads it once). */
export const debugEnabled = logger.enabled;

/**
 * `NODE_DEBUG=redis-token-semaphore` prints each step. Without it, a function that does nothing:
 * `debuglog`'s own logger spreads its arguments on every call even when it prints nothing.
 */
export const debug: (format: string, ...args: unknown[]) => void = debugEnabled ? logger : () => undefined;

const channels = Object.fromEntries(
  Object.entries(CHANNELS).map(([event, name]) => [event, channel(name)]),
) as Record<Published, Channel>;

/** Whether anyone listens to one of the semaphore's events (its `listenerCount`). */
export type Hears = (event: keyof SemaphoreEvents) => boolean;

/** Emits one of the semaphore's events; never throws (see `Semaphore#emit`). */
export type Emit = <E extends keyof SemaphoreEvents>(event: E, ...args: SemaphoreEvents[E]) => void;

/**
 * Counts what a semaphore does, publishes it on diagnostics channels and `NODE_DEBUG`, and emits
 * the acquisition events. An event object is built only when something will see it: a listener, a
 * channel subscriber or `NODE_DEBUG`; otherwise an acquisition or release only counts.
 */
export class Telemetry {
  readonly #semaphore: string;
  readonly #emit: Emit;
  readonly #hears: Hears;
  readonly #counters = { acquisitions: 0, releases: 0, timeouts: 0, aborts: 0, losses: 0, reclaims: 0 };
  readonly #waits: number[] = [];
  #nextWait = 0;

  constructor(semaphore: string, emit: Emit = () => undefined, hears: Hears = () => true) {
    this.#semaphore = semaphore;
    this.#emit = emit;
    this.#hears = hears;
  }

  /** A token was acquired `waitedMs` after the call: counted, and the `acquired` event. */
  acquired(token: string, fence: number, waitedMs: number): void {
    this.#counters.acquisitions++;
    this.#waits[this.#nextWait] = waitedMs;
    this.#nextWait = (this.#nextWait + 1) % WAIT_SAMPLES;
    if (this.#observed('acquired')) this.#report('acquired', { token, fence, waitedMs });
  }

  /** A held token was released after `heldMs`: counted, and the `released` event. */
  released(token: string, fence: number, heldMs: number): void {
    this.#counters.releases++;
    if (this.#observed('released')) this.#report('released', { token, fence, heldMs });
  }

  /** A held token was lost: counted, and the `lost` event. */
  lost(token: string, fence: number, reason: LockLostReason): void {
    this.#counters.losses++;
    this.#report('lost', { token, fence, reason });
  }

  /** Counts a reclaim and publishes it; the caller emits the `reclaimed` event. */
  reclaimed(event: ReclaimedEvent): void {
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

  /** Whether anything sees `event`: NODE_DEBUG, a diagnostics subscriber, or a listener. */
  #observed(event: Published): boolean {
    return debugEnabled || channels[event].hasSubscribers || this.#hears(event);
  }

  #report<E extends 'acquired' | 'released' | 'lost'>(event: E, payload: SemaphoreEvents[E][0]): void {
    this.#publish(event, payload);
    (this.#emit as (event: E, payload: SemaphoreEvents[E][0]) => void)(event, payload);
  }

  #publish(event: Published, payload: object): void {
    debug('%s %s %j', this.#semaphore, event, payload);
    const target = channels[event];
    if (target.hasSubscribers) target.publish({ semaphore: this.#semaphore, ...payload });
  }
}
