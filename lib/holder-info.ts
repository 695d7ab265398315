/**
 * The state `status-7.lua` reads in one snapshot, shared by `Semaphore.holders()` /
 * `Semaphore.waiting()` and the operator's tools (lib/admin).
 */

/** A held token as `holders()` reports it. */
export interface HolderInfo {
  /** The held token. */
  readonly token: string;
  /** When it was taken or last refreshed (GRABBED), or `null` if the stamp cannot be read. */
  readonly since: Date | null;
  /** Milliseconds since then, on Redis' clock. */
  readonly heldMs: number | null;
  /** The acquisition's fencing number; `undefined` for a holder this library did not record (the Ruby gem). */
  readonly fence: number | undefined;
  /** The holder's `owner` label; `undefined` as for `fence`. */
  readonly owner: string | undefined;
  /** The acquisition's grant id; `undefined` as for `fence`. */
  readonly grantId: string | undefined;
}

/** `status-7.lua`'s reply, decoded. */
export interface StatusSnapshot {
  readonly exists: boolean;
  /** Redis' clock, in seconds. */
  readonly nowSeconds: number;
  readonly available: number;
  /** Registered waiters whose lease runs. */
  readonly waiting: number;
  /** Their grant ids, earliest lease first (as many as the script was asked for). */
  readonly waiterIds: readonly string[];
  /** Held tokens, longest-held first. */
  readonly holders: readonly HolderInfo[];
}

export function decodeStatus(reply: unknown): StatusSnapshot {
  const [exists, now, available, waiting, waiterIds, ...flat] = reply as [
    number,
    string,
    number,
    number,
    string[],
    ...Array<string | null>,
  ];
  const nowSeconds = Number(now);
  const holders: HolderInfo[] = [];
  for (let i = 0; i < flat.length; i += 3) {
    holders.push(decodeHolder(flat[i] as string, flat[i + 1] ?? null, flat[i + 2] ?? null, nowSeconds));
  }
  holders.sort((a, b) => (a.since?.getTime() ?? 0) - (b.since?.getTime() ?? 0));
  return { exists: exists === 1, nowSeconds, available, waiting, waiterIds, holders };
}

/** A GRABBED entry and its OWNERS value (`"<grant id> <fence> <owner label>"`, see includes/grant.lua). */
function decodeHolder(token: string, stamp: string | null, owner: string | null, nowSeconds: number): HolderInfo {
  const seconds = Number(stamp);
  const readable = stamp !== null && stamp !== '' && Number.isFinite(seconds);
  const [grantId, fence, ...label] = (owner ?? '').split(' ');
  const known = owner !== null;
  return {
    token,
    since: readable ? new Date(seconds * 1000) : null,
    heldMs: readable ? Math.max(0, Math.round((nowSeconds - seconds) * 1000)) : null,
    fence: known ? Number(fence) : undefined,
    owner: known ? label.join(' ') : undefined,
    grantId: known ? grantId : undefined,
  };
}
