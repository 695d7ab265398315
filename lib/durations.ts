import { describe } from './describe';

/**
 * Every duration in the API is in milliseconds; this module is the one place that checks them and
 * turns them into what Redis takes.
 */

/** Throws unless `value` is a finite number ≥ 0 (or > 0 when `positive`). */
export function assertDuration(name: string, value: unknown, positive = false): asserts value is number {
  if (typeof value !== 'number' || Number.isNaN(value)) {
    throw new TypeError(`Expected \`${name}\` to be a number of milliseconds, got ${describe(value)}`);
  }
  if (!Number.isFinite(value) || value < 0 || (positive && value === 0)) {
    throw new RangeError(
      `Expected \`${name}\` to be a finite number of milliseconds ${positive ? '> 0' : '≥ 0'}, got ${value}`,
    );
  }
}

/** The last conversion: every wait converts its semaphore's registration lifetime again. */
let lastMs = 0;
let lastSeconds = '0.000';

/** Milliseconds as decimal seconds, the unit of this library's Lua scripts. */
export function toSeconds(ms: number): string {
  if (ms === lastMs) return lastSeconds;
  lastMs = ms;
  return (lastSeconds = (ms / 1000).toFixed(3));
}

/** The last conversion: a busy semaphore converts its usual slice length again and again. */
let lastBlockingMs = 0;
let lastBlockingTimeout = '';

/** A BLMOVE timeout: whole milliseconds, at least 1, since Redis reads `0` as "block forever". */
export function toBlockingTimeout(ms: number): string {
  const whole = Math.max(1, Math.ceil(ms));
  if (whole === lastBlockingMs) return lastBlockingTimeout;
  lastBlockingMs = whole;
  return (lastBlockingTimeout = (whole / 1000).toFixed(3));
}

/** setTimeout fires at once for delays past 2^31 - 1 ms; longer waits must not arm a timer. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Milliseconds as the whole number PEXPIRE takes ('' when off, which the scripts read as "none"). */
export function toExpireArgument(ms: number | null): string {
  return ms === null ? '' : String(Math.max(1, Math.ceil(ms)));
}

/** The local clock as the decimal seconds GRABBED stores, for `useLocalTime` ('' means Redis TIME). */
export function localTimeArgument(useLocalTime: boolean): string {
  return useLocalTime ? (Date.now() / 1000).toFixed(6) : '';
}
