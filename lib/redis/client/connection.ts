// The one narrow interface the rest of the library talks to (a connection, or a client that routes), and the helpers every connection has.
import type { RedisClientLike } from './types';

/**
 * What the rest of the library talks to: one connection (a blocking waiter's), or a client that
 * routes each command (the main client; a cluster adapter sends it to the semaphore's slot). Every
 * command goes through `sendCommand`, and only raw RESP2 replies are relied on (scripts reply RESP2
 * shapes even to a RESP3 connection unless they ask otherwise). A node-redis standalone client is one
 * as it is (`RedisClientLike` has the same shape); the adapters in this folder make the others one.
 */
export interface Connection extends Omit<RedisClientLike, 'duplicate'> {
  /** A new, unconnected connection with the same options; used for the connections blocking waits run on. */
  duplicate(overrides?: { disableOfflineQueue?: boolean; socket?: object }): Connection;
  /**
   * `sendCommand` with its reply or failure handed to `answered` or `failed` (once, never
   * synchronously) rather than a promise: where an adapter would otherwise make a promise of its own
   * per command (ioredis'). Without it, `sendTo` follows `sendCommand`'s promise.
   */
  sendCommandTo?(args: Array<string>, answered: (reply: unknown) => void, failed: (error: unknown) => void): void;
}

/** `args` sent on `client`, its reply or failure handed to `answered` or `failed`: the fewest promises a command can take. */
export function sendTo(
  client: Connection,
  args: Array<string>,
  answered: (reply: unknown) => void,
  failed: (error: unknown) => void,
): void {
  if (client.sendCommandTo !== undefined) return client.sendCommandTo(args, answered, failed);
  let sending: Promise<unknown>;
  try {
    sending = client.sendCommand(args);
  } catch (error) {
    // node-redis v5+ throws at once when closed: a failure all the same, and never synchronous.
    sending = Promise.reject(error);
  }
  sending.then(answered, failed);
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

/**
 * What a command to a caller's node-redis client that is not open rejects with (node-redis' own
 * message, which says nothing of what to do, is the same "The client is closed"; lib/redis/client/classify.ts
 * reads it as a command never sent).
 */
export function clientNotOpen(): Error {
  return new Error(
    'The client is closed: call `await client.connect()` before a semaphore uses it, and keep it open while semaphores do',
  );
}
