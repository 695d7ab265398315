// The connection the library makes from an ioredis client it cannot use as it is (one that resends commands, or has a keyPrefix): one per client, shared, closed when the client ends.
import { DEFAULT_KEY_PREFIX, assertKeyPrefix } from '../keys';
import { sendTo, type Connection } from './connection';
import { IoRedisAdapter, IoRedisClusterAdapter } from './ioredis';
import type { IoRedisClusterLike, IoRedisLike } from './types';

/**
 * What the library's own connection changes of the caller's options (the rest, TLS, auth, `db`,
 * `enableOfflineQueue`, `retryStrategy`…, it keeps):
 * - `autoResendUnfulfilledCommands` off (ioredis' default is on): a command whose reply a dropped
 *   connection lost is not sent again after the reconnect, where a script that already ran would
 *   run twice (a `signal` push its token twice, a `lock` take two tokens and know of one); the
 *   library settles such commands itself (lib/redis/client/ioredis.ts).
 * - a Cluster's `retryDelayOnFailover` 0 (ioredis' default is 100): the same, for a command whose
 *   node connection closed.
 * - no `keyPrefix`: the library puts it in front of every key name it makes instead
 *   (`clientKeyPrefix`), so the keys a script is given, the ones it builds from them (a waiter's
 *   inbox), the raw keys of `BLMOVE` and `DEL` and the `SCAN` patterns all carry it alike.
 * - `lazyConnect`: it connects at the first command, not when a semaphore is made.
 */
const STANDALONE_OVERRIDES = { autoResendUnfulfilledCommands: false, keyPrefix: '', lazyConnect: true } as const;

/** The library's own connection made from a caller's client, and its first connection under way. */
interface Own {
  readonly connection: IoRedisLike | IoRedisClusterLike;
  connecting: Promise<void> | undefined;
}

/** Each caller's client's own connection: one for all the semaphores, lock managers and dashboards given that client. */
const owned = new WeakMap<object, Own>();

/** The prefix ioredis puts in front of every key of `client`'s commands ('' for none). */
export function ioredisKeyPrefix(client: IoRedisLike | IoRedisClusterLike): string {
  const options = client.options as IoRedisClusterLike['options'] | undefined;
  return options?.keyPrefix || options?.redisOptions?.keyPrefix || '';
}

/**
 * Throws a `TypeError` for an ioredis `keyPrefix` a semaphore's keys cannot start with: the rules of
 * the `keyPrefix` option (no `{`, `}`, glob character, whitespace or control character), which keep
 * the hash tag the name's on a Cluster and `<prefix>*` a working SCAN pattern and ACL rule.
 */
export function checkIoRedisKeyPrefix(client: IoRedisLike | IoRedisClusterLike): void {
  const prefix = ioredisKeyPrefix(client);
  if (prefix !== '')
    assertKeyPrefix("an ioredis client's `keyPrefix` followed by `keyPrefix`", prefix + DEFAULT_KEY_PREFIX);
}

/** Whether the library can send its commands through `client` itself, as the caller made it. */
function usableAsIs(client: IoRedisLike | IoRedisClusterLike, cluster: boolean): boolean {
  if (ioredisKeyPrefix(client) !== '') return false;
  return cluster
    ? (client as IoRedisClusterLike).options.retryDelayOnFailover === 0
    : (client as IoRedisLike).options.autoResendUnfulfilledCommands === false;
}

/**
 * The connection the library talks to for an ioredis client: the client itself when its options
 * allow, else the client's own connection (see STANDALONE_OVERRIDES), made at the first call and
 * shared by every semaphore of that client.
 */
export function adaptIoRedis(
  client: IoRedisLike | IoRedisClusterLike,
  cluster: boolean,
  routingKey: string,
): Connection {
  const adapt = (connection: IoRedisLike | IoRedisClusterLike): Connection =>
    cluster
      ? new IoRedisClusterAdapter(connection as IoRedisClusterLike, routingKey)
      : new IoRedisAdapter(connection as IoRedisLike);
  if (usableAsIs(client, cluster)) return adapt(client);
  const own = ownConnection(client, cluster);
  return new OwnConnection(client, own, adapt(own.connection));
}

function ownConnection(client: IoRedisLike | IoRedisClusterLike, cluster: boolean): Own {
  let own = owned.get(client);
  if (own === undefined) {
    const connection = cluster
      ? duplicateCluster(client as IoRedisClusterLike)
      : (client as IoRedisLike).duplicate(STANDALONE_OVERRIDES);
    connection.on('error', () => undefined); // failures reach callers as rejected calls
    const made: Own = { connection, connecting: undefined };
    own = made;
    owned.set(client, made);
    // Closed with the caller's client: it lives no longer than the client the caller manages.
    client.on('end', () => {
      owned.delete(client);
      if (made.connection.status === 'ready') void made.connection.quit().catch(() => made.connection.disconnect());
      else made.connection.disconnect();
    });
  }
  return own;
}

function duplicateCluster(cluster: IoRedisClusterLike): IoRedisClusterLike {
  const { redisOptions } = cluster.options;
  return cluster.duplicate([], {
    retryDelayOnFailover: 0,
    keyPrefix: '',
    lazyConnect: true,
    redisOptions: { ...redisOptions, keyPrefix: '' },
  });
}

/**
 * What a semaphore talks to when the library made its own connection from the caller's client:
 * commands go through that connection (connected at the first one); it is open for as long as the
 * caller's client is (a semaphore closes itself when the caller's client ends, as with any client),
 * and closing it is left to the caller's client's end, since other semaphores may share it.
 */
class OwnConnection implements Connection {
  readonly #client: { readonly status: string };
  readonly #own: Own;
  readonly #inner: Connection;

  constructor(client: { readonly status: string }, own: Own, inner: Connection) {
    this.#client = client;
    this.#own = own;
    this.#inner = inner;
  }

  sendCommand(args: Array<string>): Promise<unknown> {
    const connecting = this.#connecting();
    return connecting === undefined
      ? this.#inner.sendCommand(args)
      : connecting.then(() => this.#inner.sendCommand(args));
  }

  sendCommandTo(args: Array<string>, answered: (reply: unknown) => void, failed: (error: unknown) => void): void {
    const connecting = this.#connecting();
    if (connecting === undefined) sendTo(this.#inner, args, answered, failed);
    else connecting.then(() => sendTo(this.#inner, args, answered, failed), failed);
  }

  sendPinned(commands: Array<Array<string>>): Promise<unknown[]> {
    const connecting = this.#connecting();
    const send = () => this.#inner.sendPinned!(commands);
    return connecting === undefined ? send() : connecting.then(send);
  }

  /** undefined when commands can go now; otherwise the first connection, or why none will be made. */
  #connecting(): Promise<void> | undefined {
    if (this.#client.status === 'end') {
      // "client is closed": a command never sent (lib/redis/client/classify.ts).
      return Promise.reject(new Error('The client is closed: the ioredis client the semaphore was given has ended'));
    }
    const own = this.#own;
    if (own.connection.status !== 'wait') return undefined;
    return (own.connecting ??= own.connection.connect().then(
      () => undefined,
      (error: unknown) => {
        own.connecting = undefined;
        throw error;
      },
    ));
  }

  /** A blocking connection: duplicated from the library's own connection, so with its options. */
  duplicate(): Connection {
    return this.#inner.duplicate();
  }

  get options() {
    return undefined;
  }

  async connect() {
    await this.#connecting();
  }

  /** Shared with the client's other semaphores: closed when the caller's client ends, not here. */
  async quit() {}

  async disconnect() {}

  on(event: 'error', listener: (error: Error) => void) {
    return this.#own.connection.on(event, listener);
  }

  get isOpen() {
    return this.#client.status !== 'end' && this.#own.connection.status !== 'end';
  }

  get isReady() {
    return this.#client.status !== 'end' && this.#own.connection.status === 'ready';
  }
}
