/** The operators' release log: every release the CLI or the dashboard makes, in a capped stream per semaphore (its AUDIT key). */
import { isConnectionError } from '../redis/client/classify';
import type { HolderInfo } from '../redis/status';
import type { Holder } from './leases';
import { readStatus, releaseStale, target, type Scope } from './operations';

/**
 * About how many entries a semaphore's log keeps (`XADD … MAXLEN ~ 1000`: Redis trims whole
 * macro nodes, so a few more may stay).
 */
export const AUDIT_LENGTH = 1000;

/** What an operator did to one grant, as recorded. */
export interface AuditEntry {
  /** What freed it: `release` (a token), `release-owner` (every grant of an owner), `release-stale`. */
  readonly action: string;
  /** The token released; `''` for a line that stands for several (see `note`). */
  readonly token: string;
  /** The grant that held it; `''` when not recorded (a Ruby gem holder). */
  readonly grantId: string;
  /** The holder's `owner` label; `''` when not recorded. */
  readonly owner: string;
  /** Who: `<OS user>@<host>` for the CLI, `dashboard <client address>` for the dashboard. */
  readonly by: string;
  /** The command line or the request that did it. */
  readonly command: string;
  /** Why, as the operator said (`--reason`, or the dashboard's reason field); `''` if not said. */
  readonly reason: string;
}

/** An entry as read back: with its stream id and Redis' time of the write. */
export interface AuditRecord extends AuditEntry {
  /** The stream entry id (`<ms>-<seq>`). */
  readonly id: string;
  /** When it was written (Redis' clock), ISO 8601. */
  readonly at: string;
}

const FIELDS = ['action', 'token', 'grantId', 'owner', 'by', 'command', 'reason'] as const;

/** Appends `entries` to the log of semaphore `name`, trimming it to about {@link AUDIT_LENGTH}. */
export async function appendAudit(scope: Scope, name: string, entries: readonly AuditEntry[]): Promise<void> {
  if (entries.length === 0) return;
  const { keys, redis } = target(scope, name);
  for (const entry of entries) {
    const fields = FIELDS.flatMap((field) => [field, entry[field]]);
    await redis.sendCommand(['XADD', keys.audit, 'MAXLEN', '~', String(AUDIT_LENGTH), '*', ...fields]);
  }
}

/** The latest `count` entries of the log of semaphore `name`, newest first. */
export async function readAudit(scope: Scope, name: string, count = 10): Promise<AuditRecord[]> {
  if (count <= 0) return [];
  const { keys, redis } = target(scope, name);
  const reply = (await redis.sendCommand(['XREVRANGE', keys.audit, '+', '-', 'COUNT', String(count)])) as Array<
    [string, string[]]
  >;
  return reply.map(([id, flat]) => {
    const values = new Map<string, string>();
    for (let i = 0; i + 1 < flat.length; i += 2) values.set(flat[i] as string, flat[i + 1] as string);
    const field = (name: (typeof FIELDS)[number]) => values.get(name) ?? '';
    return {
      id,
      at: new Date(Number(id.split('-')[0])).toISOString(),
      action: field('action'),
      token: field('token'),
      grantId: field('grantId'),
      owner: field('owner'),
      by: field('by'),
      command: field('command'),
      reason: field('reason'),
    };
  });
}

/**
 * `readAudit`, for views that show the log beside the state (`status`, the dashboard): a log Redis
 * refuses to read (an ACL without XREVRANGE, a key of the wrong type) gives its error instead of
 * failing the view. A connection failure still rejects.
 */
export async function readAuditOrError(
  scope: Scope,
  name: string,
  count = 10,
): Promise<{ records: AuditRecord[]; error?: string }> {
  try {
    return { records: await readAudit(scope, name, count) };
  } catch (error) {
    if (isConnectionError(error)) throw error;
    return { records: [], error: String((error as { message?: unknown } | null)?.message ?? error) };
  }
}

/** Who releases, from where and why: what every audit entry of one operator action shares. */
export interface Actor {
  readonly by: string;
  readonly command: string;
  readonly reason: string;
}

/** The entry for releasing `holder`'s grant. */
export function auditEntry(
  action: string,
  holder: Pick<HolderInfo, 'token' | 'grantId' | 'owner'>,
  actor: Actor,
): AuditEntry {
  return { action, token: holder.token, grantId: holder.grantId ?? '', owner: holder.owner ?? '', ...actor };
}

/**
 * `releaseStale`, logged: one entry per holder of `stale` (the stale holders listed just before,
 * see `staleHolders`) that is gone after it, and one entry for the rest of the count (tokens of dead
 * waiters' inboxes, or holders gone stale since the listing). A holder of `stale` that unlocked by
 * itself meanwhile is logged as released: the log can only tell what vanished. Resolves the count,
 * and why the log could not be written, if it could not (the release is done either way).
 */
export async function releaseStaleLogged(
  scope: Scope,
  name: string,
  rubyOlderThanMs: number | null,
  stale: readonly Holder[],
  actor: Actor,
): Promise<{ released: number; auditError?: string }> {
  const released = await releaseStale(scope, name, rubyOlderThanMs);
  if (released === 0) return { released };
  const after = await readStatus(scope, name, 0);
  const still = new Set(after.holders.map((h) => `${h.token}\n${h.grantId ?? ''}`));
  const gone = stale.filter((h) => !still.has(`${h.token}\n${h.grantId ?? ''}`)).slice(0, released);
  const entries = gone.map((h) => auditEntry('release-stale', h, actor));
  if (released > gone.length) {
    const more = `${released - gone.length} more token${released - gone.length === 1 ? '' : 's'}: stranded by dead waiters, or stale since the listing`;
    const reason = [actor.reason, more].filter((text) => text !== '').join('; ');
    entries.push(
      auditEntry('release-stale', { token: '', grantId: undefined, owner: undefined }, { ...actor, reason }),
    );
  }
  try {
    await appendAudit(scope, name, entries);
  } catch (error) {
    return { released, auditError: String((error as { message?: unknown } | null)?.message ?? error) };
  }
  return { released };
}
