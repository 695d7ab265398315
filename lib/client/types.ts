// The client types the `redis` option accepts: node-redis v4, v5 and v6 standalone, cluster and Sentinel clients, by shape.

/**
 * A node-redis standalone client (`createClient()`, v4, v5 or v6), by the narrow shape this library
 * uses of it: every command goes through `sendCommand`, and only raw RESP2 replies are relied on
 * (scripts reply RESP2 shapes even to a RESP3 connection unless they ask otherwise). Cluster and
 * Sentinel clients are adapted to the same shape (lib/client/adapt.ts).
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
