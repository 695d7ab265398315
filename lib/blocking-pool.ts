import type { RedisClientLike } from './redis-client';

/** Handed to a queued caller: a connection to reuse, a free slot to open one in, or null (gave up). */
const SLOT = Symbol('slot');
type Handoff = RedisClientLike | typeof SLOT | null;

/**
 * The dedicated connections blocking waits run on: BLMOVE holds its connection until a token comes,
 * so each waiter needs one of its own. At most `max` are open; further waiters queue here and get a
 * connection in arrival order. Connections are made with `duplicate()` and no offline queue, so a
 * blocking command issued while disconnected fails at once instead of running later for a caller who
 * has gone.
 */
export class BlockingPool {
  readonly #source: RedisClientLike;
  readonly #max: number;
  readonly #prepare: (connection: RedisClientLike) => Promise<unknown>;
  readonly #idle: RedisClientLike[] = [];
  readonly #open = new Set<RedisClientLike>();
  readonly #queue: Array<(handoff: Handoff) => void> = [];
  #creating = 0;
  #closed = false;

  /** `prepare` runs on each new connection before its first use (e.g. loading scripts). */
  constructor(source: RedisClientLike, max: number, prepare: (connection: RedisClientLike) => Promise<unknown>) {
    this.#source = source;
    this.#max = max;
    this.#prepare = prepare;
  }

  /** Whether callers are queued for a connection (every connection is busy). */
  get hasQueue(): boolean {
    return this.#queue.length > 0;
  }

  /** Open connections, idle or in use. */
  get size(): number {
    return this.#open.size + this.#creating;
  }

  /**
   * A connection of the caller's own until `release`, or null once `deadline` (performance.now())
   * passes in the queue or the pool closes. Rejects when a new connection cannot be opened.
   */
  async acquire(deadline: number): Promise<RedisClientLike | null> {
    if (this.#closed) return null;
    const idle = this.#idle.pop();
    if (idle) return idle;
    if (this.size < this.#max) {
      this.#creating++;
      return this.#connect();
    }
    const handed = await new Promise<Handoff>((resolve) => {
      const entry = (handoff: Handoff): void => {
        if (timer) clearTimeout(timer);
        resolve(handoff);
      };
      const timer =
        deadline === Infinity
          ? undefined
          : setTimeout(() => {
              const index = this.#queue.indexOf(entry);
              if (index >= 0) this.#queue.splice(index, 1);
              resolve(null);
            }, Math.max(0, deadline - performance.now()));
      this.#queue.push(entry);
    });
    return handed === SLOT ? this.#connect() : handed;
  }

  /** Gives a connection back; a `broken` one (its last command failed) is closed instead of reused. */
  release(connection: RedisClientLike, broken = false): void {
    if (broken || this.#closed) {
      this.#discard(connection);
      const next = this.#queue.shift();
      if (next) {
        this.#creating++; // the freed slot, reserved for the next caller in the queue
        next(SLOT);
      }
      return;
    }
    const next = this.#queue.shift();
    if (next) next(connection);
    else this.#idle.push(connection);
  }

  /** Closes every connection; queued callers get null, and commands in flight reject. */
  close(): void {
    this.#closed = true;
    for (const next of this.#queue.splice(0)) next(null);
    for (const connection of [...this.#open]) this.#discard(connection);
    this.#idle.length = 0;
  }

  /** Opens a connection in a slot the caller has already counted in `#creating`. */
  async #connect(): Promise<RedisClientLike> {
    // No offline queue and no reconnection: a connection that drops is discarded and replaced, and a
    // command can never wait offline to run later for a caller who has gone.
    const socket = { ...this.#source.options?.socket, reconnectStrategy: false as const };
    const connection = this.#source.duplicate({ disableOfflineQueue: true, socket });
    // A dropped connection emits 'error'; without a listener Node would crash the process. The
    // waiter that was using it sees its command reject and recovers on the main connection.
    connection.on('error', () => undefined);
    try {
      await connection.connect();
      await this.#prepare(connection);
    } catch (error) {
      void connection.disconnect().catch(() => undefined);
      throw error;
    } finally {
      this.#creating--;
    }
    if (this.#closed) {
      void connection.disconnect().catch(() => undefined);
      throw new Error('The client is closed');
    }
    this.#open.add(connection);
    return connection;
  }

  #discard(connection: RedisClientLike): void {
    this.#open.delete(connection);
    if (connection.isOpen) void connection.disconnect().catch(() => undefined);
  }
}
