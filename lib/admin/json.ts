/** The JSON shapes of a semaphore's status and holders: the CLI's `--json` output and the dashboard's API. */
import type { HolderInfo } from '../redis/status';
import type { SemaphoreStatus, UnreadableSemaphore } from './operations';

/** A holder: times as ISO 8601 strings, what was not recorded (a Ruby gem holder) as `null`. */
export interface HolderJson {
  readonly token: string;
  readonly since: string | null;
  readonly heldMs: number | null;
  readonly refreshedAt: string | null;
  readonly refreshedMs: number | null;
  readonly leaseMs: number | null;
  readonly fence: number | null;
  readonly owner: string | null;
  readonly grantId: string | null;
}

/** A semaphore's status: `status --json`, each `watch --json` frame, each semaphore of the dashboard's API. */
export interface StatusJson {
  readonly name: string;
  readonly exists: boolean;
  /** Redis' clock when it was read. */
  readonly now: string;
  readonly tokens: number;
  readonly held: number;
  readonly available: number;
  readonly waiting: number;
  /** Longest-held first. */
  readonly holders: readonly HolderJson[];
}

/** A semaphore in a list without its holders (`list --json`). */
export interface SummaryJson {
  readonly name: string;
  readonly tokens: number;
  readonly held: number;
  readonly available: number;
  readonly waiting: number;
  readonly longestHeldMs: number | null;
}

/** A semaphore in a list whose keys Redis refused to read. */
export interface UnreadableJson {
  readonly name: string;
  readonly error: string;
}

export function statusJson(status: SemaphoreStatus): StatusJson {
  return {
    name: status.name,
    exists: status.exists,
    now: status.now.toISOString(),
    tokens: status.tokens,
    held: status.holders.length,
    available: status.available,
    waiting: status.waiting,
    holders: status.holders.map(holderJson),
  };
}

export function holderJson(h: HolderInfo): HolderJson {
  return {
    token: h.token,
    since: h.since?.toISOString() ?? null,
    heldMs: h.heldMs,
    refreshedAt: h.refreshedAt?.toISOString() ?? null,
    refreshedMs: h.refreshedMs,
    leaseMs: h.leaseMs ?? null,
    fence: h.fence ?? null,
    owner: h.owner ?? null,
    grantId: h.grantId ?? null,
  };
}

export function summaryJson(status: SemaphoreStatus): SummaryJson {
  return {
    name: status.name,
    tokens: status.tokens,
    held: status.holders.length,
    available: status.available,
    waiting: status.waiting,
    longestHeldMs: status.holders[0]?.heldMs ?? null,
  };
}

export function unreadableJson(semaphore: UnreadableSemaphore): UnreadableJson {
  return { name: semaphore.name, error: semaphore.error };
}
