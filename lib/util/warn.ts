// Process warnings for problems nobody can be handed.
/**
 * Reports a failing user callback or watchdog run. Takes the message as text: an error from another
 * realm (a VM context) could make `emitWarning` itself throw from inside a timer.
 */
export function warn(message: string, cause?: unknown): void {
  const detail = cause === undefined ? '' : `: ${errorMessage(cause)}`;
  process.emitWarning(`${message}${detail}`, { type: 'RedisTokenSemaphoreWarning' });
}

function errorMessage(error: unknown): string {
  const message = (error as { message?: unknown } | null)?.message;
  return typeof message === 'string' ? message : String(error);
}
