// Settling an attempt whose reply was lost (recover.lua): adopt its grant, claim its inbox, or mark it abandoned.
import type { SemaphoreContext } from '../context';
import { backoffMs, DeadlineExceeded, raceAbort, sleep, withDeadline } from '../util/deadline';
import { SemaphoreError, SemaphoreRedisError } from '../errors';
import type { Grant, Ledger } from '../hold/ledger';
import type { Reclaim } from '../hold/reclaim';
import { isConnectionError, isMisattributedReply } from '../redis/client/classify';
import { recover as recoverCall } from '../redis/commands';
import { debug } from '../telemetry';
import { abandonedMarkMs, RECOVER_ANSWER_MS } from './timing';

/** A blocking wait gave up on its connection after this many failures in a row. */
export const MAX_CONNECTION_FAILURES = 5;

export interface RecoverParts {
  readonly ctx: SemaphoreContext;
  readonly ledger: Ledger;
  readonly reclaim: Reclaim;
}

/**
 * Adopts grant `id` of an attempt whose reply was lost, or the token in `registration`'s inbox, or
 * marks that registration abandoned (recover.lua); `permits`: the attempt's (a weighted grant is
 * adopted whole, and a weighted wait's partial collection goes back). After a blocking slice (`blockedUntil`: when
 * its BLMOVE times out at the latest), a BLMOVE the server still runs for the closed connection may
 * yet deliver into the abandoned inbox: that inbox is drained soon and again once the slice is
 * surely over (Reclaim.drainAbandoned).
 */
export async function recover(
  { ctx, ledger, reclaim }: RecoverParts,
  id: string,
  registration: string,
  permits: number,
  blockedUntil?: number,
  answerMs = RECOVER_ANSWER_MS,
): Promise<Grant | null> {
  debug('%s recover %s (registration %s)', ctx.name, id, registration);
  let attempt = 0;
  for (;;) {
    try {
      const client = await ctx.ready(true);
      const sent = performance.now();
      const call = recoverCall(ctx, id, registration, abandonedMarkMs(ctx.options.waitSlice), permits);
      const running = ctx.call('recover', call, { via: client, raw: true });
      const adopted = await answerOrGiveUp(ctx, running, 'recover', answerMs, (late) => {
        // Queued while Redis was unreachable, it ran later: a grant it adopted goes back.
        if (late) void ledger.giveBack({ token: late.token, id, tokens: late.tokens });
      });
      if (adopted === null) {
        if (blockedUntil !== undefined) reclaim.drainAbandoned(registration, blockedUntil);
        return null;
      }
      // The grant may be older than this call: its lease counts from `age` ms before the call was sent.
      const { token, tokens, fence, ageMs } = adopted;
      return { token, id, fence, anchor: sent - ageMs, ...(tokens && { tokens }) };
    } catch (error) {
      if (error instanceof SemaphoreError) throw error;
      // A reply meant for another command leaves this one's outcome unknown: recover is idempotent
      // (it adopts by grant id, and an abandoned id stays abandoned), so it runs again.
      if (++attempt >= MAX_CONNECTION_FAILURES || !(isConnectionError(error) || isMisattributedReply(error))) {
        throw new SemaphoreRedisError(ctx.name, 'lock', error);
      }
      await sleep(backoffMs(attempt));
    }
  }
}

/**
 * `running`'s answer, or a rejection after `answerMs` (at once once close() starts) while Redis does
 * not answer: a step must not wait forever in an offline queue. `late` gets the answer if it comes
 * after all.
 */
async function answerOrGiveUp<T>(
  ctx: SemaphoreContext,
  running: Promise<T>,
  what: string,
  answerMs: number,
  late: (answer: T) => void,
): Promise<T> {
  const closing = ctx.closeController.signal;
  try {
    return await raceAbort(withDeadline(running, closing.aborted ? 0 : answerMs, what), closing);
  } catch (error) {
    if (error instanceof DeadlineExceeded || (closing.aborted && error === closing.reason)) {
      running.then(late, () => undefined);
      throw new SemaphoreRedisError(ctx.name, what, new DeadlineExceeded(what, answerMs));
    }
    throw error;
  }
}
