export { Semaphore, type Watchdog, type WatchdogOptions } from './semaphore';
export { Mutex, type MutexOptions } from './mutex';
export type { SemaphoreOptions, WaitReplicasOptions } from './options';
export type { RedisClientLike, RedisClusterLike, RedisSentinelLike, SupportedRedisClient } from './redis-client';
export { SemaphoreError, LockTimeoutError, SemaphoreRedisError, SemaphoreClosedError, ReplicationError } from './errors';
