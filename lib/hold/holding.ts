// One held grant: its token, grant id and fence, its lease as this process counts it, its refreshes and its signal.
import { LockLostError } from '../errors';
import type { LockLostReason } from '../options';
import { holderLeaseMs, REFRESHES_PER_LEASE } from '../lock/timing';

/** What a holding asks of its semaphore. */
export interface HoldingHost {
  readonly name: string;
  /** Renews the holding's GRABBED time; resolves whether Redis still records this acquisition. */
  refreshHolding(holding: Holding): Promise<boolean>;
  /** Tells the user (callback, events) that the holding was lost. */
  holdingLost(holding: Holding, reason: LockLostReason): void;
  /**
   * The holding has something due at `at` (`performance.now()`): its lease ends or a refresh is
   * due. The host's timer calls `tick` no later than that (one timer for all of a semaphore's holdings).
   */
  wake(at: number): void;
}

export interface LeaseTerms {
  /** How long a confirmed acquisition or refresh keeps the token: `staleClientTimeout`. */
  readonly ms: number;
  /** The lease as this process counts it: `holderLeaseMs(ms)`. */
  readonly holderMs: number;
  /** Refresh every third of the lease while held. */
  readonly autoRefresh: boolean;
}

/** The terms of every holding of a semaphore with this `staleClientTimeout` (null: no lease). */
export function leaseTerms(staleMs: number | null, autoRefresh: boolean): LeaseTerms | null {
  return staleMs === null ? null : { ms: staleMs, holderMs: holderLeaseMs(staleMs), autoRefresh };
}

/**
 * One acquisition this process holds: its token, the grant id Redis records as its owner, its
 * fencing number, and its lease as this process sees it. The lease is counted on this process's
 * monotonic clock from when the acquiring (or last confirmed refreshing) request was *sent*, which is
 * no later than when Redis stamped it, so the holder gives the token up in its own mind no later than
 * any other client may reclaim it (clock rates assumed equal). It arms no timer of its own: its
 * host's one timer calls `tick` when the earliest lease end or refresh is due.
 */
export class Holding {
  readonly token: string;
  /** A weighted grant's tokens, all of them (`token` is the first); undefined for a grant of one. */
  readonly tokens: readonly string[] | undefined;
  readonly id: string;
  readonly fence: number;
  /** Taken by the callback form or `acquire()`, which release it themselves; `unlock` and `consume` never find it. */
  readonly scoped: boolean;
  /** When this process got it (`performance.now()`). */
  readonly acquiredAt: number;
  /**
   * `lock()` (no callback) resolved it to its caller: only from then may `unlock(token)` end it, so a
   * call made before cannot be that caller's (see `Ledger.find`).
   */
  delivered = false;

  readonly #host: HoldingHost;
  readonly #terms: LeaseTerms | null;
  /** Made when `signal` is first read. */
  #controller: AbortController | undefined;
  #lostReason: LockLostError | undefined;
  #leaseEnd = Infinity;
  /** When the next automatic refresh is due (while `#refreshing`). */
  #refreshAt = Infinity;
  #refreshing: boolean;
  /** An automatic refresh is on its way: the next one is due a third of the lease after it settles. */
  #refreshInFlight = false;
  #ended = false;
  #releasing = false;

  constructor(
    host: HoldingHost,
    grant: { readonly token: string; readonly tokens?: readonly string[]; readonly id: string; readonly fence: number },
    scoped: boolean,
    terms: LeaseTerms | null,
    sentAt: number,
    acquiredAt: number,
  ) {
    this.#host = host;
    this.acquiredAt = acquiredAt;
    this.token = grant.token;
    this.tokens = grant.tokens;
    this.id = grant.id;
    this.fence = grant.fence;
    this.scoped = scoped;
    this.#terms = terms;
    this.#refreshing = terms?.autoRefresh ?? false;
    if (terms !== null) {
      this.#leaseEnd = sentAt + terms.holderMs;
      if (this.#refreshing) this.#refreshAt = this.acquiredAt + terms.ms / REFRESHES_PER_LEASE;
      host.wake(this.#nextDue());
    }
  }

  /** Whether the token was lost (the signal aborted). */
  get lost(): boolean {
    return this.#lostReason !== undefined;
  }

  get releasing(): boolean {
    return this.#releasing;
  }

  get lostReason(): LockLostReason | undefined {
    return this.#lostReason?.reason;
  }

  /** Aborts (with a `LockLostError`) when the token is lost; never on a normal release. */
  get signal(): AbortSignal {
    if (!this.#controller) {
      this.#controller = new AbortController();
      if (this.#lostReason) this.#controller.abort(this.#lostReason);
    }
    return this.#controller.signal;
  }

  /** Redis confirmed the acquisition at a request sent at `sentAt` (`performance.now()`): the lease runs from there. */
  confirm(sentAt: number): void {
    if (this.#ended || this.#terms === null) return;
    this.#leaseEnd = sentAt + this.#terms.holderMs;
    this.#host.wake(this.#nextDue());
  }

  /**
   * Called by the host's timer: ends the holding if its lease is over (`'expired'`), or starts the
   * refresh that is due (or nearly). Returns when it next has something due (`Infinity`: nothing).
   */
  tick(now: number): number {
    if (this.#ended || this.#releasing) return Infinity;
    if (this.#leaseEnd <= now) {
      this.lose('expired');
      return Infinity;
    }
    // A refresh due soon goes now too, with the one that woke the timer: one wake-up serves all
    // holdings granted around the same time, however many there are.
    if (this.#refreshing && !this.#refreshInFlight && this.#refreshAt <= now + this.#refreshSlackMs()) this.#refresh();
    return this.#nextDue();
  }

  /** Ends the holding at once if its lease is already over (a slow grant): its caller must not start work. */
  loseIfExpired(now = performance.now()): void {
    if (!this.#ended && this.#leaseEnd <= now) this.lose('expired');
  }

  /**
   * Stops refreshing but keeps counting the lease: after a failed release (the token may still be
   * held in Redis, and must go stale rather than be refreshed forever) and at `close()`.
   */
  stopRefreshing(): void {
    this.#refreshing = false;
  }

  /**
   * Its holder is giving the token back: refreshes stop, and what a refresh that crosses the release
   * answers ("not held", since the release ran first) or the lease says is no news: a holder never
   * hears "lost" because of its own release. Until `end()`, or `releaseFailed()`.
   */
  beginRelease(): void {
    this.#releasing = true;
  }

  /**
   * The release failed (Redis unreachable): the token may still be held in Redis. It must go stale,
   * not be refreshed forever, so refreshes stay off; the lease counts again and reports its end.
   */
  releaseFailed(): void {
    this.#releasing = false;
    this.stopRefreshing();
    this.loseIfExpired();
    if (!this.#ended) this.#host.wake(this.#nextDue());
  }

  /** The token is gone: aborts the signal and tells the user, once. */
  lose(reason: LockLostReason): void {
    if (this.#ended || this.#releasing) return;
    this.end();
    this.#lostReason = new LockLostError(this.#host.name, this.token, reason);
    this.#controller?.abort(this.#lostReason);
    this.#host.holdingLost(this, reason);
  }

  /** Released, or lost: nothing is due any more. */
  end(): void {
    this.#ended = true;
  }

  /** When `tick` next has something to do: the lease's end, or the next refresh. */
  #nextDue(): number {
    if (this.#ended || this.#releasing) return Infinity;
    return this.#refreshing && !this.#refreshInFlight ? Math.min(this.#leaseEnd, this.#refreshAt) : this.#leaseEnd;
  }

  /** How early a refresh may go: a tenth of the time between refreshes. */
  #refreshSlackMs(): number {
    return (this.#terms?.ms ?? 0) / REFRESHES_PER_LEASE / 10;
  }

  #refresh(): void {
    this.#refreshInFlight = true;
    const sentAt = performance.now();
    this.#host
      .refreshHolding(this)
      .then(
        (held) => (held ? this.confirm(sentAt) : this.lose('reclaimed')),
        () => undefined, // unconfirmed: the next refresh tries again, and the lease decides
      )
      .finally(() => {
        this.#refreshInFlight = false;
        this.#refreshAt = performance.now() + (this.#terms?.ms ?? Infinity) / REFRESHES_PER_LEASE;
        const due = this.#nextDue();
        if (due !== Infinity) this.#host.wake(due);
      });
  }
}
