// What a semaphore tells the outside: its events, counters and stats, diagnostics and tracing channels, NODE_DEBUG.
import { channel, tracingChannel, type Channel, type TracingChannel } from 'node:diagnostics_channel';
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

/** The `timeout` event. */
export interface TimeoutEvent {
  /** The timeout that ran out, in milliseconds. */
  readonly timeout: number;
  /** Milliseconds from the call to giving up. */
  readonly waitedMs: number;
}

/** The `aborted` event. */
export interface AbortedEvent {
  /** The signal's reason, which the call rejected with. */
  readonly reason: unknown;
  /** Milliseconds from the call to the abort. */
  readonly waitedMs: number;
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
  /** A wait ran out of time without a token (`lock(timeout)` resolved null, or the call threw `LockTimeoutError`). */
  timeout: [event: TimeoutEvent];
  /** A wait was ended by its `AbortSignal` (the call rejected with the signal's reason). */
  aborted: [event: AbortedEvent];
  /** This instance returned stale holders' tokens to the pool (`releaseStaleLocks`, the watchdog). */
  reclaimed: [event: ReclaimedEvent];
  /** A background step failed (a watchdog run). Without a listener it becomes a process warning. */
  error: [error: Error];
}

/** What `sem.stats()` reports: counters since the semaphore was made, gauges of right now, and recent waits. */
export interface SemaphoreStats extends SemaphoreGauges {
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

/** The gauges of `sem.stats()`: this instance, right now. */
export interface SemaphoreGauges {
  /** Tokens this instance holds (acquired, not released, not lost). */
  readonly held: number;
  /** Callers of this instance queued for a blocking connection (all `maxBlockingConnections` are busy). */
  readonly queued: number;
  /**
   * Blocking connections: open or opening in this semaphore's own pool, or, for a lock manager's
   * semaphore, those of the shared pool it has in use.
   */
  readonly connections: number;
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
  /** Each wait that ran out of time: a `TimeoutEvent` with `semaphore`. */
  timeout: 'redis-token-semaphore:timeout',
  /** Each wait ended by its signal: an `AbortedEvent` with `semaphore`. */
  aborted: 'redis-token-semaphore:aborted',
} as const;

type Published = keyof typeof CHANNELS;

/**
 * Tracing channel names, for `diagnostics_channel.tracingChannel(name)`: each publishes `start`,
 * `end`, `asyncStart`, `asyncEnd` and `error` (as `tracing:<name>:start` and so on) around one call.
 */
export const TRACING_CHANNELS = {
  /**
   * Each acquisition's wait, from the call (before any Redis command) to the grant, the timeout, the
   * abort or the failure: an `AcquireTrace`. Every form: `lock()`, `lock(timeout)`, `lock(fn)`,
   * `wait()`, `acquire()`.
   */
  acquire: 'redis-token-semaphore:acquire',
  /** The callback form's hold, from the grant to the release after `fn` settled: a `HoldTrace`. */
  hold: 'redis-token-semaphore:hold',
} as const;

/** How an acquisition's wait ended. */
export type AcquireOutcome = 'granted' | 'timeout' | 'aborted' | 'error';

/** Which call an acquisition is: `lock()`, `lock(timeout)` and `wait()`; `lock(fn)`; `acquire()`. */
export type AcquireForm = 'lock' | 'callback' | 'lease';

/**
 * The context object of the `acquire` tracing channel: the same object at every event of one
 * acquisition. The fields below `form` are set when the wait settles, before `asyncStart` (and
 * `error`). A timeout is an outcome, not an error: `lock(timeout)` resolves `null` (`result`), and
 * the `LockTimeoutError` of `lock(timeout, fn)` and `acquire()` is thrown after the trace ended.
 */
export interface AcquireTrace {
  /** The semaphore's name. */
  readonly semaphore: string;
  /** The semaphore's `resources`. */
  readonly resources: number;
  /** The call's timeout in milliseconds; `null` waits until a token comes. */
  readonly timeout: number | null;
  /** The call; `callback` is followed, once granted, by a trace on the `hold` channel. */
  readonly form: AcquireForm;
  /** How the wait ended. */
  outcome?: AcquireOutcome;
  /** Milliseconds from the call to the outcome. */
  waitedMs?: number;
  /** The token, when granted. */
  token?: string;
  /** The acquisition's fencing number, when granted. */
  fence?: number;
  /** Set by `tracePromise`: the token, or `null` on a timeout. */
  result?: string | null;
  /** Set by `tracePromise` when the wait failed or was aborted (the signal's reason). */
  error?: unknown;
}

/**
 * The context object of the `hold` tracing channel (the callback form only): `start` at the grant,
 * just before `fn` runs; `asyncEnd` once `fn` settled and the token was released; `error` if `fn` or
 * the release threw.
 */
export interface HoldTrace {
  /** The semaphore's name. */
  readonly semaphore: string;
  /** The semaphore's `resources`. */
  readonly resources: number;
  /** The token held. */
  readonly token: string;
  /** The acquisition's fencing number. */
  readonly fence: number;
  /** The `acquire` trace of the same call, when that channel had subscribers at the call. */
  readonly acquisition: AcquireTrace | undefined;
  /** Milliseconds from the grant to the end of the release. */
  heldMs?: number;
  /** Set by `tracePromise`: what `fn` resolved. */
  result?: unknown;
  /** Set by `tracePromise`: what `fn` (or the release) threw. */
  error?: unknown;
}

const acquireChannel = tracingChannel<unknown, AcquireTrace>(TRACING_CHANNELS.acquire);
const holdChannel = tracingChannel<unknown, HoldTrace>(TRACING_CHANNELS.hold);

/** `TracingChannel#hasSubscribers`, which Node has only since 20.13. */
function traced(trace: TracingChannel<unknown, object>): boolean {
  return (
    trace.start.hasSubscribers ||
    trace.end.hasSubscribers ||
    trace.asyncStart.hasSubscribers ||
    trace.asyncEnd.hasSubscribers ||
    trace.error.hasSubscribers
  );
}

/** Whether anyone subscribes to the `acquire` tracing channel: without, nothing about the trace is built. */
export function acquireTraced(): boolean {
  return traced(acquireChannel);
}

/** Whether anyone subscribes to the `hold` tracing channel. */
export function holdTraced(): boolean {
  return traced(holdChannel);
}

/** The acquire trace of each traced acquisition's holding, for the hold trace that follows it. */
const tracesOfHoldings = new WeakMap<object, AcquireTrace>();

/**
 * Runs `wait` (an acquisition: its holding, or null on a timeout) under the `acquire` tracing
 * channel, and fills in `trace` as it settles; `failure` names the outcome of a rejection (`aborted`
 * or `error`). Only called when someone subscribes.
 */
export function traceAcquire<H extends { readonly token: string; readonly fence: number; readonly acquiredAt: number }>(
  trace: AcquireTrace,
  startedAt: number,
  wait: () => Promise<H | null>,
  failure: (error: unknown) => AcquireOutcome,
): Promise<H | null> {
  let holding: H | null = null;
  const settled = acquireChannel.tracePromise(async () => {
    try {
      holding = await wait();
    } catch (error) {
      trace.outcome = failure(error);
      trace.waitedMs = performance.now() - startedAt;
      throw error;
    }
    if (holding === null) {
      trace.outcome = 'timeout';
      trace.waitedMs = performance.now() - startedAt;
      return null;
    }
    trace.outcome = 'granted';
    trace.token = holding.token;
    trace.fence = holding.fence;
    trace.waitedMs = holding.acquiredAt - startedAt;
    tracesOfHoldings.set(holding, trace);
    return holding.token;
  }, trace);
  return settled.then(() => holding);
}

/** Runs `hold` (the callback form's `fn` and the release) under the `hold` tracing channel. Only when subscribed. */
export function traceHold<T>(
  semaphore: string,
  resources: number,
  holding: { readonly token: string; readonly fence: number; readonly acquiredAt: number },
  hold: () => Promise<T>,
): Promise<T> {
  const trace: HoldTrace = {
    semaphore,
    resources,
    token: holding.token,
    fence: holding.fence,
    acquisition: tracesOfHoldings.get(holding),
  };
  return holdChannel.tracePromise(async () => {
    try {
      return await hold();
    } finally {
      trace.heldMs = performance.now() - holding.acquiredAt;
    }
  }, trace);
}

const WAIT_SAMPLES = 1000;

const logger = debuglog('redis-token-semaphore');

/** Whether `NODE_DEBUG=redis-token-semaphore` was set when the process started (Node reads it once). */
export const debugEnabled = logger.enabled;

/** `NODE_DEBUG=redis-token-semaphore` prints each step; without it, a function that does nothing. */
export const debug: (format: string, ...args: unknown[]) => void = debugEnabled ? logger : () => undefined;

const channels = Object.fromEntries(Object.entries(CHANNELS).map(([event, name]) => [event, channel(name)])) as Record<
  Published,
  Channel
>;

/** Whether anyone listens to one of the semaphore's events (its `listenerCount`). */
export type Hears = (event: keyof SemaphoreEvents) => boolean;

/** Emits one of the semaphore's events; never throws (see `Semaphore#emit`). */
export type Emit = <E extends keyof SemaphoreEvents>(event: E, ...args: SemaphoreEvents[E]) => void;

/**
 * Counts what a semaphore does, publishes it on diagnostics channels and `NODE_DEBUG`, and emits
 * the acquisition events; an event object is built only when something will see it.
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

  /** A held token, got at `acquiredAt` (`performance.now()`), was released: counted, and the `released` event. */
  released(token: string, fence: number, acquiredAt: number): void {
    this.#counters.releases++;
    if (this.#observed('released')) this.#report('released', { token, fence, heldMs: performance.now() - acquiredAt });
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

  /** A wait with `timeout` (ms) that started at `startedAt` ran out: counted, and the `timeout` event. */
  timedOut(timeout: number, startedAt: number): void {
    this.#counters.timeouts++;
    if (this.#observed('timeout')) this.#report('timeout', { timeout, waitedMs: performance.now() - startedAt });
  }

  /** A wait that started at `startedAt` was aborted with `reason`: counted, and the `aborted` event. */
  aborted(reason: unknown, startedAt: number): void {
    this.#counters.aborts++;
    if (this.#observed('aborted')) this.#report('aborted', { reason, waitedMs: performance.now() - startedAt });
  }

  /** The counters and wait percentiles, with the `gauges` the semaphore reads. */
  stats(gauges: SemaphoreGauges): SemaphoreStats {
    const waits = [...this.#waits].sort((a, b) => a - b);
    const at = (q: number) =>
      waits.length === 0 ? 0 : (waits[Math.min(waits.length - 1, Math.floor(q * waits.length))] ?? 0);
    return {
      ...this.#counters,
      ...gauges,
      waits: { count: waits.length, p50: at(0.5), p99: at(0.99), max: waits.at(-1) ?? 0 },
    };
  }

  /** Whether anything sees `event`: NODE_DEBUG, a diagnostics subscriber, or a listener. */
  #observed(event: Published): boolean {
    return debugEnabled || channels[event].hasSubscribers || this.#hears(event);
  }

  #report<E extends 'acquired' | 'released' | 'lost' | 'timeout' | 'aborted'>(
    event: E,
    payload: SemaphoreEvents[E][0],
  ): void {
    this.#publish(event, payload);
    (this.#emit as (event: E, payload: SemaphoreEvents[E][0]) => void)(event, payload);
  }

  #publish(event: Published, payload: object): void {
    debug('%s %s %j', this.#semaphore, event, payload);
    const target = channels[event];
    if (target.hasSubscribers) target.publish({ semaphore: this.#semaphore, ...payload });
  }
}
