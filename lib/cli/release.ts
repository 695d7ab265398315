/** The CLI's commands that change Redis: release (a token, or every grant of an owner), release-stale, delete. Each shows its plan, asks, and logs its releases. */
import { holderJson } from '../admin/json';
import { appendAudit, auditEntry, releaseStaleLogged, type Actor } from '../admin/audit';
import {
  deleteSemaphore,
  ownerMatches,
  readStatus,
  releaseGrants,
  releaseToken,
  staleHolders,
  target,
  type GrantRelease,
  type Scope,
  type SemaphoreStatus,
} from '../admin/operations';
import type { Holder } from '../admin/leases';
import { cliActor, confirm, type Consent } from './confirm';
import { CliError, EXIT, missing, notFound } from './failures';
import { formatDuration, formatLease, printable, table, terminalJson } from './format';
import type { Io } from './watch';

/** What a destructive command needs besides the scope: where to write, consent, and its own command line for the log. */
export interface Change {
  readonly io: Io;
  readonly consent: Consent;
  /** The command as the audit log records it (no credentials). */
  readonly command: string;
}

async function existing(scope: Scope, name: string): Promise<SemaphoreStatus> {
  const status = await readStatus(scope, name);
  if (!status.exists) throw missing(name, scope);
  return status;
}

function holderRows(holders: readonly Holder[]): string {
  const rows = holders.map((h) => [
    printable(h.token),
    formatLease(h),
    formatDuration(h.heldMs),
    formatDuration(h.refreshedMs),
    h.grantId === undefined ? '-' : printable(h.grantId),
    h.owner === undefined ? '(not recorded: Ruby gem?)' : printable(h.owner),
  ]);
  return table(['TOKEN', 'LEASE', 'HELD FOR', 'REFRESHED AGO', 'GRANT', 'OWNER'], rows)
    .split('\n')
    .map((line) => `  ${line}`)
    .join('\n');
}

/**
 * Appends to the audit log; the release it records is done, so a failure to log (an ACL without
 * XADD, say) is a warning on stderr, not the command's failure.
 */
async function record(scope: Scope, name: string, entries: Parameters<typeof appendAudit>[2]): Promise<void> {
  try {
    await appendAudit(scope, name, entries);
  } catch (error) {
    warnUnrecorded((error as Error)?.message ?? String(error));
  }
}

function warnUnrecorded(why: string): void {
  process.stderr.write(`redis-token-semaphore: warning: released, but not recorded in the audit log: ${why}\n`);
}

function actorOf(change: Change): Actor {
  return { by: cliActor(), command: change.command, reason: change.consent.reason };
}

function entry(action: string, holder: Holder, change: Change) {
  return auditEntry(action, holder, actorOf(change));
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;

/**
 * `release <name> <token>`: frees the token from the grant that holds it now (the one shown and
 * confirmed: if it was given back and taken again meanwhile, nothing is released, exit 1).
 */
export async function releaseOne(scope: Scope, name: string, token: string, change: Change): Promise<number> {
  const { io, consent } = change;
  const status = await existing(scope, name);
  const holder = status.holders.find((h) => h.token === token);
  if (holder === undefined)
    throw notFound(`token "${printable(token)}" of semaphore "${printable(name)}" is not held; nothing released`);
  if (consent.dryRun) {
    if (io.json) io.out(terminalJson({ name, dryRun: true, release: [holderJson(holder)] }));
    else
      io.out(
        `Would release token "${printable(token)}" of "${printable(name)}" (dry run: nothing changed):\n${holderRows([holder])}`,
      );
    return EXIT.ok;
  }
  if (!consent.yes) {
    if (!io.json) io.out(`Token "${printable(token)}" of "${printable(name)}":\n${holderRows([holder])}`);
    await confirm(
      consent,
      `Release token "${printable(token)}" of "${printable(name)}"? Its holder's unlock and refresh will find nothing.`,
    );
  }
  const outcome = await releaseToken(scope, name, token, holder.grantId ?? '');
  if (outcome.status !== 'released') {
    if (outcome.status === 'not-found') throw missing(name, scope);
    if (outcome.status === 'not-held')
      throw notFound(
        `token "${printable(token)}" of semaphore "${printable(name)}" is not held any more; nothing released`,
      );
    throw new CliError(
      EXIT.error,
      'holder_changed',
      `token "${printable(token)}" of "${printable(name)}" was given back and taken again meanwhile; nothing released`,
    );
  }
  await record(scope, name, [entry('release', holder, change)]);
  if (io.json) {
    io.out(
      terminalJson({
        name,
        token,
        released: true,
        available: outcome.available,
        grantId: holder.grantId ?? null,
        owner: holder.owner ?? null,
      }),
    );
  } else {
    io.out(
      `Released token "${printable(token)}" of "${printable(name)}": the longest-blocked waiter gets it, else it is free.`,
    );
  }
  return EXIT.ok;
}

/**
 * `release --owner <label> <name…>`: frees every grant whose record names that owner (a label
 * ending with `*`: every owner starting with the rest), each only if that grant still holds its
 * token. Every semaphore must exist (checked before anything is released).
 */
export async function releaseOwner(
  scope: Scope,
  owner: string,
  names: readonly string[],
  change: Change,
): Promise<number> {
  const { io, consent } = change;
  const plans: Array<{ name: string; holders: Holder[] }> = [];
  for (const name of names) {
    const status = await existing(scope, name);
    plans.push({ name, holders: status.holders.filter((h) => ownerMatches(owner, h.owner)) });
  }
  const total = plans.reduce((sum, plan) => sum + plan.holders.length, 0);
  const describePlan = () =>
    plans
      .map(({ name, holders }) =>
        holders.length === 0
          ? `"${printable(name)}": no grant of owner "${printable(owner)}"`
          : `"${printable(name)}": ${plural(holders.length, 'grant')} of owner "${printable(owner)}"\n${holderRows(holders)}`,
      )
      .join('\n');
  if (consent.dryRun || total === 0) {
    if (io.json) {
      io.out(
        terminalJson({
          owner,
          dryRun: consent.dryRun,
          semaphores: plans.map((p) => ({ name: p.name, release: p.holders.map(holderJson), released: [] })),
        }),
      );
    } else {
      io.out(
        `${consent.dryRun ? 'Would release' : 'Nothing to release:'} ${plural(total, 'grant')} of owner "${printable(owner)}"${consent.dryRun ? ' (dry run: nothing changed)' : ''}:\n${describePlan()}`,
      );
    }
    return EXIT.ok;
  }
  if (!consent.yes) {
    if (!io.json) io.out(describePlan());
    await confirm(consent, `Release these ${plural(total, 'grant')} of owner "${printable(owner)}"?`);
  }
  const results: Array<{ name: string; released: GrantRelease[] }> = [];
  for (const { name, holders } of plans) {
    const released = await releaseGrants(scope, name, holders);
    await record(
      scope,
      name,
      released.filter((r) => r.outcome.status === 'released').map((r) => entry('release-owner', r.holder, change)),
    );
    results.push({ name, released });
  }
  const freed = results.reduce((sum, r) => sum + r.released.filter((x) => x.outcome.status === 'released').length, 0);
  if (io.json) {
    io.out(
      terminalJson({
        owner,
        dryRun: false,
        semaphores: results.map((r) => ({
          name: r.name,
          release: plans.find((p) => p.name === r.name)?.holders.map(holderJson) ?? [],
          released: r.released.map((x) => ({
            token: x.holder.token,
            grantId: x.holder.grantId ?? null,
            status: x.outcome.status,
          })),
        })),
      }),
    );
  } else {
    const skipped = results.flatMap((r) =>
      r.released
        .filter((x) => x.outcome.status !== 'released')
        .map(
          (x) =>
            `  "${printable(r.name)}" token "${printable(x.holder.token)}": ${x.outcome.status === 'holder-changed' ? 'taken again meanwhile' : 'no longer held'}, left alone`,
        ),
    );
    io.out([`Released ${plural(freed, 'grant')} of owner "${printable(owner)}".`, ...skipped].join('\n'));
  }
  return EXIT.ok;
}

/**
 * `release-stale <name> [--ruby-older-than <d>]`: frees the tokens of holders whose lease is over
 * (dead processes), as `releaseStaleLocks()` does; Ruby gem holders, which record no lease, only
 * with `--ruby-older-than` and when held longer than that. The log gets one entry per holder that
 * was stale before and is gone after (a holder that unlocked meanwhile would be counted too), and
 * one for the rest of the count (tokens of dead waiters' inboxes).
 */
export async function releaseStaleCommand(
  scope: Scope,
  name: string,
  rubyOlderThan: number | null,
  change: Change,
): Promise<number> {
  const { io, consent } = change;
  const before = await existing(scope, name);
  const stale = staleHolders(before, rubyOlderThan);
  const rule =
    "whose holder's lease has expired" +
    (rubyOlderThan === null ? '' : `, and of Ruby gem holders held longer than ${formatDuration(rubyOlderThan)}`);
  const json = { name, rubyOlderThanMs: rubyOlderThan };
  if (consent.dryRun) {
    if (io.json) io.out(terminalJson({ ...json, dryRun: true, release: stale.map(holderJson) }));
    else {
      io.out(
        `Would release ${plural(stale.length, 'token')} of "${printable(name)}" ${rule}, and any token stranded by a dead waiter (dry run: nothing changed)` +
          (stale.length > 0 ? `:\n${holderRows(stale)}` : '.'),
      );
    }
    return EXIT.ok;
  }
  if (!consent.yes) {
    if (!io.json && stale.length > 0) io.out(`Stale now:\n${holderRows(stale)}`);
    await confirm(
      consent,
      `Release ${plural(stale.length, 'stale token')} of "${printable(name)}" (and any stranded by dead waiters)?`,
    );
  }
  const { released, auditError } = await releaseStaleLogged(scope, name, rubyOlderThan, stale, actorOf(change));
  if (auditError !== undefined) warnUnrecorded(auditError);
  if (io.json) io.out(terminalJson({ ...json, released }));
  else io.out(`Released ${plural(released, 'token')} of "${printable(name)}" ${rule}.`);
  return EXIT.ok;
}

/** `delete <name>`: every key of the semaphore, its audit log too. */
export async function deleteCommand(scope: Scope, name: string, change: Change): Promise<number> {
  const { io, consent } = change;
  const status = await existing(scope, name);
  const summary = `${plural(status.tokens, 'token')} (${status.holders.length} held, ${status.available} free), ${status.waiting} waiting`;
  if (consent.dryRun) {
    const { keys, redis } = target(scope, name);
    const candidates = [...keys.scriptKeys, keys.gemReleaseGuard, keys.audit];
    const present: string[] = [];
    for (const key of candidates) if ((await redis.sendCommand(['EXISTS', key])) === 1) present.push(key);
    if (io.json)
      io.out(
        terminalJson({
          name,
          dryRun: true,
          tokens: status.tokens,
          held: status.holders.length,
          waiting: status.waiting,
          keys: present,
        }),
      );
    else {
      io.out(
        `Would delete semaphore "${printable(name)}": ${summary} (dry run: nothing changed).\nKeys: ${present.map(printable).join(' ')} and the inboxes of its waiters.` +
          (status.holders.length > 0 ? `\nIts holders' unlock would find nothing:\n${holderRows(status.holders)}` : ''),
      );
    }
    return EXIT.ok;
  }
  if (!consent.yes) {
    if (!io.json && status.holders.length > 0) io.out(`Holders:\n${holderRows(status.holders)}`);
    await confirm(consent, `Delete semaphore "${printable(name)}": ${summary}?`);
  }
  await deleteSemaphore(scope, name);
  io.out(io.json ? terminalJson({ name, deleted: true }) : `Deleted semaphore "${printable(name)}".`);
  return EXIT.ok;
}
