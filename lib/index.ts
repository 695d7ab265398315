// The package's entry: every public export, and nothing else.
/**
 * A blocking, fair, crash-safe distributed counting semaphore and mutex on a Redis token list
 * (`BLMOVE`), for node-redis. Key names follow the Ruby gem redis-semaphore, so Ruby and Node
 * processes can share a semaphore. docs/GUARANTEES.md covers how it works, the guarantees and their limits.
 *
 * @example
 * ```ts
 * import { createClient } from 'redis';
 * import { Semaphore } from 'redis-token-semaphore';
 *
 * const redis = await createClient({ url: 'redis://127.0.0.1:6379' }).connect();
 * const sem = new Semaphore('crawler:example.com', { redis, resources: 3 });
 * const page = await sem.lock(async (token) => fetchPage()); // waits for a token; always releases it
 * ```
 *
 * @packageDocumentation
 */
export { Semaphore, type Watchdog, type WatchdogOptions } from './semaphore';
export type { HolderInfo } from './redis/status';
export type { AcquireOptions, GrantHandle, Lease, LockCallback, LockOptions } from './lease';
export {
  CHANNELS,
  TRACING_CHANNELS,
  type AbortedEvent,
  type AcquiredEvent,
  type AcquireForm,
  type AcquireOutcome,
  type AcquireTrace,
  type AcquisitionEvent,
  type HoldTrace,
  type LostEvent,
  type ReclaimedEvent,
  type ReleasedEvent,
  type SemaphoreEvents,
  type SemaphoreGauges,
  type SemaphoreStats,
  type TimeoutEvent,
  type WaitStats,
} from './telemetry';
export { Mutex, type MutexOptions } from './mutex';
export { createLocks, Locks, type LocksOptions, type LocksStats } from './locks';
export type { LockLostReason, SemaphoreOptions, WaitReplicasOptions } from './options';
export type {
  IoRedisClusterLike,
  IoRedisLike,
  IoRedisOptionsLike,
  RedisClientLike,
  RedisClusterLike,
  RedisSentinelLike,
  SupportedRedisClient,
} from './redis/client/types';
export {
  SemaphoreError,
  LockTimeoutError,
  SemaphoreRedisError,
  SemaphoreClosedError,
  LockLostError,
  ReplicationError,
  UnsupportedServerError,
} from './errors';
export { createDashboard, type DashboardHandler, type DashboardOptions } from './dashboard/handler';
