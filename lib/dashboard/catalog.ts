/** The dashboard's table of every semaphore: names by SCAN, each name's summary re-read within a fixed budget of reads per refresh. */
import {
  isUnreadable,
  readStatuses,
  scanNodes,
  type ScanReply,
  type Scope,
  type SemaphoreStatus,
} from '../admin/operations';
import { existsKeyPattern, nameOfExistsKey } from '../redis/keys';
import { isUnreadableRow, summarize, type Row } from '../admin/overview';

/**
 * What one refresh may cost Redis, and how fresh the table is. Names are listed by SCAN (`COUNT
 * 1000`: about one call per 1,000 keys), at most `scansPerRefresh` calls a refresh, going on where
 * the last refresh stopped: a new name is listed as soon as the scan passes it, a deleted one is
 * dropped when a whole pass has not seen it (or a read finds it gone). Each refresh re-reads at most
 * `readsPerRefresh` names (one status script each, sent together as a pipeline): names never read
 * first, then the ones read longest ago, where a name that had holders, waiters or unreadable keys
 * counts as read `activeBonusMs` earlier than it was (so busy names are read about every refresh,
 * idle ones in turn).
 */
export interface CatalogLimits {
  readonly readsPerRefresh: number;
  readonly scansPerRefresh: number;
  readonly activeBonusMs: number;
  /** Most names listed (then the listing says it is truncated). */
  readonly maxNames: number;
}

export const CATALOG_LIMITS: CatalogLimits = {
  readsPerRefresh: 500,
  scansPerRefresh: 20,
  activeBonusMs: 10_000,
  maxNames: 10_000,
};

const EXISTS_SUFFIX = ':EXISTS';
/** The keys that exist only while a semaphore has holders (GRABBED) or has had waiters (WAITING). */
const BUSY_SUFFIXES = [':GRABBED', ':WAITING'];
/** Where names never read stand in the reading order: before any read one, busy ones first. */
const NEVER_READ_BUSY = -2e15;
const NEVER_READ = -1e15;

/** Waiter ids read per name: enough to follow the longest waiters from one refresh to the next. */
const WAITER_IDS = 20;

interface Entry {
  row: Row;
  /** When it was read (this process's clock, ms). */
  readAt: number;
  /** Waiter registration id → Redis time (ms) of the first read that saw it. */
  firstSeen: Map<string, number>;
}

/** One refresh's bill: what it read and how many commands it sent Redis. */
export interface RefreshCost {
  readonly scans: number;
  readonly reads: number;
}

export class Catalog {
  readonly #scope: Scope;
  readonly #limits: CatalogLimits;
  /** Names listed: every name of the last whole pass, and those the current pass found since. */
  #names = new Set<string>();
  #truncated = false;
  /** Whole SCAN passes made. */
  #passes = 0;
  /** The pass under way: the nodes it scans, where it is, and the names it has seen. */
  #pass:
    | {
        nodes: Array<{ sendCommand(args: string[]): Promise<unknown> }>;
        node: number;
        cursor: string;
        seen: Set<string>;
        busy: Set<string>;
      }
    | undefined;
  /** Names whose GRABBED or WAITING key the scan saw: read first when never read. */
  #busy = new Set<string>();
  readonly #entries = new Map<string, Entry>();
  #lastCost: RefreshCost = { scans: 0, reads: 0 };
  /** `rows()` until the next change (the same array, so a sorted copy of it can be kept). */
  #rows: { rows: readonly Row[]; pending: number; truncated: boolean; oldestReadAt: number | null } | undefined;

  constructor(scope: Scope, limits: Partial<CatalogLimits> = {}) {
    this.#scope = scope;
    this.#limits = { ...CATALOG_LIMITS, ...limits };
  }

  /** Reads what this refresh's budget allows (see `CatalogLimits`). */
  async refresh(): Promise<RefreshCost> {
    const now = Date.now();
    const scans = await this.#scan();
    const due = this.#due();
    const statuses = await readStatuses(this.#scope, due, WAITER_IDS);
    for (const status of statuses) {
      if (isUnreadable(status)) {
        this.#entries.set(status.name, { row: status, readAt: now, firstSeen: new Map() });
      } else if (!status.exists) {
        this.#entries.delete(status.name); // deleted since it was listed
        this.#names.delete(status.name);
      } else {
        this.#record(status, now);
      }
    }
    this.#lastCost = { scans, reads: due.length };
    this.#rows = undefined;
    return this.#lastCost;
  }

  /** Goes on with the SCAN pass for at most `scansPerRefresh` calls; resolves how many it made. */
  async #scan(): Promise<number> {
    const { scansPerRefresh, maxNames } = this.#limits;
    // Every key under the prefix, not only EXISTS keys: the same SCAN calls (SCAN walks the whole
    // keyspace whatever it matches), and a GRABBED or WAITING key tells which names to read first.
    const pattern = existsKeyPattern(this.#scope.keyPrefix).slice(0, -EXISTS_SUFFIX.length);
    this.#pass ??= {
      nodes: await scanNodes(this.#scope.redis),
      node: 0,
      cursor: '0',
      seen: new Set(),
      busy: new Set(),
    };
    const pass = this.#pass;
    let calls = 0;
    while (calls < scansPerRefresh) {
      const node = pass.nodes[pass.node];
      if (node === undefined) break; // no node to scan
      const reply = (await node.sendCommand(['SCAN', pass.cursor, 'MATCH', pattern, 'COUNT', '1000'])) as ScanReply;
      calls++;
      const [cursor, keys] = reply;
      for (const key of keys) {
        const busy = BUSY_SUFFIXES.find((suffix) => key.endsWith(suffix));
        if (busy !== undefined) {
          const name = nameOfExistsKey(`${key.slice(0, -busy.length)}${EXISTS_SUFFIX}`, this.#scope.keyPrefix);
          if (name !== undefined && pass.busy.size < maxNames) {
            pass.busy.add(name);
            this.#busy.add(name);
          }
          continue;
        }
        const name = nameOfExistsKey(key, this.#scope.keyPrefix);
        if (name === undefined) continue;
        if (pass.seen.size < maxNames) pass.seen.add(name);
        if (this.#names.size < maxNames) this.#names.add(name);
      }
      pass.cursor = cursor;
      if (cursor !== '0') continue;
      if (++pass.node < pass.nodes.length) continue;
      // A whole pass: it names every semaphore that existed throughout (SCAN's guarantee).
      this.#truncated = pass.seen.size >= maxNames;
      this.#names = pass.seen;
      this.#busy = pass.busy;
      for (const name of this.#entries.keys()) if (!pass.seen.has(name)) this.#entries.delete(name);
      this.#pass = undefined;
      this.#passes++;
      break;
    }
    return calls;
  }

  /** The names this refresh reads: never read first (busy ones before idle), then by (read time − bonus if active). */
  #due(): string[] {
    const { readsPerRefresh, activeBonusMs } = this.#limits;
    const order = (name: string) => {
      const entry = this.#entries.get(name);
      if (entry === undefined) return this.#busy.has(name) ? NEVER_READ_BUSY : NEVER_READ;
      const row = entry.row;
      const active = isUnreadableRow(row) || row.held > 0 || row.waiting > 0;
      return entry.readAt - (active ? activeBonusMs : 0);
    };
    if (this.#names.size <= readsPerRefresh) return [...this.#names];
    const keyed = [...this.#names].map((name) => ({ name, at: order(name) }));
    keyed.sort((a, b) => a.at - b.at);
    return keyed.slice(0, readsPerRefresh).map((k) => k.name);
  }

  #record(status: SemaphoreStatus, now: number): void {
    const previous = this.#entries.get(status.name);
    const redisNow = status.now.getTime();
    const firstSeen = new Map<string, number>();
    let earliest: number | null = null;
    for (const id of status.waiterIds) {
      const seen = previous?.firstSeen.get(id) ?? redisNow;
      firstSeen.set(id, seen);
      if (earliest === null || seen < earliest) earliest = seen;
    }
    const row = summarize(status, earliest === null ? null : redisNow - earliest);
    this.#entries.set(status.name, { row, readAt: now, firstSeen });
  }

  /** Every name listed with its latest row (names not read yet have none), and whether the listing was cut short. */
  rows(): { rows: readonly Row[]; pending: number; truncated: boolean; oldestReadAt: number | null } {
    if (this.#rows !== undefined) return this.#rows;
    const rows: Row[] = [];
    let pending = 0;
    let oldest: number | null = null;
    for (const name of this.#names) {
      const entry = this.#entries.get(name);
      if (entry === undefined) {
        pending++;
        continue;
      }
      rows.push(entry.row);
      if (Number.isFinite(entry.readAt) && (oldest === null || entry.readAt < oldest)) oldest = entry.readAt;
    }
    this.#rows = { rows, pending, truncated: this.#truncated, oldestReadAt: oldest };
    return this.#rows;
  }

  /**
   * Lists `name` at once if it exists and the scan has not reached it yet (a search for an exact
   * name finds a new semaphore before the pass does): one read, only for a name not listed.
   */
  async lookup(name: string): Promise<number> {
    if (name === '' || this.#names.has(name) || this.#names.size >= this.#limits.maxNames) return 0;
    const [status] = await readStatuses(this.#scope, [name], WAITER_IDS);
    // (A name no key can have, such as one with a lone surrogate, is refused before Redis: not listed.)
    const refused = status !== undefined && isUnreadable(status) && !status.error.startsWith('WRONGTYPE');
    if (status !== undefined && !refused && (isUnreadable(status) || status.exists)) {
      this.#names.add(name);
      this.#rows = undefined;
      if (isUnreadable(status)) this.#entries.set(name, { row: status, readAt: Date.now(), firstSeen: new Map() });
      else this.#record(status, Date.now());
    }
    return 1;
  }

  /** Whether a whole SCAN pass has been made: until then, names may be missing from `rows()`. */
  listed(): boolean {
    return this.#passes > 0;
  }

  /** The last refresh's bill. */
  lastCost(): RefreshCost {
    return this.#lastCost;
  }

  /** After a change: re-read `name` first at the next refresh. */
  forget(name: string): void {
    const entry = this.#entries.get(name);
    if (entry !== undefined) entry.readAt = -Infinity;
  }
}
