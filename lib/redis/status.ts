/**
 * The state `status.lua` reads in one snapshot, shared by `Semaphore.holders()` /
 * `Semaphore.waiting()` and the operator's tools (lib/admin).
 */

import type { StatusReply } from './operator-commands';

/** A held token as `holders()` reports it. */
export interface HolderInfo {
  /** The held token. */
  readonly token: string;
  /** When it was acquired, or `null` if the stamp cannot be read. */
  readonly since: Date | null;
  /** Milliseconds since then, on Redis' clock. */
  readonly heldMs: number | null;
  /**
   * When its lease last started: the acquisition or the last refresh (GRABBED's stamp, which is what
   * a reclaimer compares with the lease). A Ruby holder's is its acquisition.
   */
  readonly refreshedAt: Date | null;
  /** Milliseconds since `refreshedAt`, on Redis' clock: a hung holder that still refreshes shows a long `heldMs` and a short this. */
  readonly refreshedMs: number | null;
  /** The holder's lease (its `staleClientTimeout`) in ms, 0 for none; `undefined` for a Ruby holder. */
  readonly leaseMs: number | undefined;
  /** The acquisition's fencing number; `undefined` for a holder this library did not record (the Ruby gem). */
  readonly fence: number | undefined;
  /** The holder's `owner` label; `undefined` as for `fence`. */
  readonly owner: string | undefined;
  /** The acquisition's grant id; `undefined` as for `fence`. */
  readonly grantId: string | undefined;
}

/** `status.lua`'s reply, decoded. */
export interface StatusSnapshot {
  readonly exists: boolean;
  /** Redis' clock, in seconds. */
  readonly nowSeconds: number;
  readonly available: number;
  /** Registered waiters whose lease runs. */
  readonly waiting: number;
  /** Their grant ids, earliest expiry first (as many as the script was asked for). */
  readonly waiterIds: readonly string[];
  /** Held tokens, longest-held first. */
  readonly holders: readonly HolderInfo[];
  /** Tokens set aside for weighted waiters: neither free nor held yet. */
  readonly collected: number;
  /** The weighted waiter collecting tokens (its registration) and the permits it asks for, or null. */
  readonly collector: { readonly waiterId: string; readonly permits: number } | null;
}

/** `status.lua`'s reply (see lib/redis/operator-commands.ts), with each holder read. */
export function snapshotOf(reply: StatusReply): StatusSnapshot {
  const { exists, now, available, waiting, waiterIds, held, collected, collector } = reply;
  const nowSeconds = Number(now);
  const holders = held.map(({ token, record }) => decodeHolder(token, record, nowSeconds));
  // Oldest first; grants of one millisecond in the order they were made (their fencing numbers).
  holders.sort((a, b) => (a.since?.getTime() ?? 0) - (b.since?.getTime() ?? 0) || (a.fence ?? 0) - (b.fence ?? 0));
  return { exists, nowSeconds, available, waiting, waiterIds, holders, collected, collector };
}

/**
 * A GRABBED value's parts (see includes/grant.lua):
 * `"<stamp> <grant id> <fence> <lease ms> <acquired stamp> <owner label>"`, the label free text and
 * last; or the first four fields alone, as versions before the single record wrote them.
 */
const GRANT_RECORD = /^(\S+) (\S+) (\d+) (\d+)(?: (\S+) ([\s\S]*))?$/;

/** The grant id a GRABBED value names, or `undefined` (a Ruby holder's plain stamp, or nothing). */
export function grantIdOf(record: string | null | undefined): string | undefined {
  return record ? GRANT_RECORD.exec(record)?.[2] : undefined;
}

/** Decimal seconds as a Date, or null when unreadable. */
function stampToDate(stamp: string | undefined): Date | null {
  const seconds = Number(stamp);
  return stamp !== undefined && stamp !== '' && Number.isFinite(seconds) ? new Date(seconds * 1000) : null;
}

/**
 * A GRABBED entry. A four-field record (written by an earlier version, whose acquisition time and
 * label were in OWNERS, no longer read) counts as acquired at its stamp, with the label ''.
 */
function decodeHolder(token: string, record: string, nowSeconds: number): HolderInfo {
  const parts = GRANT_RECORD.exec(record);
  if (parts === null) {
    // A holder this library did not record (the Ruby gem): a plain stamp.
    const since = stampToDate(record);
    const held = heldMs(since, nowSeconds);
    return {
      token,
      since,
      heldMs: held,
      refreshedAt: since,
      refreshedMs: held,
      leaseMs: undefined,
      fence: undefined,
      owner: undefined,
      grantId: undefined,
    };
  }
  const [, stamp, grantId, fence, lease, acquired, label = ''] = parts;
  const refreshedAt = stampToDate(stamp);
  const since = stampToDate(acquired) ?? refreshedAt;
  return {
    token,
    since,
    heldMs: heldMs(since, nowSeconds),
    refreshedAt,
    refreshedMs: heldMs(refreshedAt, nowSeconds),
    leaseMs: Number(lease),
    fence: Number(fence),
    owner: label,
    grantId,
  };
}

function heldMs(since: Date | null, nowSeconds: number): number | null {
  return since === null ? null : Math.max(0, Math.round(nowSeconds * 1000 - since.getTime()));
}
