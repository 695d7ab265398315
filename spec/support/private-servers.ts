import { createClient } from 'redis';
import { Semaphore, type SemaphoreOptions } from '../../lib';
import { startRedisServer, type RedisServer } from './redis-server';
import type { Client } from './redis';

/**
 * Private redis-server processes for fault specs, and the clients and semaphores made on them (or
 * through a proxy to them), all closed by `close()`: call it in the hook that matches their lifetime
 * (afterEach for what a test makes, afterAll for what the file shares).
 */
export class PrivateServers {
  readonly #opened: Array<{ close(): Promise<unknown> }> = [];
  readonly #servers: RedisServer[] = [];

  /** Starts a redis-server with `args` (see startRedisServer) and connects an admin client to it. */
  async start(args: readonly string[] = []): Promise<{ server: RedisServer; admin: Client }> {
    const server = await startRedisServer(args);
    this.#servers.push(server);
    return { server, admin: await this.connect(server.url) };
  }

  /** A connected client on `url`; its errors are left to the commands that meet them. */
  async connect(url: string): Promise<Client> {
    const client = createClient({ url });
    client.on('error', () => undefined);
    await client.connect();
    // A client still reconnecting (its server killed) would queue QUIT forever: disconnect it instead.
    this.#opened.push({
      close: () => (client.isReady ? client.quit().catch(() => client.disconnect()) : client.disconnect()),
    });
    return client;
  }

  semaphore(name: string, options: SemaphoreOptions): Semaphore {
    const sem = new Semaphore(name, options);
    this.#opened.push(sem);
    return sem;
  }

  /** Closes every client and semaphore (failures ignored), then stops every server. */
  async close(): Promise<void> {
    await Promise.all(
      this.#opened
        .splice(0)
        .reverse()
        .map((thing) => thing.close().catch(() => undefined)),
    );
    await Promise.all(this.#servers.splice(0).map((server) => server.stop()));
  }
}
