// The blocking wait: slices on a connection of its own until a token comes, the deadline passes, an abort or close().
import type { Connection } from '../redis/client/connection';
import { identity, raceAbort, rethrow, sleep, backoffMs, type Decision } from '../util/deadline';
import { SemaphoreClosedError, SemaphoreRedisError } from '../errors';
import type { Attempt, Grant } from '../hold/ledger';
import type { Holding } from '../hold/holding';
import { MAX_CONNECTION_FAILURES } from './recover';
import { newId } from '../util/ids';
import { endWait, type Registration } from './registration';
import { checkReplicated, waitOn } from '../hold/replication';
import { explainConnectionFailure } from '../redis/server-checks';
import { blockOnce, type SliceOutcome, type BlockingParts } from './slice';
import { debug } from '../telemetry';
import { CLIENT_WATCH_MS, isLastSlice, sliceMs } from './timing';

/** A wait in progress: what `block` was given, and what the loop carries from one slice to the next. */
interface Wait<R> {
  readonly deadline: number;
  readonly attempt: Attempt;
  readonly taken: (holding: Holding | null) => R;
  readonly failed: (error: unknown) => never;
  /** The registration the next slice blocks under (null: it makes one). */
  registration: Registration | null;
  /** Connection failures in a row, and the last one's error. */
  failures: number;
  lastError: unknown;
}

/** A promise rejected with what `fail` throws. */
function rejection(fail: () => never): Promise<never> {
  try {
    return fail();
  } catch (error) {
    return Promise.reject(error as Error);
  }
}

export class BlockingWait {
  readonly #parts: BlockingParts;
  /** Closes the semaphore (when the caller closed its client). */
  readonly #close: () => void;
  /** Watches the caller's client while this semaphore has connections (see #watchClient). */
  #clientWatch: NodeJS.Timeout | undefined;

  constructor(parts: BlockingParts, close: () => void) {
    this.#parts = parts;
    this.#close = close;
  }

  /**
   * The blocking path: BLMOVE slices on a dedicated connection until a token comes or `deadline`
   * passes, as `taken` makes it (or `failed`), kept among the calls close() waits for. A wait that
   * ends without a token (timed out, or failed) proves nothing about contention: the next lock tries first.
   * The usual wait (no signal, a connection free in the pool) sends its first slice from here, not
   * from an async frame: that slice's promise is the caller's, and the loop (`#wait`) takes over from
   * what it ended with only when it did not grant. `now`: `performance.now()`, if the caller has it.
   */
  block<R>(
    deadline: number,
    attempt: Attempt,
    registration: Registration | null,
    taken: (holding: Holding | null) => R,
    failed: (error: unknown) => never,
    now = performance.now(),
  ): Promise<R> {
    const { ctx } = this.#parts;
    const wait: Wait<R> = { deadline, attempt, taken, failed, registration, failures: 0, lastError: undefined };
    this.#watchClient();
    const remaining = deadline - now;
    const inline = attempt.signal === undefined && !ctx.closing && (remaining > 0 || registration !== null);
    const connection = inline ? ctx.pool.checkoutIdle() : undefined;
    if (connection === undefined) return ctx.track(this.#wait(wait));
    const decision: Decision = { settled: false, decided: undefined };
    const lost = (error: unknown): never => this.#lost(wait, connection, error);
    try {
      const went = (outcome: SliceOutcome): R | Promise<R> =>
        outcome.grant === null
          ? this.#wait(wait, { connection, outcome })
          : this.#deliver(wait, connection, outcome.grant, outcome.failure !== undefined);
      return ctx.track(this.#slice(wait, connection, remaining, went, lost, decision, now), decision);
    } catch (error) {
      return ctx.track(rejection(() => lost(error)));
    }
  }

  /** The first slice `block` sent threw, or could not settle what it did (see `settleTroubledSlice`): the wait fails. */
  #lost<R>(wait: Wait<R>, connection: Connection, error: unknown): never {
    this.#parts.ctx.pool.checkin(connection, true);
    this.#parts.contention.contended = false;
    return wait.failed(error);
  }

  /**
   * The wait loop: a connection from the pool (with backoff after connection failures), then slices
   * on it until one grants, the deadline passes, an abort or close(). `resumed`: the slice `block`
   * sent, on `connection`, ended with `outcome`, which did not grant.
   */
  async #wait<R>(wait: Wait<R>, resumed?: { connection: Connection; outcome: SliceOutcome }): Promise<R> {
    let granted = false;
    try {
      const { ctx } = this.#parts;
      const { deadline, attempt, taken } = wait;
      const { signal } = attempt;
      for (;;) {
        let connection: Connection | null | undefined = resumed?.connection;
        if (connection === undefined) {
          this.#stopIfClosedOrAborted(attempt, wait.registration);
          // A failure past the deadline (Redis cannot be reached) is a timeout, like any other: not a
          // retry that might fail MAX_CONNECTION_FAILURES times first.
          if (wait.failures > 0 && this.#timedOut(deadline, attempt, wait.registration)) return taken(null);
          if (wait.failures >= MAX_CONNECTION_FAILURES) {
            const explained = await explainConnectionFailure(ctx.client, wait.lastError);
            throw new SemaphoreRedisError(ctx.name, 'lock', explained);
          }
          if (wait.failures > 0) {
            await sleep(Math.min(backoffMs(wait.failures), deadline - performance.now()), signal);
            this.#stopIfClosedOrAborted(attempt, wait.registration);
            if (this.#timedOut(deadline, attempt, wait.registration)) return taken(null);
          }
          try {
            connection = ctx.pool.checkoutIdle() ?? (await ctx.pool.checkout(deadline, signal));
          } catch (error) {
            wait.failures++;
            wait.lastError = error;
            continue;
          }
          if (connection === null) {
            // Queued for a connection past the deadline (or until aborted or closed): no BLMOVE was sent
            // for this registration, so just end it.
            this.#stopIfClosedOrAborted(attempt, wait.registration);
            void endWait(ctx, wait.registration, attempt.permits);
            return taken(null);
          }
        }
        let broken = false;
        // Whether this call still answers for `connection`: an abort hands it to the settling below,
        // a grant to `#deliver`.
        let owned = true;
        try {
          for (;;) {
            let outcome: SliceOutcome;
            if (resumed !== undefined) {
              outcome = resumed.outcome;
              resumed = undefined;
            } else {
              if (ctx.closing) {
                // On the waiter's own connection, which works when the caller closed its client too, and
                // before that connection closes.
                await endWait(ctx, wait.registration, attempt.permits, connection);
                throw new SemaphoreClosedError(ctx.name);
              }
              this.#stopIfClosedOrAborted(attempt, wait.registration, connection);
              const now = performance.now();
              const remaining = deadline - now;
              // Past the deadline, a live registration still gets a last slice, whose claim ends it.
              if (remaining <= 0 && wait.registration === null) return taken(null);
              broken = true; // until the slice says otherwise: a throw leaves the connection in doubt
              const pending = this.#slice(wait, connection, remaining, identity<SliceOutcome>, rethrow, undefined, now);
              try {
                outcome = await (signal ? raceAbort(pending, signal) : pending);
              } catch (error) {
                if (!signal?.aborted || error !== signal.reason) throw error;
                // The caller is told at once; the slice, cut short by CLIENT UNBLOCK (Interrupts), settles
                // in the background: a token its claim granted goes back, its registration ends, and the
                // connection returns to the pool. close() waits for it.
                owned = false;
                void ctx.track(this.#settleAbandonedSlice(pending, connection, attempt.permits));
                throw error;
              }
            }
            broken = outcome.failure !== undefined;
            if (outcome.grant !== null) {
              owned = false;
              granted = true;
              return await this.#deliver(wait, connection, outcome.grant, broken);
            }
            wait.registration = outcome.registration;
            if (broken) {
              wait.failures++;
              wait.lastError = outcome.failure;
              break;
            }
            wait.failures = 0;
            // A shared pool's callers of other names queue for a connection: this one takes its turn
            // again at the back of the line (its registration stays), so a waiter on a name nobody
            // releases cannot keep a connection from callers whose tokens are free.
            if (ctx.pool.turnTaking) break;
          }
        } finally {
          if (owned) ctx.pool.checkin(connection, broken);
        }
      }
    } catch (error) {
      return granted ? rethrow(error) : wait.failed(error);
    } finally {
      if (!granted) this.#parts.contention.contended = false;
    }
  }

  /** Sends the next slice on `connection` (its registration made now if none is left): see `blockOnce`. */
  #slice<R, T>(
    wait: Wait<R>,
    connection: Connection,
    remaining: number,
    then: (outcome: SliceOutcome) => T | Promise<T>,
    failed: (error: unknown) => T | Promise<T>,
    decision?: Decision,
    now?: number,
  ): Promise<T> {
    const { ctx } = this.#parts;
    const short = wait.registration?.advance === true || ctx.pool.crowded;
    const slice = sliceMs(remaining, ctx.options.waitSlice, short);
    const registration = (wait.registration ??= { id: newId(), until: 0 });
    const lastSlice = isLastSlice(slice, remaining, wait.attempt.permits);
    const { attempt, deadline } = wait;
    return blockOnce(
      this.#parts,
      connection,
      registration,
      slice,
      lastSlice,
      attempt,
      deadline,
      then,
      failed,
      decision,
      now,
    );
  }

  /**
   * The end of a wait a slice granted: the holding, as `taken` makes it (or what `failed` makes of an
   * error: a replica check, a caller gone). `connection` goes back to the pool after it (`broken`: the
   * slice failed, and `recover` found the grant): waitReplicas WAITs there (the claim wrote the grant
   * on it), and a token declined goes back on it first.
   */
  #deliver<R>(wait: Wait<R>, connection: Connection, grant: Grant, broken: boolean): R | Promise<R> {
    const { ctx, ledger } = this.#parts;
    const holding = ctx.options.waitReplicas ? undefined : ledger.granted(grant, wait.attempt, connection);
    if (holding === undefined || holding instanceof Promise)
      return this.#deliverLater(wait, connection, grant, broken, holding);
    try {
      return wait.taken(holding);
    } catch (error) {
      return wait.failed(error);
    } finally {
      ctx.pool.checkin(connection, broken);
    }
  }

  /** `#deliver` when it waits: for the replicas, or for the holding (a refresh first, a token declined). */
  async #deliverLater<R>(
    wait: Wait<R>,
    connection: Connection,
    grant: Grant,
    broken: boolean,
    holding: Promise<Holding> | undefined,
  ): Promise<R> {
    const { ctx, ledger, contention } = this.#parts;
    let held: Holding;
    try {
      if (holding === undefined) {
        await checkReplicated(ctx, 'lock', await waitOn(ctx, connection), () => ledger.giveBack(grant));
      }
      held = await (holding ?? ledger.granted(grant, wait.attempt, connection));
    } catch (error) {
      contention.contended = false;
      return wait.failed(error);
    } finally {
      ctx.pool.checkin(connection, broken);
    }
    try {
      return wait.taken(held);
    } catch (error) {
      return wait.failed(error);
    }
  }

  /** Whether `deadline` has passed; if so, the registration left (if any) ends, or lapses if Redis is unreachable. */
  #timedOut(deadline: number, attempt: Attempt, registration: Registration | null): boolean {
    if (performance.now() < deadline) return false;
    void endWait(this.#parts.ctx, registration, attempt.permits);
    return true;
  }

  stopWatchingClient(): void {
    clearInterval(this.#clientWatch);
  }

  /**
   * The caller may close its own client (quit, disconnect, destroy) while this semaphore waits or
   * keeps connections: nothing could then settle those waits, and the connections would keep the
   * process alive. While it has connections, the semaphore checks every CLIENT_WATCH_MS and closes
   * itself (waits reject with SemaphoreClosedError) once the caller's client is closed.
   */
  #watchClient(): void {
    const { ctx, interrupts } = this.#parts;
    // A lock manager's semaphore: the manager watches the client once for all its names (lib/locks.ts).
    if (ctx.ownsClient || ctx.options.sharedPool !== undefined || this.#clientWatch !== undefined || ctx.closing)
      return;
    this.#clientWatch = setInterval(() => {
      if (!ctx.client.isOpen) {
        debug('%s: the caller closed its client; closing', ctx.name);
        this.#close();
      } else if (ctx.pool.size === 0 && interrupts.size === 0) {
        clearInterval(this.#clientWatch);
        this.#clientWatch = undefined;
      }
    }, CLIENT_WATCH_MS);
    this.#clientWatch.unref();
  }

  /** What a slice abandoned by its caller (an abort) leaves: the token goes back, the registration ends. */
  async #settleAbandonedSlice(pending: Promise<SliceOutcome>, connection: Connection, permits: number): Promise<void> {
    const { ctx, ledger } = this.#parts;
    let broken = true;
    try {
      const outcome = await pending;
      broken = outcome.failure !== undefined;
      // On the waiter's own connection, free now, which works even when the caller closed its client.
      const via = broken ? undefined : connection;
      if (outcome.grant !== null) await ledger.giveBack(outcome.grant, via);
      await endWait(ctx, outcome.registration, permits, via);
    } catch {
      // A refused slice settled itself (blockOnce gives back what its claim kept).
    } finally {
      ctx.pool.checkin(connection, broken);
    }
  }

  /**
   * An aborted wait, or one whose semaphore is closing, ends here, between Redis steps: its
   * registration goes (best effort: it also lapses).
   */
  #stopIfClosedOrAborted({ signal, permits }: Attempt, registration: Registration | null, via?: Connection): void {
    const { ctx } = this.#parts;
    if (!ctx.closing && !signal?.aborted) return;
    void endWait(ctx, registration, permits, via);
    if (ctx.closing) throw new SemaphoreClosedError(ctx.name);
    signal?.throwIfAborted();
  }
}
