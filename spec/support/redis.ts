import { createClient } from 'redis';
import { nanoid } from 'nanoid';

export type Client = ReturnType<typeof createClient>;

/** The node-redis package this run uses (REDIS_CLIENT; jest.config.js maps `redis` to it). */
export function redisClientPackage(): 'redis' | 'redis5' | 'redis6' {
  const name = process.env['REDIS_CLIENT'] || 'redis';
  if (name !== 'redis' && name !== 'redis5' && name !== 'redis6') throw new Error(`unknown REDIS_CLIENT ${name}`);
  return name;
}

/** The run's Redis (REDIS_URL, set by the global setup). */
export function redisUrl(): string {
  const url = process.env['REDIS_URL'];
  if (!url) throw new Error('REDIS_URL is not set: run the tests through jest (spec/support/global-setup.ts)');
  return url;
}

/** A connected client; `closeAll()` quits every client made here. */
const clients = new Set<Client>();
export async function connectClient(url = redisUrl()): Promise<Client> {
  const client = createClient({ url });
  client.on('error', () => undefined);
  await client.connect();
  clients.add(client);
  return client;
}

export async function closeAll(): Promise<void> {
  await Promise.all([...clients].map((client) => (client.isOpen ? client.quit().catch(() => client.disconnect()) : undefined)));
  clients.clear();
}

/** A semaphore name no other test uses (tests never FLUSHALL). */
export function uniqueName(prefix = 'spec'): string {
  return `${prefix}:${nanoid(10)}`;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `check` until it is true, or fails after `timeoutMs`. */
export async function until(check: () => boolean | Promise<boolean>, timeoutMs = 10_000, what = 'condition'): Promise<void> {
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
