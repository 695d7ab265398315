/** A holder's lease as operators see it: when it ends, whether it is over (a dead holder) or its renewals are overdue. */
import type { HolderInfo } from '../redis/status';

/** What an operator's view adds to a holder: its lease, judged on Redis' clock. */
export interface HolderLease {
  /** When the lease ends (`refreshedAt` + `leaseMs`); `null` for no lease (0) or a Ruby holder, which records none. */
  readonly leaseEndsAt: Date | null;
  /** Milliseconds until then on Redis' clock, negative once over (expired for that long); `null` as for `leaseEndsAt`. */
  readonly leaseLeftMs: number | null;
  /**
   * The lease is over by Redis' clock (reclaim's rule: longer since the last refresh than the
   * lease): its holder did not refresh in time, a dead or cut-off process. Its token goes back at
   * the next reclaim (`release-stale`, a watchdog, a `lock` that finds none free).
   */
  readonly expired: boolean;
  /**
   * Not expired, but more than one renewal interval late: `autoRefresh` renews every third of the
   * lease, so a lease left unrenewed for over two thirds of it belongs to a holder that is hung,
   * starved or cut off, and it ends soon unless the holder refreshes.
   */
  readonly overdue: boolean;
}

/** A holder with its lease judged: what `status`, `list`, the dashboard and `/metrics` show. */
export type Holder = HolderInfo & HolderLease;

/** The share of a lease after which a renewal is overdue: due at a third, one more third late. */
const OVERDUE_SHARE = 2 / 3;

/** `holder` with its lease judged at `now` (Redis' clock, from the same snapshot). */
export function withLease(holder: HolderInfo, now: Date): Holder {
  const { leaseMs, refreshedAt, refreshedMs } = holder;
  if (leaseMs === undefined || leaseMs <= 0 || refreshedAt === null) {
    return { ...holder, leaseEndsAt: null, leaseLeftMs: null, expired: false, overdue: false };
  }
  const end = refreshedAt.getTime() + leaseMs;
  const expired = now.getTime() > end;
  return {
    ...holder,
    leaseEndsAt: new Date(end),
    leaseLeftMs: end - now.getTime(),
    expired,
    overdue: !expired && (refreshedMs ?? 0) > OVERDUE_SHARE * leaseMs,
  };
}

/** How many of `holders` have an expired lease, and how many are overdue. */
export function leaseCounts(holders: readonly HolderLease[]): { expired: number; overdue: number } {
  let expired = 0;
  let overdue = 0;
  for (const holder of holders) {
    if (holder.expired) expired++;
    else if (holder.overdue) overdue++;
  }
  return { expired, overdue };
}
