/** How the CLI and its dashboard reach Redis, from the command line: a URL, Cluster seed nodes or Sentinels, with TLS and credentials. */
import { readFileSync } from 'node:fs';
import type { SupportedRedisClient } from '../redis/client/types';
import { connectCluster, connectStandalone } from './clients';
import { CliError, describeError, EXIT, usage } from './failures';
import { printable, redactUrl } from './format';
import { connectSentinel } from './sentinel';

/** Where Redis is, and how to log in: from `--url`, `--cluster`, `--sentinel`, `--tls-ca`, `--user`, `--password`. */
export interface ConnectOptions {
  /** `--url` (or $REDIS_URL): a standalone Redis; unused with `cluster` or `sentinel` (their credentials: `username`, `password`). */
  readonly url: string;
  /** `--cluster <url,url>`: seed nodes of a Redis Cluster. */
  readonly cluster?: readonly string[];
  /** `--sentinel <host:port,…>` and `--sentinel-name <master>`. */
  readonly sentinel?: { readonly nodes: ReadonlyArray<{ host: string; port: number }>; readonly name: string };
  /** The contents of `--tls-ca <file>`: connect with TLS, trusting this CA. */
  readonly ca?: string;
  readonly username?: string;
  readonly password?: string;
}

/** The connection options as parsed from the command line, before they are checked. */
export interface ConnectValues {
  url?: string;
  cluster?: string;
  sentinel?: string;
  'sentinel-name'?: string;
  'tls-ca'?: string;
  user?: string;
  password?: string;
}

/** The connection options as given on the command line, checked; usage errors before anything connects. */
export function connectOptions(values: ConnectValues): ConnectOptions {
  const url = values.url ?? process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
  if (values.cluster !== undefined && values.sentinel !== undefined)
    throw usage('--cluster and --sentinel exclude each other');
  if ((values.sentinel === undefined) !== (values['sentinel-name'] === undefined)) {
    throw usage('--sentinel <host:port,…> and --sentinel-name <master> go together');
  }
  let cluster: string[] | undefined;
  if (values.cluster !== undefined) {
    cluster = values.cluster
      .split(',')
      .map((seed) => seed.trim())
      .filter((seed) => seed !== '');
    if (cluster.length === 0)
      throw usage('--cluster takes seed node URLs separated by commas: redis://10.0.0.1:7000,redis://10.0.0.2:7000');
    for (const seed of cluster) {
      if (!/^rediss?:\/\//.test(seed))
        throw usage(`--cluster: "${printable(redactUrl(seed))}" is not a redis:// or rediss:// URL`);
    }
  }
  let sentinel: ConnectOptions['sentinel'];
  if (values.sentinel !== undefined) {
    const nodes = values.sentinel.split(',').map((node) => {
      const match = /^\[?([^\]]+?)\]?:(\d{1,5})$/.exec(node.trim());
      if (!match || Number(match[2]) > 65_535)
        throw usage(`--sentinel takes host:port pairs separated by commas, got "${printable(node)}"`);
      return { host: match[1] as string, port: Number(match[2]) };
    });
    sentinel = { nodes, name: values['sentinel-name'] as string };
  }
  let ca: string | undefined;
  if (values['tls-ca'] !== undefined) {
    try {
      ca = readFileSync(values['tls-ca'], 'utf8');
    } catch (error) {
      throw usage(`--tls-ca: cannot read ${printable(values['tls-ca'])}: ${(error as Error).message}`);
    }
  }
  const password = values.password ?? process.env['REDIS_PASSWORD'];
  return {
    url,
    ...(cluster && { cluster }),
    ...(sentinel && { sentinel }),
    ...(ca !== undefined && { ca }),
    ...(values.user !== undefined && { username: values.user }),
    ...(password !== undefined && password !== '' && { password }),
  };
}

/** Where the options point, for messages: URLs without passwords. */
export function describeTarget(options: ConnectOptions): string {
  if (options.cluster) return `the cluster of ${options.cluster.map(redactUrl).join(', ')}`;
  if (options.sentinel) {
    return `the primary "${options.sentinel.name}" of Sentinels ${options.sentinel.nodes.map((n) => `${n.host}:${n.port}`).join(', ')}`;
  }
  return redactUrl(options.url);
}

/** A connected client and how to close it. */
export interface Connected {
  readonly client: SupportedRedisClient;
  close(): Promise<void>;
}

/**
 * Connects as the options say. `lasting`: the dashboard's client, which reconnects by itself (and,
 * behind Sentinels, follows the primary); otherwise a client that fails fast (no offline queue, no
 * reconnection), as a one-shot command wants.
 */
export async function connect(options: ConnectOptions, { lasting = false } = {}): Promise<Connected> {
  try {
    if (options.cluster) return await connectCluster(options, lasting);
    if (options.sentinel) return await connectSentinel(options, lasting);
    return await connectStandalone(options, { url: options.url }, lasting);
  } catch (error) {
    if (error instanceof CliError) throw error;
    throw new CliError(
      EXIT.error,
      'connection',
      `cannot connect to ${describeTarget(options)}: ${describeError(error)}`,
    );
  }
}
