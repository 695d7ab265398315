// Time limits on promises: a deadline, an abort signal, a sleep, and the retry backoff.
/** What `withDeadline` rejects with when the time is up. */
export class DeadlineExceeded extends Error {
  constructor(what: string, ms: number) {
    super(`${what}: no answer within ${ms} ms`);
    this.name = 'DeadlineExceeded';
  }
}

/**
 * Runs `expire` when `ms` have passed and then what I/O was already due: a reply that arrived while
 * the event loop was busy (a long GC, a loaded machine) settles its call first, so only a call that
 * really got no answer in time expires.
 */
function afterIo(expire: () => void, ms: number): NodeJS.Timeout {
  const timer = setTimeout(() => setImmediate(expire), ms);
  timer.unref();
  return timer;
}

/**
 * Settles as `promise` does, or rejects with `DeadlineExceeded` after `ms` (or what `expired` makes
 * of it). The promise itself runs on (a command queued offline may still run later): callers that
 * care settle it in the background.
 */
export function withDeadline<T>(
  promise: Promise<T>,
  ms: number,
  what: string,
  expired?: (error: DeadlineExceeded) => Error,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = afterIo(() => {
      const error = new DeadlineExceeded(what, ms);
      reject(expired ? expired(error) : error);
    }, ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}

/** One call a `DeadlineQueue` waits for: what settles it when its deadline passes. */
interface Watched {
  readonly at: number;
  readonly what: string;
  /** Settles the call with the `DeadlineExceeded` (the call's own way: a rejection, or a fallback). */
  readonly expire: (error: DeadlineExceeded) => void;
  settled: boolean;
}

/** How `settle` starts a call: `send` hands its answer to `answered` or `failed`, once, and never synchronously. */
export type Send<T> = (answered: (value: T) => void, failed: (error: unknown) => void) => void;

/**
 * Told when a `settle` promise (or one `decided` serves) is decided: `plain` when it resolved with a
 * value (neither a thenable nor a rejection), so it has settled already, or does as the callback
 * telling it returns. `settled` says whether that happened yet.
 */
export interface Decision {
  settled: boolean;
  decided: ((plain: boolean) => void) | undefined;
}

/**
 * `withDeadline` for many calls with the same time limit, with one timer for all: calls queue in the
 * order they began, so their deadlines are in order; the timer, armed for the head's, expires the
 * calls past theirs. A call expires no earlier than `ms` after it began. No promise of its own but the
 * call's: the hot path's calls (tryLock, release) are watched here.
 */
export class DeadlineQueue {
  readonly ms: number;
  /** The calls waited for, `#head` to `#tail` (exclusive): emptied by index, so a push allocates nothing. */
  readonly #queue: Array<Watched | undefined> = [];
  #head = 0;
  #tail = 0;
  #timer: NodeJS.Timeout | undefined;

  constructor(ms: number) {
    this.ms = ms;
  }

  /**
   * Settles as `promise` does, or rejects with what `expired` makes of a `DeadlineExceeded` after
   * `ms`. (`expired` is best made once per kind of call, not per call.)
   */
  watch<T>(promise: Promise<T>, what: string, expired: (error: DeadlineExceeded) => Error): Promise<T> {
    return this.settle<T, T>(
      (answered, failed) => void promise.then(answered, failed),
      what,
      identity,
      rethrow,
      (error) => {
        throw expired(error);
      },
    );
  }

  /**
   * One promise for a call and what follows it: starts the call with `send`, and resolves what
   * `answered(value)` or `failed(error, deadline)` return once it answers (`deadline`: when the time
   * limit ends, on `performance.now()`), or, once `ms` passed unanswered, what
   * `expired` returns (by default `failed` with the `DeadlineExceeded`), given the answer still to
   * come as `late` (a rejection nobody handles is not reported); an answer after that goes to `late`
   * only. What they throw rejects it. `decision`, when given, hears when it is decided. `now`: when
   * the call starts, if the caller has read the clock.
   */
  settle<T, R>(
    send: Send<T>,
    what: string,
    answered: (value: T) => R | PromiseLike<R>,
    failed: (error: unknown, deadline: number) => R | PromiseLike<R>,
    expired?: (error: DeadlineExceeded, late: Promise<T>) => R | PromiseLike<R>,
    decision?: Decision,
    now = performance.now(),
  ): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      /** Where an answer after the deadline goes: set when the deadline passes. */
      let late: { answered: (value: T) => void; failed: (error: unknown) => void } | undefined;
      const watched: Watched = {
        at: now + this.ms,
        what,
        expire: (error) => {
          const lateAnswer = new Promise<T>((answer, fail) => (late = { answered: answer, failed: fail }));
          lateAnswer.catch(ignore);
          const make = expired
            ? (exceeded: DeadlineExceeded) => expired(exceeded, lateAnswer)
            : (exceeded: DeadlineExceeded) => failed(exceeded, watched.at);
          decide(resolve, reject, make, error, decision);
        },
        settled: false,
      };
      this.#queue[this.#tail++] = watched;
      if (this.#timer === undefined) this.#arm(this.ms);
      send(
        (value) => {
          if (watched.settled) return late?.answered(value);
          this.#settle(watched);
          decide(resolve, reject, answered, value, decision);
        },
        (error: unknown) => {
          if (watched.settled) return late?.failed(error);
          this.#settle(watched);
          decide(resolve, reject, (reason: unknown) => failed(reason, watched.at), error, decision);
        },
      );
    });
  }

  #settle(watched: Watched): void {
    watched.settled = true;
    if (this.#queue[this.#head] === watched) this.#dropSettled();
  }

  /** Drops the settled calls at the head of the queue. */
  #dropSettled(): void {
    const queue = this.#queue;
    while (this.#head < this.#tail && queue[this.#head]!.settled) queue[this.#head++] = undefined;
    if (this.#head === this.#tail) {
      this.#head = this.#tail = 0;
    } else if (this.#head >= 1024 && this.#head * 2 >= this.#tail) {
      queue.copyWithin(0, this.#head, this.#tail);
      queue.fill(undefined, this.#tail - this.#head, this.#tail);
      this.#tail -= this.#head;
      this.#head = 0;
    }
  }

  #arm(ms: number): void {
    this.#timer = afterIo(() => this.#expire(), ms);
  }

  #expire(): void {
    this.#timer = undefined;
    const now = performance.now();
    for (let next = this.#queue[this.#head]; next !== undefined && next.at <= now; next = this.#queue[this.#head]) {
      next.settled = true;
      this.#dropSettled();
      next.expire(new DeadlineExceeded(next.what, this.ms));
    }
    const head = this.#queue[this.#head];
    if (head !== undefined) this.#arm(Math.max(1, head.at - now));
  }
}

/** Continuations that pass a value or an error on as they came, and one that drops a rejection. */
export const identity = <T>(value: T): T => value;
export const rethrow = (error: unknown): never => {
  throw error;
};
export const ignore = (): void => undefined;

/** Resolves with what `make(input)` returns, or rejects with what it throws; then tells `decision`. */
function decide<A, R>(
  resolve: (value: R | PromiseLike<R>) => void,
  reject: (error: unknown) => void,
  make: (input: A) => R | PromiseLike<R>,
  input: A,
  decision: Decision | undefined,
): void {
  try {
    resolve(decided(() => make(input), decision));
  } catch (thrown) {
    reject(thrown);
  }
}

/**
 * What `make()` returns or throws, for a `.then` callback whose promise settles with it as soon as
 * the callback returns: `decision` is told, as `decide` tells it, whether that is a plain value.
 */
export function decided<V>(make: () => V, decision: Decision | undefined): V {
  let plain = false;
  try {
    const value = make();
    plain = !isThenable(value);
    return value;
  } finally {
    if (decision !== undefined) {
      decision.settled = true;
      decision.decided?.(plain);
    }
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}

/** Settles as `promise` does, or rejects with `signal`'s reason as soon as it aborts. */
export function raceAbort<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  return new Promise<T>((resolve, reject) => {
    const abort = () => reject(signal.reason);
    signal.addEventListener('abort', abort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', abort));
  });
}

/** Resolves after `ms`, or as soon as `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** Exponential backoff for retries after connection failures: 50 ms doubling, at most 2 s. */
export function backoffMs(attempt: number): number {
  return Math.min(2000, 50 * 2 ** attempt);
}
