// The scripts' replies: the result codes each answers, and the checks that a reply answers the call
// it is read for (lib/redis/commands.ts decodes each script's reply with them).
import { describe } from '../util/describe';
import { MisattributedReplyError } from './client/classify';
import type { Script } from './registry';

// ---- What the scripts answer (see each script's header) ----

/** create.lua (includes/ensure.lua). */
export const CREATE_RESULT = { EXISTED: 0, CREATED: 1, BATCHES_REMAIN: 2 } as const;
/** refresh.lua's first field. */
export const GRANT_RESULT = { NOT_HELD: 0, DONE: 1 } as const;
/** The `exists` field of inspect.lua and status.lua. */
export const EXISTS = 1;

// ---- Replies that name the call they answer ----

/**
 * The reply of `script` for grant `grantId`, checked: an array of `length` fields (at least, with
 * `rest`) whose field `at` is the grant id. Anything else answers another command (see
 * `MisattributedReplyError`): the call's outcome is unknown, as after a lost reply.
 */
export function checked(
  script: Script,
  reply: unknown,
  grantId: string,
  at: number,
  length: number,
  rest = false,
): unknown[] {
  if (!Array.isArray(reply) || (rest ? reply.length < length : reply.length !== length) || reply[at] !== grantId) {
    throw new MisattributedReplyError(script.name, describe(reply));
  }
  return reply as unknown[];
}

/** `reply[index]` if it is a token (a string), or null for nil; anything else: the reply answers another command. */
export function tokenField(script: Script, reply: unknown[], index: number, nullable: boolean): string | null {
  const value = reply[index];
  if (typeof value === 'string' || (nullable && value === null)) return value;
  throw new MisattributedReplyError(script.name, describe(reply));
}

/** `reply[index]` if it is an integer; anything else: the reply answers another command. */
export function integerField(script: Script, reply: unknown[], index: number): number {
  const value = reply[index];
  if (typeof value === 'number' && Number.isInteger(value)) return value;
  throw new MisattributedReplyError(script.name, describe(reply));
}

/**
 * A one-string reply of `script` for grant `grantId` ("<grant id> <field>…": tryLock, claim, release),
 * split into its first `count` fields after the grant id, each matched by the pattern at its place,
 * and the rest: null when the fields end the reply, else what follows the space after them. A reply
 * that is not a string, names another grant or has other fields answers another command (see
 * `MisattributedReplyError`); the scripts' fields differ in form, so none reads as another's.
 */
export function fieldsOf(
  script: Script,
  reply: unknown,
  grantId: string,
  patterns: readonly RegExp[],
): { fields: string[]; rest: string | null } {
  if (typeof reply !== 'string' || !reply.startsWith(grantId) || reply.charCodeAt(grantId.length) !== 32) {
    throw new MisattributedReplyError(script.name, describe(reply));
  }
  const fields: string[] = [];
  let from = grantId.length + 1;
  let rest: string | null = null;
  for (const pattern of patterns) {
    const space = reply.indexOf(' ', from);
    const field = space === -1 ? reply.slice(from) : reply.slice(from, space);
    if (!pattern.test(field) || (space === -1 && fields.length < patterns.length - 1)) {
      throw new MisattributedReplyError(script.name, describe(reply));
    }
    fields.push(field);
    if (space === -1) break;
    from = space + 1;
    if (fields.length === patterns.length) rest = reply.slice(from);
  }
  return { fields, rest };
}

/** A fencing number (0: none), a count. */
export const NUMBER = /^(?:0|[1-9]\d*)$/;
/** claim.lua's flags: K (kept) or E (ended), then W (others wait), C (this registration collects: weighted) or N. */
export const CLAIM_FLAGS = /^[KE][WCN]$/;
/** A weighted tryLock's count of expired registrations, after a C when it parked the free tokens for the caller. */
export const PARKED_COUNT = /^C?(?:0|[1-9]\d*)$/;
/** release.lua's field: + (ended here) or - (not held), then the length of AVAILABLE. */
export const RELEASE_FIELD = /^[+-](?:0|[1-9]\d*)$/;

/**
 * The end of a tryLock or claim reply: "<registration>… <token>" after the count `count` of
 * registrations (grant ids: no spaces), the token (any text) only when `granted`.
 */
export function expiredAndToken(
  script: Script,
  reply: unknown,
  count: string,
  rest: string | null,
  granted: boolean,
): { expired: string[]; token: string | null } {
  const n = Number(count);
  const parts = n === 0 || rest === null ? [] : rest.split(' ', n);
  let at = 0;
  for (const id of parts) at += id.length + 1;
  // A grant's token follows a space (even an empty token); a reply without one ends after the ids.
  const ended = rest === null || (n > 0 && at === rest.length + 1);
  if (parts.length !== n || granted === ended) throw new MisattributedReplyError(script.name, describe(reply));
  return { expired: parts, token: granted ? rest!.slice(at) : null };
}

/**
 * A weighted grant's `permits` tokens from the end of a tryLock, claim or recover reply, as
 * includes/weighted.lua encodes them: "<k> <byte length>… <token>…" (a token may hold any text).
 */
export function weightedTokens(script: Script, reply: unknown, text: string, permits: number): string[] {
  const fields = text.split(' ', permits + 1);
  const misattributed = () => new MisattributedReplyError(script.name, describe(reply));
  if (fields.length !== permits + 1 || fields[0] !== String(permits)) throw misattributed();
  let at = 0;
  for (const field of fields) at += field.length + 1;
  const bytes = Buffer.from(text.slice(at), 'utf8');
  const tokens: string[] = [];
  let from = 0;
  for (const field of fields.slice(1)) {
    if (!NUMBER.test(field)) throw misattributed();
    const to = from + Number(field);
    tokens.push(bytes.toString('utf8', from, to));
    from = to;
  }
  if (from !== bytes.length) throw misattributed();
  return tokens;
}
