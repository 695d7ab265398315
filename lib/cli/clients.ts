/** The CLI's standalone and cluster clients: TLS, credentials, and fail-fast or reconnecting sockets. */
import { createClient, createCluster } from 'redis';
import type { RedisClientLike, SupportedRedisClient } from '../redis/client/types';
import type { ConnectOptions, Connected } from './connect';
import { usage } from './failures';

/** The socket options every connection gets: TLS when a CA was given, a connect timeout, the retry policy. */
export function socket(options: ConnectOptions, reconnect: boolean, extra: object = {}) {
  return {
    connectTimeout: 5000,
    reconnectStrategy: reconnect ? (retries: number) => Math.min(2000, 50 * 2 ** retries) : (false as const),
    ...(options.ca !== undefined && { tls: true as const, ca: options.ca }),
    ...extra,
  };
}

function credentials(options: ConnectOptions) {
  return {
    ...(options.username !== undefined && { username: options.username }),
    ...(options.password !== undefined && { password: options.password }),
  };
}

export async function connectStandalone(
  options: ConnectOptions,
  where: { url: string } | { host: string; port: number },
  lasting: boolean,
): Promise<Connected> {
  let client;
  try {
    client = createClient({
      ...('url' in where ? { url: where.url } : {}),
      ...credentials(options),
      disableOfflineQueue: true,
      socket: socket(options, lasting, 'url' in where ? {} : { host: where.host, port: where.port }),
    });
  } catch (error) {
    throw usage(`--url: ${(error as Error).message}`);
  }
  client.on('error', () => undefined); // failures reach the commands as rejections
  try {
    await client.connect();
  } catch (error) {
    await client.disconnect().catch(() => undefined);
    throw error;
  }
  const connected = client as unknown as RedisClientLike;
  return { client: connected, close: () => closeClient(connected) };
}

async function closeClient(client: RedisClientLike): Promise<void> {
  await client.quit().catch(() => client.disconnect().catch(() => undefined));
}

export async function connectCluster(options: ConnectOptions, lasting: boolean): Promise<Connected> {
  const cluster = createCluster({
    rootNodes: (options.cluster ?? []).map((url) => ({ url })),
    defaults: { ...credentials(options), disableOfflineQueue: true, socket: socket(options, lasting) },
  });
  cluster.on('error', () => undefined);
  try {
    await cluster.connect();
  } catch (error) {
    await cluster.disconnect().catch(() => undefined);
    throw error;
  }
  return {
    client: cluster as unknown as SupportedRedisClient,
    close: async () => {
      await cluster.quit().catch(() => cluster.disconnect().catch(() => undefined));
    },
  };
}
