// Owns a Sentinel setup for the specs: a primary, its replicas and three Sentinels, all started by tools/redis-server.js.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { startRedisServer, type RedisServer } from './redis-server';

const run = promisify(execFile);

/** A primary, its replicas and three Sentinels, all real processes on loopback, owned by the test. */
export interface SentinelSetup {
  readonly masterName: string;
  /** Data nodes: the first started as the primary. */
  readonly servers: RedisServer[];
  readonly sentinels: RedisServer[];
  /** `{ host, port }` of each Sentinel, for `createSentinel({ sentinelRootNodes })`. */
  readonly sentinelRootNodes: Array<{ host: string; port: number }>;
  /** The port of the primary as the Sentinels see it. */
  primaryPort(): Promise<number>;
  /** `SENTINEL FAILOVER`, then waits until the Sentinels report another primary and it has a replica up. */
  failover(timeoutMs?: number): Promise<{ from: number; to: number; ms: number }>;
  /** Waits until the Sentinels agree on a primary other than `than` that is a writable master. */
  waitForNewPrimary(than: number, timeoutMs?: number): Promise<number>;
  stop(): Promise<void>;
}

const cli = async (port: number, ...args: string[]) =>
  (await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], { timeout: 10_000 })).stdout.trim();

/**
 * Starts a primary, `replicas` replicas and three Sentinels (quorum 2, down-after `downAfterMs`), and
 * waits until every Sentinel knows the primary, the replicas and the other Sentinels, so a failover
 * can be forced at once.
 */
export async function startSentinelSetup({
  replicas = 1,
  downAfterMs = 1000,
  masterName = 'mymaster',
  serverArgs = [],
}: {
  replicas?: number;
  downAfterMs?: number;
  masterName?: string;
  serverArgs?: string[];
} = {}): Promise<SentinelSetup> {
  const servers: RedisServer[] = [];
  const sentinels: RedisServer[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'rts-sentinel-')); // their config files, which they rewrite
  const stop = async () => {
    await Promise.all(
      sentinels.map(async (sentinel) => {
        await sentinel.kill('SIGKILL');
        await sentinel.stop();
      }),
    );
    await Promise.all(servers.map((server) => server.stop().catch(() => undefined)));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const primary = await startRedisServer([...serverArgs]);
    servers.push(primary);
    for (let i = 0; i < replicas; i++) {
      servers.push(await startRedisServer(['--replicaof', '127.0.0.1', String(primary.port), ...serverArgs]));
    }
    for (let i = 0; i < 3; i++) {
      // Port, bind and dir come from startRedisServer's arguments, which override the file.
      const conf = join(dir, `sentinel-${i}.conf`);
      writeFileSync(
        conf,
        [
          `sentinel monitor ${masterName} 127.0.0.1 ${primary.port} 2`,
          `sentinel down-after-milliseconds ${masterName} ${downAfterMs}`,
          `sentinel failover-timeout ${masterName} 5000`,
          `sentinel parallel-syncs ${masterName} 1`,
          '',
        ].join('\n'),
      );
      sentinels.push(await startRedisServer(['--sentinel'], { config: conf }));
    }
    const until = async (what: string, check: () => Promise<boolean>, timeoutMs = 30_000) => {
      const started = Date.now();
      while (!(await check().catch(() => false))) {
        if (Date.now() - started > timeoutMs) throw new Error(`Timed out waiting for ${what}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    };
    for (const replica of servers.slice(1)) {
      await until('replication', async () =>
        (await cli(replica.port, 'INFO', 'replication')).includes('master_link_status:up'),
      );
    }
    for (const sentinel of sentinels) {
      await until('the Sentinels to find each other and the replicas', async () => {
        const master = (await cli(sentinel.port, 'SENTINEL', 'MASTER', masterName)).split('\n');
        const field = (name: string) => master[master.indexOf(name) + 1];
        return Number(field('num-other-sentinels')) === 2 && Number(field('num-slaves')) === replicas;
      });
    }
    const primaryPort = async () =>
      Number((await cli(sentinels[0]!.port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', masterName)).split('\n')[1]);
    const waitForNewPrimary = async (than: number, timeoutMs = 30_000) => {
      let port = than;
      await until(
        'a new primary',
        async () => {
          const views = await Promise.all(
            sentinels.map(async (s) =>
              Number((await cli(s.port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', masterName)).split('\n')[1]),
            ),
          );
          port = views[0]!;
          if (port === than || views.some((view) => view !== port)) return false;
          return (await cli(port, 'INFO', 'replication')).includes('role:master');
        },
        timeoutMs,
      );
      return port;
    };
    return {
      masterName,
      servers,
      sentinels,
      sentinelRootNodes: sentinels.map((s) => ({ host: '127.0.0.1', port: s.port })),
      primaryPort,
      waitForNewPrimary,
      async failover(timeoutMs = 30_000) {
        const from = await primaryPort();
        const started = Date.now();
        await cli(sentinels[0]!.port, 'SENTINEL', 'FAILOVER', masterName);
        const to = await waitForNewPrimary(from, timeoutMs);
        return { from, to, ms: Date.now() - started };
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
