// Reading a semaphore's state in Redis (holders, waiters, tokens, whether it exists or a token is held), and deleting it.
import type { Contention } from '../lock/contention';
import type { SemaphoreContext } from '../context';
import { grantIdOf, snapshotOf, type HolderInfo } from './status';
import type { Ledger } from '../hold/ledger';
import { inspect } from './commands';
import { status } from './operator-commands';
import { withDeadline } from '../util/deadline';
import { SemaphoreRedisError } from '../errors';

/**
 * How long a read waits for Redis: a client that does not answer (node-redis can stay "not ready"
 * after a reconnect) fails the read with SemaphoreRedisError rather than hold it. A read changes
 * nothing, so nothing is left to settle; long enough for a read of a million tokens on a busy server.
 */
const READ_ANSWER_MS = 10_000;

function bounded<T>(ctx: SemaphoreContext, operation: string, reading: Promise<T>): Promise<T> {
  return withDeadline(
    reading,
    READ_ANSWER_MS,
    operation,
    (error) => new SemaphoreRedisError(ctx.name, operation, error),
  );
}

/** Every held token with its holder, as Redis records them, oldest first. */
export async function holders(ctx: SemaphoreContext): Promise<HolderInfo[]> {
  return [...snapshotOf(await bounded(ctx, 'holders', ctx.call('holders', status(ctx, 0)))).holders];
}

/** How many waiters are registered and waiting for a token right now. */
export async function waiting(ctx: SemaphoreContext): Promise<number> {
  return (await bounded(ctx, 'waiting', ctx.call('waiting', status(ctx, 0)))).waiting;
}

/** With a token: whether anyone holds it. Without: whether this instance holds one it was not told it lost. */
export async function isLocked(ctx: SemaphoreContext, ledger: Ledger, token: string | undefined): Promise<boolean> {
  if (token !== undefined) {
    return (await bounded(ctx, 'isLocked', ctx.command('isLocked', ['HEXISTS', ctx.keys.grabbed, token]))) === 1;
  }
  const held = ledger.live();
  if (held.length === 0) return false;
  const records = (await bounded(
    ctx,
    'isLocked',
    ctx.command('isLocked', ['HMGET', ctx.keys.grabbed, ...held.map((h) => h.token)]),
  )) as Array<string | null>;
  return held.some((holding, i) => grantIdOf(records[i]) === holding.id);
}

/** Whether the semaphore has been created in Redis. */
export async function exists(ctx: SemaphoreContext): Promise<boolean> {
  return (await bounded(ctx, 'exists', ctx.command('exists', ['EXISTS', ctx.keys.exists]))) === 1;
}

/** How many tokens are free right now; `resources` before the semaphore exists. */
export async function availableCount(ctx: SemaphoreContext): Promise<number> {
  const snapshot = await bounded(ctx, 'availableCount', ctx.call('availableCount', inspect(ctx, false)));
  return snapshot.exists ? snapshot.available : ctx.resources;
}

/** Every token: free ones first, then held ones, then those set aside for a weighted waiter. */
export async function allTokens(ctx: SemaphoreContext): Promise<string[]> {
  const reply = await bounded(ctx, 'allTokens', ctx.call('allTokens', inspect(ctx, true)));
  return [...reply.availableTokens, ...reply.heldTokens, ...reply.collectedTokens];
}

/** Removes every key of the semaphore (the operators' audit stream too) and every registered inbox; this instance's holdings are lost. */
export async function deleteAll(ctx: SemaphoreContext, ledger: Ledger, contention: Contention): Promise<void> {
  const registrations = (await ctx.command('delete', ['ZRANGE', ctx.keys.waiting, '0', '-1'])) as string[];
  const inboxes = registrations.map(ctx.keys.inboxOfRegistration);
  await ctx.command('delete', ['DEL', ...ctx.keys.scriptKeys, ctx.keys.gemReleaseGuard, ctx.keys.audit, ...inboxes]);
  contention.forgetAdvanceRegistrations(); // they went with WAITING
  ledger.loseAll('reclaimed');
}
