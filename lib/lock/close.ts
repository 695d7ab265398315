// Closing a semaphore: watchdogs stop, blocked waits end, connections close, an owned client quits.
import { disconnectQuietly } from '../redis/client/connection';
import { withDeadline } from '../util/deadline';
import { endRegistrations } from './registration';
import type { TakeParts } from './take';
import { CLOSE_IN_FLIGHT_MS, UNBLOCK_ANSWER_MS } from './timing';

/** Every step of close(); tokens still held stay held, but nobody refreshes them any more. */
export async function closeSemaphore(parts: TakeParts): Promise<void> {
  const { ctx, blocking, reclaim, interrupts, contention, ledger } = parts;
  ctx.closeController.abort();
  blocking.stopWatchingClient();
  await reclaim.stopWatchdogs();
  // Queued waiters stop; blocked ones are unblocked and their claims end them. Waits that do not end
  // in time (Redis unreachable) end when their connections close.
  ctx.pool.stopServing();
  interrupts.interruptAll();
  const settled = ctx.settled();
  await withDeadline(settled, CLOSE_IN_FLIGHT_MS, 'close').catch(() => undefined);
  ctx.pool.close();
  await settled;
  const abandoned = reclaim.takePendingDrains();
  if (abandoned.length > 0 && ctx.client.isReady) {
    await withDeadline(reclaim.reapWaiters(abandoned), UNBLOCK_ANSWER_MS, 'drain').catch(() => undefined);
  }
  // Advance registrations end now rather than lapse, so nobody counts them as waiters.
  const advance = contention.takeAllAdvanceRegistrations();
  if (ctx.client.isReady) {
    await withDeadline(endRegistrations(ctx, advance), UNBLOCK_ANSWER_MS, 'ZREM').catch(() => undefined);
  }
  // Their holders hear 'expired' when their leases end.
  ledger.stopRefreshing();
  if (ctx.ownsClient && ctx.client.isOpen) {
    // A client whose connection is gone (reconnecting) cannot QUIT; closing must still end.
    const quit = ctx.client.isReady ? ctx.client.quit() : Promise.reject(new Error('not ready'));
    await quit.catch(() => disconnectQuietly(ctx.client));
  }
}
