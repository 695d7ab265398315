import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { startRedisServer, type RedisServer } from './redis-server';

const run = promisify(execFile);

/** A real Redis Cluster of redis-server processes on loopback, owned by the test that started it. */
export interface RedisCluster {
  /** Every node, masters first as created (`redis-cli --cluster create` makes the first ones masters). */
  readonly nodes: RedisServer[];
  /** The nodes whose process is still running (a killed master is not). */
  liveNodes(): RedisServer[];
  /** `{ url }` of every node, for `createCluster({ rootNodes })`. */
  readonly rootNodes: Array<{ url: string }>;
  /** Runs `redis-cli -p <port> <args>` and resolves its stdout. */
  cli(port: number, ...args: string[]): Promise<string>;
  /** The node ids and roles as `CLUSTER NODES` on `port` sees them. */
  topology(port?: number): Promise<ClusterNode[]>;
  /** The node that owns `slot`, as `port` sees it. */
  ownerOf(slot: number, port?: number): Promise<ClusterNode>;
  /** Waits until every live node reports `cluster_state:ok` and agrees on who owns `slot` (all slots if omitted). */
  waitUntilStable(timeoutMs?: number): Promise<void>;
  /** Stops every node (by pid) and removes their directories. */
  stop(): Promise<void>;
}

export interface ClusterNode {
  readonly id: string;
  readonly port: number;
  readonly master: boolean;
  readonly failed: boolean;
  readonly masterId: string | null;
  /** Slot ranges `[from, to]` this node serves (masters). */
  readonly slots: Array<[number, number]>;
}

/**
 * Starts `masters` masters and `replicasPerMaster` replicas of each, with `cluster-node-timeout`
 * `nodeTimeoutMs` (a failover takes about twice that), and creates the cluster.
 */
export async function startRedisCluster({
  masters = 3,
  replicasPerMaster = 0,
  nodeTimeoutMs = 1000,
}: { masters?: number; replicasPerMaster?: number; nodeTimeoutMs?: number } = {}): Promise<RedisCluster> {
  const nodes: RedisServer[] = [];
  const stop = async () => {
    await Promise.all(nodes.map((node) => node.stop().catch(() => undefined)));
  };
  try {
    const count = masters * (1 + replicasPerMaster);
    for (let i = 0; i < count; i++) {
      nodes.push(
        await startRedisServer([
          '--cluster-enabled',
          'yes',
          '--cluster-node-timeout',
          String(nodeTimeoutMs),
          // A replica may take over even if it lost touch with its master a while ago (tests kill masters).
          '--cluster-replica-validity-factor',
          '0',
          '--enable-debug-command',
          'local',
        ]),
      );
    }
    const cli = async (port: number, ...args: string[]) =>
      (await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], { timeout: 30_000 })).stdout;
    await run(
      'redis-cli',
      [
        '--cluster',
        'create',
        ...nodes.map((node) => `127.0.0.1:${node.port}`),
        '--cluster-replicas',
        String(replicasPerMaster),
        '--cluster-yes',
      ],
      { timeout: 60_000 },
    );
    const alive = () => nodes.filter((node) => node.pid > 0 && isAlive(node.pid));
    const topology = async (port = alive()[0]!.port) => parseNodes(await cli(port, 'CLUSTER', 'NODES'));
    const cluster: RedisCluster = {
      nodes,
      liveNodes: alive,
      rootNodes: nodes.map((node) => ({ url: node.url })),
      cli,
      topology,
      async ownerOf(slot, port) {
        const owner = (await topology(port)).find(
          (node) => node.master && !node.failed && node.slots.some(([from, to]) => slot >= from && slot <= to),
        );
        if (!owner) throw new Error(`no node owns slot ${slot}`);
        return owner;
      },
      async waitUntilStable(timeoutMs = 30_000) {
        const started = Date.now();
        for (;;) {
          const views = await Promise.all(
            alive().map(async (node) => {
              const info = await cli(node.port, 'CLUSTER', 'INFO').catch(() => '');
              const owners = await topology(node.port).catch(() => []);
              const masters = owners
                .filter((n) => n.master && !n.failed && n.slots.length > 0)
                .map((n) => `${n.port}:${JSON.stringify(n.slots)}`)
                .sort()
                .join(' ');
              return { ok: info.includes('cluster_state:ok'), masters };
            }),
          );
          const covered = views.every((view) => view.ok) && new Set(views.map((view) => view.masters)).size === 1;
          if (covered) return;
          if (Date.now() - started > timeoutMs) {
            throw new Error(`cluster not stable after ${timeoutMs} ms: ${JSON.stringify(views)}`);
          }
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      },
      stop,
    };
    await cluster.waitUntilStable();
    return cluster;
  } catch (error) {
    await stop();
    throw error;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Parses `CLUSTER NODES`. */
export function parseNodes(text: string): ClusterNode[] {
  return text
    .trim()
    .split('\n')
    .filter((line) => line.length > 0)
    .map((line) => {
      const [id, address, flags, masterId, , , , , ...slots] = line.split(' ');
      const port = Number(/:(\d+)@/.exec(address ?? '')?.[1]);
      const flagList = (flags ?? '').split(',');
      return {
        id: id!,
        port,
        master: flagList.includes('master'),
        failed: flagList.includes('fail') || flagList.includes('fail?'),
        masterId: masterId === '-' ? null : masterId!,
        slots: slots
          .filter((slot) => !slot.startsWith('['))
          .map((slot) => {
            const [from, to = from] = slot.split('-').map(Number);
            return [from!, to!] as [number, number];
          }),
      };
    });
}
