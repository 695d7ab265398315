import { keySlot } from './slot';

/**
 * Everything that differs between the Redis clients this library accepts lives here: node-redis v4,
 * v5 and v6 standalone clients (`createClient()`), their cluster clients (`createCluster()`), and
 * (v5+) their Sentinel clients (`createSentinel()`). The rest of the library talks to one narrow
 * interface, `RedisClientLike`, sends every command through `sendCommand` and relies on raw RESP2
 * replies only (scripts reply RESP2 shapes even to a RESP3 connection unless they ask otherwise).
 */
export interface RedisClientLike {
  /** Sends one command (`['EVALSHA', …]`) and resolves Redis' raw reply. */
  sendCommand(args: Array<string>): Promise<unknown>;
  /** A new, unconnected client with the same options; used for the connections blocking waits run on. */
  duplicate(overrides?: { disableOfflineQueue?: boolean; socket?: object }): RedisClientLike;
  /** The options the client was made with (node-redis exposes them); `socket` is copied to duplicates. */
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
  /** Sends `commands` in order on one connection (`WAIT` must follow the write on its connection). */
  sendPinned?(commands: Array<Array<string>>): Promise<unknown[]>;
}

/** `commands` in order on one connection of `client`: a plain client has only one. */
export function sendPinned(client: RedisClientLike, commands: Array<Array<string>>): Promise<unknown[]> {
  return client.sendPinned
    ? client.sendPinned(commands)
    : Promise.all(commands.map((command) => client.sendCommand(command)));
}

/** A node-redis cluster client (`createCluster()`, v4, v5 or v6): commands are routed by a key. */
export interface RedisClusterLike {
  /** Sends a raw command to the node that owns `firstKey`'s slot. */
  sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: Array<string>): Promise<unknown>;
  /** A new, unconnected cluster client with the same options. */
  duplicate(overrides?: object): RedisClusterLike;
  /** The master that owns `slot`, with its node client (used for blocking waits). */
  getSlotMaster(slot: number): unknown;
  /** Connects to the cluster. */
  connect(): Promise<unknown>;
  /** Closes at once (v4). */
  disconnect?(): Promise<unknown>;
  /** Closes after pending replies (v5+). */
  close?(): Promise<unknown>;
  /** Closes after pending replies (v4). */
  quit?(): Promise<unknown>;
  /** Listens for errors; the semaphore adds a listener so a dropped node cannot crash the process. */
  on(event: 'error', listener: (error: Error) => void): unknown;
  /** Whether the client is connected or reconnecting. */
  readonly isOpen: boolean;
}

/** A node-redis v5+ Sentinel client (`createSentinel()`): commands go to the current primary. */
export interface RedisSentinelLike {
  /** Sends a raw command to the current primary. */
  sendCommand(isReadonly: boolean | undefined, args: Array<string>): Promise<unknown>;
  /** Connects to the Sentinels and the primary. */
  connect(): Promise<unknown>;
  /** Closes after pending replies. */
  close(): Promise<unknown>;
  /** Closes at once. */
  destroy(): Promise<unknown>;
  /** Listens for events (`error`, topology changes). */
  on(event: string, listener: (...args: never[]) => void): unknown;
  /** Whether the client is connected or reconnecting. */
  readonly isOpen: boolean;
  /** Whether commands can be sent now. */
  readonly isReady: boolean;
}

/** Any client the `redis` option accepts. */
export type SupportedRedisClient = RedisClientLike | RedisClusterLike | RedisSentinelLike;

export type Topology = 'standalone' | 'cluster' | 'sentinel';

/** Which kind of client this is, by shape (clients may come from another copy of node-redis). */
export function topologyOf(client: SupportedRedisClient): Topology {
  const probe = client as { getSlotMaster?: unknown; getSentinelNode?: unknown; getMasterNode?: unknown };
  if (typeof probe.getSlotMaster === 'function') return 'cluster';
  if (typeof probe.getSentinelNode === 'function' || typeof probe.getMasterNode === 'function') return 'sentinel';
  return 'standalone';
}

/**
 * The client the semaphore talks to, for the client it was given. `routingKey` is one of the
 * semaphore's keys: in a cluster every key of a semaphore is in one slot, so every command (also
 * the keyless `SCRIPT LOAD`) goes to the node that owns that slot.
 */
export function adaptClient(client: SupportedRedisClient, routingKey: string): RedisClientLike {
  switch (topologyOf(client)) {
    case 'cluster':
      return new ClusterAdapter(client as RedisClusterLike, routingKey, true);
    case 'sentinel':
      return new SentinelAdapter(client as RedisSentinelLike);
    default:
      return new StandaloneAdapter(client as RedisClientLike);
  }
}

/**
 * A standalone client as is, except for the duplicates blocking waits run on: node-redis v6's
 * `socket.socketTimeout` (an idle-socket timeout) would cut a blocked BLMOVE that waits longer
 * than it, so it is switched off there (the semaphore guards silent connections itself).
 */
class StandaloneAdapter implements RedisClientLike {
  readonly #client: RedisClientLike;

  constructor(client: RedisClientLike) {
    this.#client = client;
  }

  sendCommand(args: Array<string>): Promise<unknown> {
    return this.#client.sendCommand(args);
  }

  sendPinned(commands: Array<Array<string>>): Promise<unknown[]> {
    return Promise.all(commands.map((command) => this.#client.sendCommand(command)));
  }

  duplicate(overrides: { disableOfflineQueue?: boolean; socket?: object } = {}): RedisClientLike {
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

/** Most tries of a command that a cluster or a failover answered "not now" (TRYAGAIN, CLUSTERDOWN…). */
const TRANSIENT_RETRIES = 8;

/**
 * A cluster client, with every command routed to the node owning the semaphore's slot; node-redis
 * follows MOVED and ASK itself. The main adapter (not the blocking duplicates, whose pipelines must
 * keep their order: the semaphore settles those with `recover`) retries what a slot migration or a
 * failover answers before running anything: TRYAGAIN (a multi-key command mid-migration),
 * CLUSTERDOWN, LOADING, MASTERDOWN.
 */
class ClusterAdapter implements RedisClientLike {
  readonly #cluster: RedisClusterLike;
  readonly #routingKey: string;
  readonly #retries: boolean;

  constructor(cluster: RedisClusterLike, routingKey: string, retries: boolean) {
    this.#cluster = cluster;
    this.#routingKey = routingKey;
    this.#retries = retries;
    if (retries) rediscoverOnNodeErrors(cluster);
  }

  sendCommand(args: Array<string>): Promise<unknown> {
    const send = () =>
      // CLIENT names no key: sent to the slot's master itself (node-redis v6 spreads keyless commands).
      args[0] === 'CLIENT' ? this.#sendToSlotMaster(args) : this.#cluster.sendCommand(this.#routingKey, false, args);
    return this.#retries ? retryRefused(send) : send();
  }

  async #sendToSlotMaster(args: Array<string>): Promise<unknown> {
    const cluster = this.#cluster as RedisClusterLike & {
      nodeClient(node: unknown): RedisClientLike | Promise<RedisClientLike>;
    };
    const node = await cluster.nodeClient(cluster.getSlotMaster(keySlot(this.#routingKey)));
    return node.sendCommand(args);
  }

  /** One routing key, so one node client: the commands go out in order on its connection. */
  sendPinned(commands: Array<Array<string>>): Promise<unknown[]> {
    const send = () => Promise.all(commands.map((command) => this.#cluster.sendCommand(this.#routingKey, false, command)));
    return this.#retries ? retryRefused(send) : send();
  }

  /**
   * A new cluster client for one blocking waiter. v5+ connect it lazily (`minimizeConnections`: only
   * the slot owner's node gets a connection). v4 cannot read back the cluster's options to change
   * them, so its duplicate keeps them as they are (and connects to every master).
   */
  duplicate(): RedisClientLike {
    const options = (this.#cluster as { _options?: { defaults?: { socket?: object } } })._options;
    const overrides =
      options === undefined
        ? undefined
        : {
            minimizeConnections: true,
            // No offline queue and no reconnection, as for standalone waiters: a node that cannot
            // be reached fails the command at once (a first connection with reconnection would
            // wait for a dead master forever), and the semaphore retries on a new duplicate.
            defaults: {
              ...options.defaults,
              disableOfflineQueue: true,
              socket: { ...options.defaults?.socket, socketTimeout: undefined, reconnectStrategy: false },
            },
          };
    return new ClusterAdapter(this.#cluster.duplicate(overrides), this.#routingKey, false);
  }

  get options() {
    return undefined;
  }

  connect() {
    return this.#cluster.connect();
  }

  /** v5+ `close()`, v4 `quit()`; either may return nothing. */
  async quit() {
    await (this.#cluster.close ?? this.#cluster.quit ?? this.#cluster.disconnect)!.call(this.#cluster);
  }

  /** v5+ `destroy()` (returns nothing), v4 `disconnect()`. */
  async disconnect() {
    const cluster = this.#cluster as { destroy?: () => unknown; disconnect?: () => unknown };
    await (cluster.destroy ?? cluster.disconnect)!.call(cluster);
  }

  on(event: 'error', listener: (error: Error) => void) {
    return this.#cluster.on(event, listener);
  }

  get isOpen() {
    return this.#cluster.isOpen;
  }

  get isReady() {
    return (this.#cluster as { isReady?: boolean }).isReady ?? this.#cluster.isOpen;
  }
}

/** Cluster clients already watched by `rediscoverOnNodeErrors`. */
const watchedClusters = new WeakSet<object>();

/**
 * node-redis' cluster clients learn a new topology only from MOVED/ASK: when a master dies, its node
 * client keeps reconnecting to the dead address and every command for its slots waits there (or
 * fails at once, with `disableOfflineQueue`), even after a replica took over. In v5 and v6 the
 * slot map can be refreshed from outside: on each error of a node client (each failed reconnect),
 * and every second for 30 s after the last one, rediscover from the root nodes (at most once per
 * half second). Rediscovery drops the clients of
 * nodes that no longer own slots, which rejects what waited on them; the semaphore settles and
 * retries those calls. v4 has no such hook (its slot map is private): there, recreate the cluster
 * client after a failover, or use v5+.
 */
function rediscoverOnNodeErrors(cluster: RedisClusterLike): void {
  const internals = cluster as unknown as {
    _slots?: { rediscover?: (startWith: { options: unknown }) => Promise<unknown> };
    _options?: { rootNodes?: unknown[] };
  };
  const slots = internals._slots;
  const rootNodes = internals._options?.rootNodes;
  if (typeof slots?.rediscover !== 'function' || !rootNodes?.length || watchedClusters.has(cluster)) return;
  watchedClusters.add(cluster);
  let last = 0;
  let activeUntil = 0;
  let timer: NodeJS.Timeout | undefined;
  const rediscover = () => {
    if (Date.now() - last < 500 || !cluster.isOpen) return;
    last = Date.now();
    const startWith = rootNodes[Math.floor(Math.random() * rootNodes.length)];
    void slots.rediscover!.call(slots, { options: startWith }).catch(() => undefined);
  };
  cluster.on('node-error' as 'error', () => {
    // Also keep trying for a while after the last error: a promotion takes a few node timeouts, and
    // a node client that stopped reconnecting emits nothing more.
    activeUntil = Date.now() + 30_000;
    rediscover();
    timer ??= setInterval(() => {
      if (Date.now() > activeUntil || !cluster.isOpen) {
        clearInterval(timer);
        timer = undefined;
        return;
      }
      rediscover();
    }, 1000);
    timer.unref();
  });
}

/**
 * A node-redis v5+ Sentinel client: commands go to the current primary, which the client follows
 * across failovers (Sentinel's `+switch-master`). The main adapter retries what a primary in the
 * middle of a failover refuses before running anything (READONLY from the demoted primary, LOADING,
 * MASTERDOWN). Blocking waits each get a duplicate with one reserved primary connection, so a
 * waiter's pipeline stays on one connection, in order.
 */
class SentinelAdapter implements RedisClientLike {
  readonly #sentinel: RedisSentinelLike;
  readonly #retries: boolean;

  constructor(sentinel: RedisSentinelLike, retries = true) {
    this.#sentinel = sentinel;
    this.#retries = retries;
  }

  sendCommand(args: Array<string>): Promise<unknown> {
    const send = () =>
      this.#sentinel.sendCommand(false, args).catch((error: unknown) => {
        // node-redis' Sentinel client can fail a command with a TypeError while it reconfigures
        // (a reserved connection it just dropped): the command may or may not have run.
        if (error instanceof TypeError) throw new Error(`${SENTINEL_RECONFIGURATION} (${error.message})`);
        throw error;
      });
    return this.#retries ? retryRefused(send) : send();
  }

  /** The client's pool may hold several primary connections: `use()` lends one for all the commands. */
  sendPinned(commands: Array<Array<string>>): Promise<unknown[]> {
    const sentinel = this.#sentinel as unknown as {
      use?<T>(fn: (client: { sendCommand(isReadonly: boolean, args: string[]): Promise<unknown> }) => Promise<T>): Promise<T>;
    };
    if (typeof sentinel.use !== 'function') return Promise.all(commands.map((command) => this.sendCommand(command)));
    const send = () => sentinel.use!((client) => Promise.all(commands.map((command) => client.sendCommand(false, command))));
    return this.#retries ? retryRefused(send) : send();
  }

  /**
   * v6: a duplicate Sentinel client with one reserved primary connection. v5 has no `duplicate()`
   * (nor a way to read the client's options back): a waiter borrows a primary connection from the
   * client's own pool (`acquire()`), so `masterPoolSize` must exceed `maxBlockingConnections`.
   */
  duplicate(): RedisClientLike {
    const sentinel = this.#sentinel as unknown as {
      duplicate?(overrides: object): RedisSentinelLike;
      acquire(): Promise<SentinelLease>;
    };
    if (typeof sentinel.duplicate === 'function') {
      return new SentinelAdapter(sentinel.duplicate({ masterPoolSize: 1, replicaPoolSize: 0, reserveClient: true }), false);
    }
    return new SentinelLeaseAdapter(sentinel);
  }

  get options() {
    return undefined;
  }

  connect() {
    return this.#sentinel.connect();
  }

  async quit() {
    await this.#sentinel.close();
  }

  async disconnect() {
    await this.#sentinel.destroy();
  }

  on(event: 'error', listener: (error: Error) => void) {
    return this.#sentinel.on(event, listener);
  }

  get isOpen() {
    return this.#sentinel.isOpen;
  }

  get isReady() {
    return this.#sentinel.isReady;
  }
}

/** A primary connection borrowed from a v5 Sentinel client's pool (`acquire()`). */
interface SentinelLease {
  sendCommand(isReadonly: boolean | undefined, args: Array<string>): Promise<unknown>;
  release(): unknown;
  readonly isOpen: boolean;
  readonly isReady: boolean;
}

class SentinelLeaseAdapter implements RedisClientLike {
  readonly #sentinel: { acquire(): Promise<SentinelLease> };
  #lease: SentinelLease | undefined;

  constructor(sentinel: { acquire(): Promise<SentinelLease> }) {
    this.#sentinel = sentinel;
  }

  async sendCommand(args: Array<string>): Promise<unknown> {
    if (!this.#lease) throw new Error('The client is closed');
    return this.#lease.sendCommand(false, args).catch((error: unknown) => {
      if (error instanceof TypeError) throw new Error(`${SENTINEL_RECONFIGURATION} (${error.message})`);
      throw error;
    });
  }

  duplicate(): RedisClientLike {
    return new SentinelLeaseAdapter(this.#sentinel);
  }

  get options() {
    return undefined;
  }

  async connect() {
    this.#lease = await this.#sentinel.acquire();
  }

  async quit() {
    await this.disconnect();
  }

  /** Gives the connection back to the pool. */
  async disconnect() {
    const lease = this.#lease;
    this.#lease = undefined;
    await lease?.release();
  }

  on() {
    return this;
  }

  get isOpen() {
    return this.#lease !== undefined;
  }

  get isReady() {
    return this.#lease !== undefined && this.#lease.isReady;
  }
}

const SENTINEL_RECONFIGURATION = 'Connection lost during a Sentinel reconfiguration';

/** Sends again, with backoff, a command a cluster or failover refused before running it (`wasRefusedForNow`). */
async function retryRefused<T>(send: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await send();
    } catch (error) {
      if (attempt >= TRANSIENT_RETRIES || !wasRefusedForNow(error)) throw error;
      await new Promise((resolve) => setTimeout(resolve, Math.min(1000, 25 * 2 ** attempt)));
    }
  }
}

// node-redis' messages for SocketClosedUnexpectedlyError, ClientClosedError, ClientOfflineError,
// DisconnectsClientError, ConnectionTimeoutError and (v5+) SocketTimeoutError, the socket errors
// behind them, and the Sentinel adapter's own (SENTINEL_RECONFIGURATION). The messages are the same in v4, v5 and v6.
const CONNECTION_ERROR =
  /Socket closed unexpectedly|client is closed|client is offline|Disconnects client|Connection timeout|Socket timeout|Sentinel reconfiguration|ECONNRESET|ECONNREFUSED|EPIPE|ETIMEDOUT/i;

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

/**
 * Replies with which a cluster or a server changing roles refuses a command before running any of
 * it, so it is safe to send again a moment later: TRYAGAIN (a multi-key command during a slot
 * migration), CLUSTERDOWN (a failover in progress), LOADING, MASTERDOWN, READONLY (a demoted primary:
 * no script here writes before it reads TIME and state, and a replica refuses the first write),
 * UNBLOCKED (a blocked BLMOVE ended by a role change: it moved nothing), MOVED/ASK that node-redis
 * gave up following (v6: "Too many Cluster redirections").
 */
export function wasRefusedForNow(error: unknown): boolean {
  const code = replyErrorCode(error);
  if (code !== undefined && /^(TRYAGAIN|CLUSTERDOWN|LOADING|MASTERDOWN|READONLY|UNBLOCKED|MOVED|ASK)$/.test(code)) {
    return true;
  }
  return /Too many Cluster redirections/.test(String((error as { message?: unknown } | null)?.message));
}

/** Redis' reply error code (`NOSCRIPT`, `WRONGTYPE`…). Read by shape, not instanceof: errors may come from another realm. */
export function replyErrorCode(error: unknown): string | undefined {
  const message = (error as { message?: unknown } | null)?.message;
  return typeof message === 'string' ? /^[A-Z]+/.exec(message)?.[0] : undefined;
}
