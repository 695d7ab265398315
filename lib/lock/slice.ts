// One blocking slice: the prepareWait + BLMOVE + claim pipeline on a waiter's connection, and what it ended with.
import { checkpoint } from '../util/checkpoint';
import type { Contention } from './contention';
import { DeadlineExceeded, decided, type Decision } from '../util/deadline';
import { toBlockingTimeout } from '../util/durations';
import { SemaphoreRedisError } from '../errors';
import type { Attempt, Grant } from '../hold/ledger';
import { recover, type RecoverParts } from './recover';
import { coversSlice, recoverWithinMs, registrationLifetimeMs, sliceGuardMs } from './timing';
import { disconnectQuietly, type Connection } from '../redis/client/connection';
import { isConnectionError, isMisattributedReply, replyErrorCode, wasRefusedForNow } from '../redis/client/classify';
import { newId } from '../util/ids';
import { endRegistrations, type Registration } from './registration';
import { claim as claimScript, prepareWait, type ClaimReply } from '../redis/commands';
import { asText, needsText, preload, runScript, sendStored, type ScriptCall } from '../redis/send';
import { Alarms } from '../util/alarms';
import { debug, debugEnabled } from '../telemetry';
import type { Interrupts } from './interrupts';

/** What a blocking wait works with. */
export interface BlockingParts extends RecoverParts {
  readonly contention: Contention;
  readonly interrupts: Interrupts;
}

/** What one slice ended with: a grant, or the registration for the next slice, and whether the connection failed. */
export interface SliceOutcome {
  readonly grant: Grant | null;
  /** null: none left (make a new one). */
  readonly registration: Registration | null;
  readonly failure?: unknown;
}

/** Every slice's guard (see `blockOnce`), on one timer. */
const guards = new Alarms();

/**
 * One slice: `BLMOVE AVAILABLE INBOX:<id>` and `claim` in one pipeline, so Redis claims the token
 * the moment BLMOVE moves it; preceded by `prepareWait` when the registration may have lapsed. When
 * the connection fails or goes silent past the slice, `recover` settles the attempt on the main
 * connection. What it ended with (the token, or the registration to use for the next slice; null:
 * make a new one) goes to `then`, or what kept it from settling to `failed`, and the promise resolves
 * what they return: the wait goes on from there without a promise more (`decision` hears when it is
 * decided). Its replies are joined by a count, not by a promise each: the usual slice is two
 * promises, the claim's answer (the slice's) and BLMOVE's. `sent`: now, if the caller has read it.
 */
export function blockOnce<T>(
  parts: BlockingParts,
  connection: Connection,
  registration: Registration,
  sliceMs: number,
  lastSlice: boolean,
  { signal, permits }: Attempt,
  deadline: number,
  then: (outcome: SliceOutcome) => T | Promise<T>,
  failed: (error: unknown) => T | Promise<T>,
  decision?: Decision,
  sent = performance.now(),
): Promise<T> {
  const { ctx, interrupts } = parts;
  const { id } = registration;
  const { keys } = ctx;
  if (debugEnabled) debug('%s wait %s: BLMOVE for up to %d ms', ctx.name, id, sliceMs);
  const lifetime = registrationLifetimeMs(ctx.options.waitSlice);
  const prepared = coversSlice(registration.until - sent, sliceMs, ctx.options.waitSlice)
    ? undefined
    : ctx.call('lock', prepareWait(ctx, id, lifetime, permits), { via: connection, raw: true });
  // A weighted wait that collects takes what is freed for it (includes/give_back.lua).
  const [from, to] = registration.collecting ? [keys.pending, keys.collected] : [keys.available, keys.inbox(id)];
  const moved = connection.sendCommand(['BLMOVE', from, to, 'LEFT', 'RIGHT', toBlockingTimeout(sliceMs)]);
  // A grant keeps the registration for this caller's next wait while no token is left free (an
  // advance registration); not with `expiration`, whose deadlines it would stretch to its expiry.
  const grantId = newId();
  const keep = ctx.options.expiration === null;
  const nextLifetimeMs = lastSlice ? null : lifetime;
  const claimCall = (pipelined: boolean) => claimScript(ctx, id, { grantId, nextLifetimeMs, keep, pipelined, permits });
  // With local time the claim must stamp the moment the token arrived, so it waits for BLMOVE.
  const claimed = ctx.options.useLocalTime
    ? moved.then(() => ctx.call('lock', claimCall(false), { via: connection, raw: true }))
    : claimCall(true);
  // (A test's hook: its rejection is handled at once, like every promise here.)
  const hooked = checkpoint('lock:waiting');
  const sentSlice: SentSlice = { registration, grantId, sent, sliceMs, prepared: prepared !== undefined, permits };
  const results: { prepare: Settled<unknown>; move: Settled<unknown>; claim: Settled<ClaimReply> | undefined } = {
    prepare: ANSWERED,
    move: ANSWERED,
    claim: undefined,
  };
  // What answers before the claim: its reply comes last on the connection, so the promise its answer
  // makes is the slice's; should any of these come later, that answer waits for them (`wake`).
  let before = 1 + (prepared ? 1 : 0) + (hooked ? 1 : 0);
  let wake: (() => void) | undefined;
  const answered = () => void (--before === 0 && wake?.());
  prepared?.then(answered, (reason: unknown) => {
    results.prepare = rejected(reason);
    answered();
  });
  moved.then(answered, (reason: unknown) => {
    results.move = rejected(reason);
    answered();
  });
  hooked?.then(answered, answered);
  // A silent connection (black hole, half-open TCP) must not hold a waiter forever: `recover` then
  // settles what the pipeline may have done.
  const guard = guards.set(
    sliceGuardMs(sliceMs, ctx.options.waitSlice),
    () => void disconnectQuietly(connection),
    sent,
  );
  // An abort or close() ends the slice early (Interrupts), keeping the connection.
  const disarm = interrupts.arm(connection, signal);
  const answer = (): T | Promise<T> => {
    guards.cancel(guard);
    const unblocking = disarm();
    const outcome = () => sliceOutcome(parts, connection, results as SliceResults, sentSlice, signal, deadline);
    let ended: SliceOutcome | Promise<SliceOutcome>;
    try {
      ended = unblocking ? unblocking.then(outcome) : outcome();
    } catch (error) {
      return failed(error);
    }
    return ended instanceof Promise ? ended.then(then, failed) : then(ended);
  };
  const claimedAs = (claim: Settled<ClaimReply>): T | Promise<T> => {
    results.claim = claim;
    const waiting = () => new Promise<void>((resolve) => (wake = resolve)).then(answer);
    return decided(before === 0 ? answer : waiting, decision);
  };
  if (!(claimed instanceof Promise))
    return settleClaim(connection, claimed, sendStored(connection, claimed), claimedAs);
  return claimed.then(
    (reply) => claimedAs(fulfilled(reply)),
    (e: unknown) => claimedAs(rejected(e)),
  );
}

/**
 * Reads the pipelined claim's reply as `runScript` would (by EVAL when `needsText`), for `claimedAs`:
 * the promise resolves what it returns.
 */
function settleClaim<T>(
  connection: Connection,
  call: ScriptCall<ClaimReply>,
  sending: Promise<unknown>,
  claimedAs: (claim: Settled<ClaimReply>) => T | Promise<T>,
): Promise<T> {
  return sending.then(
    (raw) => {
      let reply: ClaimReply;
      try {
        reply = call.decode!(raw);
      } catch (error) {
        return claimedAs(rejected(error));
      }
      return claimedAs(fulfilled(reply));
    },
    (error: unknown) => {
      if (!needsText(connection, call, error)) return claimedAs(rejected(error));
      return runScript(connection, asText(call)).then(
        (reply) => claimedAs(fulfilled(reply)),
        (next: unknown) => claimedAs(rejected(next)),
      );
    },
  );
}

/** What a slice whose pipeline answered ended with. */
function sliceOutcome(
  parts: BlockingParts,
  connection: Connection,
  results: SliceResults,
  sentSlice: SentSlice,
  signal: AbortSignal | undefined,
  deadline: number,
): SliceOutcome | Promise<SliceOutcome> {
  const { prepare, move, claim } = results;
  if (prepare.status === 'fulfilled' && move.status === 'fulfilled' && claim.status === 'fulfilled') {
    // The usual end: every command answered.
    const { registration, grantId, sent } = sentSlice;
    const { id } = registration;
    const lifetime = registrationLifetimeMs(parts.ctx.options.waitSlice);
    const { token, tokens, renewed, fence, others, expired, collecting } = claim.value;
    parts.reclaim.reapInBackground(expired);
    // Renewed by the claim after an empty slice, or by this slice's prepareWait: from `sent` on.
    if (token === null) {
      return { grant: null, registration: renewed ? { id, until: sent + lifetime, collecting } : null };
    }
    parts.contention.contended = others;
    // Kept for this caller's next wait (claim.lua), when no token was left free and others are registered.
    if (renewed) {
      parts.contention.keepAdvanceRegistration({
        id,
        until: sentSlice.prepared ? sent + lifetime : registration.until,
      });
    }
    // The claim ran when BLMOVE returned, at some moment after `sent`: the lease counts from `sent`
    // (Ledger.granted refreshes the grant first when that leaves too little of it).
    return { grant: { token, id: grantId, fence, anchor: sent, ...(tokens && { tokens }) }, registration: null };
  }
  return settleTroubledSlice(parts, connection, results, sentSlice, signal, deadline);
}

/** How each command of a slice's pipeline settled. */
interface SliceResults {
  readonly prepare: Settled<unknown>;
  readonly move: Settled<unknown>;
  readonly claim: Settled<ClaimReply>;
}

type Settled<T> = PromiseSettledResult<T>;

/** What a slice sent, for `sliceOutcome` and `settleTroubledSlice`. */
interface SentSlice {
  readonly registration: Registration;
  readonly grantId: string;
  /** When the pipeline was sent (`performance.now()`). */
  readonly sent: number;
  readonly sliceMs: number;
  /** Whether prepareWait went first (it renewed the registration). */
  readonly prepared: boolean;
  /** How many tokens the grant takes. */
  readonly permits: number;
}

/**
 * A slice whose pipeline did not simply answer: a connection failure, a refusal or an error reply on
 * one of its commands. Settles what the pipeline may have done and says how the wait goes on.
 */
async function settleTroubledSlice(
  parts: BlockingParts,
  connection: Connection,
  { prepare, move, claim }: SliceResults,
  { registration, grantId, sent, sliceMs, permits }: SentSlice,
  signal: AbortSignal | undefined,
  deadline: number,
): Promise<SliceOutcome> {
  const { ctx, ledger, reclaim } = parts;
  const { id } = registration;
  const results = [prepare, move, claim];
  // A connection failure, or a cluster or failover refusing for now (TRYAGAIN mid-migration,
  // CLUSTERDOWN, READONLY from a demoted primary), or a reply meant for another command (the claim's
  // outcome unknown): settle the attempt and retry on a new connection.
  const failure = results.find(
    (result): result is PromiseRejectedResult =>
      result.status === 'rejected' &&
      (isConnectionError(result.reason) || wasRefusedForNow(result.reason) || isMisattributedReply(result.reason)),
  );
  if (failure && (signal?.aborted || ctx.closing)) {
    // Its caller has gone: recover settles the attempt, giving back a token the pipeline may have
    // claimed (close() waits for it). A registration the claim kept goes too.
    const grant = await recover(parts, grantId, id, permits, sent + sliceMs).catch(() => null);
    if (grant) await ledger.giveBack(grant);
    return { grant: null, registration: null, failure: failure.reason };
  }
  if (failure) {
    // Redis may not answer (an outage, with an offline queue): past the caller's deadline the
    // attempt counts as failed, and a late answer settles itself.
    const within = recoverWithinMs(deadline, performance.now());
    const grant = await recover(parts, grantId, id, permits, sent + sliceMs, within).catch((error: unknown) => {
      if ((error as { cause?: unknown }).cause instanceof DeadlineExceeded) return null;
      throw error;
    });
    return { grant, registration: null, failure: failure.reason };
  }
  // Not a failure: a refusal on a healthy connection (OOM, NOPERM, WRONGTYPE, NOSCRIPT…).
  const error = [prepare, move].find((result): result is PromiseRejectedResult => result.status === 'rejected');
  if (claim.status === 'fulfilled') {
    // So prepareWait or BLMOVE was refused (blockOnce took the slices where all three answered).
    // The claim ran after it and settled the inbox, so no recover is needed: give back what the claim
    // kept, report.
    const { token, tokens, renewed, expired } = claim.value;
    reclaim.reapInBackground(expired);
    if (token !== null) await ledger.giveBack({ token, id: grantId, tokens });
    if (renewed) void endRegistrations(ctx, [id]);
    throw new SemaphoreRedisError(ctx.name, 'lock', error?.reason);
  }
  // The claim failed (NOSCRIPT, OOM…): settle what BLMOVE may have moved, then report the first
  // error unless the claim was all that failed.
  if (replyErrorCode(claim.reason) === 'NOSCRIPT') {
    await loadClaimScript(connection).catch(() => undefined);
  }
  const grant = await recover(parts, grantId, id, permits);
  if (error) {
    if (grant !== null) await ledger.giveBack(grant);
    throw new SemaphoreRedisError(ctx.name, 'lock', error.reason);
  }
  return { grant, registration: null };
}

const fulfilled = <T>(value: T): PromiseFulfilledResult<T> => ({ status: 'fulfilled', value });
const rejected = (reason: unknown): PromiseRejectedResult => ({ status: 'rejected', reason });

/** prepareWait or BLMOVE answered (their replies are not read), or prepareWait was not sent. */
const ANSWERED: PromiseFulfilledResult<undefined> = { status: 'fulfilled', value: undefined };

/**
 * Blocking connections call claim by SHA1 only, so a new one loads it. Best effort: where an ACL
 * forbids SCRIPT, the claim fails with NOSCRIPT and `recover` claims instead.
 */
function loadClaimScript(connection: Connection): Promise<unknown> {
  return preload(connection, 'claim').catch(() => undefined);
}

/**
 * Readies a new blocking connection: loads the claim, and learns the connection's id, which
 * `CLIENT UNBLOCK` needs to end its wait without closing it. Without an id (an ACL that forbids
 * CLIENT ID), a cancelled wait closes its connection instead.
 */
export async function prepareConnection(connection: Connection): Promise<string | undefined> {
  const [, id] = await Promise.all([
    loadClaimScript(connection),
    connection.sendCommand(['CLIENT', 'ID']).then(
      (reply) => String(reply),
      () => undefined,
    ),
  ]);
  return id;
}
