/** `redis-token-semaphore dashboard`: the dashboard's handler served over HTTP until a signal. */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { isIP } from 'node:net';
import { createDashboard } from '../dashboard/handler';
import { DEFAULT_KEY_PREFIX } from '../redis/keys';
import { connect, describeTarget, type ConnectOptions, type Connected } from './connect';

export interface ServeOptions {
  /** Where Redis is (`--url`, `--cluster`, `--sentinel`…). */
  readonly connection: ConnectOptions;
  /** The semaphores' key prefix (`--prefix`). */
  readonly keyPrefix: string;
  readonly port: number;
  readonly host: string;
  /** The bearer token; a random one is made (and printed) when absent, unless `readOnly`. */
  readonly token: string | undefined;
  readonly readOnly: boolean;
  /** The semaphores `/metrics` reports on (`--watch`). */
  readonly watched: readonly string[];
}

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '::1', '[::1]']);

/**
 * `redis-token-semaphore dashboard`: serves the dashboard until SIGINT or SIGTERM; resolves the exit
 * code. The Redis client reconnects by itself; while Redis is down the page shows why.
 */
export async function serveDashboard(options: ServeOptions): Promise<number> {
  const { connection, keyPrefix, port, host, readOnly, watched } = options;
  const generated = !readOnly && options.token === undefined;
  const token = readOnly ? undefined : (options.token ?? randomBytes(18).toString('base64url'));
  // A client that reconnects by itself (behind Sentinels: follows the primary); requests fail with
  // 503 and the reason while Redis is down.
  let connected: Connected;
  try {
    connected = await connect(connection, { lasting: true });
  } catch (error) {
    process.stderr.write(`redis-token-semaphore: ${(error as Error).message}\n`);
    return 1;
  }
  const { client } = connected;
  const loopback = LOOPBACK.has(host);
  // Bound to loopback, it answers only requests addressed to loopback (createDashboard's default): a
  // web page elsewhere cannot reach it through a DNS name rebound to 127.0.0.1. Bound elsewhere, by
  // whatever name the operator chose to publish it.
  const handler = createDashboard({
    redis: client,
    token,
    readOnly,
    keyPrefix,
    watch: watched,
    allowedHosts: loopback ? undefined : 'any',
    redisName: describeTarget(connection),
  });
  const server = createServer(handler);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
  } catch (error) {
    await connected.close();
    process.stderr.write(`redis-token-semaphore: cannot listen on ${host}:${port}: ${(error as Error).message}\n`);
    return 1;
  }
  const address = server.address();
  const boundPort = typeof address === 'object' && address ? address.port : port;
  const shownHost = isIP(host) === 6 ? `[${host}]` : host;
  const link = `http://${shownHost}:${boundPort}/`;
  const scope = keyPrefix === DEFAULT_KEY_PREFIX ? '' : ` (keys ${keyPrefix}*)`;
  // One write: a reader that waits for the link reads the lines about it in the same chunk.
  const lines = [
    `Dashboard for ${describeTarget(connection)}${scope} on ${link}${generated ? `#token=${token}` : ''}`,
    readOnly
      ? 'Read-only: no release buttons.'
      : generated
        ? 'Release buttons need the token in that link (a new one each start; --token to choose it).'
        : 'Release buttons need the token given with --token (or $REDIS_TOKEN_SEMAPHORE_TOKEN).',
  ];
  if (watched.length > 0) {
    lines.push(`Metrics for ${watched.length} semaphore${watched.length === 1 ? '' : 's'} on ${link}metrics`);
  }
  if (!loopback) lines.push(`Warning: listening on ${host}, not loopback; the dashboard speaks plain HTTP.`);
  process.stdout.write(`${lines.join('\n')}\n`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await connected.close();
  return 0;
}
