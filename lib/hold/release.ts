// Ending one grant by its id with the release script: one bounded try, then retries while the outcome is unknown.
import type { Connection } from '../redis/client/connection';
import type { SemaphoreContext } from '../context';
import { backoffMs, DeadlineExceeded, DeadlineQueue, rethrow, sleep } from '../util/deadline';
import { SemaphoreClosedError, SemaphoreRedisError } from '../errors';
import { replyErrorCode, wasNeverSent } from '../redis/client/classify';
import { RELEASE_ANSWER_MS } from '../lock/timing';
import { withReplicaWait } from './replication';
import { release, type ReleaseReply } from '../redis/commands';
import type { Replied, ScriptCall } from '../redis/send';

/** Every release try of the process, each limited to RELEASE_ANSWER_MS, with one timer for all. */
const releaseDeadlines = new DeadlineQueue(RELEASE_ANSWER_MS);

const asIs = (outcome: Released): Released => outcome;

/** Most tries of a release whose connection failed (each after a backoff): about 3 s in all. */
const RELEASE_TRIES = 6;

/** A grant as the release script names it: its token and its grant id (and a weighted grant's tokens, all of them). */
export interface GrantRef {
  readonly token: string;
  readonly id: string;
  readonly tokens?: readonly string[] | undefined;
}

export class Releaser {
  readonly #ctx: SemaphoreContext;
  /** What a try past its time limit rejects with, made once rather than per try. */
  readonly #unlockExpired: (error: DeadlineExceeded) => Error;
  readonly #consumeExpired: (error: DeadlineExceeded) => Error;

  constructor(ctx: SemaphoreContext) {
    this.#ctx = ctx;
    this.#unlockExpired = (error) => new SemaphoreRedisError(ctx.name, 'unlock', error);
    this.#consumeExpired = (error) => new SemaphoreRedisError(ctx.name, 'consume', error);
  }

  /** Gives a grant back (the token goes to the next waiter) when nobody will hold it; failures are ignored. */
  giveBack(grant: GrantRef, via?: Connection): Promise<void> {
    return this.release(grant, true, { via }).then(
      () => undefined,
      () => undefined,
    );
  }

  /**
   * Ends grant `grant` (its token back, or consumed), retried after a failure; resolves what
   * `released` makes of the outcome, or what `failed` makes of the last failure (by default the
   * outcome, and the failure). With `replicated` and `waitReplicas`, a WAIT follows it on the same
   * connection. The usual release (one try on a ready client) is one promise.
   */
  release<T = Released>(
    grant: GrantRef,
    putBack: boolean,
    options: ReleaseOptions = {},
    then: (outcome: Released) => T | PromiseLike<T> = asIs as (outcome: Released) => T,
    failed: (error: unknown) => T | PromiseLike<T> = rethrow,
  ): Promise<T> {
    const ctx = this.#ctx;
    const operation = putBack ? 'unlock' : 'consume';
    const retry = (error: unknown) => this.#retryRelease(grant, putBack, options, error).then(then, failed);
    try {
      // Runs while closing too (`whileClosing`, below): close() waits for callbacks and hand-offs in
      // flight to give tokens back. A try that gets no answer in time is not repeated: an offline
      // queue still holds it.
      const client = options.via ?? ctx.readyNow();
      const call = this.#call(grant, putBack, options);
      if (client === undefined)
        return this.#tryRelease(call, operation, options).then((r) => then(released(r, false)), retry);
      return ctx.answer(
        client,
        operation,
        call,
        releaseDeadlines,
        (replied) => then(released(replied, false)),
        (error) => (error instanceof DeadlineExceeded ? failed(this.#expired(putBack, error)) : retry(error)),
      );
    } catch (error) {
      return retry(error);
    }
  }

  /** One try of the release script, when the main client is not ready (connecting, or closing). */
  #tryRelease(
    call: ScriptCall<Replied<ReleaseReply>>,
    operation: string,
    { via }: ReleaseOptions,
  ): Promise<Replied<ReleaseReply>> {
    const ctx = this.#ctx;
    return releaseDeadlines.watch(ctx.call(operation, call, { whileClosing: true, via }), operation, (error) =>
      this.#expired(operation === 'unlock', error),
    );
  }

  /** The release script's call for `grant`, with a WAIT behind it when `replicated` asks (not on `via`). */
  #call(
    grant: GrantRef,
    putBack: boolean,
    { replicated = false, via }: ReleaseOptions,
  ): ScriptCall<Replied<ReleaseReply>> {
    return withReplicaWait(
      this.#ctx,
      release(this.#ctx, grant.token, grant.id, putBack, grant.tokens?.slice(1)),
      replicated && !via,
    );
  }

  #expired(putBack: boolean, error: DeadlineExceeded): Error {
    return putBack ? this.#unlockExpired(error) : this.#consumeExpired(error);
  }

  /** The tries after a first one failed with `error`. */
  async #retryRelease(grant: GrantRef, putBack: boolean, options: ReleaseOptions, error: unknown): Promise<Released> {
    // A try whose reply was lost may have run: then a retry finds the grant already ended.
    let mayHaveRun = false;
    for (let attempt = 1; ; attempt++) {
      // Retrying is safe, since the script only ever ends this grant (idempotent by grant id), and
      // needed: a release that never ran would leave the token held by a live process that gave it
      // up. So anything but a refusal that a retry would meet again is retried.
      const cause = error instanceof SemaphoreRedisError ? error.cause : error;
      if (attempt >= RELEASE_TRIES || cause instanceof DeadlineExceeded || isPermanentRefusal(cause)) throw error;
      if (!wasNeverSent(cause)) mayHaveRun = true;
      await sleep(backoffMs(attempt));
      try {
        const call = this.#call(grant, putBack, options);
        return released(await this.#tryRelease(call, putBack ? 'unlock' : 'consume', options), mayHaveRun);
      } catch (next) {
        error = next;
      }
    }
  }
}

export interface ReleaseOptions {
  /** Waits for `waitReplicas` (the grant's own release, not a give-back). */
  readonly replicated?: boolean;
  /** The connection to send it on (a waiter's own, free again), instead of the main one. */
  readonly via?: Connection | undefined;
}

/** `release` waits for `waitReplicas`. */
export const REPLICATED: ReleaseOptions = { replicated: true };

/**
 * A release's outcome: the length of AVAILABLE after it (false: the grant no longer held its token),
 * and how many replicas acknowledged (null: no WAIT).
 */
export interface Released {
  readonly available: number | false;
  readonly acknowledged: number | null;
}

/** A try's reply as a release's outcome; after a try that may have run, "not held" means that try ended it. */
function released({ reply, acknowledged }: Replied<ReleaseReply>, mayHaveRun: boolean): Released {
  return { available: reply.ended || mayHaveRun ? reply.available : false, acknowledged };
}

/**
 * Failures a retry would meet again: the ACL, a wrong key type, too few replicas, no memory, or a
 * client that is closed (the semaphore's, or the caller's).
 */
function isPermanentRefusal(error: unknown): boolean {
  if (error instanceof SemaphoreClosedError || (error as { name?: unknown } | null)?.name === 'ClientClosedError') {
    return true;
  }
  return PERMANENT_REFUSALS.has(replyErrorCode(error) ?? '');
}

/** Error codes of refusals that a retry meets again. */
const PERMANENT_REFUSALS = new Set('NOPERM WRONGTYPE NOREPLICAS OOM'.split(' '));
