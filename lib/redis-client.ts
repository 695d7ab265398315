// The client types and adapters moved to lib/client/; this module re-exports them for the modules that still import it here (lib/admin, lib/cli, lib/dashboard, specs).
export { adaptClient, topologyOf, type Topology } from './client/adapt';
export { disconnectQuietly, sendPinned } from './client/connection';
export { isConnectionError, replyErrorCode, wasNeverSent, wasRefusedForNow } from './client/errors';
export type { RedisClientLike, RedisClusterLike, RedisSentinelLike, SupportedRedisClient } from './client/types';
