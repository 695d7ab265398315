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

export function checkSignal(signal: unknown): AbortSignal | undefined {
  if (signal === undefined) return undefined;
  if (!isAbortSignal(signal)) {
    throw new TypeError(`Expected \`signal\` to be an AbortSignal, got ${describe(signal)}`);
  }
  return signal as AbortSignal;
}

export function assertToken(token: unknown, operation: string): asserts token is string {
  if (typeof token !== 'string') {
    throw new TypeError(`Expected the token given to ${operation} to be a string, got ${describe(token)}`);
  }
}
