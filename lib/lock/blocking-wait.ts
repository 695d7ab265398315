// The blocking wait: slices on a connection of its own until a token comes, the deadline passes, an abort or close().
import type { Connection } from '../redis/client/connection';
import { raceAbort, sleep, backoffMs } from '../util/deadline';
import { SemaphoreClosedError, SemaphoreRedisError } from '../errors';
import type { Attempt } from '../hold/ledger';
import type { Holding } from '../hold/holding';
import { MAX_CONNECTION_FAILURES } from './recover';
import { newId } from '../util/ids';
import { endWait, type Registration } from './registration';
import { checkReplicated, waitOn } from '../hold/replication';
import { explainConnectionFailure } from '../redis/server-checks';
import { blockOnce, type SliceOutcome, type BlockingParts } from './slice';
import { debug } from '../telemetry';
import { CLIENT_WATCH_MS, isLastSlice, sliceMs } from './timing';

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
   * passes, as `taken` makes it (or `failed`: its one async frame serves the caller's). A wait that
   * ends without a token (timed out, or failed) proves nothing about contention: the next lock tries first.
   */
  async block<R>(
    deadline: number,
    attempt: Attempt,
    registered: Registration | null,
    taken: (holding: Holding | null) => R,
    failed: (error: unknown) => never,
  ): Promise<R> {
    let granted = false;
    try {
      const { ctx, ledger } = this.#parts;
      const { signal } = attempt;
      this.#watchClient();
      let registration = registered;
      let failures = 0;
      let lastError: unknown;
      for (;;) {
        this.#stopIfClosedOrAborted(attempt, registration);
        // A failure past the deadline (Redis cannot be reached) is a timeout, like any other: not a
        // retry that might fail MAX_CONNECTION_FAILURES times first.
        if (failures > 0 && this.#timedOut(deadline, attempt, registration)) return taken(null);
        if (failures >= MAX_CONNECTION_FAILURES) {
          throw new SemaphoreRedisError(ctx.name, 'lock', await explainConnectionFailure(ctx.client, lastError));
        }
        if (failures > 0) {
          await sleep(Math.min(backoffMs(failures), deadline - performance.now()), signal);
          this.#stopIfClosedOrAborted(attempt, registration);
          if (this.#timedOut(deadline, attempt, registration)) return taken(null);
        }
        let connection: Connection | null;
        try {
          connection = ctx.pool.checkoutIdle() ?? (await ctx.pool.checkout(deadline, signal));
        } catch (error) {
          failures++;
          lastError = error;
          continue;
        }
        if (connection === null) {
          // Queued for a connection past the deadline (or until aborted or closed): no BLMOVE was sent
          // for this registration, so just end it.
          this.#stopIfClosedOrAborted(attempt, registration);
          void endWait(ctx, registration, attempt.permits);
          return taken(null);
        }
        let broken = false;
        // Whether this call still answers for `connection`: an abort hands it to the settling below.
        let owned = true;
        try {
          for (;;) {
            if (ctx.closing) {
              // On the waiter's own connection, which works when the caller closed its client too, and
              // before that connection closes.
              await endWait(ctx, registration, attempt.permits, connection);
              throw new SemaphoreClosedError(ctx.name);
            }
            this.#stopIfClosedOrAborted(attempt, registration, connection);
            const remaining = deadline - performance.now();
            // Past the deadline, a live registration still gets a last slice, whose claim ends it.
            if (remaining <= 0 && registration === null) return taken(null);
            const short = registration?.advance === true || ctx.pool.crowded;
            const slice = sliceMs(remaining, ctx.options.waitSlice, short);
            registration ??= { id: newId(), until: 0 };
            broken = true; // until blockOnce says otherwise: a throw leaves the connection in doubt
            const lastSlice = isLastSlice(slice, remaining, attempt.permits);
            const pending = blockOnce(this.#parts, connection, registration, slice, lastSlice, attempt, deadline);
            let outcome: SliceOutcome;
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
            broken = outcome.failure !== undefined;
            if (outcome.grant !== null) {
              const grant = outcome.grant;
              // waitReplicas: the claim wrote the grant on this connection, so WAIT there.
              if (ctx.options.waitReplicas) {
                await checkReplicated(ctx, 'lock', await waitOn(ctx, connection), () => ledger.giveBack(grant));
              }
              // Awaited when it is a promise: a token declined goes back on `connection`, before checkin.
              const holding = ledger.granted(grant, attempt, connection);
              const held = holding instanceof Promise ? await holding : holding;
              granted = true;
              return taken(held);
            }
            registration = outcome.registration;
            if (broken) {
              failures++;
              lastError = outcome.failure;
              break;
            }
            failures = 0;
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
      return failed(error);
    } finally {
      if (!granted) this.#parts.contention.contended = false;
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
