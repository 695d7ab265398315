// The layer between TypeScript and Lua: loads lib/redis/scripts/*.lua once, sends a script (FCALL or EVALSHA, EVAL when the server lacks it), and for each script builds its KEYS and ARGV and names its reply.
import type { Connection } from './client/connection';
import { describe } from '../util/describe';
import { localTimeArgument, toExpireArgument, toSeconds } from '../util/durations';
import type { SemaphoreKeys } from './keys';
import { MisattributedReplyError, replyErrorCode } from './client/classify';
import { functionLibrary, mayFcall, refusedBeforeRunning } from './functions';
import { loadScript, type Script } from './lua-source';

export { withoutUnusedFunctions, type Script } from './lua-source';

export const scripts = {
  tryLock: loadScript('tryLock-9.lua'),
  prepareWait: loadScript('prepareWait-9.lua'),
  claim: loadScript('claim-10.lua'),
  recover: loadScript('recover-10.lua'),
  reapWaiters: loadScript('reapWaiters.lua'),
  release: loadScript('release-9.lua'),
  refresh: loadScript('refresh-9.lua'),
  signal: loadScript('signal-9.lua'),
  releaseStale: loadScript('releaseStale-9.lua'),
  create: loadScript('create-9.lua'),
  inspect: loadScript('inspect-9.lua'),
  // Operators' scripts (lib/admin/): the CLI and the dashboard.
  status: loadScript('status-9.lua'),
  forceRelease: loadScript('forceRelease-9.lua'),
  resize: loadScript('resize-9.lua'),
} as const;

// ---- Sending a script ----

/** One call of a script, built by one of the functions below: its KEYS and ARGV, and how its reply reads. */
export interface ScriptCall<R> {
  readonly script: Script;
  readonly keys: readonly string[];
  readonly args: readonly string[];
  /** The reply as named fields (a function of its own, so a `then` can take it as it is). */
  readonly decode: (reply: unknown) => R;
  /** Its function in the library (lib/redis/functions.ts), when the server has the library; else undefined (EVALSHA). */
  readonly fn: string | undefined;
}

/** `EVAL` with the script's text: never fails with NOSCRIPT (used where a failed step must not be skipped). */
export function evalArguments(script: Script, keys: readonly string[], args: readonly string[]): string[] {
  return ['EVAL', script.source, String(keys.length), ...keys, ...args];
}

/** `command` sent on `client`, as a promise also when the client throws at once (node-redis v5+ when closed). */
function send(client: Connection, command: string[]): Promise<unknown> {
  try {
    return client.sendCommand(command);
  } catch (error) {
    return Promise.reject(error);
  }
}

/**
 * Whether `call`, refused with `error`, goes again as EVAL with its text: the server lacks the script
 * (NOSCRIPT), or refused the FCALL before running it (see `refusedFunction`).
 */
export function needsText(client: Connection, call: ScriptCall<unknown>, error: unknown): boolean {
  return replyErrorCode(error) === 'NOSCRIPT' || refusedFunction(client, call, error);
}

/** Whether `call` went by FCALL and Redis refused it before running any of it, where EVAL runs (see `refusedBeforeRunning`). */
function refusedFunction(client: Connection, call: ScriptCall<unknown>, error: unknown): boolean {
  return call.fn !== undefined && refusedBeforeRunning(client, error);
}

/** Runs a script by SHA1, falling back to EVAL (which also caches it) when Redis answers NOSCRIPT. */
export function runScript(
  client: Connection,
  script: Script,
  keys: readonly string[],
  args: readonly string[],
): Promise<unknown> {
  return send(client, ['EVALSHA', script.sha1, String(keys.length), ...keys, ...args]).catch((error: unknown) => {
    if (replyErrorCode(error) === 'NOSCRIPT') return send(client, evalArguments(script, keys, args));
    throw error;
  });
}

/**
 * Runs `call` in its stored form (see `storedCommand`), as EVAL when that is refused (see
 * `needsText`), and resolves its named reply: every release and refresh comes this way.
 */
export function callScript<R>(client: Connection, call: ScriptCall<R>): Promise<R> {
  return send(client, storedCommand(call, client)).then(call.decode, (error: unknown) => {
    if (needsText(client, call, error)) return send(client, evalCommand(call)).then(call.decode);
    throw error;
  });
}

/**
 * Runs `call` in its stored form, with no EVAL fallback on NOSCRIPT (a blocking connection's claim:
 * its caller recovers instead), and resolves its named reply. An FCALL Redis refused before running
 * it goes again as EVAL, which runs where the script would have (see `refusedFunction`).
 */
export function callStored<R>(client: Connection, call: ScriptCall<R>): Promise<R> {
  return send(client, storedCommand(call, client)).then(call.decode, (error: unknown) => {
    if (refusedFunction(client, call, error)) return send(client, evalCommand(call)).then(call.decode);
    throw error;
  });
}

/**
 * `call` without its text: `FCALL` of its function where the server has the library (and `client`
 * may call it), else `EVALSHA`. For a pipeline that must not spend a round trip on a fallback.
 */
export function storedCommand(call: ScriptCall<unknown>, client?: Connection): string[] {
  return call.fn === undefined || (client !== undefined && !mayFcall(client))
    ? ['EVALSHA', call.script.sha1, String(call.keys.length), ...call.keys, ...call.args]
    : ['FCALL', call.fn, String(call.keys.length), ...call.keys, ...call.args];
}

/** `call` as an `EVAL` command (see `evalArguments`). */
export function evalCommand(call: ScriptCall<unknown>): string[] {
  return evalArguments(call.script, call.keys, call.args);
}

/** `SCRIPT LOAD` of `script`, so a connection can call it by SHA1 alone. */
export function scriptLoadCommand(script: Script): string[] {
  return ['SCRIPT', 'LOAD', script.source];
}

/** A call of `script`; by its function in the library when `target` says the server has it (the scripts of lib/redis/functions.ts only). */
function define<R>(
  script: Script,
  keys: readonly string[],
  args: readonly string[],
  decode: (reply: unknown) => R,
  target?: ScriptTarget,
): ScriptCall<R> {
  if (script.keyCount !== null && keys.length > script.keyCount) {
    throw new Error(`${script.name} takes at most ${script.keyCount} keys, got ${keys.length}`);
  }
  return {
    script,
    keys,
    args,
    decode,
    fn: target?.functions === true ? functionLibrary.functions.get(script.name) : undefined,
  };
}

// ---- What the scripts answer (see each script's header) ----

/** create-9.lua (includes/ensure.lua). */
export const CREATE_RESULT = { EXISTED: 0, CREATED: 1, BATCHES_REMAIN: 2 } as const;
/** prepareWait-9.lua. */
export const PREPARE_WAIT_RESULT = { ABANDONED: 0, REGISTERED: 1 } as const;
/** release-9.lua's and refresh-9.lua's first field. */
export const GRANT_RESULT = { NOT_HELD: 0, DONE: 1 } as const;
/** claim-10.lua's second field: whether the registration lasts into the next slice. */
export const CLAIM_REGISTRATION = { ENDED: 0, RENEWED: 1 } as const;
/** forceRelease-9.lua, when it released nothing (otherwise: the new length of AVAILABLE). */
export const FORCE_RELEASE_RESULT = { NOT_HELD: -1, OTHER_GRANT: -2 } as const;
/** resize-9.lua's first field. */
export const RESIZE_STATUS = { BELOW_HELD: -1, MISSING: 0, DONE: 1 } as const;
/** The `exists` field of inspect-9.lua and status-9.lua. */
const EXISTS = 1;

// ---- Replies that name the call they answer ----

/**
 * The reply of `script` for grant `grantId`, checked: an array of `length` fields (at least, with
 * `rest`) whose field `at` is the grant id. Anything else answers another command (see
 * `MisattributedReplyError`): the call's outcome is unknown, as after a lost reply.
 */
function checked(script: Script, reply: unknown, grantId: string, at: number, length: number, rest = false): unknown[] {
  if (!Array.isArray(reply) || (rest ? reply.length < length : reply.length !== length) || reply[at] !== grantId) {
    throw new MisattributedReplyError(script.name, describe(reply));
  }
  return reply as unknown[];
}

/** `value` if it is a token (a string), or null for nil; anything else: the reply answers another command. */
function tokenField(script: Script, reply: unknown[], index: number, nullable: boolean): string | null {
  const value = reply[index];
  if (typeof value === 'string' || (nullable && value === null)) return value;
  throw new MisattributedReplyError(script.name, describe(reply));
}

/** `reply[index]` if it is an integer; anything else: the reply answers another command. */
function integerField(script: Script, reply: unknown[], index: number): number {
  const value = reply[index];
  if (typeof value === 'number' && Number.isInteger(value)) return value;
  throw new MisattributedReplyError(script.name, describe(reply));
}

/** The expired registrations from `from` on (grant ids: strings). */
function idsFrom(script: Script, reply: unknown[], from: number): string[] {
  const ids = reply.slice(from);
  if (ids.every((id) => typeof id === 'string')) return ids as string[];
  throw new MisattributedReplyError(script.name, describe(reply));
}

// ---- One function per script ----

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

/** The caller's clock for GRABBED stamps ('' for Redis TIME). */
const now = (t: ScriptTarget) => localTimeArgument(t.options.useLocalTime);
/** The lease recorded with a grant, in whole ms ('0': never stale). */
const lease = (t: ScriptTarget) => {
  const stale = t.options.staleClientTimeout;
  return stale === null ? '0' : String(Math.ceil(stale));
};
const expiration = (t: ScriptTarget) => toExpireArgument(t.options.expiration);
/**
 * The keys a hot-path call passes: on a single Redis, AVAILABLE alone (see `shortKeys`); on Cluster,
 * without `expiration` the eight a script touches (OWNERS, last, is only touched by touch_expiry),
 * with it all nine. Every key costs to send and to run.
 */
const live = (t: ScriptTarget) =>
  t.keys.shortKeys ?? (t.options.expiration === null ? t.keys.liveKeys : t.keys.scriptKeys);
/** What release and refresh touch without `expiration`: AVAILABLE, GRABBED and LEASES (AVAILABLE alone on a single Redis). */
const holder = (t: ScriptTarget) => t.keys.shortKeys ?? t.keys.holderKeys;
/** `live`, and on Cluster the inbox of `registrationId` after them (on a single Redis the script names it). */
const liveWithInbox = (t: ScriptTarget, registrationId: string) =>
  t.keys.shortKeys ?? [...live(t), t.keys.inbox(registrationId)];

/**
 * `args` followed by `optional`, less the trailing '' among them: the local time and expiration
 * arguments, which are '' in the usual case (Redis TIME, no expiration). The scripts read an absent
 * argument as '', and each argument costs Redis about 1k instructions to pass.
 */
function withOptionalTail(args: string[], ...optional: string[]): string[] {
  let end = optional.length;
  while (end > 0 && optional[end - 1] === '') end--;
  for (let i = 0; i < end; i++) args.push(optional[i]!);
  return args;
}

export interface TryLockReply {
  readonly token: string | null;
  readonly fence: number;
  /** Waiter registrations past their expiry (reported on a miss). */
  readonly expired: string[];
}

/** tryLock-9.lua. `registrationLifetimeMs`: registers the caller on a miss for that long; null not to (lock(0)). */
export function tryLock(
  t: ScriptTarget,
  grantId: string,
  registrationLifetimeMs: number | null,
): ScriptCall<TryLockReply> {
  const registration = registrationLifetimeMs === null ? '' : toSeconds(registrationLifetimeMs);
  return define(
    scripts.tryLock,
    live(t),
    withOptionalTail([String(t.resources), grantId, lease(t), registration, t.options.owner], now(t), expiration(t)),
    (raw) => {
      const s = scripts.tryLock;
      const reply = checked(s, raw, grantId, 2, 3, true);
      return { token: tokenField(s, reply, 0, true), fence: integerField(s, reply, 1), expired: idsFrom(s, reply, 3) };
    },
    t,
  );
}

/** prepareWait-9.lua: registers waiter `grantId` for `registrationLifetimeMs`. */
export function prepareWait(
  t: ScriptTarget,
  grantId: string,
  registrationLifetimeMs: number,
): ScriptCall<{ registered: boolean }> {
  return define(
    scripts.prepareWait,
    live(t),
    [grantId, expiration(t), toSeconds(registrationLifetimeMs), String(t.resources), lease(t), now(t)],
    (reply) => ({ registered: reply === PREPARE_WAIT_RESULT.REGISTERED }),
  );
}

export interface ClaimReply {
  /** The token this grant now holds, or null (the slice ended empty, or the token went back). */
  readonly token: string | null;
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
 * claim-10.lua, right behind the BLMOVE into `registrationId`'s inbox; a token it finds is recorded
 * as grant `grantId`. `nextLifetimeMs`: how long the registration lasts into the next slice, or null
 * on the last one; `keep`: after a grant while others wait (no token free, other registrations), the
 * registration stays for the caller's next wait.
 */
export function claim(
  t: ScriptTarget,
  registrationId: string,
  { grantId, nextLifetimeMs, keep }: { grantId: string; nextLifetimeMs: number | null; keep: boolean },
): ScriptCall<ClaimReply> {
  return define(
    scripts.claim,
    liveWithInbox(t, registrationId),
    withOptionalTail(
      [
        registrationId,
        String(t.resources),
        lease(t),
        nextLifetimeMs === null ? '' : toSeconds(nextLifetimeMs),
        t.options.owner,
        grantId,
        keep ? '1' : '',
      ],
      now(t),
      expiration(t),
    ),
    (raw) => {
      const s = scripts.claim;
      const reply = checked(s, raw, grantId, 4, 5, true);
      return {
        token: tokenField(s, reply, 0, true),
        renewed: integerField(s, reply, 1) === CLAIM_REGISTRATION.RENEWED,
        fence: integerField(s, reply, 2),
        others: integerField(s, reply, 3) > 0,
        expired: idsFrom(s, reply, 5),
      };
    },
    t,
  );
}

export interface RecoverReply {
  readonly token: string;
  readonly fence: number;
  /** Ms since GRABBED stamped the grant (its lease's start). */
  readonly ageMs: number;
}

/**
 * recover-10.lua: adopts `grantId`'s grant, or claims the token in `registrationId`'s inbox as it, or
 * marks that registration abandoned for `abandonedMs` (null).
 */
export function recover(
  t: ScriptTarget,
  grantId: string,
  registrationId: string,
  abandonedMs: number,
): ScriptCall<RecoverReply | null> {
  return define(
    scripts.recover,
    liveWithInbox(t, registrationId),
    [grantId, now(t), expiration(t), toSeconds(abandonedMs), t.options.owner, lease(t), registrationId],
    (raw) => {
      const s = scripts.recover;
      // Abandoned: { nil, grant id }; adopted or claimed: { token, fence, age, grant id }.
      if (Array.isArray(raw) && raw.length === 2 && raw[0] === null) {
        checked(s, raw, grantId, 1, 2);
        return null;
      }
      const reply = checked(s, raw, grantId, 3, 4);
      return {
        token: tokenField(s, reply, 0, false)!,
        fence: integerField(s, reply, 1),
        ageMs: integerField(s, reply, 2),
      };
    },
  );
}

/** reapWaiters.lua: returns the tokens of expired (or abandoned, `~<id>`) registrations' inboxes; resolves how many. */
export function reapWaiters(t: ScriptTarget, registrations: readonly string[]): ScriptCall<number> {
  return define(
    scripts.reapWaiters,
    [...t.keys.scriptKeys, ...registrations.map(t.keys.inboxOfRegistration)],
    [expiration(t), ...registrations],
    (reply) => reply as number,
  );
}

export interface ReleaseReply {
  /** Whether this call ended the grant (false: it no longer held the token). */
  readonly ended: boolean;
  /** The length of AVAILABLE afterwards. */
  readonly available: number;
}

/** release-9.lua: ends grant `grantId` of `token`, putting the token back (unlock) or not (consume). */
export function release(t: ScriptTarget, token: string, grantId: string, putBack: boolean): ScriptCall<ReleaseReply> {
  // Without `expiration`, a release touches AVAILABLE, GRABBED and LEASES alone (named after
  // AVAILABLE's prefix on a single Redis: includes/holder_keys.lua).
  const keys = t.options.expiration === null ? holder(t) : t.keys.scriptKeys;
  return define(
    scripts.release,
    keys,
    withOptionalTail([token, grantId, putBack ? '1' : '0'], expiration(t)),
    (raw) => {
      const s = scripts.release;
      const reply = checked(s, raw, grantId, 2, 3);
      return { ended: integerField(s, reply, 0) === GRANT_RESULT.DONE, available: integerField(s, reply, 1) };
    },
    t,
  );
}

/** refresh-9.lua: restamps grant `grantId` of `token`; resolves whether it still held it. */
export function refresh(t: ScriptTarget, token: string, grantId: string): ScriptCall<boolean> {
  return define(
    scripts.refresh,
    holder(t),
    [token, grantId, now(t)],
    (raw) => {
      const s = scripts.refresh;
      return integerField(s, checked(s, raw, grantId, 1, 2), 0) === GRANT_RESULT.DONE;
    },
    t,
  );
}

/** signal-9.lua: pushes `token`; resolves the new length of AVAILABLE. */
export function signal(t: ScriptTarget, token: string): ScriptCall<number> {
  return define(
    scripts.signal,
    t.keys.scriptKeys,
    [token, String(t.resources), expiration(t)],
    (reply) => reply as number,
  );
}

/** releaseStale-9.lua. */
export function releaseStale(t: ScriptTarget): ScriptCall<{ reclaimed: number; expired: string[] }> {
  return define(scripts.releaseStale, t.keys.scriptKeys, [now(t), lease(t), expiration(t)], (reply) => {
    const [reclaimed, ...expired] = reply as [number, ...string[]];
    return { reclaimed, expired };
  });
}

/** create-9.lua: one batch of a creation; resolves a `CREATE_RESULT`. */
export function create(t: ScriptTarget): ScriptCall<number> {
  return define(scripts.create, t.keys.scriptKeys, [String(t.resources), expiration(t)], (reply) => reply as number);
}

export interface InspectReply {
  readonly exists: boolean;
  readonly available: number;
  /** With `tokens`: the free tokens, and the held ones; otherwise empty. */
  readonly availableTokens: string[];
  readonly heldTokens: string[];
}

/** inspect-9.lua: counts, and with `tokens` the token lists. */
export function inspect(t: ScriptTarget, tokens: boolean): ScriptCall<InspectReply> {
  return define(scripts.inspect, t.keys.scriptKeys, [tokens ? '1' : '0'], (reply) => {
    const [exists, available, availableTokens = [], heldTokens = []] = reply as [number, number, string[]?, string[]?];
    return { exists: exists === EXISTS, available, availableTokens, heldTokens };
  });
}

/** status-9.lua's reply, by field (lib/redis/status.ts reads the holders). */
export interface StatusReply {
  readonly exists: boolean;
  /** Redis TIME as "sec.usec". */
  readonly now: string;
  readonly available: number;
  readonly waiting: number;
  readonly waiterIds: string[];
  /** Each held token and its GRABBED value (a grant record, or a Ruby holder's plain stamp). */
  readonly held: ReadonlyArray<{ token: string; record: string }>;
}

/** status-9.lua's raw reply by field. */
function decodeStatusReply(reply: unknown): StatusReply {
  const [exists, now, available, waiting, waiterIds, flat = []] = reply as [
    number,
    string,
    number,
    number,
    string[],
    string[]?,
  ];
  const held: Array<{ token: string; record: string }> = [];
  for (let i = 0; i + 1 < flat.length; i += 2) {
    held.push({ token: flat[i] as string, record: flat[i + 1] as string });
  }
  return { exists: exists === EXISTS, now, available, waiting, waiterIds, held };
}

/** status-9.lua: a snapshot, listing up to `waiterIds` waiters' grant ids. */
export function status(t: { keys: SemaphoreKeys }, waiterIds: number): ScriptCall<StatusReply> {
  return define(scripts.status, t.keys.scriptKeys, [String(waiterIds)], decodeStatusReply);
}

/** forceRelease-9.lua: an operator frees `token` (held by `grantId`, or '' for whoever); the new length of AVAILABLE or a `FORCE_RELEASE_RESULT`. */
export function forceRelease(t: { keys: SemaphoreKeys }, token: string, grantId: string): ScriptCall<number> {
  return define(scripts.forceRelease, t.keys.scriptKeys, [token, grantId], (reply) => reply as number);
}

/** resize-9.lua: an operator sets the number of tokens. */
export function resize(
  t: { keys: SemaphoreKeys },
  tokens: number,
): ScriptCall<{ status: number; before: number; held: number; after: number }> {
  return define(scripts.resize, t.keys.scriptKeys, [String(tokens)], (reply) => {
    const [status, before, held, after] = reply as [number, number, number, number];
    return { status, before, held, after };
  });
}
