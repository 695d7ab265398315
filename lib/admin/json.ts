/** The JSON shapes of a semaphore's status and holders: the CLI's `--json` output and the dashboard's API. */
import { leaseCounts, type Holder } from './leases';
import type { SemaphoreStatus, UnreadableSemaphore } from './operations';
import type { Summary } from './overview';

/** A holder: times as ISO 8601 strings, what was not recorded (a Ruby gem holder) as `null`. */
export interface HolderJson {
  readonly token: string;
  readonly since: string | null;
  readonly heldMs: number | null;
  readonly refreshedAt: string | null;
  readonly refreshedMs: number | null;
  readonly leaseMs: number | null;
  /** When the lease ends; `null` for no lease or a Ruby holder (see lib/admin/leases.ts). */
  readonly leaseEndsAt: string | null;
  /** Until then, negative once over. */
  readonly leaseLeftMs: number | null;
  /** The lease is over: a dead holder, which `release-stale` frees. */
  readonly expired: boolean;
  /** Renewals more than one interval late, the lease not over yet. */
  readonly overdue: boolean;
  readonly fence: number | null;
  readonly owner: string | null;
  readonly grantId: string | null;
}

/** A semaphore's status: `status --json`, each `watch --json` frame, each semaphore of the dashboard's API. */
export interface StatusJson extends Pick<
  Summary,
  'name' | 'tokens' | 'held' | 'available' | 'collected' | 'waiting' | 'expired' | 'overdue'
> {
  readonly exists: boolean;
  /** The weighted waiter the collected tokens are for (its registration's id) and the permits it asks for. */
  readonly collector: { readonly waiterId: string; readonly permits: number } | null;
  /** Redis' clock when it was read. */
  readonly now: string;
  /** Longest-held first. */
  readonly holders: readonly HolderJson[];
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
    collected: status.collected,
    collector: status.collector,
    waiting: status.waiting,
    ...leaseCounts(status.holders),
    holders: status.holders.map(holderJson),
  };
}

export function holderJson(h: Holder): HolderJson {
  return {
    token: h.token,
    since: h.since?.toISOString() ?? null,
    heldMs: h.heldMs,
    refreshedAt: h.refreshedAt?.toISOString() ?? null,
    refreshedMs: h.refreshedMs,
    leaseMs: h.leaseMs ?? null,
    leaseEndsAt: h.leaseEndsAt?.toISOString() ?? null,
    leaseLeftMs: h.leaseLeftMs,
    expired: h.expired,
    overdue: h.overdue,
    fence: h.fence ?? null,
    owner: h.owner ?? null,
    grantId: h.grantId ?? null,
  };
}

export function unreadableJson(semaphore: UnreadableSemaphore): UnreadableJson {
  return { name: semaphore.name, error: semaphore.error };
}
