// The client types the `redis` option accepts, by shape: node-redis v4, v5 and v6 standalone, cluster and Sentinel clients; ioredis v5 and v6 clients and clusters.

/**
 * A node-redis standalone client (`createClient()`, v4, v5 or v6), by the narrow shape this library
 * uses of it: every command goes through `sendCommand`, and only raw RESP2 replies are relied on
 * (scripts reply RESP2 shapes even to a RESP3 connection unless they ask otherwise). Cluster and
 * Sentinel clients are adapted to the same shape (lib/redis/client/adapt.ts).
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
  /** Listens for errors; the semaphore adds a listener so a dropped connection cannot crash the process. */
  on(event: 'error', listener: (error: Error) => void): unknown;
  /** Whether the client is connected or reconnecting. */
  readonly isOpen: boolean;
  /** Whether commands can be sent now. */
  readonly isReady: boolean;
}

/** The options of an ioredis client this library reads (lib/redis/client/ioredis-own.ts). */
export interface IoRedisOptionsLike {
  /** Put in front of every key the library makes (before its own `keyPrefix` option). */
  readonly keyPrefix?: string | undefined;
  /** Unless `false`, the library sends its commands on a connection of its own made with `false`: a resent script could run twice. */
  readonly autoResendUnfulfilledCommands?: boolean | undefined;
  /** A function: the client reconnects after a dropped connection (ioredis' default); else it ends. */
  readonly retryStrategy?: unknown;
}

/**
 * An ioredis client (`new Redis()`, v5 or v6; also in Sentinel mode), by the shape this library
 * uses: commands go through `call`, and only raw RESP2-shaped replies are relied on.
 */
export interface IoRedisLike {
  /** Sends one command (`call('EVALSHA', …)`) and resolves Redis' reply. */
  call(command: string, ...args: string[]): Promise<unknown>;
  /** A new client with these options and `override`; used for the connections blocking waits run on. */
  duplicate(override?: object): IoRedisLike;
  /** The options the client was made with. */
  readonly options: IoRedisOptionsLike;
  /** `wait`, `connecting`, `connect`, `ready`, `reconnecting`, `close` or `end`. */
  readonly status: string;
  /** Opens the connection (duplicates are made with `lazyConnect`). */
  connect(): Promise<unknown>;
  /** Closes the connection once pending replies arrive. */
  quit(): Promise<unknown>;
  /** Closes the connection at once. */
  disconnect(): unknown;
  /** Listens for errors; the semaphore adds a listener so a dropped connection cannot crash the process. */
  on(event: 'error', listener: (error: Error) => void): unknown;
  /** Listens for `close`: a connection that dropped, so the replies it owed are lost. */
  on(event: 'close', listener: () => void): unknown;
  /** Listens for `end`: closed for good; the library then closes the connection it made from this client. */
  on(event: 'end', listener: () => void): unknown;
}

/** An ioredis cluster client (`new Cluster()`, v5 or v6): commands routed by their keys. */
export interface IoRedisClusterLike {
  /** Sends one command to the node that owns its keys' slot (a keyless one to any node). */
  call(command: string, ...args: string[]): Promise<unknown>;
  /** The connections to the cluster's nodes: `nodes('master')`. */
  nodes(role?: 'all' | 'master' | 'slave'): IoRedisLike[];
  /** Each slot's nodes as `host:port`, its master first. */
  readonly slots: ReadonlyArray<ReadonlyArray<string> | undefined>;
  /** The cluster's options; `redisOptions` are every node connection's. */
  readonly options: IoRedisOptionsLike & {
    /** Unless `0`, the library sends its commands on a cluster of its own made with `0`: a command whose connection closed would be sent again, and could run twice. */
    readonly retryDelayOnFailover?: number | undefined;
    /** Every node connection's options (their `keyPrefix` is the cluster's when it has none). */
    readonly redisOptions?: IoRedisOptionsLike | undefined;
  };
  /** `wait`, `connecting`, `connect`, `ready`, `reconnecting`, `disconnecting`, `close` or `end`. */
  readonly status: string;
  /** A new cluster client with these options and `overrideOptions`; the library's own, when it needs other options. */
  duplicate(overrideStartupNodes: never[], overrideOptions: object): IoRedisClusterLike;
  /** Reloads the slot map (after a connection to a node failed). */
  refreshSlotsCache(callback?: (error?: Error) => void): unknown;
  /** Connects to the cluster. */
  connect(): Promise<unknown>;
  /** Closes after pending replies. */
  quit(): Promise<unknown>;
  /** Closes at once. */
  disconnect(): unknown;
  /** Listens for errors; the semaphore adds a listener so a dropped node cannot crash the process. */
  on(event: 'error', listener: (error: Error) => void): unknown;
  /** Listens for `end`: closed for good; the library then closes the cluster client it made from this one. */
  on(event: 'end', listener: () => void): unknown;
}

/** Any client the `redis` option accepts. */
export type SupportedRedisClient =
  RedisClientLike | RedisClusterLike | RedisSentinelLike | IoRedisLike | IoRedisClusterLike;
