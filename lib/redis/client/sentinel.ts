// A node-redis v5+ Sentinel client (`createSentinel()`): commands to the current primary, refusals retried, and its blocking connections (a reserved duplicate, or a borrowed pool connection).
import { retryRefused, SENTINEL_RECONFIGURATION } from './classify';
import { clientNotOpen, type Connection } from './connection';
import type { RedisSentinelLike } from './types';

/**
 * A node-redis v5+ Sentinel client: commands go to the current primary, which the client follows
 * across failovers (Sentinel's `+switch-master`). The main adapter retries what a primary in the
 * middle of a failover refuses before running anything (READONLY from the demoted primary, LOADING,
 * MASTERDOWN). Blocking waits each get a duplicate with one reserved primary connection, so a
 * waiter's pipeline stays on one connection, in order.
 */
export class SentinelAdapter implements Connection {
  readonly #sentinel: RedisSentinelLike;
  readonly #retries: boolean;

  constructor(sentinel: RedisSentinelLike, retries = true) {
    this.#sentinel = sentinel;
    this.#retries = retries;
  }

  sendCommand(args: Array<string>): Promise<unknown> {
    // The caller's client (the one that retries): one not open says to connect it.
    if (this.#retries && !this.#sentinel.isOpen) return Promise.reject(clientNotOpen());
    const send = () =>
      this.#sentinel.sendCommand(false, args).catch((error: unknown) => {
        // node-redis' Sentinel client can fail a command with a TypeError while it reconfigures
        // (a reserved connection it just dropped): the command may or may not have run.
        if (error instanceof TypeError) throw new Error(`${SENTINEL_RECONFIGURATION} (${error.message})`);
        throw error;
      });
    return this.#retries ? retryRefused(send) : send();
  }

  /** The client's pool may hold several primary connections: `use()` lends one for all the commands. */
  sendPinned(commands: Array<Array<string>>): Promise<unknown[]> {
    const sentinel = this.#sentinel as unknown as {
      use?<T>(
        fn: (client: { sendCommand(isReadonly: boolean, args: string[]): Promise<unknown> }) => Promise<T>,
      ): Promise<T>;
    };
    if (typeof sentinel.use !== 'function') return Promise.all(commands.map((command) => this.sendCommand(command)));
    if (this.#retries && !this.#sentinel.isOpen) return Promise.reject(clientNotOpen());
    const send = () =>
      sentinel.use!((client) => Promise.all(commands.map((command) => client.sendCommand(false, command))));
    return this.#retries ? retryRefused(send) : send();
  }

  /**
   * v6: a duplicate Sentinel client with one reserved primary connection. v5 has no `duplicate()`
   * (nor a way to read the client's options back): a waiter borrows a primary connection from the
   * client's own pool (`acquire()`), so `masterPoolSize` must exceed `maxBlockingConnections`.
   */
  duplicate(): Connection {
    const sentinel = this.#sentinel as unknown as {
      duplicate?(overrides: object): RedisSentinelLike;
      acquire(): Promise<SentinelPoolConnection>;
    };
    if (typeof sentinel.duplicate === 'function') {
      return new SentinelAdapter(
        sentinel.duplicate({ masterPoolSize: 1, replicaPoolSize: 0, reserveClient: true }),
        false,
      );
    }
    return new BorrowedSentinelConnection(sentinel);
  }

  get options() {
    return undefined;
  }

  connect() {
    return this.#sentinel.connect();
  }

  async quit() {
    await this.#sentinel.close();
  }

  async disconnect() {
    await this.#sentinel.destroy();
  }

  on(event: 'error', listener: (error: Error) => void) {
    return this.#sentinel.on(event, listener);
  }

  get isOpen() {
    return this.#sentinel.isOpen;
  }

  get isReady() {
    return this.#sentinel.isReady;
  }
}

/** A primary connection borrowed from a v5 Sentinel client's pool (`acquire()`). */
interface SentinelPoolConnection {
  sendCommand(isReadonly: boolean | undefined, args: Array<string>): Promise<unknown>;
  release(): unknown;
  readonly isOpen: boolean;
  readonly isReady: boolean;
}

class BorrowedSentinelConnection implements Connection {
  readonly #sentinel: { acquire(): Promise<SentinelPoolConnection> };
  #borrowed: SentinelPoolConnection | undefined;

  constructor(sentinel: { acquire(): Promise<SentinelPoolConnection> }) {
    this.#sentinel = sentinel;
  }

  async sendCommand(args: Array<string>): Promise<unknown> {
    if (!this.#borrowed) throw new Error('The client is closed');
    return this.#borrowed.sendCommand(false, args).catch((error: unknown) => {
      if (error instanceof TypeError) throw new Error(`${SENTINEL_RECONFIGURATION} (${error.message})`);
      throw error;
    });
  }

  duplicate(): Connection {
    return new BorrowedSentinelConnection(this.#sentinel);
  }

  get options() {
    return undefined;
  }

  async connect() {
    this.#borrowed = await this.#sentinel.acquire();
  }

  async quit() {
    await this.disconnect();
  }

  /** Gives the connection back to the pool. */
  async disconnect() {
    const borrowed = this.#borrowed;
    this.#borrowed = undefined;
    await borrowed?.release();
  }

  on() {
    return this;
  }

  get isOpen() {
    return this.#borrowed !== undefined;
  }

  get isReady() {
    return this.#borrowed !== undefined && this.#borrowed.isReady;
  }
}
