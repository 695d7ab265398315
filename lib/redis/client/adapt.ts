// Which kind of client the caller gave (node-redis or ioredis; standalone, cluster or Sentinel), checked at construction, and the adapter the library talks to for it.
import { describe } from '../../util/describe';
import { ClusterAdapter } from './cluster';
import { adaptIoRedis, checkIoRedisKeyPrefix, ioredisKeyPrefix } from './ioredis-own';
import { SentinelAdapter } from './sentinel';
import { StandaloneAdapter } from './standalone';
import type { Connection } from './connection';
import type {
  IoRedisClusterLike,
  IoRedisLike,
  RedisClientLike,
  RedisClusterLike,
  RedisSentinelLike,
  SupportedRedisClient,
} from './types';

export type Topology = 'standalone' | 'cluster' | 'sentinel';

/** The library that made a client: node-redis or ioredis. */
export type ClientLibrary = 'node-redis' | 'ioredis';

/** Which library made `client`, by shape (clients may come from another copy of either), or undefined: neither. */
export function libraryOf(client: unknown): ClientLibrary | undefined {
  if (typeof client !== 'object' || client === null) return undefined;
  const probe = client as Record<string, unknown>;
  const has = (...names: string[]) => names.every((name) => typeof probe[name] === 'function');
  // ioredis' `Redis` and `Cluster`: `call`, a `status` string and their `options`.
  if (
    has('call', 'duplicate', 'connect', 'on') &&
    typeof probe['status'] === 'string' &&
    typeof probe['options'] === 'object'
  ) {
    return 'ioredis';
  }
  if (
    has('sendCommand', 'connect', 'on') &&
    (has('duplicate') || has('getSlotMaster') || has('getMasterNode') || has('getSentinelNode'))
  ) {
    return 'node-redis';
  }
  return undefined;
}

/**
 * Throws a `TypeError` unless `client` is a client the `redis` option accepts: node-redis or ioredis,
 * by shape, and for ioredis with a `keyPrefix` the semaphore's keys can start with (lib/redis/client/ioredis-own.ts).
 */
export function assertSupportedClient(client: unknown): asserts client is SupportedRedisClient {
  const library = libraryOf(client);
  if (library === undefined) {
    throw new TypeError(
      'Expected `redis` to be a node-redis client (v4, v5 or v6: `createClient()`, `createCluster()`, ' +
        '`createSentinel()`) or an ioredis client (v5 or v6: `new Redis()`, `new Cluster()`), got ' +
        describe(client),
    );
  }
  if (library === 'ioredis') checkIoRedisKeyPrefix(client as IoRedisLike);
}

/**
 * What the caller's client puts in front of every key: an ioredis `keyPrefix`, or ''. The library's
 * keys start with it, then the `keyPrefix` option (`app:SEMAPHORE:<name>:AVAILABLE`), and it sends
 * them on connections of its own without the prefix (lib/redis/client/ioredis-own.ts).
 */
export function clientKeyPrefix(client: SupportedRedisClient | undefined): string {
  return client !== undefined && libraryOf(client) === 'ioredis' ? ioredisKeyPrefix(client as IoRedisLike) : '';
}

/** Which kind of client this is, by shape (clients may come from another copy of node-redis or ioredis). */
export function topologyOf(client: SupportedRedisClient): Topology {
  const probe = client as {
    getSlotMaster?: unknown;
    getSentinelNode?: unknown;
    getMasterNode?: unknown;
    nodes?: unknown;
  };
  if (typeof probe.getSlotMaster === 'function') return 'cluster';
  if (typeof probe.getSentinelNode === 'function' || typeof probe.getMasterNode === 'function') return 'sentinel';
  // ioredis: a `Cluster` has `nodes()`; a `Redis` in Sentinel mode is one connection to the master.
  if (libraryOf(client) === 'ioredis' && typeof probe.nodes === 'function') return 'cluster';
  return 'standalone';
}

/**
 * The client the semaphore talks to, for the client it was given. `routingKey` is one of the
 * semaphore's keys: in a cluster every key of a semaphore is in one slot, so every command (also
 * the keyless `SCRIPT LOAD`) goes to the node that owns that slot.
 */
export function adaptClient(client: SupportedRedisClient, routingKey: string): Connection {
  const topology = topologyOf(client);
  if (libraryOf(client) === 'ioredis') {
    return adaptIoRedis(client as IoRedisLike | IoRedisClusterLike, topology === 'cluster', routingKey);
  }
  switch (topology) {
    case 'cluster':
      return new ClusterAdapter(client as RedisClusterLike, routingKey, true);
    case 'sentinel':
      return new SentinelAdapter(client as RedisSentinelLike);
    default:
      return new StandaloneAdapter(client as RedisClientLike);
  }
}
