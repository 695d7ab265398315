// ioredis clients (`new Redis()`, `new Cluster()`, v5 and v6) with the options the library needs: commands through `call`, replies a dropped connection lost, and the blocking connections.
import { keySlot } from '../slot';
import { isConnectionError, NO_SLOT_MASTER, retryRefused, wasRefusedForNow } from './classify';
import type { Connection } from './connection';
import type { IoRedisClusterLike, IoRedisLike } from './types';

/** ioredis' own message for a command whose connection closed; what a lost reply rejects with here too. */
export const IOREDIS_CONNECTION_CLOSED = 'Connection is closed.';

/** Options of a blocking connection: no offline queue, no reconnection, no resend, no client-side timeouts (the semaphore guards its waits itself). */
const BLOCKING_OVERRIDES = {
  lazyConnect: true,
  enableOfflineQueue: false,
  retryStrategy: null,
  reconnectOnError: null,
  autoResendUnfulfilledCommands: false,
  autoResubscribe: false,
  enableAutoPipelining: false,
  readOnly: false,
  commandTimeout: undefined,
  socketTimeout: undefined,
  blockingTimeout: undefined,
} as const;

/** `args` as ioredis' `call` takes them (a rejection also when it throws at once). */
function send(
  client: { call(command: string, ...args: string[]): Promise<unknown> },
  args: Array<string>,
): Promise<unknown> {
  if (args.length === 0) return Promise.reject(new TypeError('Expected a command'));
  try {
    return client.call(...(args as [string, ...string[]]));
  } catch (error) {
    return Promise.reject(error);
  }
}

/** The replies each client still owes for commands written to its connection, failed when the connection closes. */
const owed = new WeakMap<IoRedisLike, Set<(error: Error) => void>>();

/**
 * The replies `client` owes, watched once per client: with `autoResendUnfulfilledCommands: false`
 * ioredis drops the commands a closed connection had written and never settles them once it has
 * reconnected, so they are rejected here, as node-redis does ("the reply is lost: the command may
 * or may not have run").
 */
function owedBy(client: IoRedisLike): Set<(error: Error) => void> {
  let pending = owed.get(client);
  if (!pending) {
    const created = new Set<(error: Error) => void>();
    pending = created;
    owed.set(client, created);
    client.on('close', () => {
      const failures = [...created];
      created.clear();
      for (const fail of failures)
        fail(new Error(`${IOREDIS_CONNECTION_CLOSED} The reply was lost with the connection`));
    });
  }
  return pending;
}

type LifecycleTarget = Pick<IoRedisLike, 'connect' | 'quit' | 'disconnect' | 'status'> & {
  on(event: 'error', listener: (error: Error) => void): unknown;
};

/** What an ioredis `Redis` and `Cluster` have alike (connecting, closing, errors, status), forwarded. */
abstract class IoRedisLifecycle {
  readonly #target: LifecycleTarget;

  protected constructor(target: LifecycleTarget) {
    this.#target = target;
  }

  /** ioredis has no node-redis `socket` options to hand on. */
  get options() {
    return undefined;
  }

  async connect() {
    await this.#target.connect();
  }

  quit() {
    return this.#target.quit();
  }

  async disconnect() {
    this.#target.disconnect();
  }

  on(event: 'error', listener: (error: Error) => void) {
    return this.#target.on(event, listener);
  }

  /** Connected, or connecting or reconnecting (`wait`: never connected; `end`: closed for good). */
  get isOpen() {
    return isOpenStatus(this.#target.status);
  }

  get isReady() {
    return this.#target.status === 'ready';
  }
}

/**
 * An ioredis `Redis` as a `Connection`: the caller's client, or a blocking connection duplicated from
 * it (no offline queue, no reconnection, no resend, no client-side timeout: the semaphore retries on
 * a new connection and guards silent ones itself).
 */
export class IoRedisAdapter extends IoRedisLifecycle implements Connection {
  readonly #client: IoRedisLike;
  /** The replies the client owes (`owedBy`), looked up at the first command written. */
  #owed: Set<(error: Error) => void> | undefined;
  readonly #reconnects: boolean;

  constructor(client: IoRedisLike) {
    super(client);
    this.#client = client;
    this.#reconnects = typeof client.options.retryStrategy === 'function';
  }

  sendCommand(args: Array<string>): Promise<unknown> {
    if (!this.#owes()) return send(this.#client, args);
    return new Promise((resolve, reject) => this.sendCommandTo(args, resolve, reject));
  }

  /** `sendCommand` without a promise of its own: ioredis' reply, or the failure of a dropped connection. */
  sendCommandTo(args: Array<string>, answered: (reply: unknown) => void, failed: (error: unknown) => void): void {
    if (!this.#owes()) return void send(this.#client, args).then(answered, failed);
    const pending = (this.#owed ??= owedBy(this.#client));
    let settled = false;
    const lost = (error: Error) => {
      settled = true;
      failed(error);
    };
    pending.add(lost);
    send(this.#client, args).then(
      (reply) => {
        if (settled) return;
        settled = true;
        pending.delete(lost);
        answered(reply);
      },
      (error: unknown) => {
        if (settled) return;
        settled = true;
        pending.delete(lost);
        failed(error);
      },
    );
  }

  /**
   * Whether a command sent now could be dropped unsettled (see `owedBy`): written at once (only a
   * ready client writes at once; otherwise it waits in ioredis' offline queue, or is refused, and
   * is written after the reconnect, where its reply will come) by a client that reconnects. One
   * that does not (`retryStrategy` not a function: the blocking connections) ends when its
   * connection closes, and ioredis then rejects every command it owes ("Connection is closed.").
   */
  #owes(): boolean {
    return this.#reconnects && this.#client.status === 'ready';
  }

  sendPinned(commands: Array<Array<string>>): Promise<unknown[]> {
    return Promise.all(commands.map((command) => this.sendCommand(command)));
  }

  duplicate(): Connection {
    return new IoRedisAdapter(this.#client.duplicate(BLOCKING_OVERRIDES));
  }
}

/** `close` is a passing state (ioredis goes on to `reconnecting` or `end`); `wait`: never connected. */
function isOpenStatus(status: string): boolean {
  return status !== 'wait' && status !== 'end';
}

/**
 * An ioredis `Cluster` as a `Connection`: keyed commands go through the cluster (which follows MOVED
 * and ASK, and retries TRYAGAIN and CLUSTERDOWN), keyless ones (`SCRIPT LOAD`, `CLIENT`, `WAIT`,
 * `INFO`) to the master that owns the semaphore's slot, which ioredis would send anywhere. Refusals
 * are retried as for node-redis (`retryRefused`). A blocking connection is a plain connection to that
 * master, duplicated from the cluster's own connection to it.
 */
export class IoRedisClusterAdapter extends IoRedisLifecycle implements Connection {
  readonly #cluster: IoRedisClusterLike;
  readonly #routingKey: string;

  constructor(cluster: IoRedisClusterLike, routingKey: string) {
    super(cluster);
    this.#cluster = cluster;
    this.#routingKey = routingKey;
  }

  sendCommand(args: Array<string>): Promise<unknown> {
    return this.#retry(() => (KEYLESS.has(args[0] ?? '') ? send(this.#slotMaster(), args) : send(this.#cluster, args)));
  }

  /** One connection, the slot master's: `WAIT` must follow the write on its connection. */
  sendPinned(commands: Array<Array<string>>): Promise<unknown[]> {
    return this.#retry(() => {
      const master = this.#slotMaster();
      return Promise.all(commands.map((command) => send(master, command)));
    });
  }

  async #retry<T>(attempt: () => Promise<T>): Promise<T> {
    try {
      return await retryRefused(attempt);
    } catch (error) {
      // A node that failed or refused may have a successor: learn the new slot map for the next call.
      if (isConnectionError(error) || wasRefusedForNow(error)) this.#cluster.refreshSlotsCache(() => undefined);
      throw error;
    }
  }

  /** The cluster's connection to the master of the semaphore's slot. */
  #slotMaster(): IoRedisLike {
    const slot = keySlot(this.#routingKey);
    const address = this.#cluster.slots[slot]?.[0];
    const master = this.#cluster.nodes('master').find((node) => addressOf(node) === address);
    if (!master) {
      this.#cluster.refreshSlotsCache(() => undefined);
      throw new Error(`${NO_SLOT_MASTER} ${slot} (${address ?? 'not in the slot map'}) yet`);
    }
    return master;
  }

  duplicate(): Connection {
    // A node's connection is made lazily, and it has the cluster's `redisOptions` and the node's address.
    return new IoRedisAdapter(this.#slotMaster().duplicate(BLOCKING_OVERRIDES));
  }
}

/** Commands with no key, which ioredis' cluster would send to any node. */
// A word list, not an array literal: spec/package/security.spec.ts reads array literals of capitals in lib/ as commands sent.
const KEYLESS = new Set('SCRIPT CLIENT WAIT INFO TIME PING'.split(' '));

function addressOf(node: IoRedisLike): string {
  const { host, port } = node.options as { host?: string; port?: number };
  return `${host}:${port}`;
}
