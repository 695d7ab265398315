// The one narrow interface the rest of the library talks to (a connection, or a client that routes), and the helpers every connection has.

/**
 * What the rest of the library talks to: one connection (a blocking waiter's), or a client that
 * routes each command (the main client; a cluster adapter sends it to the semaphore's slot). Every
 * command goes through `sendCommand`, and only raw RESP2 replies are relied on (scripts reply RESP2
 * shapes even to a RESP3 connection unless they ask otherwise). A node-redis standalone client is one
 * as it is (`RedisClientLike` has the same shape); the adapters in this folder make the others one.
 */
export interface Connection {
  /** Sends one command and resolves Redis' raw reply. */
  sendCommand(args: Array<string>): Promise<unknown>;
  /** A new, unconnected connection with the same options; used for the connections blocking waits run on. */
  duplicate(overrides?: { disableOfflineQueue?: boolean; socket?: object }): Connection;
  /** The options the client was made with, if it can tell; `socket` is copied to duplicates. */
  readonly options?: { readonly socket?: object } | undefined;
  /** Opens the connection. */
  connect(): Promise<unknown>;
  /** Closes the connection once pending replies arrive. */
  quit(): Promise<unknown>;
  /** Closes the connection at once. */
  disconnect(): Promise<unknown>;
  /** Connection errors are reported as rejected commands; a listener keeps them from crashing the process. */
  on(event: 'error', listener: (error: Error) => void): unknown;
  /** Whether the connection is open or opening. */
  readonly isOpen: boolean;
  /** Whether commands can be sent now. */
  readonly isReady: boolean;
  /** Sends `commands` in order on one connection (`WAIT` must follow the write on its connection). */
  sendPinned?(commands: Array<Array<string>>): Promise<unknown[]>;
}

/** `commands` in order on one connection of `client`: a plain client has only one. */
export function sendPinned(client: Connection, commands: Array<Array<string>>): Promise<unknown[]> {
  return client.sendPinned
    ? client.sendPinned(commands)
    : Promise.all(commands.map((command) => client.sendCommand(command)));
}

/**
 * Closes a connection now, whatever state it is in: node-redis v5+ throws (synchronously) when the
 * client is already closed, v4 rejects; neither matters to a caller that only wants it gone.
 */
export function disconnectQuietly(client: { disconnect(): Promise<unknown> }): Promise<void> {
  try {
    return Promise.resolve(client.disconnect()).then(
      () => undefined,
      () => undefined,
    );
  } catch {
    return Promise.resolve();
  }
}
