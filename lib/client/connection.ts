// The one narrow interface the rest of the library talks to (a connection, or a client that routes), and the helpers every connection has.
import type { RedisClientLike } from './types';

/** `commands` in order on one connection of `client`: a plain client has only one. */
export function sendPinned(client: RedisClientLike, commands: Array<Array<string>>): Promise<unknown[]> {
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
