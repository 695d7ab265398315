import { spawnSync } from 'node:child_process';
import { isOlder } from '../../lib/redis/server-checks';
import { startRedisServer, type RedisServer } from './redis-server';

declare global {
  var __RTS_REDIS__: RedisServer | undefined;
}

/**
 * The oldest redis-server the specs can start: they pass `--enable-debug-command local` (new in 7.0;
 * `DEBUG SLEEP` and the like stand in for a stalled server), here and in the cluster and fault specs.
 * The library itself runs on 6.2 (lib/redis/server-checks.ts).
 */
const TESTS_NEED = '7.0.0';

const HOW_TO_GET_REDIS = `Install redis-server 7.0 or later so the tests can start their own:
  sudo apt-get install redis-server   (Debian 12, Ubuntu 24.04; Ubuntu 22.04's is 6.0: use packages.redis.io)
  brew install redis
Most specs can also use a running Redis (the cluster, Sentinel and fault specs still start their own):
  docker compose up -d && REDIS_URL=redis://127.0.0.1:6379 npm test`;

/** The installed redis-server's version (`redis-server --version`: "Redis server v=7.0.15 sha=…"), or why there is none. */
function installedRedisServer(): { version: string } | { missing: string } {
  const run = spawnSync('redis-server', ['--version'], { encoding: 'utf8', timeout: 10_000 });
  if (run.error) {
    const code = (run.error as NodeJS.ErrnoException).code;
    return {
      missing:
        code === 'ENOENT' ? 'redis-server is not on PATH' : `redis-server --version failed: ${run.error.message}`,
    };
  }
  const version = /\bv=(\d+\.\d+\.\d+)/.exec(run.stdout)?.[1];
  return version
    ? { version }
    : { missing: `redis-server --version said ${JSON.stringify(run.stdout.trim())}, with no version` };
}

/** Uses REDIS_URL when set; otherwise starts a private redis-server for the whole run. */
export default async function globalSetup(): Promise<void> {
  if (process.env['REDIS_URL']) return;
  const installed = installedRedisServer();
  if ('missing' in installed)
    throw new Error(`The tests need redis-server ${TESTS_NEED} or later: ${installed.missing}.\n${HOW_TO_GET_REDIS}`);
  if (isOlder(installed.version, TESTS_NEED)) {
    throw new Error(
      `The tests need redis-server ${TESTS_NEED} or later (they start it with --enable-debug-command), ` +
        `but the one on PATH is ${installed.version}.\n${HOW_TO_GET_REDIS}`,
    );
  }
  const server = await startRedisServer(['--enable-debug-command', 'local']);
  globalThis.__RTS_REDIS__ = server;
  process.env['REDIS_URL'] = server.url;
}
