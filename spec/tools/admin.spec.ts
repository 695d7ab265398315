import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { createCluster } from 'redis';
import { createDashboard, Semaphore, type DashboardHandler } from '../../lib';
import { statusJson } from '../../lib/admin/json';
import {
  deleteSemaphore,
  readStatus,
  releaseStale,
  releaseToken,
  resizeSemaphore,
  semaphoreExists,
} from '../../lib/admin/operations';
import { readAudit } from '../../lib/admin/audit';
import { withLease } from '../../lib/admin/leases';
import { compareNames, filterRows, nameMatcher, sortRows, type Summary } from '../../lib/admin/overview';
import { metricsText } from '../../lib/dashboard/metrics';
import { escapeHtml } from '../../lib/dashboard/page';
import {
  DEFAULT_KEY_PREFIX,
  existsKeyPattern,
  grantIdOfInboxKey,
  inboxKeyPattern,
  keyPattern,
  nameOfExistsKey,
  semaphoreKeys,
} from '../../lib/redis/keys';
import type { RedisClientLike, SupportedRedisClient } from '../../lib/redis/client/types';
import { scripts } from '../../lib/redis/registry';
import { runScript, scriptCall } from '../../lib/redis/send';
import { snapshot, useFixture } from '../support/fixture';
import { blockedClients, connectClient, uniqueName, until } from '../support/redis';
import { startRedisServer } from '../support/redis-server';
import { startRedisCluster, type RedisCluster } from '../support/redis-cluster';

/** The operators' scripts with raw KEYS and ARGV, and createDashboard mounted in a node:http server. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

const fx = useFixture();
const client = () => fx.redis as unknown as RedisClientLike;
/** The operators' view of the default prefix's semaphores on the fixture's Redis. */
const scope = () => ({ redis: client(), keyPrefix: DEFAULT_KEY_PREFIX });

function setup() {
  const name = uniqueName('admin');
  const keys = semaphoreKeys(name);
  const run = (script: 'status' | 'forceRelease' | 'resize', args: string[]) =>
    runScript(client(), scriptCall(scripts[script], keys.scriptKeys, args));
  return { name, keys, run };
}

describe('forceRelease.lua', () => {
  test('frees a held token (its GRABBED record gone, token pushed); refuses one that is not held', async () => {
    const { name, run } = setup();
    const sem = fx.semaphore({ resources: 2 }, name);
    const token = (await sem.lock(0)) as string;
    expect(await run('forceRelease', ['1', ''])).toBe(-1);
    expect(await run('forceRelease', [token, ''])).toBe(2);
    expect(await snapshot(fx.redis, name)).toMatchObject({ grabbed: {}, owners: {}, available: [token, '1'] });
    expect(await run('forceRelease', [token, ''])).toBe(-1);
    await expect(sem.unlock(token)).resolves.toBe(false);
    expect((await snapshot(fx.redis, name)).available).toEqual([token, '1']);
  });

  test('with a grant id, frees the token only if that grant still holds it', async () => {
    const { name, run } = setup();
    const sem = fx.semaphore({ resources: 1 }, name);
    await sem.lock(0);
    const [{ grantId: first }] = (await readStatus(scope(), name)).holders as unknown as [{ grantId: string }];
    await sem.unlock();
    await sem.lock(0);
    expect(await run('forceRelease', ['0', first])).toBe(-2);
    await expect(sem.isLocked('0')).resolves.toBe(true);
    const [{ grantId: second }] = (await readStatus(scope(), name)).holders as unknown as [{ grantId: string }];
    expect(await run('forceRelease', ['0', second])).toBe(1);
  });

  test('a held token of a Ruby holder (a plain stamp in GRABBED) is freed too', async () => {
    const { name, keys, run } = setup();
    await fx.semaphore({ resources: 1 }, name).existsOrCreate();
    await fx.redis.lPop(keys.available);
    await fx.redis.hSet(keys.grabbed, '0', '1763800000.123456');
    expect(await run('forceRelease', ['0', ''])).toBe(1);
  });
});

describe('resize.lua', () => {
  test('grows with the lowest free integer names, shrinks retiring non-canonical and highest free tokens first', async () => {
    const { name, run } = setup();
    const sem = fx.semaphore({ resources: 3 }, name);
    const held = (await sem.lock(0)) as string; // '0'
    await sem.signal('job-x'); // not a canonical token name
    expect(await run('resize', ['6'])).toEqual([1, 4, 1, 6]);
    expect((await snapshot(fx.redis, name)).available.sort()).toEqual(['1', '2', '3', '4', 'job-x']);
    expect(await run('resize', ['3'])).toEqual([1, 6, 1, 3]);
    expect((await snapshot(fx.redis, name)).available.sort()).toEqual(['1', '2']);
    expect(await run('resize', ['0'.concat()])).toEqual([-1, 3, 1, 3]);
    expect(await run('resize', ['1'])).toEqual([1, 3, 1, 1]);
    expect(await snapshot(fx.redis, name)).toMatchObject({ available: [], grabbed: { [held]: expect.any(String) } });
  });

  test('a semaphore that does not exist is left alone', async () => {
    const { name, run } = setup();
    expect(await run('resize', ['3'])).toEqual([0, 0, 0, 0]);
    expect((await snapshot(fx.redis, name)).keys).toEqual([]);
  });
});

describe('status.lua', () => {
  test('exists, free tokens, live waiters (not abandoned marks) and every holder with its grant record', async () => {
    const { name, keys, run } = setup();
    const sem = fx.semaphore({ resources: 1, owner: 'me on host' }, name);
    await sem.lock(0);
    const before = await blockedClients(fx.redis);
    const waiter = sem.lock(10_000);
    await until(async () => (await blockedClients(fx.redis)) > before);
    await fx.redis.zAdd(keys.waiting, { score: 1e12, value: '~abandoned' });
    const [exists, now, available, waiting, ids, held] = (await run('status', ['10'])) as [
      number,
      string,
      number,
      number,
      string[],
      string[],
    ];
    expect([exists, available, waiting]).toEqual([1, 0, 1]);
    expect(ids).toEqual([expect.any(String)]);
    expect(held).toEqual(['0', expect.stringMatching(/^(\d+\.\d{6}) \S+ \d+ 30000 \1 me on host$/)]);
    expect(Number(now)).toBeGreaterThanOrEqual(parseFloat(held[1]!));
    // Last: tokens collected for a weighted waiter, its registration and permits (none here).
    expect(await run('status', ['0'])).toEqual([1, expect.any(String), 0, 1, [], held, [0, '', 0]]);
    await sem.unlock('0');
    await waiter;
  });

  test('holders read the one record: acquisition, last refresh, lease, fence and a label with spaces, or none', async () => {
    const { name } = setup();
    const sem = fx.semaphore({ resources: 2, owner: ' two  spaces ', autoRefresh: false }, name);
    await sem.lock(0);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await sem.refresh();
    await fx.semaphore({ resources: 2, owner: '' }, name).lock(0);
    const holders = (await readStatus(scope(), name)).holders as unknown as Array<Record<string, unknown>>;
    expect(holders.map((h) => [h.token, h.owner, h.leaseMs])).toEqual([
      ['0', ' two  spaces ', 30000],
      ['1', '', 30000],
    ]);
    const first = holders[0] as { since: Date; refreshedAt: Date; fence: number; grantId: string };
    expect(first.refreshedAt.getTime() - first.since.getTime()).toBeGreaterThanOrEqual(40);
    expect(first.fence).toBeGreaterThan(0);
    expect(first.grantId).toMatch(/^\S+$/);
  });

  test('a record as earlier versions wrote it (four fields, OWNERS beside it) reads as acquired at its stamp, with no label', async () => {
    const { name, keys } = setup();
    await fx.semaphore({ resources: 1 }, name).existsOrCreate();
    await fx.redis.lPop(keys.available);
    const [seconds] = (await fx.redis.sendCommand(['TIME'])) as [string, string];
    await fx.redis.hSet(keys.grabbed, '0', `${Number(seconds) - 5}.000000 old-grant 7 30000`);
    await fx.redis.hSet(keys.owners, '0', `old-grant 7 ${Number(seconds) - 60}.000000 old label`); // no longer read
    const [holder] = (await readStatus(scope(), name)).holders as unknown as Array<Record<string, unknown>>;
    expect(holder).toMatchObject({ token: '0', grantId: 'old-grant', fence: 7, leaseMs: 30000, owner: '' });
    expect(holder?.since).toEqual(holder?.refreshedAt);
    expect(holder?.heldMs).toBeGreaterThanOrEqual(4000);
    expect(holder?.heldMs).toBeLessThan(10_000);
  });
});

describe('createDashboard', () => {
  const TOKEN = 'a-long-enough-secret';
  let server: Server;
  let base: string;
  let handler: DashboardHandler;

  beforeAll(async () => {
    handler = createDashboard({ redis: client(), token: TOKEN, basePath: '/ops/semaphores' });
    server = createServer((request, response) => handler(request, response));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/ops/semaphores`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  const post = (path: string, body: unknown, token: string | null = TOKEN) =>
    fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(token === null ? {} : { authorization: `Bearer ${token}` }) },
      body: JSON.stringify(body),
    });

  test('rejects options that would leave state-changing requests open', () => {
    expect(() => createDashboard({ redis: client(), readOnly: false })).toThrow(TypeError);
    expect(() => createDashboard({ redis: client(), token: '' })).toThrow(TypeError);
    expect(() => createDashboard({ redis: client(), basePath: 'ops' })).toThrow(TypeError);
    expect(() => createDashboard({ redis: undefined as unknown as RedisClientLike })).toThrow(TypeError);
    expect(() => createDashboard({ redis: client(), keyPrefix: 'APP1' })).toThrow(TypeError);
  });

  test('serves the page and the JSON API under its base path, and 404 elsewhere', async () => {
    const name = uniqueName('dash-api');
    const sem = fx.semaphore({ resources: 2, owner: 'api-holder' }, name);
    await sem.lock(0);
    const page = await fetch(`${base}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
    expect(await page.text()).toContain('<script src="/ops/semaphores/app.js"></script>');
    expect((await fetch(`${base}/app.js`)).status).toBe(200);
    const broken = uniqueName('dash-broken');
    await fx.redis.set(semaphoreKeys(broken).exists, '1');
    await fx.redis.set(semaphoreKeys(broken).available, 'not a list');
    // A search for the name (the listing pages and sorts by trouble), and the Redis it reads.
    const list = (await (await fetch(`${base}/api/semaphores?q=${encodeURIComponent(name)}`)).json()) as Json;
    expect(list.semaphores).toEqual([
      expect.objectContaining({ name, tokens: 2, held: 1, available: 1, waiting: 0, expired: 0 }),
    ]);
    expect(list).toMatchObject({
      readOnly: false,
      timeZone: 'UTC',
      server: {
        address: expect.stringMatching(/^127\.0\.0\.1:\d+$/),
        role: 'master',
        version: expect.stringMatching(/^(Redis|Valkey) \d/),
      },
      matched: 1,
      page: 1,
    });
    const unreadable = (await (await fetch(`${base}/api/semaphores?q=${encodeURIComponent(broken)}`)).json()) as Json;
    expect(unreadable.semaphores).toEqual([{ name: broken, error: expect.stringMatching(/^WRONGTYPE/) }]);
    expect((await fetch(`${base}/api/semaphores?sort=size`)).status).toBe(400);
    expect((await fetch(`${base}/api/semaphores?page=0`)).status).toBe(400);
    expect((await fetch(`${base}/api/semaphores?q=${encodeURIComponent('[z-a]')}`)).status).toBe(400);
    const one = (await (await fetch(`${base}/api/semaphores/${encodeURIComponent(name)}`)).json()) as Json;
    expect(one.semaphore.holders[0]).toMatchObject({ token: '0', owner: 'api-holder' });
    // The CLI's status JSON (lib/admin/json.ts), with the dashboard's hand-offs.
    const shape = statusJson(await readStatus(scope(), name));
    expect(Object.keys(one.semaphore)).toEqual([...Object.keys(shape), 'handOffs', 'audit']);
    expect(Object.keys(one.semaphore.holders[0])).toEqual(Object.keys(shape.holders[0] ?? {}));
    expect((await fetch(`${base.replace('/ops/semaphores', '')}/api/semaphores`)).status).toBe(404);
    expect((await fetch(`${base}x/api/semaphores`)).status).toBe(404);
    expect((await fetch(base)).status).toBe(200);
    expect((await fetch(`${base}/api/semaphores/${encodeURIComponent(name)}/nope`)).status).toBe(404);
    expect((await fetch(`${base}/api/semaphores`, { method: 'DELETE' })).status).toBe(405);
  });

  test('release needs the bearer token; frees a held token for a blocked waiter; refuses what is not held or re-taken', async () => {
    const name = uniqueName('dash-release');
    const holder = fx.semaphore({ resources: 1 }, name);
    await holder.lock(0);
    const before = await blockedClients(fx.redis);
    const waiter = fx.semaphore({ resources: 1 }, name).lock(10_000);
    await until(async () => (await blockedClients(fx.redis)) > before);
    const path = `/api/semaphores/${encodeURIComponent(name)}/release`;
    expect((await post(path, { token: '0' }, null)).status).toBe(401);
    expect((await post(path, { token: '0' }, 'wrong-token-of-any-length')).status).toBe(401);
    const unjson = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}` },
      body: '{"token":"0"}',
    });
    expect(unjson.status).toBe(415);
    expect((await post(path, { token: 0 })).status).toBe(400);
    await expect(holder.isLocked('0')).resolves.toBe(true);
    const [{ grantId }] = (await readStatus(scope(), name)).holders as unknown as [{ grantId: string }];
    const released = await post(path, { token: '0', grantId });
    expect(released.status).toBe(200);
    expect(await released.json()).toEqual({ released: true, token: '0', available: expect.any(Number) });
    await expect(waiter).resolves.toBe('0');
    expect((await post(path, { token: '0', grantId })).status).toBe(409); // the waiter's grant holds it now
    expect((await post(path, { token: '7' })).status).toBe(404);
    const missing = await post(`/api/semaphores/${encodeURIComponent(uniqueName('dash-missing'))}/release`, {
      token: '0',
    });
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as Json).error.code).toBe('semaphore_not_found');
  });

  test('release-stale frees expired-lease holders; Ruby holders only with rubyOlderThanMs; never a live lease', async () => {
    const name = uniqueName('dash-stale');
    const sem = fx.semaphore({ resources: 3 }, name);
    await sem.lock(0); // a live holder with a 30 s lease
    const dead = (await fx
      .semaphore({ resources: 3, staleClientTimeout: 200, autoRefresh: false }, name)
      .lock(0)) as string;
    const [seconds] = (await fx.redis.sendCommand(['TIME'])) as [string, string];
    const ruby = (await fx.redis.lPop(semaphoreKeys(name).available)) as string;
    await fx.redis.hSet(semaphoreKeys(name).grabbed, ruby, `${Number(seconds)}.000000`); // a Ruby gem holder
    await new Promise((resolve) => setTimeout(resolve, 400));
    const path = `/api/semaphores/${encodeURIComponent(name)}/release-stale`;
    expect((await post(path, { rubyOlderThanMs: -1 })).status).toBe(400);
    expect((await post(path, { rubyOlderThanMs: 50 })).status).toBe(400); // below the shortest lease
    expect(await (await post(path, {})).json()).toEqual({ released: 1 }); // the expired lease alone
    await expect(sem.isLocked(dead)).resolves.toBe(false);
    await expect(sem.isLocked(ruby)).resolves.toBe(true);
    expect(await (await post(path, { rubyOlderThanMs: 60_000 })).json()).toEqual({ released: 0 });
    expect(await (await post(path, { rubyOlderThanMs: 100 })).json()).toEqual({ released: 1 });
    await expect(sem.availableCount()).resolves.toBe(2);
    // Logged: the Ruby holder (no grant id, no owner recorded), by the dashboard, with the request.
    expect((await readAudit(scope(), name))[0]).toEqual(
      expect.objectContaining({
        action: 'release-stale',
        token: ruby,
        grantId: '',
        owner: '',
        by: 'dashboard 127.0.0.1',
        command: `POST ${path}`,
        reason: '',
      }),
    );
  });

  test('every release is logged with the holder it took the token from and the reason given; the API shows the log', async () => {
    const name = uniqueName('dash-audit');
    const sem = fx.semaphore({ resources: 2, owner: 'pod-x:1' }, name);
    await sem.lock(0);
    const path = `/api/semaphores/${encodeURIComponent(name)}/release`;
    expect((await post(path, { token: '0', reason: 'x'.repeat(501) })).status).toBe(400);
    expect((await post(path, { token: '0', reason: 'stuck since the deploy' })).status).toBe(200);
    const [entry] = await readAudit(scope(), name);
    expect(entry).toEqual({
      id: expect.stringMatching(/^\d+-\d+$/),
      at: expect.stringMatching(/^\d{4}-\d\d-\d\dT.*Z$/),
      action: 'release',
      token: '0',
      grantId: expect.stringMatching(/\S/),
      owner: 'pod-x:1',
      by: 'dashboard 127.0.0.1',
      command: `POST ${path}`,
      reason: 'stuck since the deploy',
    });
    const api = (await (await fetch(`${base}/api/semaphores/${encodeURIComponent(name)}`)).json()) as Json;
    expect(api.semaphore.audit).toEqual([entry]);
  });

  test('/metrics: only the watched semaphores, label values escaped; /healthz answers without the token', async () => {
    expect(metricsText(undefined)).toBe(
      "# HELP redis_token_semaphore_up Whether Redis answered the dashboard's reads for this scrape (1) or not (0).\n# TYPE redis_token_semaphore_up gauge\nredis_token_semaphore_up 0\n",
    );
    const name = uniqueName('dash-"metrics"\\\n');
    const sem = fx.semaphore({ resources: 2 }, name);
    await sem.lock(0);
    const watching = createDashboard({ redis: client(), watch: [name] });
    const other = createServer(watching);
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
    try {
      const text = await (await fetch(`${url}/metrics`)).text();
      const label = name.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
      expect(text).toContain(`redis_token_semaphore_held{semaphore="${label}"} 1\n`);
      expect(text.split('\n').filter((line) => line.startsWith('redis_token_semaphore_held'))).toHaveLength(1);
      // Leases: the count of expired ones, and each holder's lease, age and last refresh.
      expect(text).toContain(`redis_token_semaphore_expired_leases{semaphore="${label}"} 0\n`);
      expect(text).toMatch(
        new RegExp(
          `^redis_token_semaphore_holder_lease_remaining_seconds\\{semaphore="${label.replace(/[\\"]/g, '\\$&')}",token="0"\\} (29|30)\\.\\d+$`,
          'm',
        ),
      );
      expect(text).toContain(`redis_token_semaphore_holder_held_seconds{semaphore="${label}",token="0"} `);
      expect(text).toContain(`redis_token_semaphore_holder_refreshed_seconds_ago{semaphore="${label}",token="0"} `);
      expect(text).toContain(
        `redis_token_semaphore_holder_acquired_timestamp_seconds{semaphore="${label}",token="0"} `,
      );
      expect((await fetch(`${url}/healthz`)).status).toBe(200);
      expect((await fetch(`${base}/healthz`)).status).toBe(200); // under basePath
      expect(await (await fetch(`${base}/metrics`)).text()).not.toContain('semaphore="'); // nothing watched
      expect((await fetch(`${url}/metrics`, { method: 'POST' })).status).toBe(405);
    } finally {
      other.closeAllConnections();
      await new Promise((resolve) => other.close(resolve));
    }
    expect(() => createDashboard({ redis: client(), watch: [''] })).toThrow(TypeError);
  });

  test('read-only: no token needed to look, every change refused with 403', async () => {
    const readOnly = createDashboard({ redis: client() });
    const other = createServer(readOnly);
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
    try {
      expect(await (await fetch(`${url}/`)).text()).toContain('data-read-only="true"');
      const refused = await fetch(`${url}/api/semaphores/x/release`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer anything' },
        body: '{"token":"0"}',
      });
      expect(refused.status).toBe(403);
    } finally {
      other.closeAllConnections();
      await new Promise((resolve) => other.close(resolve));
    }
  });

  test('Redis going away is a 503 with the reason, never a crash', async () => {
    const server2 = await startRedisServer();
    const redis2 = await connectClient(server2.url);
    const dashboard = createDashboard({ redis: redis2 as unknown as RedisClientLike });
    const http2 = createServer(dashboard);
    await new Promise<void>((resolve) => http2.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(http2.address() as AddressInfo).port}`;
    try {
      expect((await fetch(`${url}/api/semaphores`)).status).toBe(200);
      await server2.kill();
      await new Promise((resolve) => setTimeout(resolve, 300)); // past the shared snapshot's lifetime
      const down = await fetch(`${url}/api/semaphores`);
      expect(down.status).toBe(503);
      // This client queues commands while offline, so the request times out rather than failing at once.
      expect(((await down.json()) as Json).error).toEqual({
        code: expect.stringMatching(/^(redis|timeout)$/),
        message: expect.any(String),
      });
      expect((await fetch(`${url}/`)).status).toBe(200);
    } finally {
      http2.closeAllConnections();
      await new Promise((resolve) => http2.close(resolve));
      await redis2.disconnect().catch(() => undefined);
      await server2.stop();
    }
  });

  test('checks Host by default: a rebound name gets 421 and no data; allowedHosts names others, or turns it off', async () => {
    const name = uniqueName('dash-host');
    await fx.semaphore({ owner: 'secret-owner' }, name).lock(0);
    const get = (handler: DashboardHandler, host: string) =>
      new Promise<{ status: number | undefined; body: string }>((resolve, reject) => {
        const server = createServer(handler);
        server.listen(0, '127.0.0.1', () => {
          const port = (server.address() as AddressInfo).port;
          const request = httpRequest(
            { host: '127.0.0.1', port, path: `/api/semaphores/${encodeURIComponent(name)}`, headers: { host } },
            (response) => {
              let body = '';
              response.on('data', (chunk: Buffer) => (body += chunk.toString()));
              response.on('end', () => {
                server.close();
                resolve({ status: response.statusCode, body });
              });
            },
          );
          request.on('error', reject).end();
        });
      });
    const embedded = createDashboard({ redis: client() });
    const rebound = await get(embedded, 'rebound.example:8080');
    expect(rebound.status).toBe(421);
    expect(rebound.body).not.toContain('secret-owner');
    for (const host of ['localhost:1234', '127.0.0.1', '[::1]:80', 'LOCALHOST']) {
      expect({ host, status: (await get(embedded, host)).status }).toEqual({ host, status: 200 });
    }
    const named = createDashboard({ redis: client(), allowedHosts: ['ops.example.com'] });
    expect((await get(named, 'ops.example.com:443')).status).toBe(200);
    expect((await get(named, 'localhost')).status).toBe(421);
    expect((await get(named, '127.0.0.1:9')).status).toBe(200); // the address it arrived on
    expect((await get(createDashboard({ redis: client(), allowedHosts: 'any' }), 'rebound.example')).status).toBe(200);
    expect(() => createDashboard({ redis: client(), allowedHosts: [''] })).toThrow(TypeError);
    expect(() => createDashboard({ redis: client(), allowedHosts: 'all' as never })).toThrow(TypeError);
  });

  test('escapeHtml covers element content and quoted attributes', () => {
    expect(escapeHtml(`<a href="x" onclick='y'>&</a>`)).toBe(
      '&#60;a href=&#34;x&#34; onclick=&#39;y&#39;&#62;&#38;&#60;/a&#62;',
    );
  });
});

describe('leases and lists for operators (lib/admin/leases.ts, overview.ts)', () => {
  const at = (ms: number) => new Date(Date.UTC(2026, 0, 1) + ms);
  const holder = (leaseMs: number | undefined, refreshedMs: number) => ({
    token: '0',
    since: at(0),
    heldMs: refreshedMs,
    refreshedAt: at(0),
    refreshedMs,
    leaseMs,
    fence: leaseMs === undefined ? undefined : 1,
    owner: leaseMs === undefined ? undefined : 'o',
    grantId: leaseMs === undefined ? undefined : 'g.1',
  });
  test('a lease is expired past its end, overdue past two thirds unrenewed; none for no lease or a Ruby holder', () => {
    expect(withLease(holder(30_000, 5_000), at(5_000))).toMatchObject({
      leaseEndsAt: at(30_000),
      leaseLeftMs: 25_000,
      expired: false,
      overdue: false,
    });
    expect(withLease(holder(30_000, 20_001), at(20_001))).toMatchObject({ expired: false, overdue: true });
    expect(withLease(holder(30_000, 30_000), at(30_000))).toMatchObject({ expired: false, leaseLeftMs: 0 });
    expect(withLease(holder(30_000, 38_700), at(38_700))).toMatchObject({
      expired: true,
      overdue: false,
      leaseLeftMs: -8_700,
    });
    for (const unleased of [holder(0, 99_000), holder(undefined, 99_000)]) {
      expect(withLease(unleased, at(99_000))).toMatchObject({
        leaseEndsAt: null,
        leaseLeftMs: null,
        expired: false,
        overdue: false,
      });
    }
  });

  test('names in natural order; globs and plain text; most trouble first', () => {
    expect(['user:10', 'user:2', 'b', 'user:1', 'A', 'user:02', 'order:30', 'order:7'].sort(compareNames)).toEqual([
      'A',
      'b',
      'order:7',
      'order:30',
      'user:1',
      'user:2',
      'user:02',
      'user:10',
    ]);
    expect(['order:1', 'order:2x', 'orders', 'user:1'].filter(nameMatcher('order:*'))).toEqual(['order:1', 'order:2x']);
    expect(['a1', 'a22', 'b1'].filter(nameMatcher('a?'))).toEqual(['a1']);
    expect(['a1', 'a22', 'b1', 'c1'].filter(nameMatcher('[ab]1'))).toEqual(['a1', 'b1']);
    expect(['a*', 'ab'].filter(nameMatcher('a\\*'))).toEqual(['a*']);
    expect(['xorder:1y', 'user'].filter(nameMatcher('order', { substring: true }))).toEqual(['xorder:1y']);
    const row = (name: string, fields: Partial<Summary>): Summary => ({
      name,
      tokens: 1,
      held: 0,
      available: 1,
      collected: 0,
      waiting: 0,
      expired: 0,
      overdue: 0,
      longestHeldMs: null,
      leaseLeftMs: null,
      longestWaitMs: null,
      ...fields,
    });
    const rows = [
      row('idle', {}),
      row('busy', { held: 1, longestHeldMs: 9_000 }),
      row('queue', { held: 1, waiting: 5, longestWaitMs: 1_000 }),
      row('stuck', { held: 1, waiting: 1, longestWaitMs: 60_000 }),
      row('dead', { held: 1, expired: 1, longestHeldMs: 1 }),
      { name: 'broken', error: 'WRONGTYPE' },
    ];
    expect(sortRows(rows, 'trouble').map((r) => r.name)).toEqual(['dead', 'broken', 'stuck', 'queue', 'busy', 'idle']);
    expect(filterRows(rows, { state: 'expired' }).map((r) => r.name)).toEqual(['dead', 'broken']);
  });
});

describe('key names for operators (lib/redis/keys.ts)', () => {
  test("a listed EXISTS key gives back a name that addresses the same keys; a cluster semaphore's is its tagged name", () => {
    expect(existsKeyPattern()).toBe('SEMAPHORE:*:EXISTS');
    expect(existsKeyPattern('APP1:')).toBe('APP1:*:EXISTS');
    expect(nameOfExistsKey('SEMAPHORE:jobs:EXISTS')).toBe('jobs');
    expect(nameOfExistsKey('SEMAPHORE:a:b:EXISTS')).toBe('a:b');
    for (const key of ['SEMAPHORE::EXISTS', 'SEMAPHORE:jobs:AVAILABLE', 'OTHER:jobs:EXISTS'])
      expect(nameOfExistsKey(key)).toBeUndefined();
    for (const name of ['jobs', '{jobs}', 'crawl:{eu}', '}abc', '"}abc', 'a{}b']) {
      for (const cluster of [false, true]) {
        const keys = semaphoreKeys(name, { cluster });
        const listed = nameOfExistsKey(keys.exists) as string;
        // What the CLI and the dashboard list is a name whose keys are these; a cluster's is tagged, so
        // a standalone client on one of its nodes addresses them too.
        expect(semaphoreKeys(listed, { cluster }).scriptKeys).toEqual(keys.scriptKeys);
        if (cluster) expect(semaphoreKeys(listed).scriptKeys).toEqual(keys.scriptKeys);
      }
    }
    expect(nameOfExistsKey(semaphoreKeys('jobs', { cluster: true }).exists)).toBe('{jobs}');
    // Under another prefix: its keys, and only its keys, give back names.
    expect(semaphoreKeys('jobs', { keyPrefix: 'APP1:' }).scriptKeys[0]).toBe('APP1:jobs:AVAILABLE');
    expect(semaphoreKeys('jobs', { keyPrefix: 'APP1:', cluster: true }).inbox('g')).toBe('APP1:{jobs}:INBOX:g');
    expect(nameOfExistsKey('APP1:jobs:EXISTS', 'APP1:')).toBe('jobs');
    expect(nameOfExistsKey('SEMAPHORE:jobs:EXISTS', 'APP1:')).toBeUndefined();
    expect(nameOfExistsKey('APP1:jobs:EXISTS')).toBeUndefined();
  });

  test('SCAN patterns escape the name; inbox keys give back their grant id', () => {
    const keys = semaphoreKeys('a*b?[c]\\d');
    expect(keyPattern(keys)).toBe('SEMAPHORE:a\\*b\\?\\[c\\]\\\\d:*');
    expect(inboxKeyPattern(keys)).toBe('SEMAPHORE:a\\*b\\?\\[c\\]\\\\d:INBOX:*');
    expect(inboxKeyPattern(semaphoreKeys('jobs', { cluster: true }))).toBe('SEMAPHORE:{jobs}:INBOX:*');
    expect(grantIdOfInboxKey(keys, keys.inbox('g1'))).toBe('g1');
    expect(grantIdOfInboxKey(keys, keys.available)).toBeUndefined();
  });
});

describe('the incident view with 10,000 names (a private Redis)', () => {
  // The figures behind docs/OPERATIONS.md "How much a refresh costs": REDIS_CLIENT=redis npx jest
  // spec/tools/admin.spec.ts -t '10,000 names' (they are written to spec/artifacts/dashboard-scale.json).
  const NAMES = 10_000;
  test('10,000 names: the dead holder is on the first row within a scan pass; each answer costs Redis a bounded number of commands', async () => {
    const server = await startRedisServer();
    const redis = await connectClient(server.url);
    const http = createServer(createDashboard({ redis: redis as unknown as RedisClientLike }));
    try {
      for (let i = 0; i < NAMES; i += 1000) {
        const batch = redis.multi();
        for (let j = i; j < i + 1000; j++) {
          const keys = semaphoreKeys(`user:${j}`);
          batch.set(keys.exists, '1').set(keys.version, '1').rPush(keys.available, ['0', '1']);
        }
        await batch.exec();
      }
      const dead = new Semaphore('user:4242', { redis, resources: 2, staleClientTimeout: 200, autoRefresh: false });
      await dead.lock(0);
      await dead.close();
      await new Promise((resolve) => setTimeout(resolve, 300));
      await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
      const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/api/semaphores`;
      const commandStats = async () => {
        const text = (await redis.sendCommand(['INFO', 'commandstats'])) as string;
        const calls = new Map<string, number>();
        for (const [, command, count] of text.matchAll(/^cmdstat_(\S+?):calls=(\d+)/gm))
          calls.set(command as string, Number(count));
        return calls;
      };
      const SENT = ['scan', 'evalsha', 'eval', 'fcall', 'info', 'client|info'];
      const answers: Array<{ ms: number; sent: number; processed: number; cost: Json; pending: number }> = [];
      for (let i = 0; i < 24; i++) {
        const before = await commandStats();
        const started = performance.now();
        const answer = (await (await fetch(url)).json()) as Json;
        const ms = performance.now() - started;
        const after = await commandStats();
        let sent = 0;
        let processed = 0;
        for (const [command, count] of after) {
          const delta = count - (before.get(command) ?? 0) - (command === 'info' ? 1 : 0); // our own INFO
          processed += delta;
          if (SENT.includes(command)) sent += delta;
        }
        answers.push({ ms, sent, processed, cost: answer.cost, pending: answer.summary.pending });
        // Once the scan has passed its keys (a whole pass takes 2 refreshes here), the dead holder
        // leads, marked: it is read first among names never read, as its GRABBED key was seen.
        if (i >= 2 || answer.summary.expired > 0) {
          expect(answer.semaphores[0]).toMatchObject({ name: 'user:4242', expired: 1 });
          expect(answer.summary).toMatchObject({ expired: 1 });
        }
        // Bounded: at most 20 SCAN calls and 500 reads a refresh (plus INFO and CLIENT INFO every 30 s).
        expect(answer.cost.scans).toBeLessThanOrEqual(20);
        expect(answer.cost.reads).toBeLessThanOrEqual(500);
        // (The very first read of each script is refused NOSCRIPT and sent again as EVAL, once per server.)
        expect(sent).toBeLessThanOrEqual(answer.cost.scans + answer.cost.reads * (i === 0 ? 2 : 1) + 3);
        await new Promise((resolve) => setTimeout(resolve, 260)); // past the shared refresh's lifetime
      }
      const final = (await (await fetch(`${url}?page=200&size=50`)).json()) as Json;
      expect(final.summary).toMatchObject({ names: NAMES, pending: 0, listed: true });
      expect(final.semaphores).toHaveLength(50);
      const steady = answers
        .slice(-10)
        .map((a) => a.ms)
        .sort((a, b) => a - b);
      const median = steady[Math.floor(steady.length / 2)] as number;
      mkdirSync(join(__dirname, '..', 'artifacts'), { recursive: true });
      writeFileSync(
        join(__dirname, '..', 'artifacts', 'dashboard-scale.json'),
        JSON.stringify({ names: NAMES, medianSteadyMs: Math.round(median), answers }, null, 1),
      );
      process.stdout.write(
        `dashboard API with ${NAMES} names: first answer ${Math.round(answers[0]?.ms ?? 0)} ms, steady median ${Math.round(median)} ms (max ${Math.round(steady[steady.length - 1] ?? 0)} ms); commands sent per answer: ${answers.map((a) => a.sent).join(' ')}; processed (with those inside scripts): ${answers.map((a) => a.processed).join(' ')}\n`,
      );
      expect(median).toBeLessThan(1500); // the figure itself is in the report; this bound is for a loaded CI machine
    } finally {
      http.closeAllConnections();
      await new Promise((resolve) => http.close(resolve));
      await redis.quit().catch(() => undefined);
      await server.stop();
    }
  }, 120_000);
});

describe('operators on a Redis Cluster client', () => {
  jest.setTimeout(60_000);
  let cluster: RedisCluster;
  let redis: ReturnType<typeof createCluster>;
  const admin = (keyPrefix = DEFAULT_KEY_PREFIX) => ({ redis: redis as unknown as SupportedRedisClient, keyPrefix });

  beforeAll(async () => {
    cluster = await startRedisCluster({ masters: 3 });
    redis = createCluster({ rootNodes: cluster.rootNodes });
    redis.on('error', () => undefined);
    await redis.connect();
  });
  afterAll(async () => {
    await redis?.disconnect().catch(() => undefined);
    await cluster?.stop();
  });

  test('read, release, resize, release-stale and delete address the hash-tagged keys a Semaphore on that client uses', async () => {
    const name = uniqueName('admin-cluster');
    const sem = new Semaphore(name, { redis: redis as never, resources: 2, owner: 'on-cluster' });
    try {
      const token = (await sem.lock(0)) as string;
      const tagged = semaphoreKeys(name, { cluster: true });
      expect(tagged.exists).toBe(`SEMAPHORE:{${name}}:EXISTS`);
      await expect(semaphoreExists(admin(), name)).resolves.toBe(true);
      const status = await readStatus(admin(), name);
      expect(status).toMatchObject({ name, exists: true, tokens: 2, available: 1 });
      expect(status.holders).toEqual([expect.objectContaining({ token, owner: 'on-cluster' })]);
      await expect(releaseToken(admin(), name, token)).resolves.toEqual({ status: 'released', available: 2 });
      await expect(sem.isLocked(token)).resolves.toBe(false);
      await expect(resizeSemaphore(admin(), name, 3)).resolves.toEqual({
        status: 'resized',
        before: 2,
        held: 0,
        after: 3,
      });
      await expect(sem.availableCount()).resolves.toBe(3);
      await expect(releaseStale(admin(), name, 1000)).resolves.toBe(0);
      await deleteSemaphore(admin(), name);
      await expect(semaphoreExists(admin(), name)).resolves.toBe(false);
      expect(await redis.sendCommand(tagged.exists, true, ['EXISTS', tagged.exists])).toBe(0);
    } finally {
      await sem.close();
    }
  });

  test("with a key prefix, the same operations address that prefix's hash-tagged keys", async () => {
    const name = uniqueName('admin-cluster');
    const sem = new Semaphore(name, { redis: redis as never, resources: 2, keyPrefix: 'APP1:' });
    try {
      const token = (await sem.lock(0)) as string;
      const tagged = semaphoreKeys(name, { cluster: true, keyPrefix: 'APP1:' });
      expect(tagged.exists).toBe(`APP1:{${name}}:EXISTS`);
      expect(await redis.sendCommand(tagged.exists, true, ['EXISTS', tagged.exists])).toBe(1);
      await expect(semaphoreExists(admin(), name)).resolves.toBe(false); // not under SEMAPHORE:
      await expect(readStatus(admin('APP1:'), name)).resolves.toMatchObject({
        name,
        exists: true,
        tokens: 2,
        available: 1,
      });
      await expect(releaseToken(admin('APP1:'), name, token)).resolves.toEqual({ status: 'released', available: 2 });
      await expect(resizeSemaphore(admin('APP1:'), name, 3)).resolves.toEqual({
        status: 'resized',
        before: 2,
        held: 0,
        after: 3,
      });
      await expect(sem.availableCount()).resolves.toBe(3);
      await deleteSemaphore(admin('APP1:'), name);
      expect(await redis.sendCommand(tagged.exists, true, ['EXISTS', tagged.exists])).toBe(0);
    } finally {
      await sem.close();
    }
  });
});
