// One blocking slice: the prepareWait + BLMOVE + claim pipeline on a waiter's connection, and what it ended with.
import { checkpoint } from '../util/checkpoint';
import type { Contention } from './contention';
import { DeadlineExceeded } from '../util/deadline';
import { toBlockingTimeout } from '../util/durations';
import { SemaphoreRedisError } from '../errors';
import type { Grant } from '../hold/ledger';
import { recover, type RecoverParts } from './recover';
import { coversSlice, recoverWithinMs, registrationLifetimeMs, sliceGuardMs } from './timing';
import { disconnectQuietly, type Connection } from '../redis/client/connection';
import { isConnectionError, isMisattributedReply, replyErrorCode, wasRefusedForNow } from '../redis/client/classify';
import { newId } from '../util/ids';
import { endRegistrations, type Registration } from './registration';
import { claim as claimScript, prepareWait, type ClaimReply } from '../redis/commands';
import { preload } from '../redis/send';
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

/**
 * One slice: `BLMOVE AVAILABLE INBOX:<id>` and `claim` in one pipeline, so Redis claims the token
 * the moment BLMOVE moves it; preceded by `prepareWait` when the registration may have lapsed. When
 * the connection fails or goes silent past the slice, `recover` settles the attempt on the main
 * connection. Resolves the token, or the registration to use for the next slice (null: make a new one).
 */
export async function blockOnce(
  parts: BlockingParts,
  connection: Connection,
  registration: Registration,
  sliceMs: number,
  lastSlice: boolean,
  signal: AbortSignal | undefined,
  deadline: number,
): Promise<SliceOutcome> {
  const { ctx, interrupts } = parts;
  const { id } = registration;
  if (debugEnabled) debug('%s wait %s: BLMOVE for up to %d ms', ctx.name, id, sliceMs);
  const lifetime = registrationLifetimeMs(ctx.options.waitSlice);
  const sent = performance.now();
  const onConnection = { via: connection, raw: true };
  const prepared = coversSlice(registration.until - sent, sliceMs, ctx.options.waitSlice)
    ? undefined
    : ctx.call('lock', prepareWait(ctx, id, lifetime), onConnection);
  const moved = connection.sendCommand([
    'BLMOVE',
    ctx.keys.available,
    ctx.keys.inbox(id),
    'LEFT',
    'RIGHT',
    toBlockingTimeout(sliceMs),
  ]);
  // A grant keeps the registration for this caller's next wait while no token is left free (an
  // advance registration); not with `expiration`, whose deadlines it would stretch to its expiry.
  const grantId = newId();
  const keep = ctx.options.expiration === null;
  const nextLifetimeMs = lastSlice ? null : lifetime;
  const claimCall = (pipelined: boolean) => claimScript(ctx, id, { grantId, nextLifetimeMs, keep, pipelined });
  // With local time the claim must stamp the moment the token arrived, so it waits for BLMOVE.
  const claimed = ctx.options.useLocalTime
    ? moved.then(() => ctx.call('lock', claimCall(false), onConnection))
    : ctx.call('lock', claimCall(true), onConnection);
  // (A test's hook: its rejection is handled at once, like every promise here.)
  const hooked = checkpoint('lock:waiting')?.then(undefined, () => undefined);
  const results = pipelineResults(prepared, moved, claimed, hooked);
  // A silent connection (black hole, half-open TCP) must not hold a waiter forever: `recover` then
  // settles what the pipeline may have done.
  const guard = setTimeout(() => void disconnectQuietly(connection), sliceGuardMs(sliceMs, ctx.options.waitSlice));
  // An abort or close() ends the slice early (Interrupts), keeping the connection.
  const disarm = interrupts.arm(connection, results, signal);
  const { prepare, move, claim } = await results;
  clearTimeout(guard);
  const unblocking = disarm();
  if (unblocking) await unblocking;

  if (prepare.status === 'fulfilled' && move.status === 'fulfilled' && claim.status === 'fulfilled') {
    // The usual end: every command answered.
    const { token, renewed, fence, others, expired } = claim.value;
    parts.reclaim.reapInBackground(expired);
    // Renewed by the claim after an empty slice, or by this slice's prepareWait: from `sent` on.
    if (token === null) return { grant: null, registration: renewed ? { id, until: sent + lifetime } : null };
    parts.contention.contended = others;
    // Kept for this caller's next wait (claim.lua), when no token was left free and others are registered.
    if (renewed) {
      parts.contention.keepAdvanceRegistration({
        id,
        until: prepared !== undefined ? sent + lifetime : registration.until,
      });
    }
    // The claim ran when BLMOVE returned, at some moment after `sent`: the lease counts from `sent`
    // (Ledger.granted refreshes the grant first when that leaves too little of it).
    return { grant: { token, id: grantId, fence, anchor: sent }, registration: null };
  }
  return settleTroubledSlice(
    parts,
    connection,
    { prepare, move, claim },
    { registration, grantId, sent, sliceMs },
    signal,
    deadline,
  );
}

/** How each command of a slice's pipeline settled. */
interface SliceResults {
  readonly prepare: PromiseSettledResult<unknown>;
  readonly move: PromiseSettledResult<unknown>;
  readonly claim: PromiseSettledResult<ClaimReply>;
}

/** What a slice sent, for `settleTroubledSlice`. */
interface SentSlice {
  readonly registration: Registration;
  readonly grantId: string;
  /** When the pipeline was sent (`performance.now()`). */
  readonly sent: number;
  readonly sliceMs: number;
}

/**
 * A slice whose pipeline did not simply answer: a connection failure, a refusal or an error reply on
 * one of its commands. Settles what the pipeline may have done and says how the wait goes on.
 */
async function settleTroubledSlice(
  parts: BlockingParts,
  connection: Connection,
  { prepare, move, claim }: SliceResults,
  { registration, grantId, sent, sliceMs }: SentSlice,
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
    const grant = await recover(parts, grantId, id, sent + sliceMs).catch(() => null);
    if (grant) await ledger.giveBack(grant);
    return { grant: null, registration: null, failure: failure.reason };
  }
  if (failure) {
    // Redis may not answer (an outage, with an offline queue): past the caller's deadline the
    // attempt counts as failed, and a late answer settles itself.
    const within = recoverWithinMs(deadline, performance.now());
    const grant = await recover(parts, grantId, id, sent + sliceMs, within).catch((error: unknown) => {
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
    const { token, renewed, expired } = claim.value;
    reclaim.reapInBackground(expired);
    if (token !== null) await ledger.giveBack({ token, id: grantId });
    if (renewed) void endRegistrations(ctx, [id]);
    throw new SemaphoreRedisError(ctx.name, 'lock', error?.reason);
  }
  // The claim failed (NOSCRIPT, OOM…): settle what BLMOVE may have moved, then report the first
  // error unless the claim was all that failed.
  if (replyErrorCode(claim.reason) === 'NOSCRIPT') {
    await loadClaimScript(connection).catch(() => undefined);
  }
  const grant = await recover(parts, grantId, id);
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
const answered = () => ANSWERED;

/**
 * How each command of the pipeline settled, once all have and the test hook too (never rejects).
 * Every outcome is taken at once, so no rejection waits unhandled behind another command.
 */
async function pipelineResults(
  prepared: Promise<unknown> | undefined,
  moved: Promise<unknown>,
  claimed: Promise<ClaimReply>,
  hooked: Promise<void> | undefined,
): Promise<SliceResults> {
  const prepare = prepared?.then(answered, rejected);
  const move = moved.then(answered, rejected);
  const claim = claimed.then(fulfilled, rejected);
  if (hooked) await hooked;
  return { prepare: prepare ? await prepare : ANSWERED, move: await move, claim: await claim };
}

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
