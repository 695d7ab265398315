// Types of tools/redis-server.js, for the TypeScript specs (spec/support/redis-server.ts re-exports them).

/** A real redis-server process on a free loopback port, owned by whoever started it. */
export interface RedisServer {
  readonly port: number;
  /** `redis://127.0.0.1:<port>` */
  readonly url: string;
  /** The current process's pid (a new one after `restart()`). */
  readonly pid: number;
  /** Its own temp dir (`--dir`): AOF and RDB files land here; `stop()` removes it. */
  readonly dir: string;
  /** Stops it (SIGTERM, SIGKILL after 5 s), waits for the exit and removes its dir. */
  stop(): Promise<void>;
  /** Kills it with `signal` (SIGKILL by default) and waits for the exit: a crash; its dir stays for `restart()`. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Starts it again on the same port, with the same arguments and dir. */
  restart(): Promise<void>;
}

export interface StartOptions {
  /** A config file, passed before every other argument (a Sentinel's; `args` then holds `--sentinel`). */
  readonly config?: string;
  /** A command to run redis-server under: `['taskset', '-c', '0']`, `['valgrind', '--tool=callgrind']`. */
  readonly wrapper?: readonly string[];
  /**
   * How long to wait for it to answer PING.
   * @default 10000
   */
  readonly readyTimeoutMs?: number;
  /**
   * SIGKILL it if this process exits while it runs (scripts that may end with `process.exit()`).
   * @default false
   */
  readonly stopOnExit?: boolean;
}

/** A TCP port nothing on 127.0.0.1 listens on at the moment of asking. */
export function freePort(): Promise<number>;

/** Whether a Redis on 127.0.0.1:`port` answers PING within `timeoutMs` (default 500). */
export function answersPing(port: number, timeoutMs?: number): Promise<boolean>;

/**
 * Starts `redis-server --port <free> --bind 127.0.0.1 --save "" --appendonly no --dir <temp> ...args`
 * and resolves once it answers PING. Rejects with `code: 'ENOENT'` when redis-server (or the wrapper)
 * is not on PATH.
 */
export function startRedisServer(args?: readonly string[], options?: StartOptions): Promise<RedisServer>;
