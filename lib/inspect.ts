// Reading a semaphore's state in Redis (holders, waiters, tokens, whether it exists or a token is held), and deleting it.
import type { Contention } from './contention';
import type { SemaphoreContext } from './context';
import { decodeStatus, grantIdOf, type HolderInfo } from './holder-info';
import type { Holdings } from './holdings';
import { scripts } from './scripts';

/** Every held token with its holder, as Redis records them, oldest first. */
export async function holders(ctx: SemaphoreContext): Promise<HolderInfo[]> {
  return [...decodeStatus(await ctx.run('holders', scripts.status, ['0'])).holders];
}

/** How many waiters are registered and waiting for a token right now. */
export async function waiting(ctx: SemaphoreContext): Promise<number> {
  return decodeStatus(await ctx.run('waiting', scripts.status, ['0'])).waiting;
}

/** With a token: whether anyone holds it. Without: whether this instance holds one it was not told it lost. */
export async function isLocked(ctx: SemaphoreContext, holdings: Holdings, token: string | undefined): Promise<boolean> {
  if (token !== undefined) {
    return (await ctx.command('isLocked', ['HEXISTS', ctx.keys.grabbed, token])) === 1;
  }
  const held = holdings.live();
  if (held.length === 0) return false;
  const records = (await ctx.command('isLocked', ['HMGET', ctx.keys.grabbed, ...held.map((h) => h.token)])) as Array<
    string | null
  >;
  return held.some((holding, i) => grantIdOf(records[i]) === holding.id);
}

/** Whether the semaphore has been created in Redis. */
export async function exists(ctx: SemaphoreContext): Promise<boolean> {
  return (await ctx.command('exists', ['EXISTS', ctx.keys.exists])) === 1;
}

/** How many tokens are free right now; `resources` before the semaphore exists. */
export async function availableCount(ctx: SemaphoreContext): Promise<number> {
  const [created, count] = (await ctx.run('availableCount', scripts.inspect, ['0'])) as [number, number];
  return created === 1 ? count : ctx.resources;
}

/** Every token, free ones first, then held ones. */
export async function allTokens(ctx: SemaphoreContext): Promise<string[]> {
  const [, , available, held] = (await ctx.run('allTokens', scripts.inspect, ['1'])) as [
    number,
    number,
    string[],
    string[],
  ];
  return [...available, ...held];
}

/** Removes every key of the semaphore and every registered inbox; this instance's holdings are lost. */
export async function deleteAll(ctx: SemaphoreContext, holdings: Holdings, contention: Contention): Promise<void> {
  const registrations = (await ctx.command('delete', ['ZRANGE', ctx.keys.waiting, '0', '-1'])) as string[];
  const inboxes = registrations.map(ctx.keys.inboxOfRegistration);
  await ctx.command('delete', ['DEL', ...ctx.keys.scriptKeys, ctx.keys.gemReleaseGuard, ...inboxes]);
  contention.forgetSpares(); // their registrations went with WAITING
  holdings.loseAll('reclaimed');
}
