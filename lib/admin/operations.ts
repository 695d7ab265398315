import { semaphoreKeys } from '../keys';
import { isConnectionError, type RedisClientLike } from '../redis-client';
import { runScript, scripts } from '../scripts';
import { decodeStatus, type HolderInfo } from '../holder-info';
import { Semaphore } from '../semaphore';
import { MAX_RESOURCES } from '../options';

/**
 * What an operator does to a semaphore by name (the CLI and the dashboard): read its state, free a
 * token, resize it, delete it. It needs no `Semaphore` options: everything is read from Redis, and
 * every change is one script (see lib/scripts/status-9.lua, forceRelease-9.lua, resize-9.lua).
 */

/** One semaphore at one instant, as `status-9.lua` reads it. */
export interface SemaphoreStatus {
  readonly name: string;
  /** Whether `SEMAPHORE:<name>:EXISTS` is set. */
  readonly exists: boolean;
  /** Redis' clock when the snapshot was taken. */
  readonly now: Date;
  /** Every token: free + held (a token in flight to a waiter, for an instant, is not counted). */
  readonly tokens: number;
  /** Free tokens (or signalled jobs) on AVAILABLE. */
  readonly available: number;
  /** Registered waiters (this library's, in any process). */
  readonly waiting: number;
  /** Their grant ids, earliest lease first (at most `waiterIds` of them). */
  readonly waiterIds: readonly string[];
  /** Held tokens, longest-held first. */
  readonly holders: readonly HolderInfo[];
}

/** How many waiter ids a status lists by default (the count is always complete). */
const WAITER_IDS = 100;

export async function readStatus(client: RedisClientLike, name: string, waiterIds = WAITER_IDS): Promise<SemaphoreStatus> {
  const reply = await runScript(client, scripts.status, semaphoreKeys(name).scriptKeys, [String(waiterIds)]);
  const { exists, nowSeconds, available, waiting, waiterIds: ids, holders } = decodeStatus(reply);
  return {
    name,
    exists,
    now: new Date(nowSeconds * 1000),
    tokens: available + holders.length,
    available,
    waiting,
    waiterIds: ids,
    holders,
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
  client: RedisClientLike,
  names: readonly string[],
  waiterIds = WAITER_IDS,
): Promise<Array<SemaphoreStatus | UnreadableSemaphore>> {
  return Promise.all(
    names.map((name) =>
      readStatus(client, name, waiterIds).catch((error: unknown) => {
        if (isConnectionError(error)) throw error;
        return { name, error: String((error as { message?: unknown } | null)?.message ?? error) };
      }),
    ),
  );
}

export function isUnreadable(status: SemaphoreStatus | UnreadableSemaphore): status is UnreadableSemaphore {
  return 'error' in status;
}

const PREFIX = 'SEMAPHORE:';
const SUFFIX = ':EXISTS';

/**
 * Names of the semaphores on this Redis (SCAN of `SEMAPHORE:*:EXISTS`), sorted. Stops after `limit`
 * names (then `truncated`). On a cluster it sees only the node `client` talks to.
 */
export async function listSemaphores(
  client: RedisClientLike,
  limit = 10_000,
): Promise<{ names: string[]; truncated: boolean }> {
  const names = new Set<string>();
  let cursor = '0';
  do {
    const [next, keys] = (await client.sendCommand(['SCAN', cursor, 'MATCH', `${PREFIX}*${SUFFIX}`, 'COUNT', '1000'])) as [
      string,
      string[],
    ];
    for (const key of keys) {
      if (key.length > PREFIX.length + SUFFIX.length) names.add(key.slice(PREFIX.length, -SUFFIX.length));
    }
    cursor = next;
  } while (cursor !== '0' && names.size < limit);
  const sorted = [...names].sort();
  return { names: sorted.slice(0, limit), truncated: cursor !== '0' || sorted.length > limit };
}

export type ReleaseOutcome =
  | { readonly status: 'released'; readonly available: number }
  | { readonly status: 'not-held' | 'holder-changed' | 'not-found' };

/**
 * Frees a held token whoever holds it (or only if `grantId` still holds it): its holder's later
 * `unlock` and `refresh` find nothing, and a blocked waiter gets the token at once.
 */
export async function releaseToken(
  client: RedisClientLike,
  name: string,
  token: string,
  grantId = '',
): Promise<ReleaseOutcome> {
  const keys = semaphoreKeys(name);
  const result = (await runScript(client, scripts.forceRelease, keys.scriptKeys, [token, grantId])) as number;
  if (result >= 0) return { status: 'released', available: result };
  if (result === -2) return { status: 'holder-changed' };
  return { status: (await client.sendCommand(['EXISTS', keys.exists])) === 1 ? 'not-held' : 'not-found' };
}

/**
 * Frees every token whose holder's lease is over (each grant of this library carries its holder's
 * own lease, which no operator setting overrides), every Ruby gem holder's token held longer than
 * `olderThanMs` (on Redis' clock), and tokens stranded by waiters that died mid-hand-off: what
 * `releaseStaleLocks()` does with `staleClientTimeout: olderThanMs`. Resolves how many tokens went back.
 */
export async function releaseStale(client: RedisClientLike, name: string, olderThanMs: number): Promise<number> {
  const semaphore = new Semaphore(name, { redis: client, staleClientTimeout: olderThanMs, autoRefresh: false });
  try {
    return await semaphore.releaseStaleLocks();
  } finally {
    await semaphore.close();
  }
}

/** Deletes every key of the semaphore (its holders' later `unlock` resolves `false`). */
export async function deleteSemaphore(client: RedisClientLike, name: string): Promise<void> {
  const semaphore = new Semaphore(name, { redis: client });
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
export async function resizeSemaphore(client: RedisClientLike, name: string, tokens: number): Promise<ResizeOutcome> {
  if (!Number.isSafeInteger(tokens) || tokens < 1 || tokens > MAX_RESOURCES) {
    throw new RangeError(`Expected the number of tokens to be an integer from 1 to ${MAX_RESOURCES}, got ${tokens}`);
  }
  const [status, before, held, after] = (await runScript(client, scripts.resize, semaphoreKeys(name).scriptKeys, [
    String(tokens),
  ])) as [number, number, number, number];
  if (status === 0) return { status: 'not-found' };
  if (status === -1) return { status: 'below-held', before, held };
  return { status: 'resized', before, held, after };
}
