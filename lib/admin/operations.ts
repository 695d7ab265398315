/** What an operator does to a semaphore by name (CLI, dashboard): read it, list them, free a token, resize, delete. */
import { existsKeyPattern, nameOfExistsKey, semaphoreKeys, type SemaphoreKeys } from '../redis/keys';
import { adaptClient, clientKeyPrefix, topologyOf } from '../redis/client/adapt';
import { isConnectionError } from '../redis/client/classify';
import type { RedisClientLike, SupportedRedisClient } from '../redis/client/types';
import { forceRelease, resize, status } from '../redis/operator-commands';
import { runScript } from '../redis/send';
import { snapshotOf } from '../redis/status';
import { withLease, type Holder } from './leases';
import { Semaphore } from '../semaphore';
import { MAX_RESOURCES } from '../options';

/*
 * It needs no `Semaphore` options: everything is read from Redis, and every change is one script
 * (see lib/redis/scripts/status.lua, forceRelease.lua, resize.lua). Given a cluster client
 * (`createCluster()`), it addresses the keys a `Semaphore` on that client uses: a name without a
 * hash tag gets one (see lib/redis/keys.ts), and every command goes to the node that owns their slot.
 */

/**
 * The semaphores an operator works on: those on `redis` whose keys start with `keyPrefix` (the
 * `keyPrefix` option of their `Semaphore`s, `'SEMAPHORE:'` by default). Every operation takes one.
 */
export interface Scope<Client = SupportedRedisClient> {
  readonly redis: Client;
  readonly keyPrefix: string;
}

/** The keys of `name` as a `Semaphore` in `scope` names them (with a hash tag on a cluster client). */
export function keysOf({ redis: client, keyPrefix }: Scope, name: string): SemaphoreKeys {
  return semaphoreKeys(name, {
    cluster: topologyOf(client) === 'cluster',
    keyPrefix: clientKeyPrefix(client) + keyPrefix,
  });
}

/** The keys of `name` as a `Semaphore` in `scope` names them, and its client routed to their slot. */
export function target(scope: Scope, name: string): { keys: SemaphoreKeys; redis: RedisClientLike } {
  const keys = keysOf(scope, name);
  return { keys, redis: adaptClient(scope.redis, keys.available) };
}

/** One semaphore at one instant, as `status.lua` reads it. */
export interface SemaphoreStatus {
  readonly name: string;
  /** Whether its `exists` key is set. */
  readonly exists: boolean;
  /** Redis' clock when the snapshot was taken. */
  readonly now: Date;
  /** Every token: free + held + collected (a token in flight to a waiter, for an instant, is not counted). */
  readonly tokens: number;
  /** Free tokens (or signalled jobs) on AVAILABLE. */
  readonly available: number;
  /** Registered waiters (this library's, in any process). */
  readonly waiting: number;
  /** Their grant ids, earliest expiry first (at most `waiterIds` of them). */
  readonly waiterIds: readonly string[];
  /** Held tokens, longest-held first, each with its lease judged at `now`. */
  readonly holders: readonly Holder[];
  /** Tokens set aside for a weighted waiter (`permits` > 1) until it has them all: neither free nor held. */
  readonly collected: number;
  /** The weighted waiter collecting them (its registration's id) and the permits it asks for, or null. */
  readonly collector: { readonly waiterId: string; readonly permits: number } | null;
}

/** SCAN's reply: the next cursor and a batch of keys. */
export type ScanReply = [cursor: string, keys: string[]];

/** How many waiter ids a status lists by default (the count is always complete). */
const WAITER_IDS = 100;

export async function readStatus(scope: Scope, name: string, waiterIds = WAITER_IDS): Promise<SemaphoreStatus> {
  const { keys, redis } = target(scope, name);
  const {
    exists,
    nowSeconds,
    available,
    waiting,
    waiterIds: ids,
    holders,
    collected,
    collector,
  } = snapshotOf(await runScript(redis, status({ keys }, waiterIds)));
  const now = new Date(nowSeconds * 1000);
  return {
    name,
    exists,
    now,
    tokens: available + holders.length + collected,
    available,
    waiting,
    waiterIds: ids,
    holders: holders.map((holder) => withLease(holder, now)),
    collected,
    collector,
  };
}

/** A semaphore whose keys Redis refused to read (`WRONGTYPE`: a key of the wrong type under its name). */
export interface UnreadableSemaphore {
  readonly name: string;
  readonly error: string;
}

/**
 * `readStatus` for many semaphores at once (pipelined). One whose keys Redis refuses to read is
 * reported with its error instead of failing the others; a connection failure still rejects.
 */
export async function readStatuses(
  scope: Scope,
  names: readonly string[],
  waiterIds = WAITER_IDS,
): Promise<Array<SemaphoreStatus | UnreadableSemaphore>> {
  return Promise.all(
    names.map((name) => readStatus(scope, name, waiterIds).catch((error: unknown) => unreadable(name, error))),
  );
}

/** The semaphore Redis refused to read with `error`; a connection failure is thrown again instead. */
export function unreadable(name: string, error: unknown): UnreadableSemaphore {
  if (isConnectionError(error)) throw error;
  return { name, error: String((error as { message?: unknown } | null)?.message ?? error) };
}

export function isUnreadable(status: SemaphoreStatus | UnreadableSemaphore): status is UnreadableSemaphore {
  return 'error' in status;
}

/**
 * Names of the semaphores on this Redis under the scope's prefix (SCAN of every `exists` key),
 * sorted, and how many SCAN calls it took. Stops after `limit` names (then `truncated`). On a node-redis cluster client it scans
 * every master; a semaphore made on a cluster client is listed by its tagged name (`{jobs}`), which
 * names the same keys.
 */
export async function listSemaphores(
  { redis: client, keyPrefix }: Scope,
  limit = 10_000,
): Promise<{ names: string[]; truncated: boolean; scans: number }> {
  const names = new Set<string>();
  let truncated = false;
  const prefix = clientKeyPrefix(client) + keyPrefix;
  let scans = 0;
  for (const node of await scanNodes(client)) {
    let cursor = '0';
    do {
      const reply: unknown = await node.sendCommand([
        'SCAN',
        cursor,
        'MATCH',
        existsKeyPattern(prefix),
        'COUNT',
        '1000',
      ]);
      scans++;
      const [next, keys] = reply as ScanReply;
      for (const key of keys) {
        const name = nameOfExistsKey(key, prefix);
        if (name !== undefined) names.add(name);
      }
      cursor = next;
    } while (cursor !== '0' && names.size < limit);
    if (cursor !== '0') truncated = true;
    if (names.size >= limit) break;
  }
  const sorted = [...names].sort();
  return { names: sorted.slice(0, limit), truncated: truncated || sorted.length > limit, scans };
}

/** What SCAN runs on: every master of a node-redis cluster client, else the client itself (adapted). */
export async function scanNodes(
  client: SupportedRedisClient,
): Promise<Array<{ sendCommand(args: string[]): Promise<unknown> }>> {
  if (topologyOf(client) !== 'cluster') return [adaptClient(client, '')];
  const cluster = client as unknown as {
    masters?: unknown[];
    nodeClient?(node: unknown): RedisClientLike | Promise<RedisClientLike>;
  };
  if (!Array.isArray(cluster.masters) || typeof cluster.nodeClient !== 'function') {
    throw new TypeError('Listing semaphores on a cluster needs a node-redis cluster client (createCluster())');
  }
  return Promise.all(cluster.masters.map((master) => cluster.nodeClient!(master)));
}

export type ReleaseOutcome =
  | { readonly status: 'released'; readonly available: number }
  | { readonly status: 'not-held' | 'holder-changed' | 'not-found' };

/**
 * Frees a held token whoever holds it (or only if `grantId` still holds it): its holder's later
 * `unlock` and `refresh` find nothing, and a blocked waiter gets the token at once.
 */
export async function releaseToken(scope: Scope, name: string, token: string, grantId = ''): Promise<ReleaseOutcome> {
  const { keys, redis } = target(scope, name);
  const result = await runScript(redis, forceRelease({ keys }, token, grantId));
  if (result.status !== 'not-held') return result;
  return { status: (await redis.sendCommand(['EXISTS', keys.exists])) === 1 ? 'not-held' : 'not-found' };
}

/**
 * The holders `releaseStale(…, rubyOlderThanMs)` would free now: this library's grants whose own
 * lease is over (a lease of 0 never ends), and, only when `rubyOlderThanMs` is given, Ruby gem
 * holders (which record no lease) held longer than that. (It also returns tokens stranded in dead
 * waiters' inboxes, which no status shows.)
 */
export function staleHolders(status: SemaphoreStatus, rubyOlderThanMs: number | null): Holder[] {
  return status.holders.filter((h) =>
    h.leaseMs === undefined ? rubyOlderThanMs !== null && (h.heldMs === null || h.heldMs > rubyOlderThanMs) : h.expired,
  );
}

/**
 * Whether an owner label matches `pattern`: equal to it, or, for a pattern ending with `*`,
 * starting with what precedes the `*` (`pod-7f9c:*` matches every process of that host with the
 * default label `<host>:<pid>`). A holder with no label recorded (a Ruby gem holder) never matches.
 */
export function ownerMatches(pattern: string, owner: string | undefined): boolean {
  if (owner === undefined) return false;
  return pattern.endsWith('*') ? owner.startsWith(pattern.slice(0, -1)) : owner === pattern;
}

/** A holder and what releasing it came to. */
export interface GrantRelease {
  readonly holder: Holder;
  readonly outcome: ReleaseOutcome;
}

/**
 * Releases each of `holders` if its grant still holds its token (a Ruby holder's, which has no grant
 * id, whoever holds it): a token given back and taken again since is left to its new holder.
 */
export async function releaseGrants(scope: Scope, name: string, holders: readonly Holder[]): Promise<GrantRelease[]> {
  const released: GrantRelease[] = [];
  for (const holder of holders) {
    released.push({ holder, outcome: await releaseToken(scope, name, holder.token, holder.grantId ?? '') });
  }
  return released;
}

/** Whether the semaphore exists (its `exists` key is set). */
export async function semaphoreExists(scope: Scope, name: string): Promise<boolean> {
  const { keys, redis } = target(scope, name);
  return (await redis.sendCommand(['EXISTS', keys.exists])) === 1;
}

/**
 * Frees every token whose holder's lease is over (each grant of this library carries its holder's
 * own lease, which no operator setting overrides), and tokens stranded by waiters that died
 * mid-hand-off: what `releaseStaleLocks()` does with `staleClientTimeout: null`. Ruby gem holders
 * record no lease: they are freed only when `rubyOlderThanMs` is given and they have held longer
 * than that (on Redis' clock), as `staleClientTimeout: rubyOlderThanMs` would. Resolves how many
 * tokens went back.
 */
export async function releaseStale(
  { redis, keyPrefix }: Scope,
  name: string,
  rubyOlderThanMs: number | null = null,
): Promise<number> {
  const semaphore = new Semaphore(name, {
    redis,
    keyPrefix,
    staleClientTimeout: rubyOlderThanMs,
    autoRefresh: false,
  });
  try {
    return await semaphore.releaseStaleLocks();
  } finally {
    await semaphore.close();
  }
}

/** Deletes every key of the semaphore (its holders' later `unlock` resolves `false`). */
export async function deleteSemaphore({ redis, keyPrefix }: Scope, name: string): Promise<void> {
  const semaphore = new Semaphore(name, { redis, keyPrefix });
  try {
    await semaphore.delete();
  } finally {
    await semaphore.close();
  }
}

export type ResizeOutcome =
  | { readonly status: 'resized'; readonly before: number; readonly held: number; readonly after: number }
  | { readonly status: 'below-held'; readonly before: number; readonly held: number }
  | { readonly status: 'not-found' };

/** Sets the number of tokens: adds new ones, or retires free ones; never below what is held. */
export async function resizeSemaphore(scope: Scope, name: string, tokens: number): Promise<ResizeOutcome> {
  if (!Number.isSafeInteger(tokens) || tokens < 1 || tokens > MAX_RESOURCES) {
    throw new RangeError(`Expected the number of tokens to be an integer from 1 to ${MAX_RESOURCES}, got ${tokens}`);
  }
  const { keys, redis } = target(scope, name);
  return runScript(redis, resize({ keys }, tokens));
}
