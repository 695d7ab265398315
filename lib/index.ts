export { Semaphore, type HolderInfo, type LockCallback, type Watchdog, type WatchdogOptions } from './semaphore';
export type { AcquireOptions, Lease, LockOptions } from './lease';
export { CHANNELS, type SemaphoreEvents, type SemaphoreStats } from './telemetry';
export { Mutex, type MutexOptions } from './mutex';
export type { LockLostReason, SemaphoreOptions } from './options';
export type { RedisClientLike } from './redis-client';
export { SemaphoreError, LockTimeoutError, SemaphoreRedisError, SemaphoreClosedError, LockLostError } from './errors';
