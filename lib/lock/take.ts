// take: lock()'s path to a token, the fast path (tryLock) and its settling, then the blocking wait if that missed.
import { checkpoint } from '../util/checkpoint';
import { DeadlineExceeded, DeadlineQueue, raceAbort, withDeadline } from '../util/deadline';
import type { Attempt } from '../hold/ledger';
import type { Holding } from '../hold/holding';
import { recover } from './recover';
import { SemaphoreClosedError } from '../errors';
import { isConnectionError, isMisattributedReply, wasNeverSent } from '../redis/client/classify';
import { newId } from '../util/ids';
import { endRegistrations, type Registration } from './registration';
import { checkReplicated, withReplicaWait } from '../hold/replication';
import { tryLock, type TryLockReply } from '../redis/commands';
import type { Replied } from '../redis/send';
import type { BlockingParts } from './slice';
import { acquireTraced, debug, debugEnabled, traceAcquire, type AcquireForm, type AcquireTrace } from '../telemetry';
import type { BlockingWait } from './blocking-wait';
import { readyWithinMs, registrationLifetimeMs, SETTLE_TRY_MS, TRY_ANSWER_MS, waitDeadline } from './timing';

/** Every tryLock of the process, each limited to TRY_ANSWER_MS, with one timer for all. */
const tryLockAnswers = new DeadlineQueue(TRY_ANSWER_MS);

/** What taking a token works with. */
export interface TakeParts extends BlockingParts {
  readonly blocking: BlockingWait;
}

/**
 * A token for `attempt`, or null when none came within `timeout` ms; counts timeouts and aborts, and
 * traces the wait on the `acquire` tracing channel when someone subscribes (`form`: which call).
 */
export function take(
  parts: TakeParts,
  timeout: number | null,
  attempt: Attempt,
  form: AcquireForm = 'lock',
): Promise<Holding | null> {
  if (!acquireTraced()) return counted(parts, timeout, attempt);
  const { ctx } = parts;
  const trace: AcquireTrace = { semaphore: ctx.name, resources: ctx.resources, timeout, form };
  return traceAcquire(
    trace,
    attempt.startedAt,
    () => counted(parts, timeout, attempt),
    (error) => (isAbort(attempt, error) ? 'aborted' : 'error'),
  );
}

async function counted(parts: TakeParts, timeout: number | null, attempt: Attempt): Promise<Holding | null> {
  const { telemetry } = parts.ctx;
  try {
    const holding = await takeOrAbort(parts, timeout, attempt);
    if (holding === null) telemetry.timedOut(timeout ?? Infinity, attempt.startedAt);
    return holding;
  } catch (error) {
    if (isAbort(attempt, error)) telemetry.aborted(error, attempt.startedAt);
    throw error;
  }
}

/** Whether `error` is what `attempt`'s signal aborted with. */
function isAbort(attempt: Attempt, error: unknown): boolean {
  return attempt.signal?.aborted === true && error === attempt.signal.reason;
}

async function takeOrAbort(parts: TakeParts, timeout: number | null, attempt: Attempt): Promise<Holding | null> {
  const { ctx, ledger, contention, reclaim } = parts;
  attempt.signal?.throwIfAborted();
  if (ctx.readyNow() === undefined && !(await readyInTime(ctx, timeout, attempt.signal))) return null;
  const deadline = waitDeadline(attempt.startedAt, timeout);
  let registration: Registration | null = null;
  if (contention.skipsTryLock(timeout)) registration = contention.takeAdvanceRegistration();
  else {
    const hooked = checkpoint('lock:before-try');
    if (hooked) await hooked;
    const id = newId();
    const sent = performance.now();
    let answered: Replied<TryLockReply> | null;
    const lifetime = registrationLifetimeMs(ctx.options.waitSlice);
    const trying = ctx.call('lock', withReplicaWait(ctx, tryLock(ctx, id, timeout === 0 ? null : lifetime)));
    try {
      answered = await raceAbort(answerInTime(ctx, trying), attempt.signal);
    } catch (error) {
      if (attempt.signal?.aborted && error === attempt.signal.reason) {
        // Aborted while the script was on its way: the try is settled in the background.
        void ctx.track(forClose(settleTry(parts, trying, id)));
        throw error;
      }
      if (!(error instanceof DeadlineExceeded)) {
        // The script may have run and its reply been lost (or handed to another command): adopt its
        // grant, or retire its registration.
        if (!(isConnectionError(error) || isMisattributedReply(error)) || wasNeverSent(error)) throw error;
        const adopted = await recover(parts, id, id).catch(() => null);
        if (adopted === null) throw error;
        return ledger.granted(adopted, attempt);
      }
      // No answer in time (Redis stalled, or a client that never becomes ready again after a
      // reconnect): the try is settled whenever its answer comes, and the lock goes on without it
      // (as do the next ones, until that answer comes: see Contention.unanswered).
      contention.unanswered++;
      const settled = () => void contention.unanswered--;
      const settling = settleTry(parts, trying, id);
      settling.then(settled, settled);
      void ctx.track(forClose(settling));
      if (performance.now() >= deadline) return null;
      answered = null;
    }
    if (answered !== null) {
      const { token, fence, expired } = answered.reply;
      if (debugEnabled)
        debug('%s tryLock %s: %s', ctx.name, id, token === null ? 'miss' : `token ${token}, fence ${fence}`);
      reclaim.reapInBackground(expired);
      contention.contended = token === null;
      if (token !== null) {
        const grant = { token, id, fence, anchor: sent };
        if (answered.acknowledged !== null)
          await checkReplicated(ctx, 'lock', answered.acknowledged, () => ledger.giveBack(grant));
        return ledger.granted(grant, attempt);
      }
      if (timeout === 0) return null;
      registration = { id, until: sent + lifetime };
    }
  }
  const beforeWait = checkpoint('lock:before-wait');
  if (beforeWait) await beforeWait;
  try {
    const holding = await parts.blocking.block(deadline, attempt, registration);
    // A wait that timed out (or failed, below) proves nothing about contention: try first next time.
    if (holding === null) contention.contended = false;
    return holding;
  } catch (error) {
    contention.contended = false;
    throw error;
  }
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

/** `trying`, or a `DeadlineExceeded` once it went TRY_ANSWER_MS (and `waitReplicas`' WAIT) unanswered. */
function answerInTime<T>(ctx: TakeParts['ctx'], trying: Promise<T>): Promise<T> {
  const replicas = ctx.options.waitReplicas;
  if (replicas) return withDeadline(trying, TRY_ANSWER_MS + replicas.timeoutMs, 'tryLock');
  return tryLockAnswers.watch(trying, 'tryLock', asIs);
}

/** A try past TRY_ANSWER_MS rejects with the DeadlineExceeded itself, which takeOrAbort tells apart. */
const asIs = (error: DeadlineExceeded): Error => error;

/** What close() waits for of a try's settling: at most SETTLE_TRY_MS (it runs on after that). */
function forClose(settling: Promise<void>): Promise<void> {
  return withDeadline(settling, SETTLE_TRY_MS, 'settle tryLock').catch(() => undefined);
}

/** Gives back what a try nobody waits for took (its token, or its registration), once its answer comes. */
async function settleTry(parts: TakeParts, trying: Promise<Replied<TryLockReply>>, id: string): Promise<void> {
  let token: string | null;
  try {
    ({ token } = (await trying).reply);
  } catch (error) {
    if (wasNeverSent(error)) return;
    const grant = await recover(parts, id, id).catch(() => null);
    if (grant) await parts.ledger.giveBack(grant);
    return;
  }
  if (token !== null) await parts.ledger.giveBack({ token, id });
  else void endRegistrations(parts.ctx, [id]);
}
