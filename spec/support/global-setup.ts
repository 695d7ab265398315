import { startRedisServer, type RedisServer } from './redis-server';

declare global {
  var __RTS_REDIS__: RedisServer | undefined;
}

/** Uses REDIS_URL when set; otherwise starts a private redis-server for the whole run. */
export default async function globalSetup(): Promise<void> {
  if (process.env['REDIS_URL']) return;
  const server = await startRedisServer(['--enable-debug-command', 'local']);
  globalThis.__RTS_REDIS__ = server;
  process.env['REDIS_URL'] = server.url;
}
