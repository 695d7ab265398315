// A waiter's registration in WAITING: what this process knows of one, and how it ends.
import type { Connection } from '../redis/client/connection';
import type { SemaphoreContext } from '../context';
import { reapWaiters } from '../redis/commands';

/**
 * A waiter's registration in WAITING (see tryLock.lua, claim.lua): the grant id its inbox is
 * named after, and until when it surely lasts by this process's clock (`performance.now()`; its
 * expiry is counted from when the request was sent, before Redis ran it, so this errs early).
 */
export interface Registration {
  readonly id: string;
  readonly until: number;
  /** An advance registration (see `Contention`): its first slice is short (the semaphore may have been reset). */
  readonly advance?: boolean;
  /**
   * A weighted wait's registration collects the tokens freed (claim.lua): its next slice blocks on
   * PENDING. Ending it (a plain ZREM) ends the collection too: the next script that gives a token
   * back, or a waiter's empty slice, returns its tokens (includes/give_back.lua).
   */
  readonly collecting?: boolean;
  /** A weighted miss parked the tokens that were free for it (tryLock.lua): ending the wait hands them on. */
  readonly parked?: boolean;
}

/**
 * Ends registrations in one ZREM. Best effort (a registration also lapses), and also while closing,
 * so close() leaves none behind. Ids that are undefined or '' are skipped. `weighted`: waits for
 * several tokens, each also listed in COLLECTING (`#<id>`, includes/give_back.lua), which goes too.
 */
export function endRegistrations(
  ctx: SemaphoreContext,
  ids: ReadonlyArray<string | undefined>,
  via?: Connection,
  weighted = false,
): Promise<void> {
  const live = ids.filter((id): id is string => id !== undefined && id !== '');
  if (live.length === 0) return Promise.resolve();
  return (via ? Promise.resolve(via) : ctx.ready(true))
    .then((client) => {
      const ended = client.sendCommand(['ZREM', ctx.keys.waiting, ...live]);
      // Pipelined behind the ZREM. Left alone, a field would stay until a weighted give-back drops it
      // (weighted_waiting), and with it a COLLECTING key on an idle semaphore.
      if (!weighted) return ended;
      return Promise.all([ended, client.sendCommand(['HDEL', ctx.keys.collecting, ...live.map((id) => `#${id}`)])]);
    })
    .then(
      () => undefined,
      () => undefined,
    );
}

/**
 * Ends a wait's registration (as `endRegistrations` does) for `permits` tokens. A weighted wait's
 * that collects also ends its partial collection at once: reapWaiters.lua, asked about no
 * registration, returns the tokens of a collection whose registration is gone
 * (includes/give_back.lua). Otherwise they would sit in COLLECTED until the next give-back, where
 * lock(0) misses them and blocked waiters wait a slice. (On the main client, once the ZREM
 * answered: `via` may be blocked in a new wait by then.)
 */
export async function endWait(
  ctx: SemaphoreContext,
  registration: Registration | null,
  permits: number,
  via?: Connection,
): Promise<void> {
  await endRegistrations(ctx, [registration?.id], via, permits > 1);
  if (registration?.collecting !== true && registration?.parked !== true) return;
  await ctx.call('lock', reapWaiters(ctx, []), { whileClosing: true }).catch(() => undefined);
}
