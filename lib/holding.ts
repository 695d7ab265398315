import { LockLostError } from './errors';
import type { LockLostReason } from './options';

/** What a holding asks of its semaphore. */
export interface HoldingHost {
  readonly name: string;
  /** Renews the holding's GRABBED time; resolves whether Redis still records this acquisition. */
  refreshHolding(holding: Holding): Promise<boolean>;
  /** Tells the user (callback, events) that the holding was lost. */
  holdingLost(holding: Holding, reason: LockLostReason): void;
}

export interface LeaseTerms {
  /** How long a confirmed acquisition or refresh keeps the token: `staleClientTimeout`. */
  readonly ms: number;
  /** Refresh every third of the lease while held. */
  readonly autoRefresh: boolean;
}

/** Refreshes per lease: one lost or slow refresh still leaves two chances before the lease ends. */
const REFRESHES_PER_LEASE = 3;

/**
 * The lease this process counts is shorter than `staleClientTimeout` by this margin (Redlock's
 * rule: 1% for clock-rate drift, 2 ms for timer lateness), so it ends before Redis may reclaim.
 */
export function holderLeaseMs(staleMs: number): number {
  return Math.max(1, staleMs * 0.99 - 2);
}

/**
 * One acquisition this process holds: its token, the grant id Redis records as its owner, its
 * fencing number, and its lease as this process sees it. The lease is counted on this process's
 * monotonic clock from when the acquiring (or last confirmed refreshing) request was *sent*, which is
 * no later than when Redis stamped it, so the holder gives the token up in its own mind no later than
 * any other client may reclaim it (clock rates assumed equal).
 */
export class Holding {
  readonly token: string;
  readonly id: string;
  readonly fence: number;
  /** Taken by the callback form, which releases it itself; `unlock()` without a token skips it. */
  readonly scoped: boolean;
  /** When this process got it (`performance.now()`). */
  readonly acquiredAt = performance.now();

  readonly #host: HoldingHost;
  readonly #terms: LeaseTerms | null;
  /** Made when `signal` is first read: most holdings are released without anyone looking. */
  #controller: AbortController | undefined;
  #lostReason: LockLostError | undefined;
  #leaseTimer: NodeJS.Timeout | undefined;
  #refreshTimer: NodeJS.Timeout | undefined;
  #leaseEnd = Infinity;
  #refreshing: boolean;
  #ended = false;
  /** A release is on its way (see `beginRelease`). */
  #releasing = false;

  constructor(
    host: HoldingHost,
    grant: { token: string; id: string; fence: number; scoped: boolean },
    terms: LeaseTerms | null,
    sentAt: number,
  ) {
    this.#host = host;
    this.token = grant.token;
    this.id = grant.id;
    this.fence = grant.fence;
    this.scoped = grant.scoped;
    this.#terms = terms;
    this.#refreshing = terms?.autoRefresh ?? false;
    this.confirm(sentAt);
    this.#scheduleRefresh();
  }

  /** Whether the token was lost (the signal aborted). */
  get lost(): boolean {
    return this.#lostReason !== undefined;
  }

  /** Whether a release is on its way. */
  get releasing(): boolean {
    return this.#releasing;
  }

  /** Why the token was lost, if it was. */
  get lostReason(): LockLostReason | undefined {
    return this.#lostReason?.reason;
  }

  /** What is left of the lease, in ms (`Infinity` without `staleClientTimeout`). */
  get remainingMs(): number {
    return this.#leaseEnd - performance.now();
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
    clearTimeout(this.#leaseTimer);
    this.#leaseEnd = sentAt + holderLeaseMs(this.#terms.ms);
    this.#armLeaseTimer();
  }

  /** Ends the holding at once if its lease is already over (a slow grant): the caller must not start work believing it holds. */
  loseIfExpired(): void {
    if (!this.#ended && this.remainingMs <= 0) this.lose('expired');
  }

  /**
   * Stops refreshing but keeps counting the lease: after a failed release (the token may still be
   * held in Redis, and must go stale rather than be refreshed forever) and at `close()`.
   */
  stopRefreshing(): void {
    this.#refreshing = false;
    clearTimeout(this.#refreshTimer);
  }

  /**
   * Its holder is giving the token back: refreshes stop, and what a refresh that crosses the release
   * answers ("not held", since the release ran first) or the lease timer says is no news: a holder
   * never hears "lost" because of its own release. Until `end()`, or `releaseFailed()`.
   */
  beginRelease(): void {
    this.#releasing = true;
    clearTimeout(this.#refreshTimer);
  }

  /**
   * The release failed (Redis unreachable): the token may still be held in Redis. It must go stale,
   * not be refreshed forever, so refreshes stay off; the lease counts again and reports its end.
   */
  releaseFailed(): void {
    this.#releasing = false;
    this.stopRefreshing();
    this.loseIfExpired();
  }

  /** The token is gone: aborts the signal and tells the user, once. */
  lose(reason: LockLostReason): void {
    if (this.#ended || this.#releasing) return;
    this.end();
    this.#lostReason = new LockLostError(this.#host.name, this.token, reason);
    this.#controller?.abort(this.#lostReason);
    this.#host.holdingLost(this, reason);
  }

  /** Released, or lost: stops the timers. */
  end(): void {
    this.#ended = true;
    clearTimeout(this.#leaseTimer);
    clearTimeout(this.#refreshTimer);
  }

  /** setTimeout's range is 2^31-1 ms (`staleClientTimeout` is validated below it). */
  #armLeaseTimer(): void {
    this.#leaseTimer = setTimeout(() => this.lose('expired'), Math.max(0, this.remainingMs));
    this.#leaseTimer.unref();
  }

  #scheduleRefresh(): void {
    if (this.#ended || this.#releasing || !this.#refreshing || this.#terms === null) return;
    this.#refreshTimer = setTimeout(() => {
      if (this.#ended || this.#releasing || !this.#refreshing) return;
      const sentAt = performance.now();
      this.#host
        .refreshHolding(this)
        .then(
          (held) => (held ? this.confirm(sentAt) : this.lose('reclaimed')),
          () => undefined, // unconfirmed: the next refresh tries again, and the lease timer decides
        )
        .finally(() => this.#scheduleRefresh());
    }, this.#terms.ms / REFRESHES_PER_LEASE);
    this.#refreshTimer.unref();
  }
}
