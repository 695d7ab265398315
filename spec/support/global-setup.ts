import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isOlder } from '../../lib/redis/server-checks';
import { startRedisServer, type RedisServer } from './redis-server';

declare global {
  var __RTS_REDIS__: RedisServer[] | undefined;
}

/**
 * The oldest redis-server the specs can start: they pass `--enable-debug-command local` (new in 7.0;
 * `DEBUG SLEEP` and the like stand in for a stalled server), here and in the cluster and fault specs.
 * The library itself runs on 6.2 (lib/redis/server-checks.ts), and so does the server matrix
 * (TEST_REDIS_SERVER: older servers get a wrapper that drops the flag; DEBUG is always on before 7.0).
 */
const TESTS_NEED = '7.0.0';

const HOW_TO_GET_REDIS = `Install redis-server 7.0 or later so the tests can start their own:
  sudo apt-get install redis-server   (Debian 12, Ubuntu 24.04; Ubuntu 22.04's is 6.0: use packages.redis.io)
  brew install redis
Most specs can also use a running Redis (the cluster, Sentinel and fault specs still start their own):
  docker compose up -d && REDIS_URL=redis://127.0.0.1:6379 npm test`;

/** The version `redis-server --version` (or another binary's) prints: "Redis server v=7.0.15 sha=…", or why there is none. */
function serverVersion(command: string): { version: string } | { missing: string } {
  const run = spawnSync(command, ['--version'], { encoding: 'utf8', timeout: 10_000 });
  if (run.error) {
    const code = (run.error as NodeJS.ErrnoException).code;
    return {
      missing: code === 'ENOENT' ? `${command} is not on PATH` : `${command} --version failed: ${run.error.message}`,
    };
  }
  const version = /\bv=(\d+\.\d+\.\d+)/.exec(run.stdout)?.[1];
  return version
    ? { version }
    : { missing: `${command} --version said ${JSON.stringify(run.stdout.trim())}, with no version` };
}

/**
 * The server matrix (spec/support/server-matrix.js): every redis-server the run starts, its own and
 * the specs', becomes TEST_REDIS_SERVER, through a `redis-server` first on the PATH. For a server
 * older than 7.0 the wrapper drops `--enable-debug-command <value>`, which it does not know.
 */
function useServer(binary: string): void {
  const found = serverVersion(binary);
  if ('missing' in found) throw new Error(`TEST_REDIS_SERVER: ${found.missing}`);
  const dir = mkdtempSync(join(tmpdir(), 'rts-server-'));
  const dropDebugFlag = isOlder(found.version, TESTS_NEED);
  const script = dropDebugFlag
    ? `#!/bin/sh
skip=0
for arg do
  shift
  if [ "$skip" = 1 ]; then skip=0; continue; fi
  if [ "$arg" = --enable-debug-command ]; then skip=1; continue; fi
  set -- "$@" "$arg"
done
exec ${JSON.stringify(binary)} "$@"
`
    : `#!/bin/sh\nexec ${JSON.stringify(binary)} "$@"\n`;
  writeFileSync(join(dir, 'redis-server'), script);
  chmodSync(join(dir, 'redis-server'), 0o755);
  process.env['PATH'] = `${dir}:${process.env['PATH'] ?? ''}`;
  process.stderr.write(`\nserver matrix: every redis-server of this run is ${binary} (v=${found.version})\n`);
}

/**
 * Uses REDIS_URL when set; otherwise starts one private redis-server per jest worker (maxWorkers),
 * whose URL setup-realm.ts hands that worker's specs as REDIS_URL. Specs in parallel then never
 * share a server: nothing one does to it (CLIENT LIST and blocked-client counts, SLOWLOG, CONFIG
 * SET, the script cache and function library, DEBUG SLEEP) is seen by a spec in another worker.
 */
export default async function globalSetup(globalConfig: { maxWorkers: number }): Promise<void> {
  const matrixServer = process.env['TEST_REDIS_SERVER'];
  if (matrixServer) useServer(matrixServer);
  if (process.env['REDIS_URL']) return;
  const installed = serverVersion('redis-server');
  if ('missing' in installed)
    throw new Error(`The tests need redis-server ${TESTS_NEED} or later: ${installed.missing}.\n${HOW_TO_GET_REDIS}`);
  if (!matrixServer && isOlder(installed.version, TESTS_NEED)) {
    throw new Error(
      `The tests need redis-server ${TESTS_NEED} or later (they start it with --enable-debug-command), ` +
        `but the one on PATH is ${installed.version}.\n${HOW_TO_GET_REDIS}`,
    );
  }
  const workers = Math.max(1, globalConfig.maxWorkers);
  const servers = await Promise.all(
    Array.from({ length: workers }, () => startRedisServer(['--enable-debug-command', 'local'])),
  );
  globalThis.__RTS_REDIS__ = servers;
  servers.forEach((server, i) => (process.env[`RTS_WORKER_REDIS_URL_${i + 1}`] = server.url));
}
