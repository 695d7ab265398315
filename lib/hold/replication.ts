// waitReplicas: a WAIT right behind a write on its connection, and what a shortfall of replicas does.
import type { SemaphoreContext } from '../context';
import { ReplicationError, SemaphoreRedisError } from '../errors';
import { sendPinned, type Connection } from '../redis/client/connection';
import type { ResolvedOptions } from '../options';
import { evalCommand, needsText, storedCommand, type ScriptCall } from '../redis/scripts';

/** A script's reply, and how many replicas acknowledged it (null: no WAIT was sent). */
export interface Replied<R> {
  readonly reply: R;
  readonly acknowledged: number | null;
}

/**
 * `ctx.call`, and with `waitReplicas` (unless `wait` is false) a `WAIT` right behind the script on the
 * same connection: resolves the script's reply and how many replicas acknowledged.
 */
export function callAndWait<R>(
  ctx: SemaphoreContext,
  operation: string,
  call: ScriptCall<R>,
  options: { whileClosing?: boolean; wait?: boolean; via?: Connection | undefined } = {},
): Promise<Replied<R>> {
  const replicas = ctx.options.waitReplicas;
  if (!replicas || options.wait === false || options.via)
    return ctx.call(operation, call, options).then(unacknowledged);
  return callThenWait(ctx, operation, call, replicas, options.whileClosing ?? false);
}

function unacknowledged<R>(reply: R): Replied<R> {
  return { reply, acknowledged: null };
}

async function callThenWait<R>(
  ctx: SemaphoreContext,
  operation: string,
  call: ScriptCall<R>,
  replicas: NonNullable<ResolvedOptions['waitReplicas']>,
  whileClosing: boolean,
): Promise<Replied<R>> {
  const client = await ctx.ready(whileClosing);
  const waitCommand = ['WAIT', String(replicas.replicas), String(replicas.timeoutMs)];
  try {
    const [reply, acknowledged] = await sendPinned(client, [storedCommand(call, client), waitCommand]).catch(
      (error: unknown) => {
        if (!needsText(client, call, error)) throw error;
        return sendPinned(client, [evalCommand(call), waitCommand]);
      },
    );
    return { reply: call.decode(reply), acknowledged: Number(acknowledged) };
  } catch (error) {
    throw new SemaphoreRedisError(ctx.name, operation, error);
  }
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
