// take: lock()'s path to a token, the fast path (tryLock) and its settling, then the blocking wait if that missed.
import { checkpoint, hasCheckpointHook } from '../util/checkpoint';
import { DeadlineExceeded, DeadlineQueue, identity, raceAbort, rethrow, withDeadline } from '../util/deadline';
import type { Attempt } from '../hold/ledger';
import type { Holding } from '../hold/holding';
import { recover } from './recover';
import { SemaphoreClosedError } from '../errors';
import { isConnectionError, isMisattributedReply, wasNeverSent } from '../redis/client/classify';
import type { Connection } from '../redis/client/connection';
import { newId } from '../util/ids';
import { endWait, type Registration } from './registration';
import { checkReplicated, withReplicaWait } from '../hold/replication';
import { tryLock, type TryLockReply } from '../redis/commands';
import type { Replied } from '../redis/send';
import type { BlockingParts } from './slice';
import { acquireTraced, debug, debugEnabled, traceAcquire, type AcquireForm, type AcquireTrace } from '../telemetry';
import type { BlockingWait } from './blocking-wait';
import { readyWithinMs, registrationLifetimeMs, SETTLE_TRY_MS, TRY_ANSWER_MS, waitDeadline } from './timing';

/** Every tryLock of the process, each limited to TRY_ANSWER_MS, with one timer for all. */
const tryLockAnswers = new DeadlineQueue(TRY_ANSWER_MS);

/** With `waitReplicas`, a try's limit includes its WAIT: one queue per limit. */
const replicatedAnswers = new Map<number, DeadlineQueue>();

/** What taking a token works with. */
export interface TakeParts extends BlockingParts {
  readonly blocking: BlockingWait;
}

/** What a taken holding (or null: none came in time) becomes for the caller: a token, a `Lease`. */
export type Deliver<R> = (holding: Holding | null) => R;

/**
 * A token for `attempt`, or null when none came within `timeout` ms, as `deliver` gives it to the
 * caller; counts timeouts and aborts, keeps the call among those close() waits for, and traces the
 * wait on the `acquire` tracing channel when someone subscribes (`form`: which call). The usual lock
 * (ready, uncontended, no signal, no test hook) is one promise: tryLock's answer and all that follows.
 */
export function take<R>(
  parts: TakeParts,
  timeout: number | null,
  attempt: Attempt,
  deliver: Deliver<R>,
  form: AcquireForm = 'lock',
): Promise<R> {
  const { ctx } = parts;
  const { telemetry } = ctx;
  const taken = (holding: Holding | null): R => {
    if (holding === null) telemetry.timedOut(timeout ?? Infinity, attempt.startedAt);
    return deliver(holding);
  };
  const failed = (error: unknown): never => {
    if (isAbort(attempt, error)) telemetry.aborted(error, attempt.startedAt);
    throw error;
  };
  // Tracked: close() waits for it (and its rejection counts as handled, as every lock's always has).
  try {
    if (acquireTraced()) return ctx.track(traced(parts, timeout, attempt, form).then(taken, failed));
    const client = ctx.readyNow();
    if (client !== undefined && attempt.signal === undefined && !hasCheckpointHook()) {
      const { contention } = parts;
      // (Sent in the same step as the attempt began: its start is the send time.)
      if (!contention.skipsTryLock(timeout))
        return ctx.track(tryFirst(parts, client, timeout, attempt, taken, failed, attempt.startedAt));
      // Contended: straight to the blocking wait (see Contention.skipsTryLock), which tracks itself
      // (and sends its first slice in the step the attempt began).
      const deadline = waitDeadline(attempt.startedAt, timeout);
      const registration = contention.takeAdvanceRegistration();
      return parts.blocking.block(deadline, attempt, registration, taken, failed, attempt.startedAt);
    }
    return ctx.track(takeOrAbort(parts, timeout, attempt).then(taken, failed));
  } catch (error) {
    return ctx.track(Promise.reject(error as Error));
  }
}

function traced(
  parts: TakeParts,
  timeout: number | null,
  attempt: Attempt,
  form: AcquireForm,
): Promise<Holding | null> {
  const { ctx } = parts;
  const trace: AcquireTrace = { semaphore: ctx.name, resources: ctx.resources, timeout, form };
  return traceAcquire(
    trace,
    attempt.startedAt,
    () => takeOrAbort(parts, timeout, attempt),
    (error) => (isAbort(attempt, error) ? 'aborted' : 'error'),
  );
}

/** Whether `error` is what `attempt`'s signal aborted with. */
function isAbort(attempt: Attempt, error: unknown): boolean {
  return attempt.signal?.aborted === true && error === attempt.signal.reason;
}

/** Every step before the try that the fast path skips: an abort, the first use's checks, contention, a test's hook. */
async function takeOrAbort(parts: TakeParts, timeout: number | null, attempt: Attempt): Promise<Holding | null> {
  const { ctx, contention } = parts;
  attempt.signal?.throwIfAborted();
  if (ctx.readyNow() === undefined && !(await readyInTime(ctx, timeout, attempt.signal))) return null;
  if (contention.skipsTryLock(timeout)) {
    const registration = contention.takeAdvanceRegistration();
    return waitAfterMiss(parts, waitDeadline(attempt.startedAt, timeout), attempt, registration, identity, rethrow);
  }
  const hooked = checkpoint('lock:before-try');
  if (hooked) await hooked;
  const client = ctx.readyNow() ?? (await ctx.ready());
  const trying = tryFirst<Holding | null>(parts, client, timeout, attempt, identity, rethrow);
  // An abort tells the caller at once; the try then settles itself (a token goes back, its
  // registration ends: see Ledger.granted and BlockingWait.block), and close() waits for it.
  return attempt.signal ? raceAbort(ctx.track(trying), attempt.signal) : trying;
}

/**
 * tryLock, and what its answer says: a holding, a miss (the blocking wait, or null for lock(0)), or
 * no answer in time or a lost reply (settled in the background, or adopted). One promise for all.
 */
function tryFirst<R>(
  parts: TakeParts,
  client: Connection,
  timeout: number | null,
  attempt: Attempt,
  taken: (holding: Holding | null) => R,
  failed: (error: unknown) => never,
  sent = performance.now(),
): Promise<R> {
  const { ctx, ledger, contention, reclaim } = parts;
  const id = newId();
  const lifetime = registrationLifetimeMs(ctx.options.waitSlice);
  const call = tryLock(ctx, id, timeout === 0 ? null : lifetime, attempt.permits);
  const replicas = ctx.options.waitReplicas;
  const then = (holding: Holding | null | Promise<Holding | null>): R | Promise<R> =>
    holding instanceof Promise ? holding.then(taken, failed) : taken(holding);

  const answered = (
    { token, tokens, fence, expired, parked }: TryLockReply,
    acknowledged: number | null,
  ): R | Promise<R> => {
    if (debugEnabled)
      debug('%s tryLock %s: %s', ctx.name, id, token === null ? 'miss' : `token ${token}, fence ${fence}`);
    reclaim.reapInBackground(expired);
    contention.contended = token === null;
    if (token !== null) {
      const grant = { token, id, fence, anchor: sent, ...(tokens && { tokens }) };
      if (acknowledged === null) return then(ledger.granted(grant, attempt));
      return then(
        checkReplicated(ctx, 'lock', acknowledged, () => ledger.giveBack(grant)).then(() =>
          ledger.granted(grant, attempt),
        ),
      );
    }
    if (timeout === 0) return taken(null);
    // Tokens parked for a weighted miss: its first slice sends prepareWait, which hands one on.
    const registration = parked === true ? { id, until: 0, parked } : { id, until: sent + lifetime };
    return waitAfterMiss(parts, waitDeadline(attempt.startedAt, timeout), attempt, registration, taken, failed);
  };

  const unanswered = (error: unknown, late?: Promise<TryLockReply | Replied<TryLockReply>>): R | Promise<R> => {
    if (!(error instanceof DeadlineExceeded)) {
      // The script may have run and its reply been lost (or handed to another command): adopt its
      // grant, or retire its registration.
      if (!(isConnectionError(error) || isMisattributedReply(error)) || wasNeverSent(error)) return failed(error);
      return then(
        recover(parts, id, id, attempt.permits)
          .catch(() => null)
          .then((adopted) => {
            if (adopted === null) throw error;
            return ledger.granted(adopted, attempt);
          }),
      );
    }
    // No answer in time (Redis stalled, or a client that never becomes ready again after a
    // reconnect): the try is settled whenever its answer comes, and the lock goes on without it
    // (as do the next ones, until that answer comes: see Contention.unanswered).
    contention.unanswered++;
    const settled = () => void contention.unanswered--;
    const settling = settleTry(parts, late, id, attempt.permits);
    settling.then(settled, settled);
    void ctx.track(forClose(settling));
    const deadline = waitDeadline(attempt.startedAt, timeout);
    if (performance.now() >= deadline) return taken(null);
    return waitAfterMiss(parts, deadline, attempt, null, taken, failed);
  };

  if (!replicas)
    return ctx.answer(client, 'lock', call, tryLockAnswers, (reply) => answered(reply, null), unanswered, sent);
  const limit = TRY_ANSWER_MS + replicas.timeoutMs;
  let answers = replicatedAnswers.get(limit);
  if (answers === undefined) replicatedAnswers.set(limit, (answers = new DeadlineQueue(limit)));
  return ctx.answer(
    client,
    'lock',
    withReplicaWait(ctx, call),
    answers,
    (replied) => answered(replied.reply, replied.acknowledged),
    unanswered,
  );
}

/** After a miss (`registration`: the try's, or an advance one) or an unanswered try: the blocking wait. */
function waitAfterMiss<R>(
  parts: TakeParts,
  deadline: number,
  attempt: Attempt,
  registration: Registration | null,
  taken: (holding: Holding | null) => R,
  failed: (error: unknown) => never,
): Promise<R> {
  const beforeWait = checkpoint('lock:before-wait');
  if (beforeWait) return beforeWait.then(() => parts.blocking.block(deadline, attempt, registration, taken, failed));
  return parts.blocking.block(deadline, attempt, registration, taken, failed);
}

/**
 * Waits for the first use's connection and server checks (false: not ready in time, the lock times
 * out): with a timeout, no longer than the timeout or TRY_ANSWER_MS, whichever is longer; never past
 * an abort (which rejects with its reason) or close() (SemaphoreClosedError).
 */
async function readyInTime(
  ctx: TakeParts['ctx'],
  timeout: number | null,
  signal: AbortSignal | undefined,
): Promise<boolean> {
  let ready = ctx.ready().then(() => true);
  if (timeout !== null) {
    ready = withDeadline(ready, readyWithinMs(timeout), 'ready').catch((error: unknown) => {
      if (error instanceof DeadlineExceeded) return false;
      throw error;
    });
  }
  try {
    return await raceAbort(raceAbort(ready, signal), ctx.closeController.signal);
  } catch (error) {
    if (ctx.closeController.signal.aborted && error === ctx.closeController.signal.reason)
      throw new SemaphoreClosedError(ctx.name);
    throw error;
  }
}

/** What close() waits for of a try's settling: at most SETTLE_TRY_MS (it runs on after that). */
function forClose(settling: Promise<void>): Promise<void> {
  return withDeadline(settling, SETTLE_TRY_MS, 'settle tryLock').catch(() => undefined);
}

/** Gives back what a try nobody waits for took (its token, or its registration), once its `late` answer comes. */
async function settleTry(
  parts: TakeParts,
  late: Promise<TryLockReply | Replied<TryLockReply>> | undefined,
  id: string,
  permits: number,
): Promise<void> {
  let reply: TryLockReply;
  try {
    if (late === undefined) throw new Error('no answer to wait for');
    const answer = await late;
    reply = 'reply' in answer ? answer.reply : answer;
  } catch (error) {
    if (late !== undefined && wasNeverSent(error)) return;
    const grant = await recover(parts, id, id, permits).catch(() => null);
    if (grant) await parts.ledger.giveBack(grant);
    return;
  }
  const { token, tokens, parked } = reply;
  if (token !== null) await parts.ledger.giveBack({ token, id, tokens });
  // A weighted miss's COLLECTING entry goes too, and the tokens it parked are handed on.
  else void endWait(parts.ctx, { id, until: 0, parked }, permits);
}
