// The checks of the public methods' arguments: timeouts, abort signals and tokens.
import { describe } from './describe';
import { assertDuration } from './durations';

/** A lock timeout in ms, or null (wait forever) for `null`, `undefined` and `Infinity`. */
export function checkTimeout(timeout: unknown): number | null {
  if (timeout === null || timeout === undefined || timeout === Infinity) return null;
  assertDuration('timeout', timeout);
  return timeout;
}

/** By shape, not instanceof: a signal may come from another realm. */
export function isAbortSignal(value: unknown): value is AbortSignal {
  const { aborted, addEventListener } = (value ?? {}) as Partial<AbortSignal>;
  return typeof aborted === 'boolean' && typeof addEventListener === 'function';
}

/**
 * Throws unless `options` is an options object (not null, not an array, not an AbortSignal passed
 * in its place) whose every own key is one of `keys`: a misspelt or unsupported option is a mistake,
 * never ignored.
 */
export function assertOptions(options: unknown, expected: string, keys: readonly string[]): asserts options is object {
  if (typeof options !== 'object' || options === null || Array.isArray(options) || isAbortSignal(options)) {
    throw new TypeError(`Expected ${expected}, got ${describe(options)}`);
  }
  for (const key in options) {
    if (Object.hasOwn(options, key) && !keys.includes(key)) {
      throw new TypeError(`Unknown option \`${key}\`: expected ${expected}`);
    }
  }
}

/** Throws when a call got more arguments than any of its forms takes (`expected` names the forms). */
export function assertArgumentCount(count: number, most: number, expected: string): void {
  if (count > most) throw new TypeError(`Expected ${expected}, got ${count} arguments`);
}

export function checkSignal(signal: unknown): AbortSignal | undefined {
  if (signal === undefined) return undefined;
  if (!isAbortSignal(signal)) {
    throw new TypeError(`Expected \`signal\` to be an AbortSignal, got ${describe(signal)}`);
  }
  return signal as AbortSignal;
}

/** `or`: what else `operation` takes, for the message. */
export function assertToken(token: unknown, operation: string, or = ''): asserts token is string {
  if (typeof token !== 'string') {
    throw new TypeError(`Expected the token given to ${operation} to be a string${or}, got ${describe(token)}`);
  }
}

const LOCK_KEYS = ['signal', 'permits'] as const;
const ACQUIRE_KEYS = ['timeout', 'signal', 'permits'] as const;

/**
 * The `permits` option: 1 when absent, else an integer from 1 to `resources` (a `RangeError` above:
 * such a grant could never be made).
 */
export function checkPermits(permits: unknown, resources: number): number {
  if (permits === undefined) return 1;
  if (typeof permits !== 'number') throw new TypeError(`Expected \`permits\` to be a number, got ${describe(permits)}`);
  if (!Number.isInteger(permits) || permits < 1) {
    throw new RangeError(`Expected \`permits\` to be an integer of at least 1, got ${describe(permits)}`);
  }
  if (permits > resources) {
    throw new RangeError(`Expected \`permits\` to be at most the semaphore's ${resources} tokens, got ${permits}`);
  }
  return permits;
}

/** lock()'s options (`expected`: what a TypeError says they must be), checked as acquire's are. */
function lockOptions(
  options: unknown,
  expected: string,
  resources: number,
): { signal: AbortSignal | undefined; permits: number } {
  if (options === undefined) return { signal: undefined, permits: 1 };
  assertOptions(options, expected, LOCK_KEYS);
  const { signal, permits } = options as { signal?: unknown; permits?: unknown };
  return { signal: checkSignal(signal), permits: checkPermits(permits, resources) };
}

/**
 * `lock`'s arguments in every form (`lock()`, `lock(timeout, options)`, `lock([timeout,] fn,
 * options)`), checked (`permits` against the semaphore's `resources`).
 */
export function lockArguments<F extends (...args: never[]) => unknown>(
  args: readonly unknown[],
  resources: number,
): { timeout: number | null; fn: F | null; signal: AbortSignal | undefined; permits: number } {
  const [first, second, third] = args;
  if (typeof first === 'function') {
    assertArgumentCount(args.length, 2, 'lock(fn, { signal, permits }) to take at most 2 arguments');
    const options = lockOptions(second, 'the options of lock(fn, options) to be { signal?, permits? }', resources);
    return { timeout: null, fn: first as F, ...options };
  }
  assertArgumentCount(args.length, 3, 'lock(timeout, fn, { signal, permits }) to take at most 3 arguments');
  const timeout = checkTimeout(first);
  if (typeof second === 'function') {
    const expected = 'the options of lock(timeout, fn, options) to be { signal?, permits? }';
    return { timeout, fn: second as F, ...lockOptions(third, expected, resources) };
  }
  if (args.length > 2) {
    throw new TypeError(
      `Expected the second argument of lock to be a function when a third is given, got ${describe(second)}`,
    );
  }
  const expected = 'the second argument of lock to be a function or { signal?, permits? }';
  return { timeout, fn: null, ...lockOptions(second, expected, resources) };
}

/** `acquire`'s arguments (`acquire({ timeout?, signal?, permits? })`), checked. */
export function acquireArguments(
  args: readonly unknown[],
  resources: number,
): { timeout: number | null; signal: AbortSignal | undefined; permits: number } {
  assertArgumentCount(args.length, 1, 'acquire({ timeout, signal, permits }) to take at most 1 argument');
  const [options = {}] = args;
  assertOptions(options, 'acquire options to be { timeout?, signal?, permits? }', ACQUIRE_KEYS);
  const { timeout, signal, permits } = options as { timeout?: unknown; signal?: unknown; permits?: unknown };
  return { timeout: checkTimeout(timeout), signal: checkSignal(signal), permits: checkPermits(permits, resources) };
}
