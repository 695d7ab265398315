/** The dashboard's `GET /api/semaphores`: the incident view's data (which Redis, a summary, one page of names sorted by trouble). */
import type { Scope } from '../admin/operations';
import { filterRows, isUnreadableRow, sortRows, SORTS, type Row, type Sort, type StateFilter } from '../admin/overview';
import { readServerInfo, type ServerInfo } from '../admin/server-info';
import { Catalog, type CatalogLimits, type RefreshCost } from './catalog';

/** What the page's header and summary show, and the page of rows asked for. */
export interface OverviewJson {
  readonly server: ServerInfo & { readonly name: string | null };
  /** Every time on the page and in the API is UTC. */
  readonly timeZone: 'UTC';
  /** When the answer was made (this server's clock), ISO 8601. */
  readonly at: string;
  readonly summary: {
    readonly names: number;
    readonly held: number;
    readonly waiting: number;
    readonly expired: number;
    readonly overdue: number;
    readonly unreadable: number;
    readonly longestWaitMs: number | null;
    /** Names listed but not read yet (a first refresh over `readsPerRefresh` names). */
    readonly pending: number;
    /** Whether the names are all listed (a first SCAN pass over a large keyspace takes a few refreshes). */
    readonly listed: boolean;
    /** How old the oldest row is, in ms. */
    readonly oldestReadMs: number | null;
  };
  /** Rows matching the query, and the page of them. */
  readonly matched: number;
  readonly page: number;
  readonly size: number;
  readonly semaphores: readonly Row[];
  readonly truncated: boolean;
  /** What the refresh behind this answer cost Redis. */
  readonly cost: RefreshCost;
}

/** Rows per page, unless the query asks for another number (at most `MAX_SIZE`). */
const PAGE_SIZE = 50;
const MAX_SIZE = 500;
/** The server's address, role and version are read again after this long. */
const SERVER_INFO_MS = 30_000;
const STATES: readonly StateFilter[] = ['any', 'held', 'waiting', 'expired'];

export class QueryError extends Error {}

/** `GET /api/semaphores?q=<pattern>&state=<any|held|waiting|expired>&sort=<trouble|name|…>&page=<n>&size=<n>`. */
export class Overview {
  readonly #scope: Scope;
  readonly #catalog: Catalog;
  readonly #name: string | null;
  readonly #minIntervalMs: number;
  #refresh: { at: number; promise: Promise<RefreshCost>; done: boolean } | undefined;
  #server: { at: number; promise: Promise<ServerInfo> } | undefined;
  readonly #sorted = new Map<Sort, { rows: readonly Row[]; sorted: readonly Row[] }>();

  constructor(scope: Scope, name: string | null, limits: Partial<CatalogLimits> = {}, minIntervalMs = 250) {
    this.#scope = scope;
    this.#catalog = new Catalog(scope, limits);
    this.#name = name;
    this.#minIntervalMs = minIntervalMs;
  }

  async answer(query: URLSearchParams): Promise<OverviewJson> {
    const pattern = query.get('q') ?? '';
    const state = (query.get('state') ?? 'any') as StateFilter;
    const sort = (query.get('sort') ?? 'trouble') as Sort;
    const page = Number(query.get('page') ?? '1');
    const size = Number(query.get('size') ?? String(PAGE_SIZE));
    if (!STATES.includes(state)) throw new QueryError(`state must be one of ${STATES.join(', ')}`);
    if (!SORTS.includes(sort)) throw new QueryError(`sort must be one of ${SORTS.join(', ')}`);
    if (!Number.isSafeInteger(page) || page < 1) throw new QueryError('page must be a positive integer');
    if (!Number.isSafeInteger(size) || size < 1 || size > MAX_SIZE)
      throw new QueryError(`size must be an integer from 1 to ${MAX_SIZE}`);
    const [refreshed, server] = await Promise.all([this.#refreshed(), this.#serverInfo()]);
    const looked = /[*?[\\]/.test(pattern) ? 0 : await this.#catalog.lookup(pattern);
    const cost = { ...refreshed, reads: refreshed.reads + looked };
    const { rows, pending, truncated, oldestReadAt } = this.#catalog.rows();
    // Sorted once per refresh and order (every page polling asks the same), then filtered.
    let sorted = this.#sorted.get(sort);
    if (sorted === undefined || sorted.rows !== rows) {
      sorted = { rows, sorted: sortRows(rows, sort) };
      this.#sorted.set(sort, sorted);
    }
    let selected: Row[];
    try {
      selected = filterRows(sorted.sorted, { pattern, substring: true, state });
    } catch (error) {
      throw new QueryError(`q: ${(error as Error).message}`);
    }
    let held = 0;
    let waiting = 0;
    let expired = 0;
    let overdue = 0;
    let unreadable = 0;
    let longestWaitMs: number | null = null;
    for (const row of rows) {
      if (isUnreadableRow(row)) {
        unreadable++;
        continue;
      }
      held += row.held;
      waiting += row.waiting;
      expired += row.expired;
      overdue += row.overdue;
      if (row.longestWaitMs !== null && (longestWaitMs === null || row.longestWaitMs > longestWaitMs))
        longestWaitMs = row.longestWaitMs;
    }
    const now = Date.now();
    return {
      server: { ...server, name: this.#name },
      timeZone: 'UTC',
      at: new Date(now).toISOString(),
      summary: {
        names: rows.length + pending,
        held,
        waiting,
        expired,
        overdue,
        unreadable,
        longestWaitMs,
        pending,
        listed: this.#catalog.listed(),
        oldestReadMs: oldestReadAt === null ? null : now - oldestReadAt,
      },
      matched: selected.length,
      page,
      size,
      semaphores: selected.slice((page - 1) * size, page * size),
      truncated,
      cost,
    };
  }

  /** After a change to `name`: the next answer reads it again. */
  forget(name: string): void {
    this.#catalog.forget(name);
    this.#refresh = undefined;
  }

  /** One refresh at a time and at most one per `minIntervalMs`, shared by every page polling. */
  #refreshed(): Promise<RefreshCost> {
    const now = Date.now();
    const last = this.#refresh;
    if (last && (!last.done || now - last.at < this.#minIntervalMs)) return last.promise;
    const promise = this.#catalog.refresh();
    const refresh = { at: now, promise, done: false };
    this.#refresh = refresh;
    promise.then(
      () => (refresh.done = true),
      () => this.#refresh === refresh && (this.#refresh = undefined),
    );
    return promise;
  }

  #serverInfo(): Promise<ServerInfo> {
    const now = Date.now();
    if (this.#server && now - this.#server.at < SERVER_INFO_MS) return this.#server.promise;
    const promise = readServerInfo(this.#scope);
    this.#server = { at: now, promise };
    promise.catch(() => (this.#server = undefined));
    return promise;
  }
}
