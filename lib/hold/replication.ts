// waitReplicas: a WAIT right behind a write on its connection, and what a shortfall of replicas does.
import type { SemaphoreContext } from '../context';
import { ReplicationError, SemaphoreRedisError } from '../errors';
import type { Connection } from '../redis/client/connection';
import type { ResolvedOptions } from '../options';
import { withWait, type Replied, type ScriptCall } from '../redis/send';

/**
 * `call` with a `WAIT` for `waitReplicas` right behind it on the same connection (unless `wait` is
 * false): resolves the script's reply and how many replicas acknowledged.
 */
export function withReplicaWait<R>(ctx: SemaphoreContext, call: ScriptCall<R>, wait = true): ScriptCall<Replied<R>> {
  return withWait(call, wait ? ctx.options.waitReplicas : null);
}

/** WAIT on `connection` (with `waitReplicas`): how many replicas have its writes. */
export async function waitOn(ctx: SemaphoreContext, connection: Connection): Promise<number> {
  const { replicas, timeoutMs } = ctx.options.waitReplicas!;
  try {
    return Number(await connection.sendCommand(['WAIT', String(replicas), String(timeoutMs)]));
  } catch (error) {
    throw new SemaphoreRedisError(ctx.name, 'lock', error);
  }
}

/**
 * A shortfall of acknowledging replicas (`waitReplicas`) rejects with ReplicationError, after
 * `giveBack` (a lock's grant goes back); with `onShortfall: 'warn'` it only emits a warning. Not
 * async: without `waitReplicas` (`acknowledged` null) it returns a resolved promise.
 */
export function checkReplicated(
  ctx: SemaphoreContext,
  operation: string,
  acknowledged: number | null,
  giveBack?: () => Promise<void>,
): Promise<void> {
  const wanted = ctx.options.waitReplicas;
  if (!wanted || acknowledged === null || acknowledged >= wanted.replicas) return RESOLVED;
  return reportShortfall(ctx, operation, wanted.replicas, acknowledged, wanted.onShortfall, giveBack);
}

const RESOLVED = Promise.resolve();

async function reportShortfall(
  ctx: SemaphoreContext,
  operation: string,
  wanted: number,
  acknowledged: number,
  onShortfall: NonNullable<ResolvedOptions['waitReplicas']>['onShortfall'],
  giveBack: (() => Promise<void>) | undefined,
): Promise<void> {
  const error = new ReplicationError(ctx.name, operation, wanted, acknowledged);
  if (onShortfall === 'warn') {
    // By message and name: an Error from another realm (a VM context) is not accepted as is.
    process.emitWarning(error.message, error.name);
    return;
  }
  if (giveBack) await giveBack();
  throw error;
}
