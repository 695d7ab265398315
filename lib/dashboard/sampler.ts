/** The dashboard's snapshots of single semaphores (detail cards, `/metrics`), shared by every page polling it, the hand-offs seen between them, and their audit logs' latest entries. */
import { readAuditOrError, type AuditRecord } from '../admin/audit';
import { readStatus, type Scope, type SemaphoreStatus } from '../admin/operations';

/**
 * A hand-off: a grant the dashboard saw appear, with how long its holder had waited for it.
 *
 * Measured from polling, so honest about its resolution: the wait counts from the first snapshot
 * that saw the holder's registration as a waiter (WAITING) to its grant's acquisition time (its
 * GRABBED record). A grant's id is not its registration's (lib/util/ids.ts), but both start with their
 * process's prefix: the registration taken is the longest-registered one of the grant's process
 * (Redis serves waiters in that order), preferring one that ended as the grant appeared (a claim
 * may keep the registration for the process's next wait). So it is an estimate when a process has
 * several waiters, short by up to one sampling interval otherwise; a grant never seen waiting (it
 * took a free token, or waited less than an interval) has `waitedMs: 0` and `seenWaiting: false`.
 */
export interface HandOff {
  /** When the grant was made (Redis' clock), ISO 8601. */
  readonly at: string;
  readonly token: string;
  readonly waitedMs: number;
  readonly seenWaiting: boolean;
}

interface History {
  /** Grant id of each held token at the last snapshot. */
  holders: Map<string, string | undefined>;
  /** Waiter registration id → Redis time (seconds) of the first snapshot that saw it. */
  firstSeen: Map<string, number>;
  handOffs: HandOff[];
}

/** Hand-offs kept per semaphore. */
const HAND_OFFS = 40;
/** Audit entries read with each snapshot. */
const AUDIT_SHOWN = 5;
/** Most waiter grant ids read per snapshot (the waiter count is always complete). */
const WAITER_IDS = 1000;

/**
 * Snapshots of semaphores, shared by every page polling the dashboard: one Redis read per
 * `minIntervalMs` at most, and the hand-offs seen between consecutive snapshots.
 */
export class Sampler {
  readonly #scope: Scope;
  readonly #minIntervalMs: number;
  readonly #histories = new Map<string, History>();
  /** The latest audit entries of each semaphore sampled, newest first. */
  readonly #audits = new Map<string, readonly AuditRecord[]>();
  readonly #one = new Map<string, { at: number; promise: Promise<SemaphoreStatus> }>();

  constructor(scope: Scope, minIntervalMs = 250) {
    this.#scope = scope;
    this.#minIntervalMs = minIntervalMs;
  }

  /** One semaphore (it may not exist: `exists: false`). */
  one(name: string): Promise<SemaphoreStatus> {
    const now = Date.now();
    const cached = this.#one.get(name);
    if (cached && now - cached.at < this.#minIntervalMs) return cached.promise;
    const promise = this.#sample(name);
    this.#one.set(name, { at: now, promise });
    promise.then(
      () => (this.#one.size > 100 ? this.#one.clear() : undefined),
      () => this.#one.delete(name),
    );
    return promise;
  }

  handOffs(name: string): readonly HandOff[] {
    return this.#histories.get(name)?.handOffs ?? [];
  }

  /** The latest audit entries of `name` as of its last sample, newest first. */
  audit(name: string): readonly AuditRecord[] {
    return this.#audits.get(name) ?? [];
  }

  /** Drops the cached snapshot of `name`, after a change: the next read is fresh. */
  forget(name: string): void {
    this.#one.delete(name);
  }

  async #sample(name: string): Promise<SemaphoreStatus> {
    // A log Redis refuses to read (an ACL without XREVRANGE) shows as none.
    const [status, audit] = await Promise.all([
      readStatus(this.#scope, name, WAITER_IDS),
      readAuditOrError(this.#scope, name, AUDIT_SHOWN),
    ]);
    this.#audits.set(name, audit.records);
    if (!status.exists) {
      this.#histories.delete(name);
      this.#audits.delete(name);
      return status;
    }
    const nowSeconds = status.now.getTime() / 1000;
    let history = this.#histories.get(name);
    const first = history === undefined;
    history ??= { holders: new Map(), firstSeen: new Map(), handOffs: [] };
    this.#histories.set(name, history);
    for (const id of status.waiterIds) if (!history.firstSeen.has(id)) history.firstSeen.set(id, nowSeconds);
    const waiting = new Set(status.waiterIds);
    for (const holder of status.holders) {
      const isNew = !history.holders.has(holder.token) || history.holders.get(holder.token) !== holder.grantId;
      if (first || !isNew || holder.since === null) continue;
      const registration = registrationOf(holder.grantId, history.firstSeen, waiting);
      const seen = registration === undefined ? undefined : history.firstSeen.get(registration);
      if (registration !== undefined) history.firstSeen.delete(registration);
      history.handOffs.push({
        at: holder.since.toISOString(),
        token: holder.token,
        waitedMs: seen === undefined ? 0 : Math.max(0, Math.round(holder.since.getTime() - seen * 1000)),
        seenWaiting: seen !== undefined,
      });
    }
    history.handOffs.sort((a, b) => a.at.localeCompare(b.at));
    history.handOffs.splice(0, Math.max(0, history.handOffs.length - HAND_OFFS));
    history.holders = new Map(status.holders.map((h) => [h.token, h.grantId]));
    for (const id of history.firstSeen.keys()) if (!waiting.has(id)) history.firstSeen.delete(id);
    return status;
  }
}

/** The process prefix of an id (`<prefix>.<counter>`, lib/util/ids.ts), or `undefined`. */
function processOf(id: string): string | undefined {
  const dot = id.lastIndexOf('.');
  return dot > 0 ? id.slice(0, dot) : undefined;
}

/**
 * The registration a new grant waited under, among those seen waiting (`firstSeen`): one named by
 * the grant id itself; else the longest-registered one of the grant's process that has just ended
 * (no longer in `waiting`); else, as a claim may keep the registration for the process's next wait,
 * the longest-registered one of the process still there.
 */
function registrationOf(
  grantId: string | undefined,
  firstSeen: ReadonlyMap<string, number>,
  waiting: ReadonlySet<string>,
): string | undefined {
  if (grantId === undefined) return undefined;
  if (firstSeen.has(grantId)) return grantId;
  const process = processOf(grantId);
  if (process === undefined) return undefined;
  let ended: string | undefined;
  let kept: string | undefined;
  const earlier = (id: string, than: string | undefined) =>
    than === undefined || (firstSeen.get(id) ?? 0) < (firstSeen.get(than) ?? 0);
  for (const id of firstSeen.keys()) {
    if (processOf(id) !== process) continue;
    if (!waiting.has(id) && earlier(id, ended)) ended = id;
    if (waiting.has(id) && earlier(id, kept)) kept = id;
  }
  return ended ?? kept;
}
