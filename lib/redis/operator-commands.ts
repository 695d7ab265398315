// One builder per operator script (status, forceRelease, resize): KEYS and ARGV from a semaphore's keys, and the reply as named fields.
import type { SemaphoreKeys } from './keys';
import { EXISTS } from './replies';
import { scripts } from './registry';
import { scriptCall, type ScriptCall } from './send';

/** What an operator's scripts read of a semaphore: its keys alone. */
export interface OperatorTarget {
  readonly keys: SemaphoreKeys;
}

/** forceRelease.lua, when it released nothing (otherwise: the new length of AVAILABLE). */
export const FORCE_RELEASE_RESULT = { NOT_HELD: -1, OTHER_GRANT: -2 } as const;
/** resize.lua's first field. */
export const RESIZE_STATUS = { BELOW_HELD: -1, MISSING: 0, DONE: 1 } as const;

/** status.lua's reply, by field (lib/redis/status.ts reads the holders). */
export interface StatusReply {
  readonly exists: boolean;
  /** Redis TIME as "sec.usec". */
  readonly now: string;
  readonly available: number;
  readonly waiting: number;
  readonly waiterIds: string[];
  /** Each held token and its GRABBED value (a grant record, or a Ruby holder's plain stamp). */
  readonly held: ReadonlyArray<{ token: string; record: string }>;
  /** Tokens set aside for weighted waiters (COLLECTED and PENDING: see includes/give_back.lua). */
  readonly collected: number;
  /** The registration collecting them and the permits it asks for, or null. */
  readonly collector: { readonly waiterId: string; readonly permits: number } | null;
}

/** status.lua's raw reply by field. */
function decodeStatusReply(reply: unknown): StatusReply {
  const [exists, now, available, waiting, waiterIds, flat = [], [collected = 0, waiterId = '', permits = 0] = []] =
    reply as [number, string, number, number, string[], string[]?, [number, string, number]?];
  const held: Array<{ token: string; record: string }> = [];
  for (let i = 0; i + 1 < flat.length; i += 2) {
    held.push({ token: flat[i] as string, record: flat[i + 1] as string });
  }
  const collector = waiterId === '' ? null : { waiterId, permits };
  return { exists: exists === EXISTS, now, available, waiting, waiterIds, held, collected, collector };
}

/** status.lua: a snapshot, listing up to `waiterIds` waiters' grant ids. */
export function status(t: OperatorTarget, waiterIds: number): ScriptCall<StatusReply> {
  return scriptCall(scripts.status, t.keys.scriptKeys, [String(waiterIds)], decodeStatusReply);
}

export type ForceReleaseReply =
  { readonly status: 'released'; readonly available: number } | { readonly status: 'not-held' | 'holder-changed' };

/** forceRelease.lua: an operator frees `token` (held by `grantId`, or '' for whoever). */
export function forceRelease(t: OperatorTarget, token: string, grantId: string): ScriptCall<ForceReleaseReply> {
  return scriptCall(scripts.forceRelease, t.keys.scriptKeys, [token, grantId], (reply) => {
    const result = reply as number;
    if (result >= 0) return { status: 'released', available: result };
    return { status: result === FORCE_RELEASE_RESULT.OTHER_GRANT ? 'holder-changed' : 'not-held' };
  });
}

export type ResizeReply =
  | { readonly status: 'resized'; readonly before: number; readonly held: number; readonly after: number }
  | { readonly status: 'below-held'; readonly before: number; readonly held: number }
  | { readonly status: 'not-found' };

/** resize.lua: an operator sets the number of tokens. */
export function resize(t: OperatorTarget, tokens: number): ScriptCall<ResizeReply> {
  return scriptCall(scripts.resize, t.keys.scriptKeys, [String(tokens)], (reply) => {
    const [status, before, held, after] = reply as [number, number, number, number];
    if (status === RESIZE_STATUS.MISSING) return { status: 'not-found' };
    if (status === RESIZE_STATUS.BELOW_HELD) return { status: 'below-held', before, held };
    return { status: 'resized', before, held, after };
  });
}
