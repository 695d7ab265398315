// Which kind of client the caller gave, and the adapter the library talks to for it.
import { ClusterAdapter } from './cluster';
import { SentinelAdapter } from './sentinel';
import { StandaloneAdapter } from './standalone';
import type { Connection } from './connection';
import type { RedisClientLike, RedisClusterLike, RedisSentinelLike, SupportedRedisClient } from './types';

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
export function adaptClient(client: SupportedRedisClient, routingKey: string): Connection {
  switch (topologyOf(client)) {
    case 'cluster':
      return new ClusterAdapter(client as RedisClusterLike, routingKey, true);
    case 'sentinel':
      return new SentinelAdapter(client as RedisSentinelLike);
    default:
      return new StandaloneAdapter(client as RedisClientLike);
  }
}
