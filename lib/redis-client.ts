/**
 * The few things this library asks of a Redis client. A node-redis v4 client (`createClient()`)
 * fits as is; commands go through `sendCommand`, so only raw RESP replies are relied on.
 */
export interface RedisClientLike {
  /** Sends one command (`['EVALSHA', …]`) and resolves Redis' raw reply. */
  sendCommand(args: Array<string>): Promise<unknown>;
  /** A new, unconnected client with the same options; used for the connections blocking waits run on. */
  duplicate(overrides?: { disableOfflineQueue?: boolean; socket?: object }): RedisClientLike;
  /** The options the client was made with (node-redis v4 exposes them); `socket` is copied to duplicates. */
  readonly options?:
    | {
        /** Socket options (host, port, TLS, timeouts…), given to each duplicate as they are. */
        readonly socket?: object;
      }
    | undefined;
  /** Opens the connection; called on duplicates, and on the client a semaphore made from `url`. */
  connect(): Promise<unknown>;
  /** Closes the connection once pending replies arrive; called only on clients the semaphore made. */
  quit(): Promise<unknown>;
  /** Closes the connection at once; the fallback when `quit` fails. */
  disconnect(): Promise<unknown>;
  /** Connection errors are reported as rejected commands; the semaphore listens so none is unhandled. */
  on(event: 'error', listener: (error: Error) => void): unknown;
  /** Whether the client is connected or connecting. */
  readonly isOpen: boolean;
  /** Whether the client is connected and ready for commands. */
  readonly isReady: boolean;
}

// node-redis' messages for SocketClosedUnexpectedlyError, ClientClosedError, ClientOfflineError,
// DisconnectsClientError and ConnectionTimeoutError, and the socket errors behind them.
const CONNECTION_ERROR =
  /Socket closed unexpectedly|client is closed|client is offline|Disconnects client|Connection timeout|ECONNRESET|ECONNREFUSED|EPIPE|ETIMEDOUT/i;

/** Errors that say the connection failed, not the command: the command may or may not have run. */
export function isConnectionError(error: unknown): boolean {
  const { message, code } = (error ?? {}) as { message?: unknown; code?: unknown };
  return CONNECTION_ERROR.test(`${String(message)} ${String(code)}`);
}

/** A command node-redis rejected before sending it (the client was offline or closed): it did not run. */
export function wasNeverSent(error: unknown): boolean {
  const { cause, message } = (error ?? {}) as { cause?: unknown; message?: unknown };
  return /client is offline|client is closed/i.test(String(message)) || (cause !== undefined && wasNeverSent(cause));
}

/** Redis' reply error code (`NOSCRIPT`, `WRONGTYPE`…). Read by shape, not instanceof: errors may come from another realm. */
export function replyErrorCode(error: unknown): string | undefined {
  const message = (error as { message?: unknown } | null)?.message;
  return typeof message === 'string' ? /^[A-Z]+/.exec(message)?.[0] : undefined;
}
