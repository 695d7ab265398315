// A node-redis cluster client (`createCluster()`): every command routed to the semaphore's slot, refusals retried, the slot map refreshed after a failover, and its blocking connections.
import { keySlot } from '../slot';
import { retryRefused } from './classify';
import { clientNotOpen, type Connection } from './connection';
import type { RedisClientLike, RedisClusterLike } from './types';

/**
 * A cluster client, with every command routed to the node owning the semaphore's slot; node-redis
 * follows MOVED and ASK itself. The main adapter (not the blocking duplicates, whose pipelines must
 * keep their order: the semaphore settles those with `recover`) retries what a slot migration or a
 * failover answers before running anything: TRYAGAIN (a multi-key command mid-migration),
 * CLUSTERDOWN, LOADING, MASTERDOWN.
 */
export class ClusterAdapter implements Connection {
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
    // The caller's client (the one that retries): one not open says to connect it.
    if (this.#retries && !this.#cluster.isOpen) return Promise.reject(clientNotOpen());
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
    if (this.#retries && !this.#cluster.isOpen) return Promise.reject(clientNotOpen());
    const send = () =>
      Promise.all(commands.map((command) => this.#cluster.sendCommand(this.#routingKey, false, command)));
    return this.#retries ? retryRefused(send) : send();
  }

  /**
   * A new cluster client for one blocking waiter. v5+ connect it lazily (`minimizeConnections`: only
   * the slot owner's node gets a connection). v4 cannot read back the cluster's options to change
   * them, so its duplicate keeps them as they are (and connects to every master).
   */
  duplicate(): Connection {
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
