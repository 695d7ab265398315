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
