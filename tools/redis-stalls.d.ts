// Types of tools/redis-stalls.js, for the TypeScript specs.

/** What `stallsDuring` measured, in milliseconds. */
export interface Stalls {
  /** How long `work()` took. */
  readonly workMs: number;
  /** The slowest PING the separate connection saw meanwhile. */
  readonly pingMs: number;
  /** PINGs answered meanwhile. */
  readonly pings: number;
  /** How long Redis ran each script meanwhile (EVAL, EVALSHA, FCALL), by its SLOWLOG, newest first. */
  readonly scriptsMs: readonly number[];
}

/**
 * Runs `work()` while a separate connection to `url` PINGs in a loop (at most `maxPings`, until
 * `deadlineMs` at the latest); logs every command meanwhile (`slowlog-log-slower-than 0`, left so).
 */
export function stallsDuring(
  url: string,
  work: () => Promise<unknown>,
  options?: { maxPings?: number; deadlineMs?: number },
): Promise<Stalls>;
