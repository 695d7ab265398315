// One semaphore's share of a lock manager's blocking pool: its connections in use, its queued callers, its close().
import { setMaxListeners } from 'node:events';
import type { BlockingPool, ConnectionPool } from './blocking-pool';
import type { Connection } from '../redis/client/connection';

/**
 * What one semaphore of a lock manager (`createLocks`) sees of the manager's shared `BlockingPool`.
 * Its callers queue in the shared pool's one line, so connections go to callers of every name in
 * arrival order. Closing the semaphore ends its own queued callers and closes only the connections
 * it has in use (which ends their waits); the shared pool and the other semaphores carry on.
 */
export class PoolShare implements ConnectionPool {
  readonly #shared: BlockingPool;
  readonly #inUse = new Set<Connection>();
  /** Aborts this semaphore's queued callers (stopServing, close). */
  readonly #stop = new AbortController();
  #queued = 0;

  constructor(shared: BlockingPool) {
    this.#shared = shared;
    // One abort listener per queued caller: as many as the pool has callers.
    setMaxListeners(0, this.#stop.signal);
  }

  /** This semaphore's callers queued in the shared pool's line (not those of other names). */
  get queued(): number {
    return this.#queued;
  }

  get size(): number {
    return this.#inUse.size;
  }

  /** Callers (of any semaphore of the manager) are queued: a waiter hands its connection on between slices. */
  get turnTaking(): boolean {
    return this.#shared.queued > 0;
  }

  /** Every connection of the shared pool is open: slices are short, so callers that queue get a turn soon. */
  get crowded(): boolean {
    return this.#shared.full;
  }

  async checkout(deadline: number, signal?: AbortSignal): Promise<Connection | null> {
    if (this.#stop.signal.aborted || signal?.aborted) return null;
    const combined = signal === undefined ? undefined : eitherSignal(signal, this.#stop.signal);
    this.#queued++;
    let connection: Connection | null;
    try {
      connection = await this.#shared.checkout(deadline, combined?.signal ?? this.#stop.signal);
    } finally {
      this.#queued--;
      combined?.dispose();
    }
    return connection === null ? null : this.#lend(connection);
  }

  checkoutIdle(): Connection | undefined {
    if (this.#stop.signal.aborted) return undefined;
    const connection = this.#shared.checkoutIdle();
    return connection === undefined ? undefined : (this.#lend(connection) ?? undefined);
  }

  checkin(connection: Connection, broken = false): void {
    // A connection close() already gave back (closed) must not go back twice.
    if (!this.#inUse.delete(connection)) return;
    this.#shared.checkin(connection, broken || this.#stop.signal.aborted);
  }

  idOf(connection: Connection): string | undefined {
    return this.#shared.idOf(connection);
  }

  stopServing(): void {
    this.#stop.abort();
  }

  /** The shared pool's control connection: it closes with the manager. */
  control(): Promise<Connection> {
    return this.#shared.control();
  }

  /** Ends this semaphore's queued callers and closes the connections it has in use. */
  close(): void {
    this.#stop.abort();
    for (const connection of [...this.#inUse]) {
      this.#inUse.delete(connection);
      this.#shared.checkin(connection, true);
    }
  }

  #lend(connection: Connection): Connection | null {
    if (this.#stop.signal.aborted) {
      this.#shared.checkin(connection);
      return null;
    }
    this.#inUse.add(connection);
    return connection;
  }
}

/**
 * A signal that aborts when either does, and a way to stop listening at once: the stop signal lives as
 * long as the semaphore, and each queued caller's listener on it must go when the caller is served.
 */
function eitherSignal(a: AbortSignal, b: AbortSignal): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const onA = () => controller.abort(a.reason);
  const onB = () => controller.abort(b.reason);
  if (a.aborted) onA();
  else if (b.aborted) onB();
  else {
    a.addEventListener('abort', onA, { once: true });
    b.addEventListener('abort', onB, { once: true });
  }
  return {
    signal: controller.signal,
    dispose() {
      a.removeEventListener('abort', onA);
      b.removeEventListener('abort', onB);
    },
  };
}
