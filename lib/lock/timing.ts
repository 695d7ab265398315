// The time rules of a wait and of a lease, and every time limit of the library: milliseconds on performance.now().

/** setTimeout fires at once for delays past 2^31 - 1 ms: a longer wait must not arm a timer. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

// ---- A wait: its deadline, its slices, its registration -------------------------------------------

/** When a wait that started at `startedAt` gives up: `timeout` ms later, or never (null). */
export function waitDeadline(startedAt: number, timeout: number | null): number {
  return timeout === null ? Infinity : startedAt + timeout;
}

/**
 * The longest first slice under an advance registration (a reset semaphore costs at most this), and
 * the longest turn on a lock manager's crowded pool (a queued caller gets a connection within it).
 */
export const TURN_MS = 1000;

/**
 * The next slice with `remaining` ms to the deadline: at most `waitSlice` (TURN_MS when `short`), at
 * least 1 ms: past the deadline, a live registration gets a last 1 ms slice, whose claim ends it.
 */
export function sliceMs(remaining: number, waitSlice: number, short: boolean): number {
  return Math.min(Math.max(remaining, 1), short ? Math.min(TURN_MS, waitSlice) : waitSlice);
}

/**
 * Whether a slice reaches the deadline: its claim then ends the registration rather than renew it.
 * A weighted wait's (`permits` > 1) last slice is the 1 ms one past the deadline: one that reaches
 * the deadline may be served its first token long before it, and must then go on collecting, not
 * give the token and its place in the queue up (claim.lua ends a collection on the last slice).
 */
export function isLastSlice(sliceMs: number, remaining: number, permits = 1): boolean {
  return permits > 1 ? remaining <= 0 : sliceMs >= remaining;
}

/** How long a registration outlives the slice it covers: half a slice, at least a second. */
export function graceMs(waitSlice: number): number {
  return Math.max(1000, waitSlice / 2);
}

/**
 * How long a registration lasts once set (tryLock, prepareWait, a claim that renews it): two slices
 * and the grace, so it covers the next slice too. This process counts it from the send: it errs early.
 */
export function registrationLifetimeMs(waitSlice: number): number {
  return 2 * waitSlice + graceMs(waitSlice);
}

/** Whether a registration with `leftMs` to live covers a slice, half the grace to spare (else prepareWait renews). */
export function coversSlice(leftMs: number, sliceMs: number, waitSlice: number): boolean {
  return leftMs >= sliceMs + graceMs(waitSlice) / 2;
}

/** How long a slice's pipeline may go unanswered before its connection counts as silent and is closed. */
export function sliceGuardMs(sliceMs: number, waitSlice: number): number {
  return Math.ceil(sliceMs + graceMs(waitSlice) / 2);
}

/** How long an abandoned grant id stays marked (recover.lua): long enough for a delayed pipeline to be refused. */
export function abandonedMarkMs(waitSlice: number): number {
  return 4 * registrationLifetimeMs(waitSlice);
}

/** The first drain of an abandoned inbox: Redis may serve a closing connection's BLMOVE before it reads the EOF. */
export const ABANDONED_DRAIN_MS = 250;

/** When the drains of an abandoned inbox run: soon, and once its slice is surely over (`blockedUntil` + grace). */
export function drainTimes(now: number, blockedUntil: number, waitSlice: number): [number, number] {
  return [now + ABANDONED_DRAIN_MS, blockedUntil + graceMs(waitSlice)];
}

/** An advance registration nobody took within this long ends: an idle one must not count as a waiter for long. */
export const ADVANCE_IDLE_MS = 200;

// ---- How long a step waits for Redis' answer -------------------------------------------------------

/** A tryLock's answer; past it, the lock goes on without it (Redis stalled, or a client stuck "not ready"). */
export const TRY_ANSWER_MS = 1000;

/** How long a lock waits for the first use's connection and server checks: its timeout, at least TRY_ANSWER_MS. */
export function readyWithinMs(timeout: number): number {
  return Math.max(timeout, TRY_ANSWER_MS);
}

/** How long close() waits for the settling of a try Redis did not answer (it runs on after that). */
export const SETTLE_TRY_MS = 10_000;

/** recover's answer: an offline queue holds commands while Redis is unreachable; a late answer settles itself. */
export const RECOVER_ANSWER_MS = 3000;

/** recover's answer after a failed slice: the caller's remaining time, at least 250 ms, at most RECOVER_ANSWER_MS. */
export function recoverWithinMs(deadline: number, now: number): number {
  return Math.max(250, Math.min(RECOVER_ANSWER_MS, deadline - now));
}

/** A release try's answer (not repeated: an offline queue still holds it); longer than a Sentinel failover. */
export const RELEASE_ANSWER_MS = 10_000;

/** The answer to the refresh that renews a mostly spent grant before it is handed out. */
export const RENEW_ANSWER_MS = 3000;

/** One CLIENT UNBLOCK's answer, before the slice's connection is closed instead. */
export const UNBLOCK_ANSWER_MS = 500;

/** The pause before the next CLIENT UNBLOCK of one slice: 5 ms doubling. */
export function unblockBackoffMs(attempt: number): number {
  return 5 * 2 ** attempt;
}

// ---- A lease ---------------------------------------------------------------------------------------

/** The lease this process counts: `staleClientTimeout` less Redlock's margin (1% clock drift, 2 ms timer lateness). */
export function holderLeaseMs(staleMs: number): number {
  return Math.max(1, staleMs * 0.99 - 2);
}

/** Automatic refreshes per lease: a lost or slow one still leaves two chances before the lease ends. */
export const REFRESHES_PER_LEASE = 3;

/** Whether a grant's lease (from `anchor`) is more than a third spent: then it is renewed before it is handed out. */
export function mostlySpent(anchor: number, holderMs: number, now: number): boolean {
  return anchor + holderMs - now < (2 / 3) * holderMs;
}

// ---- Housekeeping ----------------------------------------------------------------------------------

/** How long close() lets blocked waits end by themselves before it closes their connections. */
export const CLOSE_IN_FLIGHT_MS = 1500;

/** How long a lock manager's close() waits for connections still opening (node-redis' connect timeout). */
export const CLOSE_OPENING_MS = 5000;

/** How often a semaphore (or lock manager) on the caller's client checks whether the caller closed it. */
export const CLIENT_WATCH_MS = 250;

/** After a connection failed to open while others were open, the pool tries no other for this long. */
export const OPEN_RETRY_MS = 1000;
