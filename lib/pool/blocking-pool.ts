// The blocking connections of one semaphore (or of a lock manager): opened on demand, handed out in arrival order.
import { disconnectQuietly, type Connection } from '../redis/client/connection';
import { MAX_TIMER_MS, OPEN_RETRY_MS } from '../lock/timing';

/** What a queued caller is handed: a connection, the error that kept one from opening, or null (gave up). */
type Handoff = Connection | Error | null;

/**
 * Where a semaphore's blocking waits get their connections: a pool of its own (`BlockingPool`), or
 * its share of a pool that a lock manager's semaphores share (`PoolShare`, lib/pool/pool-share.ts).
 */
export interface ConnectionPool {
  /** How many callers of this semaphore are queued for a connection. */
  readonly queued: number;
  /** Connections this semaphore has open (its own pool) or in use (a share). */
  readonly size: number;
  /**
   * Whether a waiter should hand its connection on between slices: callers of other semaphores are
   * queued for one of a shared pool's connections, so each waiter blocks for a turn, then queues again.
   */
  readonly turnTaking: boolean;
  /**
   * Whether a waiter's slices are short (a second): a shared pool has all its connections open, so
   * the next caller will queue, and its turn must come soon.
   */
  readonly crowded: boolean;
  checkout(deadline: number, signal?: AbortSignal): Promise<Connection | null>;
  checkoutIdle(): Connection | undefined;
  checkin(connection: Connection, broken?: boolean): void;
  idOf(connection: Connection): string | undefined;
  stopServing(): void;
  control(): Promise<Connection>;
  close(): void;
}

/**
 * The dedicated connections blocking waits run on: BLMOVE holds its connection until a token comes,
 * so each waiter needs one of its own. At most `max` are open. Callers get connections strictly in
 * arrival order — a connection that finishes opening goes to the longest-waiting caller, not to the
 * one that asked for it — so waiters of one process block in Redis in the order they called.
 * Connections are made with `duplicate()`, no offline queue and no reconnection, so a blocking
 * command can never wait offline and run later for a caller who has gone.
 */
export class BlockingPool implements ConnectionPool {
  readonly #source: Connection;
  readonly #max: number;
  /** Idle connections older than this close (a shared pool's); undefined: they stay open until close(). */
  readonly #idleMs: number | undefined;
  /** When each idle connection became idle (performance.now()). */
  readonly #idleSince = new WeakMap<Connection, number>();
  #idleSweep: NodeJS.Timeout | undefined;
  readonly #prepare: (connection: Connection) => Promise<string | undefined>;
  /** Each open connection's id on the server (`CLIENT ID`), where `prepare` could learn it. */
  readonly #ids = new WeakMap<Connection, string>();
  readonly #idle: Connection[] = [];
  readonly #open = new Set<Connection>();
  readonly #queue: Array<(handoff: Handoff) => void> = [];
  #opening = 0;
  #openPausedUntil = 0;
  /** What `#openOne` is doing now, for `openingSettled()`. */
  readonly #openings = new Set<Promise<void>>();
  #closed = false;
  /** No longer hands out connections (see `stopServing`). */
  #stopped = false;
  #control: Promise<Connection> | undefined;

  /**
   * `prepare` runs on each new connection before its first use (e.g. loading scripts) and resolves
   * the connection's id on the server, if it can tell.
   */
  constructor(
    source: Connection,
    max: number,
    prepare: (connection: Connection) => Promise<string | undefined>,
    idleMs?: number,
  ) {
    this.#source = source;
    this.#max = max;
    this.#prepare = prepare;
    this.#idleMs = idleMs;
  }

  get queued(): number {
    return this.#queue.length;
  }

  /** A pool of one semaphore's own: its waiters keep their connections (Redis serves them in order). */
  get turnTaking(): boolean {
    return false;
  }

  /** A pool of one semaphore's own: slices keep their length. */
  get crowded(): boolean {
    return false;
  }

  /** Whether every connection the pool may open is open or opening. */
  get full(): boolean {
    return this.size >= this.#max || !this.#mayOpen();
  }

  /** No new connection is tried for OPEN_RETRY_MS after one failed to open while others were open. */
  #mayOpen(): boolean {
    return this.#open.size === 0 || performance.now() >= this.#openPausedUntil;
  }

  get idle(): number {
    return this.#idle.length;
  }

  get size(): number {
    return this.#open.size + this.#opening;
  }

  /**
   * A connection of the caller's own until `checkin`, or null once `deadline` (performance.now())
   * passes in the queue, `signal` aborts, or the pool closes. Rejects when a connection opened for
   * it fails to open.
   */
  async checkout(deadline: number, signal?: AbortSignal): Promise<Connection | null> {
    if (this.#stopped || signal?.aborted) return null;
    const idle = this.checkoutIdle();
    if (idle) return idle;
    const handed = new Promise<Handoff>((resolve) => {
      const entry = (handoff: Handoff): void => {
        if (timer) clearTimeout(timer);
        signal?.removeEventListener('abort', giveUp);
        resolve(handoff);
      };
      const giveUp = (): void => {
        const index = this.#queue.indexOf(entry);
        if (index >= 0) this.#queue.splice(index, 1);
        entry(null);
      };
      const delay = deadline - performance.now();
      // A deadline beyond setTimeout's range arms no timer: the caller checks it once served.
      const timer = delay > MAX_TIMER_MS ? undefined : setTimeout(giveUp, Math.max(0, delay));
      signal?.addEventListener('abort', giveUp, { once: true });
      this.#queue.push(entry);
    });
    if (this.size < this.#max && this.#mayOpen()) void this.#openOne();
    const handoff = await handed;
    if (handoff instanceof Error) throw handoff;
    return handoff;
  }

  /** An idle connection at once when nobody queues for one, or undefined: then `checkout` queues. */
  checkoutIdle(): Connection | undefined {
    if (this.#stopped) return undefined;
    while (this.#queue.length === 0 && this.#idle.length > 0) {
      const idle = this.#idle.pop();
      // An idle connection can die unnoticed (a server restart, its `timeout` setting).
      if (idle?.isReady) return idle;
      if (idle) this.#discard(idle);
    }
    return undefined;
  }

  /** Gives a connection back; a `broken` one (its last command failed) is closed instead of reused. */
  checkin(connection: Connection, broken = false): void {
    if (broken || this.#closed) {
      this.#discard(connection);
      if (this.#queue.length > 0 && !this.#closed && this.#mayOpen()) void this.#openOne();
      return;
    }
    this.#handOut(connection);
  }

  /** The connection's id on the server (`CLIENT ID`), for `CLIENT UNBLOCK`; undefined if unknown. */
  idOf(connection: Connection): string | undefined {
    return this.#ids.get(connection);
  }

  /**
   * The first step of closing: queued callers get null and nobody gets a connection any more, while
   * the connections in use stay open, so their waits can be ended by `CLIENT UNBLOCK` and settle.
   */
  stopServing(): void {
    this.#stopped = true;
    for (const next of this.#queue.splice(0)) next(null);
  }

  /**
   * A connection of the pool's own for commands about its other connections (`CLIENT UNBLOCK`) when
   * the caller's client is closed: opened on first use, closed with the pool.
   */
  control(): Promise<Connection> {
    if (this.#closed) return Promise.reject(new Error('the pool is closed'));
    this.#control ??= (async () => {
      const connection = this.#duplicate();
      await connection.connect();
      return connection;
    })();
    this.#control.catch(() => (this.#control = undefined));
    return this.#control;
  }

  /**
   * Connections still opening close as soon as they open: `openingSettled()` resolves then (a connection
   * that cannot open gives up within the client's connect timeout).
   */
  openingSettled(): Promise<void> {
    return Promise.all([...this.#openings]).then(() => undefined);
  }

  /** Closes every connection; queued callers get null, and commands in flight reject. */
  close(): void {
    this.#stopped = true;
    this.#closed = true;
    clearTimeout(this.#idleSweep);
    void this.#control?.then(disconnectQuietly, () => undefined);
    for (const next of this.#queue.splice(0)) next(null);
    for (const connection of [...this.#open]) this.#discard(connection);
    this.#idle.length = 0;
  }

  #handOut(connection: Connection): void {
    if (this.#stopped) {
      this.#discard(connection);
      return;
    }
    const next = this.#queue.shift();
    if (next) next(connection);
    else {
      this.#idle.push(connection);
      if (this.#idleMs !== undefined) {
        this.#idleSince.set(connection, performance.now());
        this.#sweepIdleLater(this.#idleMs);
      }
    }
  }

  /** Closes connections idle for `idleMs`, checking again while any stay idle. */
  #sweepIdleLater(idleMs: number): void {
    if (this.#idleSweep !== undefined) return;
    this.#idleSweep = setTimeout(() => {
      this.#idleSweep = undefined;
      const now = performance.now();
      // The idle list is a stack: the oldest are at the bottom.
      while (this.#idle.length > 0 && now - (this.#idleSince.get(this.#idle[0]!) ?? now) >= idleMs) {
        this.#discard(this.#idle.shift()!);
      }
      if (this.#idle.length > 0 && !this.#closed) this.#sweepIdleLater(idleMs);
    }, idleMs);
    this.#idleSweep.unref();
  }

  #openOne(): Promise<void> {
    const opening = this.#connectOne();
    this.#openings.add(opening);
    const untrack = () => this.#openings.delete(opening);
    opening.then(untrack, untrack);
    return opening;
  }

  async #connectOne(): Promise<void> {
    this.#opening++;
    let connection: Connection | undefined;
    try {
      connection = this.#duplicate();
      await connection.connect();
      const id = await this.#prepare(connection);
      if (id !== undefined) this.#ids.set(connection, id);
    } catch (error) {
      this.#opening--;
      if (connection) void disconnectQuietly(connection);
      if (this.#open.size > 0) {
        // Other connections serve the line (a server's maxclients reached, say): the queued callers
        // wait for them, and no new connection is tried for a while (each try would fail the same way).
        this.#openPausedUntil = performance.now() + OPEN_RETRY_MS;
        return;
      }
      // None: every queued caller hears of it (each retries on its own schedule); handing the error
      // to the first alone would leave the others queued with no connection on its way.
      const failure = error instanceof Error ? error : new Error(String(error));
      for (const next of this.#queue.splice(0)) next(failure);
      return;
    }
    this.#opening--;
    if (this.#stopped) {
      void disconnectQuietly(connection);
      return;
    }
    this.#open.add(connection);
    this.#handOut(connection);
  }

  /** A new connection: no offline queue and no reconnection, so one that drops is discarded and replaced. */
  #duplicate(): Connection {
    const socket = { ...this.#source.options?.socket, reconnectStrategy: false as const };
    const connection = this.#source.duplicate({ disableOfflineQueue: true, socket });
    // A dropped connection emits 'error'; without a listener Node would crash the process. The
    // waiter that was using it sees its command reject and recovers on the main connection.
    connection.on('error', () => undefined);
    return connection;
  }

  #discard(connection: Connection): void {
    this.#open.delete(connection);
    if (connection.isOpen) void disconnectQuietly(connection);
  }
}
