/**
 * The few things this library asks of a Redis client. A node-redis v4 client (`createClient()`)
 * fits as is; commands go through `sendCommand`, so only raw RESP replies are relied on.
 */
export interface RedisClientLike {
  sendCommand(args: Array<string>): Promise<unknown>;
  /** A new, unconnected client with the same options; used for the connections blocking waits run on. */
  duplicate(overrides?: { disableOfflineQueue?: boolean }): RedisClientLike;
  connect(): Promise<unknown>;
  quit(): Promise<unknown>;
  disconnect(): Promise<unknown>;
  on(event: 'error', listener: (error: Error) => void): unknown;
  readonly isOpen: boolean;
  readonly isReady: boolean;
}

// node-redis' messages for SocketClosedUnexpectedlyError, ClientClosedError, ClientOfflineError,
// DisconnectsClientError and ConnectionTimeoutError, and the socket errors behind them.
const CONNECTION_ERROR =
  /Socket closed unexpectedly|client is closed|client is offline|Disconnects client|Connection timeout|ECONNRESET|ECONNREFUSED|EPIPE|ETIMEDOUT/i;

/** Errors that say the connection failed, not the command: the command may or may not have run. */
export function isConnectionError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  return CONNECTION_ERROR.test(`${error.message} ${(error as { code?: string }).code ?? ''}`);
}
