// One builder per script a semaphore runs: its KEYS and ARGV from the semaphore's settings, and its reply as named fields.
import { describe } from '../util/describe';
import { localTimeArgument, toExpireArgument, toSeconds } from '../util/durations';
import { MisattributedReplyError } from './client/classify';
import type { SemaphoreKeys } from './keys';
import { scripts, type Script } from './registry';
import {
  CREATE_RESULT,
  GRANT_RESULT,
  EXISTS,
  checked,
  tokenField,
  integerField,
  fieldsOf,
  NUMBER,
  CLAIM_FLAGS,
  RELEASE_FIELD,
  PARKED_COUNT,
  expiredAndToken,
  weightedTokens,
} from './replies';
import { scriptCall, type ScriptCall } from './send';

/** What a semaphore's scripts read of it: its keys and the settings they record or apply. */
export interface ScriptTarget {
  readonly keys: SemaphoreKeys;
  readonly resources: number;
  readonly options: {
    /** Recorded with each grant as its lease (null: never stale); also Ruby holders' stale timeout. */
    readonly staleClientTimeout: number | null;
    readonly expiration: number | null;
    readonly useLocalTime: boolean;
    readonly owner: string;
  };
  /** Whether the server has the function library (lib/redis/functions.ts): calls of its scripts go by FCALL. */
  readonly functions?: boolean;
}

// ---- Arguments ----

/** The caller's clock for GRABBED stamps ('' for Redis TIME). */
const now = (t: ScriptTarget) => localTimeArgument(t.options.useLocalTime);
/** The lease recorded with a grant, in whole ms ('0': never stale). */
const lease = (t: ScriptTarget) => {
  const stale = t.options.staleClientTimeout;
  return stale === null ? '0' : String(Math.ceil(stale));
};
const expiration = (t: ScriptTarget) => toExpireArgument(t.options.expiration);

/** One text of `settings`, and what it was made from. */
interface Settings {
  readonly resources: number;
  readonly lifetimeMs: number | null;
  readonly keep: boolean;
  readonly permits: number;
  readonly text: string;
}
/** The texts `settings` made for each target (a few: tryLock's, and claim's for a slice and a last slice, per weight). */
const settingsMade = new WeakMap<ScriptTarget, Settings[]>();

/**
 * What tryLock and claim read of the caller as one argument (includes/settings.lua): "<lease ms>
 * <resources> <registration lifetime s or -> <keep 1 or 0> <permits> <expiration ms or -> <owner
 * label>", made once per target and variant.
 */
function settings(t: ScriptTarget, lifetimeMs: number | null, keep: boolean, permits: number): string {
  let made = settingsMade.get(t);
  if (made === undefined) settingsMade.set(t, (made = []));
  for (const s of made) {
    if (s.lifetimeMs === lifetimeMs && s.keep === keep && s.permits === permits && s.resources === t.resources)
      return s.text;
  }
  const text = [
    lease(t),
    String(t.resources),
    lifetimeMs === null ? '-' : toSeconds(lifetimeMs),
    keep ? '1' : '0',
    String(permits),
    t.options.expiration === null ? '-' : expiration(t),
    t.options.owner,
  ].join(' ');
  if (made.length >= 8) made.shift();
  made.push({ resources: t.resources, lifetimeMs, keep, permits, text });
  return text;
}
/** The keys a hot-path call passes: on a single Redis AVAILABLE alone (see `shortKeys`); on Cluster all twelve. */
const live = (t: ScriptTarget) => t.keys.shortKeys ?? t.keys.scriptKeys;
/** `live`, and on Cluster the inbox of `registrationId` after them (on a single Redis the script names it). */
const liveWithInbox = (t: ScriptTarget, registrationId: string) =>
  t.keys.shortKeys ?? [...live(t), t.keys.inbox(registrationId)];

/**
 * `args` followed by `optional`, less the trailing '' among them: the local time and expiration
 * arguments, '' in the usual case (Redis TIME, no expiration), which the scripts read when absent.
 */
function withOptionalTail(args: string[], ...optional: string[]): string[] {
  let end = optional.length;
  while (end > 0 && optional[end - 1] === '') end--;
  for (let i = 0; i < end; i++) args.push(optional[i]!);
  return args;
}

// ---- Taking a token ----

export interface TryLockReply {
  readonly token: string | null;
  /** After a weighted miss: the tokens that were free wait for the caller (its first slice sends prepareWait). */
  readonly parked?: boolean;
  /** A weighted grant's tokens, all of them (`token` is the first); absent for a grant of one. */
  readonly tokens?: readonly string[];
  readonly fence: number;
  /** Waiter registrations past their expiry (reported on a miss). */
  readonly expired: string[];
}

/**
 * tryLock.lua for `permits` tokens. `registrationLifetimeMs`: registers the caller on a miss for that
 * long; null not to (lock(0)).
 */
export function tryLock(
  t: ScriptTarget,
  grantId: string,
  registrationLifetimeMs: number | null,
  permits = 1,
): ScriptCall<TryLockReply> {
  return scriptCall(
    scripts.tryLock,
    live(t),
    withOptionalTail([grantId, settings(t, registrationLifetimeMs, false, permits)], now(t)),
    (raw) => {
      const s = scripts.tryLock;
      if (permits === 1) {
        const { fields, rest } = fieldsOf(s, raw, grantId, [NUMBER, NUMBER]);
        const fence = Number(fields[0]);
        return { fence, ...expiredAndToken(s, raw, fields[1]!, rest, fence !== 0) };
      }
      const { fields, rest } = fieldsOf(s, raw, grantId, [NUMBER, PARKED_COUNT]);
      const fence = Number(fields[0]);
      const parked = fields[1]![0] === 'C';
      const count = parked ? fields[1]!.slice(1) : fields[1]!;
      return { parked, ...weighted(s, raw, { fence, ...expiredAndToken(s, raw, count, rest, fence !== 0) }, permits) };
    },
    t.functions,
  );
}

/** `reply` with the tokens of a weighted grant read from its token field. */
function weighted<R extends { readonly token: string | null }>(
  s: Script,
  raw: unknown,
  reply: R,
  permits: number,
): R & { tokens?: readonly string[] } {
  if (reply.token === null) return reply;
  const tokens = weightedTokens(s, raw, reply.token, permits);
  return { ...reply, token: tokens[0]!, tokens };
}

/**
 * prepareWait.lua: registers waiter `registrationId` for `registrationLifetimeMs`. Always EVAL, so no
 * NOSCRIPT leaves the BLMOVE behind it unregistered; its reply (0 abandoned, 1 registered) is not read:
 * the claim behind it settles the slice.
 */
export function prepareWait(
  t: ScriptTarget,
  registrationId: string,
  registrationLifetimeMs: number,
  permits = 1,
): ScriptCall<unknown> {
  const args = [
    registrationId,
    expiration(t),
    toSeconds(registrationLifetimeMs),
    String(t.resources),
    lease(t),
    now(t),
  ];
  if (permits > 1) args.push(String(permits));
  return scriptCall(scripts.prepareWait, live(t), args, undefined, false, 'text');
}

export interface ClaimReply {
  /** The token this grant now holds, or null (the slice ended empty, or the token went back). */
  readonly token: string | null;
  /** A weighted grant's tokens, all of them (`token` is the first); absent for a grant of one. */
  readonly tokens?: readonly string[];
  /** A weighted wait's registration collects the tokens freed (its next slice blocks on PENDING). */
  readonly collecting: boolean;
  /**
   * Whether the registration lasts: into the next slice (no grant), or after a grant into the
   * caller's next wait (an advance registration: no token was left free and `keep` was asked).
   */
  readonly renewed: boolean;
  readonly fence: number;
  /** After a grant: whether other registrations remain while no token is free (others wait). */
  readonly others: boolean;
  readonly expired: string[];
}

/**
 * claim.lua, right behind the BLMOVE into `registrationId`'s inbox; a token it finds is recorded as
 * grant `grantId`. `nextLifetimeMs`: how long the registration lasts into the next slice, or null on
 * the last one; `keep`: after a grant while others wait (no token free, other registrations), the
 * registration stays for the caller's next wait. `pipelined`: sent right behind BLMOVE, by function
 * or SHA1 alone ('stored': a NOSCRIPT is settled by recover, not by a round trip more on the hand-off).
 * `permits`: how many tokens the grant takes (claim.lua collects them, includes/weighted.lua).
 */
export function claim(
  t: ScriptTarget,
  registrationId: string,
  {
    grantId,
    nextLifetimeMs,
    keep,
    pipelined = false,
    permits = 1,
  }: { grantId: string; nextLifetimeMs: number | null; keep: boolean; pipelined?: boolean; permits?: number },
): ScriptCall<ClaimReply> {
  return scriptCall(
    scripts.claim,
    liveWithInbox(t, registrationId),
    withOptionalTail([registrationId, grantId, settings(t, nextLifetimeMs, keep, permits)], now(t)),
    (raw) => {
      const s = scripts.claim;
      const { fields, rest } = fieldsOf(s, raw, grantId, [NUMBER, CLAIM_FLAGS, NUMBER]);
      const [fence, flags, count] = fields as [string, string, string];
      const reply = {
        renewed: flags[0] === 'K',
        fence: Number(fence),
        others: flags[1] === 'W',
        collecting: flags[1] === 'C',
        ...expiredAndToken(s, raw, count, rest, fence !== '0'),
      };
      return permits === 1 ? reply : weighted(s, raw, reply, permits);
    },
    t.functions,
    pipelined ? 'stored' : undefined,
  );
}

export interface RecoverReply {
  readonly token: string;
  /** A weighted grant's tokens, all of them (`token` is the first); absent for a grant of one. */
  readonly tokens?: readonly string[];
  readonly fence: number;
  /** Ms since GRABBED stamped the grant (its lease's start). */
  readonly ageMs: number;
}

/**
 * recover.lua: adopts `grantId`'s grant, or claims the token in `registrationId`'s inbox as it, or
 * marks that registration abandoned for `abandonedMs` (null). A wait for `permits` > 1 tokens is
 * adopted only whole, and never claimed from its inbox (its partial collection goes back).
 */
export function recover(
  t: ScriptTarget,
  grantId: string,
  registrationId: string,
  abandonedMs: number,
  permits = 1,
): ScriptCall<RecoverReply | null> {
  const args = [grantId, now(t), expiration(t), toSeconds(abandonedMs), t.options.owner, lease(t), registrationId];
  if (permits > 1) args.push(String(permits));
  return scriptCall(scripts.recover, liveWithInbox(t, registrationId), args, (raw) => {
    const s = scripts.recover;
    // Abandoned: { nil, grant id }; adopted or claimed: { token, fence, age, grant id, other tokens… }.
    if (Array.isArray(raw) && raw.length === 2 && raw[0] === null) {
      checked(s, raw, grantId, 1, 2);
      return null;
    }
    const reply = checked(s, raw, grantId, 3, 3 + permits);
    const recovered = {
      token: tokenField(s, reply, 0, false)!,
      fence: integerField(s, reply, 1),
      ageMs: integerField(s, reply, 2),
    };
    if (permits === 1) return recovered;
    const tokens = [recovered.token, ...reply.slice(4).map((_, i) => tokenField(s, reply, 4 + i, false)!)];
    return { ...recovered, tokens };
  });
}

// ---- Holding and giving back ----

export interface ReleaseReply {
  /** Whether this call ended the grant (false: it no longer held the token). */
  readonly ended: boolean;
  /** The length of AVAILABLE afterwards. */
  readonly available: number;
}

/**
 * release.lua: ends grant `grantId` of `token` (and of a weighted grant's `others`), putting the
 * tokens back (unlock) or not (consume).
 */
export function release(
  t: ScriptTarget,
  token: string,
  grantId: string,
  putBack: boolean,
  others?: readonly string[],
): ScriptCall<ReleaseReply> {
  // With `expiration`, every key (on a single Redis too): touch_expiry sets them all.
  const keys = t.options.expiration === null ? live(t) : t.keys.scriptKeys;
  const args =
    others !== undefined
      ? [token, grantId, putBack ? '1' : '0', expiration(t), ...others]
      : putBack
        ? withOptionalTail([token, grantId], '', expiration(t))
        : [token, grantId, '0', expiration(t)];
  return scriptCall(
    scripts.release,
    keys,
    args,
    (raw) => {
      const s = scripts.release;
      const { fields, rest } = fieldsOf(s, raw, grantId, [RELEASE_FIELD]);
      if (rest !== null) throw new MisattributedReplyError(s.name, describe(raw));
      const field = fields[0]!;
      return { ended: field[0] === '+', available: Number(field.slice(1)) };
    },
    t.functions,
  );
}

/**
 * refresh.lua: restamps grant `grantId` of `token` (and of a weighted grant's `others`); resolves
 * whether it still held it (them all). Touches AVAILABLE, GRABBED and LEASES alone.
 */
export function refresh(
  t: ScriptTarget,
  token: string,
  grantId: string,
  others?: readonly string[],
): ScriptCall<boolean> {
  return scriptCall(
    scripts.refresh,
    t.keys.shortKeys ?? t.keys.holderKeys,
    others !== undefined ? [token, grantId, now(t), ...others] : [token, grantId, now(t)],
    (raw) => {
      const s = scripts.refresh;
      return integerField(s, checked(s, raw, grantId, 1, 2), 0) === GRANT_RESULT.DONE;
    },
    t.functions,
  );
}

/** signal.lua: pushes `token`; resolves the new length of AVAILABLE. */
export function signal(t: ScriptTarget, token: string): ScriptCall<number> {
  return scriptCall(
    scripts.signal,
    t.keys.scriptKeys,
    [token, String(t.resources), expiration(t)],
    (reply) => reply as number,
  );
}

// ---- Reclaiming ----

/** releaseStale.lua: the tokens it returned, and the waiter registrations past their expiry. */
export function releaseStale(t: ScriptTarget): ScriptCall<{ reclaimed: number; expired: string[] }> {
  return scriptCall(scripts.releaseStale, t.keys.scriptKeys, [now(t), lease(t), expiration(t)], (reply) => {
    const [reclaimed, ...expired] = reply as [number, ...string[]];
    return { reclaimed, expired };
  });
}

/** reapWaiters.lua: returns the tokens of expired (or abandoned, `~<id>`) registrations' inboxes; resolves how many. */
export function reapWaiters(t: ScriptTarget, registrations: readonly string[]): ScriptCall<number> {
  return scriptCall(
    scripts.reapWaiters,
    [...t.keys.scriptKeys, ...registrations.map(t.keys.inboxOfRegistration)],
    [expiration(t), ...registrations],
    (reply) => reply as number,
  );
}

// ---- Creating and reading ----

/** create.lua: one batch of a creation (a large one takes several). */
export function create(t: ScriptTarget): ScriptCall<'existed' | 'created' | 'batches-remain'> {
  return scriptCall(scripts.create, t.keys.scriptKeys, [String(t.resources), expiration(t)], (reply) =>
    reply === CREATE_RESULT.BATCHES_REMAIN ? 'batches-remain' : reply === CREATE_RESULT.CREATED ? 'created' : 'existed',
  );
}

export interface InspectReply {
  readonly exists: boolean;
  readonly available: number;
  /** With `tokens`: the free tokens, the held ones, and those set aside for weighted waiters; otherwise empty. */
  readonly availableTokens: string[];
  readonly heldTokens: string[];
  readonly collectedTokens: string[];
}

/** inspect.lua: counts, and with `tokens` the token lists. */
export function inspect(t: ScriptTarget, tokens: boolean): ScriptCall<InspectReply> {
  return scriptCall(scripts.inspect, t.keys.scriptKeys, [tokens ? '1' : '0'], (reply) => {
    const [exists, available, availableTokens = [], heldTokens = [], collectedTokens = []] = reply as [
      number,
      number,
      string[]?,
      string[]?,
      string[]?,
    ];
    return { exists: exists === EXISTS, available, availableTokens, heldTokens, collectedTokens };
  });
}
