// A node-redis standalone client (`createClient()`): the one a semaphore makes from `url`, the caller's, and how it makes a blocking connection (no idle-socket timeout).
import type { createClient } from 'redis';
import { backoffMs } from '../../util/deadline';
import { clientNotOpen, type Connection } from './connection';
import type { RedisClientLike } from './types';

/** How often a semaphore's own client retries its first connection before the call fails. */
const INITIAL_CONNECT_RETRIES = 3;

/**
 * A caller's standalone client as is (a command while it is not open says to connect it), except for the duplicates blocking waits run on: node-redis v6's
 * `socket.socketTimeout` (an idle-socket timeout) would cut a blocked BLMOVE that waits longer
 * than it, so it is switched off there (the semaphore guards silent connections itself).
 */
export class StandaloneAdapter implements Connection {
  readonly #client: RedisClientLike;

  constructor(client: RedisClientLike) {
    this.#client = client;
  }

  sendCommand(args: Array<string>): Promise<unknown> {
    if (!this.#client.isOpen) return Promise.reject(clientNotOpen());
    return this.#client.sendCommand(args);
  }

  sendPinned(commands: Array<Array<string>>): Promise<unknown[]> {
    if (!this.#client.isOpen) return Promise.reject(clientNotOpen());
    return Promise.all(commands.map((command) => this.#client.sendCommand(command)));
  }

  duplicate(overrides: { disableOfflineQueue?: boolean; socket?: object } = {}): Connection {
    const socket = { ...this.#client.options?.socket, ...overrides.socket, socketTimeout: undefined };
    return this.#client.duplicate({ ...overrides, socket });
  }

  get options() {
    return this.#client.options;
  }

  connect() {
    return this.#client.connect();
  }

  quit() {
    return this.#client.quit();
  }

  disconnect() {
    return this.#client.disconnect();
  }

  on(event: 'error', listener: (error: Error) => void) {
    return this.#client.on(event, listener);
  }

  get isOpen() {
    return this.#client.isOpen;
  }

  get isReady() {
    return this.#client.isReady;
  }
}

/**
 * The client a semaphore makes when given none. It fails fast rather than hang: commands sent while
 * disconnected reject at once, and a first connection that cannot be made gives up after a few tries
 * (the next call tries again). Once connected, it reconnects with backoff for as long as it is open.
 */
export function createOwnClient(url: string): Connection {
  let connected = false;
  const client = nodeRedis().createClient({
    url,
    disableOfflineQueue: true,
    socket: {
      // A new Error, not `cause`: node-redis tells "give up" from a delay with instanceof, and `cause`
      // may come from another realm (a socket error under jest's VM) and not pass.
      reconnectStrategy: (retries: number, cause: Error) =>
        connected || retries < INITIAL_CONNECT_RETRIES ? backoffMs(retries) : new Error(cause.message),
    },
  });
  client.on('ready', () => (connected = true));
  client.on('error', () => undefined); // failures reach callers as rejected calls
  return client as unknown as Connection;
}

/** node-redis, an optional peer dependency: loaded only when a semaphore makes its own client (`url`). */
function nodeRedis(): { createClient: typeof createClient } {
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- optional: an ioredis-only application has no `redis`
    return require('redis') as { createClient: typeof createClient };
  } catch (error) {
    throw new Error('The `url` option needs node-redis (`npm install redis`); or pass a connected client as `redis`', {
      cause: error,
    });
  }
}
