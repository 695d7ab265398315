/** How the CLI and its dashboard reach Redis: a URL, Cluster seed nodes or Sentinels, with TLS and credentials. */
import { readFileSync } from 'node:fs';
import { createClient, createCluster } from 'redis';
import { isConnectionError } from '../client/errors';
import type { RedisClientLike, SupportedRedisClient } from '../client/types';
import { CliError, EXIT, usage } from './errors';
import { printable, redactUrl } from './format';

/** Where Redis is, and how to log in: from `--url`, `--cluster`, `--sentinel`, `--tls-ca`, `--user`, `--password`. */
export interface ConnectOptions {
  /** `--url` (or $REDIS_URL): a standalone Redis; unused with `cluster` or `sentinel` except for its credentials. */
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

/** The connection options as given on the command line, checked; usage errors before anything connects. */
export function connectOptions(values: {
  url?: string;
  cluster?: string;
  sentinel?: string;
  'sentinel-name'?: string;
  'tls-ca'?: string;
  user?: string;
  password?: string;
}): ConnectOptions {
  const url = values.url ?? process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
  if (values.cluster !== undefined && values.sentinel !== undefined) throw usage('--cluster and --sentinel exclude each other');
  if ((values.sentinel === undefined) !== (values['sentinel-name'] === undefined)) {
    throw usage('--sentinel <host:port,…> and --sentinel-name <master> go together');
  }
  let cluster: string[] | undefined;
  if (values.cluster !== undefined) {
    cluster = values.cluster.split(',').map((seed) => seed.trim()).filter((seed) => seed !== '');
    if (cluster.length === 0) throw usage('--cluster takes seed node URLs separated by commas: redis://10.0.0.1:7000,redis://10.0.0.2:7000');
    for (const seed of cluster) {
      if (!/^rediss?:\/\//.test(seed)) throw usage(`--cluster: "${printable(redactUrl(seed))}" is not a redis:// or rediss:// URL`);
    }
  }
  let sentinel: ConnectOptions['sentinel'];
  if (values.sentinel !== undefined) {
    const nodes = values.sentinel.split(',').map((node) => {
      const match = /^\[?([^\]]+?)\]?:(\d{1,5})$/.exec(node.trim());
      if (!match || Number(match[2]) > 65_535) throw usage(`--sentinel takes host:port pairs separated by commas, got "${printable(node)}"`);
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

/** The socket options every connection gets: TLS when a CA was given, a connect timeout, the retry policy. */
function socket(options: ConnectOptions, reconnect: boolean, extra: object = {}) {
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
    throw new CliError(EXIT.error, 'connection', `cannot connect to ${describeTarget(options)}: ${describeError(error)}`);
  }
}

async function connectStandalone(options: ConnectOptions, where: { url: string } | { host: string; port: number }, lasting: boolean): Promise<Connected> {
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

async function connectCluster(options: ConnectOptions, lasting: boolean): Promise<Connected> {
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

/**
 * Asks each Sentinel in turn for the primary's address (`SENTINEL GET-MASTER-ADDR-BY-NAME`) and
 * checks that it says it is a primary (`ROLE`). node-redis v4 has no Sentinel client, so the CLI
 * does what one does at connection time itself.
 */
async function resolvePrimary(options: ConnectOptions): Promise<{ host: string; port: number }> {
  const { nodes, name } = options.sentinel as NonNullable<ConnectOptions['sentinel']>;
  const failures: string[] = [];
  for (const node of nodes) {
    const client = createClient({ disableOfflineQueue: true, socket: socket(options, false, { host: node.host, port: node.port, connectTimeout: 2000 }) });
    client.on('error', () => undefined);
    try {
      await client.connect();
      const reply = (await client.sendCommand(['SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name])) as [string, string] | null;
      if (reply === null) {
        failures.push(`${node.host}:${node.port} knows no primary "${name}"`);
        continue;
      }
      return { host: reply[0], port: Number(reply[1]) };
    } catch (error) {
      failures.push(`${node.host}:${node.port}: ${describeError(error)}`);
    } finally {
      await client.disconnect().catch(() => undefined);
    }
  }
  throw new Error(`no Sentinel gave the primary's address (${failures.join('; ')})`);
}

async function connectSentinel(options: ConnectOptions, lasting: boolean): Promise<Connected> {
  const connectPrimary = async () => {
    const address = await resolvePrimary(options);
    const primary = await connectStandalone(options, address, lasting);
    const role = (await (primary.client as RedisClientLike).sendCommand(['ROLE'])) as [string, ...unknown[]];
    if (role[0] !== 'master') {
      await primary.close();
      throw new Error(`${address.host}:${address.port}, the primary by the Sentinels, says it is a ${role[0]} (a failover under way?)`);
    }
    return primary;
  };
  const first = await connectPrimary();
  if (!lasting) return first;
  const follower = new PrimaryFollower(first, connectPrimary);
  const watcher = await watchSwitches(options, () => follower.switched());
  return {
    client: follower,
    close: async () => {
      await watcher?.disconnect().catch(() => undefined);
      await follower.close();
    },
  };
}

/**
 * Subscribes to `+switch-master` on the first Sentinel that answers, calling `switched` when the
 * primary named changes: a demoted primary may still call itself one for a moment, so only the
 * Sentinels can say. The subscription reconnects by itself; `undefined` if no Sentinel answers
 * (the `ROLE` checks remain).
 */
async function watchSwitches(options: ConnectOptions, switched: () => void) {
  const { nodes, name } = options.sentinel as NonNullable<ConnectOptions['sentinel']>;
  for (const node of nodes) {
    const watcher = createClient({ socket: socket(options, true, { host: node.host, port: node.port, connectTimeout: 2000 }) });
    watcher.on('error', () => undefined);
    try {
      await watcher.connect();
      await watcher.subscribe('+switch-master', (message: string) => {
        if (message.split(' ')[0] === name) switched();
      });
      return watcher;
    } catch {
      await watcher.disconnect().catch(() => undefined);
    }
  }
  return undefined;
}

/** How long the dashboard trusts that its node behind Sentinels is still the primary before asking it again (`ROLE`). */
const ROLE_CHECK_MS = 250;

/**
 * The dashboard's client behind Sentinels: a standalone client on the primary, replaced by one on
 * the new primary when the Sentinels announce a switch (`switched`) or the node says it is no
 * longer the primary. Before a command, if it has not asked for
 * {@link ROLE_CHECK_MS}, it asks (`ROLE`): a demoted primary still answers reads, from data it may
 * not have re-synced yet. A command refused with READONLY (demoted in between: it did not run) is
 * sent again once on the new primary; one that fails on the connection is not (it may have run),
 * and the next command asks the Sentinels first.
 */
class PrimaryFollower implements RedisClientLike {
  #current: Connected;
  #next: Promise<Connected> | undefined;
  readonly #connectPrimary: () => Promise<Connected>;
  #closed = false;
  #roleCheckedAt = Date.now();
  #switched = false;

  constructor(first: Connected, connectPrimary: () => Promise<Connected>) {
    this.#current = first;
    this.#connectPrimary = connectPrimary;
  }

  get #client(): RedisClientLike {
    return this.#current.client as RedisClientLike;
  }

  async #follow(): Promise<void> {
    this.#next ??= (async () => {
      const old = this.#current;
      const next = await this.#connectPrimary();
      this.#current = next;
      await old.close();
      return next;
    })().finally(() => (this.#next = undefined));
    await this.#next;
  }

  /** The Sentinels announced a new primary: the next command goes to it. */
  switched(): void {
    this.#switched = true;
  }

  /** Follows the primary if the Sentinels switched, or the current node is unreachable or says it is not the primary. */
  async #check(): Promise<void> {
    if (this.#next) {
      await this.#next;
      return;
    }
    if (this.#switched) {
      this.#switched = false;
      await this.#follow();
      this.#roleCheckedAt = Date.now();
      return;
    }
    if (this.#client.isReady && Date.now() - this.#roleCheckedAt < ROLE_CHECK_MS) return;
    const role = this.#client.isReady ? ((await this.#client.sendCommand(['ROLE']).catch(() => [])) as unknown[])[0] : undefined;
    if (role !== 'master') await this.#follow();
    this.#roleCheckedAt = Date.now();
  }

  async sendCommand(args: string[]): Promise<unknown> {
    if (this.#closed) throw new Error('The client is closed');
    await this.#check();
    try {
      return await this.#client.sendCommand(args);
    } catch (error) {
      const message = String((error as { message?: unknown } | null)?.message ?? error);
      if (message.startsWith('READONLY')) {
        await this.#follow();
        return this.#client.sendCommand(args);
      }
      if (isConnectionError(error)) void this.#follow().catch(() => undefined);
      throw error;
    }
  }

  duplicate(overrides?: { disableOfflineQueue?: boolean; socket?: object }): RedisClientLike {
    return this.#client.duplicate(overrides);
  }

  get options() {
    return this.#client.options;
  }

  connect(): Promise<unknown> {
    return Promise.resolve();
  }

  async quit(): Promise<unknown> {
    await this.close();
    return 'OK';
  }

  async disconnect(): Promise<unknown> {
    await this.close();
    return undefined;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#next?.catch(() => undefined);
    await this.#current.close();
  }

  on(): unknown {
    return this; // the clients it makes have listeners already
  }

  get isOpen(): boolean {
    return !this.#closed;
  }

  get isReady(): boolean {
    return !this.#closed && this.#client.isReady;
  }
}

export function describeError(error: unknown): string {
  const { message, code, errors } = (error ?? {}) as { message?: string; code?: string; errors?: unknown[] };
  if (message) return message;
  if (Array.isArray(errors) && errors.length > 0) return describeError(errors[0]);
  return code ?? String(error);
}
