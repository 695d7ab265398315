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

const LOCK_KEYS = ['signal'] as const;
const ACQUIRE_KEYS = ['timeout', 'signal'] as const;

/** The signal of lock()'s options (`expected`: what a TypeError says they must be), checked as acquire's are. */
function lockSignal(options: unknown, expected: string): AbortSignal | undefined {
  if (options === undefined) return undefined;
  assertOptions(options, expected, LOCK_KEYS);
  return checkSignal((options as { signal?: unknown }).signal);
}

/** `lock`'s arguments in every form (`lock()`, `lock(timeout, options)`, `lock([timeout,] fn, options)`), checked. */
export function lockArguments<F extends (...args: never[]) => unknown>(
  args: readonly unknown[],
): { timeout: number | null; fn: F | null; signal: AbortSignal | undefined } {
  const [first, second, third] = args;
  if (typeof first === 'function') {
    assertArgumentCount(args.length, 2, 'lock(fn, { signal }) to take at most 2 arguments');
    const signal = lockSignal(second, 'the options of lock(fn, options) to be { signal }');
    return { timeout: null, fn: first as F, signal };
  }
  assertArgumentCount(args.length, 3, 'lock(timeout, fn, { signal }) to take at most 3 arguments');
  const timeout = checkTimeout(first);
  if (typeof second === 'function') {
    const signal = lockSignal(third, 'the options of lock(timeout, fn, options) to be { signal }');
    return { timeout, fn: second as F, signal };
  }
  if (args.length > 2) {
    throw new TypeError(
      `Expected the second argument of lock to be a function when a third is given, got ${describe(second)}`,
    );
  }
  return {
    timeout,
    fn: null,
    signal: lockSignal(second, 'the second argument of lock to be a function or { signal }'),
  };
}

/** `acquire`'s arguments (`acquire({ timeout?, signal? })`), checked. */
export function acquireArguments(args: readonly unknown[]): {
  timeout: number | null;
  signal: AbortSignal | undefined;
} {
  assertArgumentCount(args.length, 1, 'acquire({ timeout, signal }) to take at most 1 argument');
  const [options = {}] = args;
  assertOptions(options, 'acquire options to be { timeout?, signal? }', ACQUIRE_KEYS);
  const { timeout, signal } = options as { timeout?: unknown; signal?: unknown };
  return { timeout: checkTimeout(timeout), signal: checkSignal(signal) };
}
