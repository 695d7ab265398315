/** Many semaphores at a glance: one summary row each, filtered by a name pattern and state, sorted by name (numbers in order) or by trouble. */
import { leaseCounts } from './leases';
import type { SemaphoreStatus } from './operations';

/** One semaphore in a list (`list`, `list --json`, the dashboard's table). */
export interface Summary {
  readonly name: string;
  readonly tokens: number;
  readonly held: number;
  readonly available: number;
  /** Tokens set aside for a weighted waiter until it has them all: neither free nor held. */
  readonly collected: number;
  readonly waiting: number;
  /** Holders whose lease is over (dead processes: `release-stale` frees them). */
  readonly expired: number;
  /** Holders whose renewals are overdue, lease not over yet. */
  readonly overdue: number;
  /** How long the longest-held token has been held; `null` when none is. */
  readonly longestHeldMs: number | null;
  /** The lease nearest its end, or longest over (negative: expired for that long); `null` when no holder has a lease. */
  readonly leaseLeftMs: number | null;
  /**
   * How long the longest waiter has been seen waiting, as the dashboard sampled it (Redis records
   * a registration's expiry, not its start); `null` when unknown (the CLI) or nobody waits.
   */
  readonly longestWaitMs: number | null;
}

/** A semaphore whose keys Redis refused to read, in a list. */
export interface UnreadableSummary {
  readonly name: string;
  readonly error: string;
}

export type Row = Summary | UnreadableSummary;

export function isUnreadableRow(row: Row): row is UnreadableSummary {
  return 'error' in row;
}

export function summarize(status: SemaphoreStatus, longestWaitMs: number | null = null): Summary {
  let leaseLeftMs: number | null = null;
  for (const holder of status.holders) {
    if (holder.leaseLeftMs !== null && (leaseLeftMs === null || holder.leaseLeftMs < leaseLeftMs)) {
      leaseLeftMs = holder.leaseLeftMs;
    }
  }
  return {
    name: status.name,
    tokens: status.tokens,
    held: status.holders.length,
    available: status.available,
    collected: status.collected,
    waiting: status.waiting,
    ...leaseCounts(status.holders),
    longestHeldMs: status.holders[0]?.heldMs ?? null,
    leaseLeftMs,
    longestWaitMs: status.waiting > 0 ? longestWaitMs : null,
  };
}

/** Which rows a list keeps besides its pattern: any, held tokens, waiters, expired leases. */
export type StateFilter = 'any' | 'held' | 'waiting' | 'expired';

/** How a list is ordered. */
export const SORTS = ['name', 'trouble', 'held', 'waiting', 'expired', 'longest-held'] as const;
export type Sort = (typeof SORTS)[number];

/**
 * A Redis-style glob over names (`*`, `?`, `[abc]`, `[a-z]`, `[^a]`, `\\` quoting the next
 * character), matched against the whole name; a pattern without glob characters matches names
 * that contain it (the dashboard's search box). Throws a `SyntaxError` for a pattern no glob reads
 * (`[z-a]`).
 */
export function nameMatcher(pattern: string, { substring = false } = {}): (name: string) => boolean {
  if (pattern === '') return () => true;
  if (substring && !/[*?[\\]/.test(pattern)) return (name) => name.includes(pattern);
  let source = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i] as string;
    if (c === '*') source += '[\\s\\S]*';
    else if (c === '?') source += '[\\s\\S]';
    else if (c === '\\' && i + 1 < pattern.length) source += escapeRegExp(pattern[++i] as string);
    else if (c === '[') {
      const end = pattern.indexOf(']', i + 2);
      if (end === -1) {
        source += '\\[';
        continue;
      }
      let body = pattern.slice(i + 1, end);
      const negated = body.startsWith('^') || body.startsWith('!');
      if (negated) body = body.slice(1);
      source += `[${negated ? '^' : ''}${body.replace(/[\\\]^]/g, '\\$&')}]`;
      i = end;
    } else source += escapeRegExp(c);
  }
  let regexp: RegExp;
  try {
    regexp = new RegExp(`^${source}$`, 'u');
  } catch {
    throw new SyntaxError(`Not a usable glob pattern: ${JSON.stringify(pattern)} (a character range backwards?)`);
  }
  return (name) => regexp.test(name);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** Each name's sort key, kept while a list is sorted (a sort compares each name many times). */
const keys = new Map<string, string>();

/**
 * A string whose code-unit order is the natural order of names: each run of digits becomes `0`,
 * a character for the length of its value, the value without leading zeros, and a character for
 * how many there were; the rest stays as it is.
 */
function naturalKey(name: string): string {
  let key = keys.get(name);
  if (key === undefined) {
    if (keys.size >= 100_000) keys.clear();
    key = name.replace(/\d+/g, (digits) => {
      const value = digits.replace(/^0+(?=\d)/, '');
      return `0${String.fromCharCode(0x100 + value.length)}${value}${String.fromCharCode(0x100 + digits.length - value.length)}`;
    });
    keys.set(name, key);
  }
  return key;
}

/** Names in natural order: runs of digits compare as numbers (`user:2` before `user:10`), the rest by code unit. */
export function compareNames(a: string, b: string): number {
  const x = naturalKey(a);
  const y = naturalKey(b);
  return x < y ? -1 : x > y ? 1 : a < b ? -1 : a > b ? 1 : 0;
}

/** A number where `null` counts as the least. */
/** A number where `null` counts as the least (below any duration). */
const n = (value: number | null) => value ?? -1;

/**
 * What a row is sorted by, most significant first, each larger for more trouble: expired leases,
 * unreadable keys, the longest wait seen, the longest queue, overdue renewals, the longest hold.
 */
function troubleOf(row: Row): number[] {
  if (isUnreadableRow(row)) return [0, 1, -1, 0, 0, -1];
  return [row.expired, 0, n(row.longestWaitMs), row.waiting, row.overdue, n(row.longestHeldMs)];
}

const BY: Record<Exclude<Sort, 'name' | 'trouble'>, (row: Summary) => number> = {
  held: (row) => row.held,
  waiting: (row) => row.waiting,
  expired: (row) => row.expired,
  'longest-held': (row) => n(row.longestHeldMs),
};

/**
 * `rows` ordered by `sort` (a new array): `name` in natural order, `trouble` most trouble first
 * (see `troubleOf`), the others largest first; ties by name. Each row's keys are computed once
 * (10,000 rows are sorted in a few milliseconds).
 */
export function sortRows(rows: readonly Row[], sort: Sort): Row[] {
  const by = sort === 'trouble' || sort === 'name' ? undefined : BY[sort];
  const decorated = rows.map((row) => ({
    row,
    keys: sort === 'name' ? [] : sort === 'trouble' ? troubleOf(row) : [isUnreadableRow(row) ? -1 : by!(row)],
    name: naturalKey(row.name),
  }));
  decorated.sort((a, b) => {
    for (let i = 0; i < a.keys.length; i++) {
      const difference = (b.keys[i] as number) - (a.keys[i] as number);
      if (difference !== 0) return difference;
    }
    return a.name < b.name ? -1 : a.name > b.name ? 1 : a.row.name < b.row.name ? -1 : 1;
  });
  return decorated.map((d) => d.row);
}

/** `rows` that match `pattern` and `state`, in their order (unreadable rows are kept by every state filter). */
export function filterRows(
  rows: readonly Row[],
  { pattern = '', substring = false, state = 'any' }: SelectOptions = {},
): Row[] {
  if (pattern === '' && state === 'any') return [...rows];
  const matches = nameMatcher(pattern, { substring });
  return rows.filter(
    (row) =>
      matches(row.name) &&
      (isUnreadableRow(row) ||
        state === 'any' ||
        (state === 'held' ? row.held > 0 : state === 'waiting' ? row.waiting > 0 : row.expired > 0)),
  );
}

/** `rows` that match, in the order asked for. */
export function selectRows(rows: readonly Row[], options: SelectOptions = {}): Row[] {
  return sortRows(filterRows(rows, options), options.sort ?? 'name');
}

export interface SelectOptions {
  /** A glob over names (see `nameMatcher`); `''`: every name. */
  readonly pattern?: string;
  /** A pattern without glob characters matches names containing it. */
  readonly substring?: boolean;
  readonly state?: StateFilter;
  readonly sort?: Sort;
}
