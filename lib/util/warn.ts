/**
 * Reports a problem nobody can be handed (a failing user callback, a watchdog run) as a process
 * warning. Takes the message as text, so an error from another realm (a VM context) cannot make
 * `emitWarning` itself throw from inside a timer.
 */
export function warn(message: string, cause?: unknown): void {
  const detail = cause === undefined ? '' : `: ${errorMessage(cause)}`;
  process.emitWarning(`${message}${detail}`, { type: 'RedisTokenSemaphoreWarning' });
}

function errorMessage(error: unknown): string {
  const message = (error as { message?: unknown } | null)?.message;
  return typeof message === 'string' ? message : String(error);
}
