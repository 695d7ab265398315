import { createClient, createCluster } from 'redis';
import { Semaphore } from '../../lib';
import { semaphoreKeys } from '../../lib/redis/keys';
import { keySlot } from '../../lib/redis/slot';
import { runMain, startDashboard } from '../support/cli';
import { startRedisCluster, type RedisCluster } from '../support/redis-cluster';
import { startSentinelSetup, type SentinelSetup } from '../support/redis-sentinel';
import { uniqueName } from '../support/redis';

// The CLI and the dashboard on a real Redis Cluster (--cluster) and behind real Sentinels
// (--sentinel): status, a release with its audit entry, and the dashboard's health and metrics.
// One cluster and one Sentinel setup serve the whole file: they are expensive.

jest.setTimeout(60_000);

type Cluster = ReturnType<typeof createCluster>;
type Client = ReturnType<typeof createClient>;

let cluster: RedisCluster;
let sentinel: SentinelSetup;
let clusterClient: Cluster;
const clients: Client[] = [];
const semaphores: Semaphore[] = [];

beforeAll(async () => {
  [cluster, sentinel] = await Promise.all([startRedisCluster({ masters: 3 }), startSentinelSetup({ replicas: 1 })]);
  clusterClient = createCluster({ rootNodes: cluster.rootNodes });
  clusterClient.on('error', () => undefined);
  await clusterClient.connect();
}, 60_000);

afterAll(async () => {
  await Promise.all(semaphores.map((sem) => sem.close()));
  await clusterClient?.quit().catch(() => undefined);
  await Promise.all(clients.map((client) => client.disconnect().catch(() => undefined)));
  await Promise.all([cluster?.stop(), sentinel?.stop()]);
});

async function connectNode(port: number): Promise<Client> {
  const client = createClient({ url: `redis://127.0.0.1:${port}`, socket: { reconnectStrategy: false } });
  client.on('error', () => undefined);
  await client.connect();
  clients.push(client);
  return client;
}

function semaphore(name: string, options: ConstructorParameters<typeof Semaphore>[1]): Semaphore {
  const sem = new Semaphore(name, options);
  semaphores.push(sem);
  return sem;
}

test('Cluster: status, list, release --owner and its audit entry (in the semaphore’s hash tag), and the dashboard', async () => {
  const name = uniqueName('ops-cluster');
  const seeds = ['--cluster', cluster.rootNodes.map((node) => node.url).join(',')];
  const sem = semaphore(name, { redis: clusterClient as never, resources: 3, owner: 'cluster-pod:7' });
  const other = semaphore(name, { redis: clusterClient as never, resources: 3, owner: 'cluster-pod:8' });
  const mine = [(await sem.lock(0)) as string, (await sem.lock(0)) as string];
  const theirs = (await other.lock(0)) as string;

  const status = await runMain(['status', name, ...seeds, '--json']);
  expect(status.code).toBe(0);
  expect(JSON.parse(status.stdout)).toMatchObject({ name, tokens: 3, held: 3, available: 0, audit: [] });
  const missing = uniqueName('ops-missing');
  expect((await runMain(['status', missing, ...seeds])).stderr).toContain(`no SEMAPHORE:{${missing}}:EXISTS key`); // the key looked for, tagged
  const list = await runMain(['list', ...seeds, '--json']);
  expect(JSON.parse(list.stdout).semaphores).toContainEqual(expect.objectContaining({ name: `{${name}}`, held: 3 }));

  const release = await runMain([
    'release',
    '--owner',
    'cluster-pod:7',
    name,
    ...seeds,
    '--yes',
    '--reason',
    'node drained',
  ]);
  expect(release).toMatchObject({ code: 0, stdout: 'Released 2 grants of owner "cluster-pod:7".\n' });
  for (const token of mine) await expect(sem.unlock(token)).resolves.toBe(false);
  await expect(other.isLocked(theirs)).resolves.toBe(true);
  const keys = semaphoreKeys(name, { cluster: true });
  expect(keys.audit).toBe(`SEMAPHORE:{${name}}:AUDIT`);
  expect(keySlot(keys.audit)).toBe(keySlot(keys.available));
  await expect(clusterClient.xLen(keys.audit)).resolves.toBe(2);
  const after = JSON.parse((await runMain(['status', name, ...seeds, '--json'])).stdout);
  expect(after.audit.map((entry: { owner: string; reason: string }) => [entry.owner, entry.reason])).toEqual([
    ['cluster-pod:7', 'node drained'],
    ['cluster-pod:7', 'node drained'],
  ]);

  const dashboard = await startDashboard(cluster.rootNodes[0]!.url, [...seeds, '--read-only', '--watch', name]);
  try {
    expect(dashboard.output()).toContain('Dashboard for the cluster of redis://127.0.0.1:');
    expect((await fetch(`${dashboard.url}healthz`)).status).toBe(200);
    const metrics = await (await fetch(`${dashboard.url}metrics`)).text();
    expect(metrics).toContain(`redis_token_semaphore_held{semaphore="${name}"} 1`);
    const api = (await (await fetch(`${dashboard.url}api/semaphores`)).json()) as {
      server: { role: string };
      semaphores: Array<{ name: string; held: number }>;
    };
    expect(api.server.role).toBe('cluster');
    expect(api.semaphores.find((s) => s.name === `{${name}}`)).toMatchObject({ held: 1 });
    const one = (await (await fetch(`${dashboard.url}api/semaphores/${encodeURIComponent(`{${name}}`)}`)).json()) as {
      semaphore: { audit: unknown[] };
    };
    expect(one.semaphore.audit).toHaveLength(2);
  } finally {
    await dashboard.stop();
  }
  await expect(clusterClient.del(keys.audit)).resolves.toBe(1);
  expect((await runMain(['delete', name, ...seeds, '--yes'])).code).toBe(0);
  await expect(sem.exists()).resolves.toBe(false);
});

test('Sentinel: status and a release through the Sentinels; the dashboard follows the primary through a failover', async () => {
  const name = uniqueName('ops-sentinel');
  const through = [
    '--sentinel',
    sentinel.sentinelRootNodes.map((n) => `${n.host}:${n.port}`).join(','),
    '--sentinel-name',
    sentinel.masterName,
  ];
  const primary = await connectNode(await sentinel.primaryPort());
  const sem = semaphore(name, { redis: primary, resources: 2, owner: 'sentinel-pod:1' });
  const token = (await sem.lock(0)) as string;

  const status = await runMain(['status', name, ...through, '--json']);
  expect(status.code).toBe(0);
  expect(JSON.parse(status.stdout).holders).toEqual([expect.objectContaining({ token, owner: 'sentinel-pod:1' })]);
  const release = await runMain(['release', name, token, ...through, '--yes', '--json']);
  expect(JSON.parse(release.stdout)).toMatchObject({ released: true, token, owner: 'sentinel-pod:1' });
  await expect(sem.isLocked(token)).resolves.toBe(false);
  expect(JSON.parse((await runMain(['status', name, ...through, '--json'])).stdout).audit).toEqual([
    expect.objectContaining({ action: 'release', token, owner: 'sentinel-pod:1' }),
  ]);
  const wrongName = await runMain(['status', name, '--sentinel', through[1] as string, '--sentinel-name', 'nope']);
  expect(wrongName.code).toBe(1);
  expect(wrongName.stderr).toContain('knows no primary "nope"');

  const secret = 'sentinel-spec-token';
  const dashboard = await startDashboard('redis://unused', [...through, '--token', secret, '--watch', name]);
  try {
    expect((await fetch(`${dashboard.url}healthz`)).status).toBe(200);
    await sem.close();
    const { to } = await sentinel.failover();
    // A holder on the new primary; the dashboard, still connected to the old one (now a replica),
    // is refused with READONLY, asks the Sentinels, and releases on the new primary.
    const newPrimary = await connectNode(to);
    const holder = semaphore(name, { redis: newPrimary, resources: 2, owner: 'after-failover' });
    const held = (await holder.lock(0)) as string;
    const response = await fetch(`${dashboard.url}api/semaphores/${encodeURIComponent(name)}/release`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}` },
      body: JSON.stringify({ token: held, reason: 'failover drill' }),
    });
    expect([response.status, await response.json()]).toEqual([
      200,
      expect.objectContaining({ released: true, token: held }),
    ]);
    await expect(holder.isLocked(held)).resolves.toBe(false);
    const audit = await newPrimary.xRevRange(semaphoreKeys(name).audit, '+', '-', { COUNT: 1 });
    expect(audit[0]?.message).toMatchObject({
      action: 'release',
      token: held,
      owner: 'after-failover',
      reason: 'failover drill',
      by: expect.stringMatching(/^dashboard /),
    });
    expect((await fetch(`${dashboard.url}healthz`)).status).toBe(200);
  } finally {
    await dashboard.stop();
  }
});
