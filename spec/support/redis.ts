import { createClient } from 'redis';
import { Redis as IoRedis5 } from 'ioredis';
import { Redis as IoRedis6 } from 'ioredis6';
import { nanoid } from 'nanoid';
import type { SupportedRedisClient } from '../../lib';

export type Client = ReturnType<typeof createClient>;

const IOREDIS = { ioredis: IoRedis5, ioredis6: IoRedis6 } as const;

/**
 * The node-redis package this run uses (REDIS_CLIENT; jest.config.js maps `redis` to it). An ioredis
 * run (REDIS_CLIENT=ioredis or ioredis6) uses node-redis v4 for everything but the semaphores' client.
 */
export function redisClientPackage(): 'redis' | 'redis5' | 'redis6' {
  const name = process.env['REDIS_CLIENT'] || 'redis';
  if (name in IOREDIS) return 'redis';
  if (name !== 'redis' && name !== 'redis5' && name !== 'redis6') throw new Error(`unknown REDIS_CLIENT ${name}`);
  return name;
}

/**
 * Whether this is the first pass of `npm test` (REDIS_CLIENT=redis, node-redis v4): the storms run
 * their full length there and shorter in the other passes, to keep CI short (jest.config.js).
 */
export function isFirstPass(): boolean {
  return (process.env['REDIS_CLIENT'] || 'redis') === 'redis';
}

/** The ioredis package the specs hand their semaphores (REDIS_CLIENT=ioredis: v5, ioredis6: v6), or undefined: node-redis. */
export function ioredisPackage(): keyof typeof IOREDIS | undefined {
  const name = process.env['REDIS_CLIENT'] || 'redis';
  return name === 'ioredis' || name === 'ioredis6' ? name : undefined;
}

/** A connected ioredis client (v5, or v6 with `major` 6) made as a semaphore needs it; closed by `closeAll()`. */
export async function connectIoRedis(url = redisUrl(), major: 5 | 6 = ioredisPackage() === 'ioredis' ? 5 : 6) {
  const options = { autoResendUnfulfilledCommands: false, lazyConnect: true };
  const client = major === 5 ? new IoRedis5(url, options) : new IoRedis6(url, options);
  client.on('error', () => undefined);
  await client.connect();
  closers.add(() => (client.status === 'ready' ? client.quit().catch(() => client.disconnect()) : client.disconnect()));
  return client;
}

/**
 * A connected client for semaphores (not for inspecting keys): ioredis when REDIS_CLIENT names it,
 * otherwise a node-redis client as `connectClient` makes.
 */
export async function connectSemaphoreClient(url = redisUrl()): Promise<SupportedRedisClient> {
  return ioredisPackage() === undefined ? connectClient(url) : connectIoRedis(url);
}

/** The run's Redis (REDIS_URL, set by the global setup). */
export function redisUrl(): string {
  const url = process.env['REDIS_URL'];
  if (!url) throw new Error('REDIS_URL is not set: run the tests through jest (spec/support/global-setup.ts)');
  return url;
}

/** A connected client; `closeAll()` quits every client made here. */
const clients = new Set<Client>();
/** How to close the ioredis clients made here. */
const closers = new Set<() => unknown>();
export async function connectClient(url = redisUrl()): Promise<Client> {
  const client = createClient({ url });
  client.on('error', () => undefined);
  await client.connect();
  clients.add(client);
  return client;
}

export async function closeAll(): Promise<void> {
  await Promise.all([
    ...[...clients].map((client) => (client.isOpen ? client.quit().catch(() => client.disconnect()) : undefined)),
    ...[...closers].map((close) => close()),
  ]);
  clients.clear();
  closers.clear();
}

/** A semaphore name no other test uses (tests never FLUSHALL). */
export function uniqueName(prefix = 'spec'): string {
  return `${prefix}:${nanoid(10)}`;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `check` until it is true, or fails after `timeoutMs`. */
export async function until(
  check: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
  what = 'condition',
): Promise<void> {
  const started = Date.now();
  while (!(await check())) {
    if (Date.now() - started > timeoutMs) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

/** How many clients are blocked in Redis right now (INFO clients). */
export async function blockedClients(client: Client): Promise<number> {
  const info = await client.info('clients');
  return Number(/blocked_clients:(\d+)/.exec(info)?.[1] ?? 0);
}
