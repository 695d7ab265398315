/** The CLI's clients behind Sentinels: the primary's address asked of the Sentinels, and (for the dashboard) a client that follows it through failovers. */
import { createClient } from 'redis';
import { isConnectionError } from '../redis/client/classify';
import type { RedisClientLike } from '../redis/client/types';
import { connectStandalone, socket } from './clients';
import type { ConnectOptions, Connected } from './connect';
import { describeError } from './failures';

/**
 * Asks each Sentinel in turn for the primary's address (`SENTINEL GET-MASTER-ADDR-BY-NAME`) and
 * checks that it says it is a primary (`ROLE`). node-redis v4 has no Sentinel client, so the CLI
 * does what one does at connection time itself.
 */
async function resolvePrimary(options: ConnectOptions): Promise<{ host: string; port: number }> {
  const { nodes, name } = options.sentinel as NonNullable<ConnectOptions['sentinel']>;
  const failures: string[] = [];
  for (const node of nodes) {
    const client = createClient({
      disableOfflineQueue: true,
      socket: socket(options, false, { host: node.host, port: node.port, connectTimeout: 2000 }),
    });
    client.on('error', () => undefined);
    try {
      await client.connect();
      const reply = (await client.sendCommand(['SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name])) as
        [string, string] | null;
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

export async function connectSentinel(options: ConnectOptions, lasting: boolean): Promise<Connected> {
  const connectPrimary = async () => {
    const address = await resolvePrimary(options);
    const primary = await connectStandalone(options, address, lasting);
    const role = (await (primary.client as RedisClientLike).sendCommand(['ROLE'])) as [string, ...unknown[]];
    if (role[0] !== 'master') {
      await primary.close();
      throw new Error(
        `${address.host}:${address.port}, the primary by the Sentinels, says it is a ${role[0]} (a failover under way?)`,
      );
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
    const watcher = createClient({
      socket: socket(options, true, { host: node.host, port: node.port, connectTimeout: 2000 }),
    });
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
    const role = this.#client.isReady
      ? ((await this.#client.sendCommand(['ROLE']).catch(() => [])) as unknown[])[0]
      : undefined;
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
