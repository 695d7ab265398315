/**
 * The state `status-9.lua` reads in one snapshot, shared by `Semaphore.holders()` /
 * `Semaphore.waiting()` and the operator's tools (lib/admin).
 */

import type { StatusReply } from './scripts';

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

/** `status-9.lua`'s reply, decoded. */
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
}


/** `status-9.lua`'s reply (see lib/scripts.ts), with each holder read. */
export function snapshotOf({ exists, now, available, waiting, waiterIds, held }: StatusReply): StatusSnapshot {
  const nowSeconds = Number(now);
  const holders = held.map(({ token, record, owner }) => decodeHolder(token, record, owner, nowSeconds));
  holders.sort((a, b) => (a.since?.getTime() ?? 0) - (b.since?.getTime() ?? 0));
  return { exists, nowSeconds, available, waiting, waiterIds, holders };
}

/** A GRABBED value's parts (see includes/grant.lua): `"<stamp> <grant id> <fence> <lease ms>"`. */
const GRANT_RECORD = /^(\S+) (\S+) (\d+) (\d+)$/;

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
 * A GRABBED entry and its OWNERS value (`"<grant id> <fence> <acquired stamp> <owner label>"`, see
 * includes/grant.lua), which describes the grant only while the grant ids agree.
 */
function decodeHolder(token: string, record: string | null, owner: string | null, nowSeconds: number): HolderInfo {
  const parts = record === null ? null : GRANT_RECORD.exec(record);
  const [ownerGrant, , acquired, ...label] = (owner ?? '').split(' ');
  if (parts === null) {
    // A holder this library did not record (the Ruby gem): a plain stamp.
    const since = stampToDate(record ?? undefined);
    const held = heldMs(since, nowSeconds);
    return { token, since, heldMs: held, refreshedAt: since, refreshedMs: held, leaseMs: undefined, fence: undefined, owner: undefined, grantId: undefined };
  }
  const [, stamp, grantId, fence, lease] = parts;
  const refreshedAt = stampToDate(stamp);
  const since = ownerGrant === grantId ? stampToDate(acquired) ?? refreshedAt : refreshedAt;
  return {
    token,
    since,
    heldMs: heldMs(since, nowSeconds),
    refreshedAt,
    refreshedMs: heldMs(refreshedAt, nowSeconds),
    leaseMs: Number(lease),
    fence: Number(fence),
    owner: ownerGrant === grantId ? label.join(' ') : '',
    grantId,
  };
}

function heldMs(since: Date | null, nowSeconds: number): number | null {
  return since === null ? null : Math.max(0, Math.round(nowSeconds * 1000 - since.getTime()));
}
