export { Semaphore, type HolderInfo, type LockCallback, type Watchdog, type WatchdogOptions } from './semaphore';
export { Mutex, type MutexOptions } from './mutex';
export type { LockLostReason, SemaphoreOptions } from './options';
export type { RedisClientLike } from './redis-client';
export { SemaphoreError, LockTimeoutError, SemaphoreRedisError, SemaphoreClosedError, LockLostError } from './errors';
export { createDashboard, type DashboardHandler, type DashboardOptions } from './dashboard/handler';
