// Durations: every one in the API is in milliseconds; checked here, and turned into what Redis takes.
import { describe } from './describe';

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

/** Milliseconds as decimal seconds, keeping the last conversion (the same durations recur). */
function secondsKeepingLast(): (ms: number) => string {
  let lastMs = Number.NaN;
  let last = '';
  return (ms) => {
    if (ms !== lastMs) {
      lastMs = ms;
      last = (ms / 1000).toFixed(3);
    }
    return last;
  };
}

/** Milliseconds as decimal seconds, the unit of this library's Lua scripts. */
export const toSeconds = secondsKeepingLast();

const blockingSeconds = secondsKeepingLast();

/** A BLMOVE timeout: whole milliseconds, at least 1, since Redis reads `0` as "block forever". */
export function toBlockingTimeout(ms: number): string {
  return blockingSeconds(Math.max(1, Math.ceil(ms)));
}

/** For lib/options.ts until it imports MAX_TIMER_MS from lib/lock/timing.ts, its owner. */
export { MAX_TIMER_MS } from '../lock/timing';

/** Milliseconds as the whole number PEXPIRE takes ('' when off, which the scripts read as "none"). */
export function toExpireArgument(ms: number | null): string {
  return ms === null ? '' : String(Math.max(1, Math.ceil(ms)));
}

/** The local clock as the decimal seconds GRABBED stores, for `useLocalTime` ('' means Redis TIME). */
export function localTimeArgument(useLocalTime: boolean): string {
  return useLocalTime ? (Date.now() / 1000).toFixed(6) : '';
}
