// Cancelling a blocked slice: an abort or close() ends its BLMOVE with CLIENT UNBLOCK, or else closes its connection.
import type { SemaphoreContext } from '../context';
import { sleep, withDeadline } from '../util/deadline';
import { disconnectQuietly, type Connection } from '../redis/client/connection';
import { UNBLOCK_ANSWER_MS, unblockBackoffMs } from './timing';

/** Most `CLIENT UNBLOCK`s sent for one cancelled slice (5 ms doubling: about 2.5 s) before its connection is closed. */
const UNBLOCK_TRIES = 9;

/** A blocked slice, as its interrupt sees it: whether it settled, and what wakes an interrupt waiting for that. */
interface Slice {
  settled: boolean;
  wake: (() => void) | undefined;
}

export class Interrupts {
  readonly #ctx: SemaphoreContext;
  /** Ends each blocked slice early (see #interrupt); close() calls them all. */
  readonly #interrupts = new Set<() => void>();

  constructor(ctx: SemaphoreContext) {
    this.#ctx = ctx;
  }

  /** How many slices are blocked right now. */
  get size(): number {
    return this.#interrupts.size;
  }

  /**
   * Lets an abort or close() end the slice blocked on `connection` early. Returns what disarms it
   * once the slice settled, which returns the UNBLOCK still on its way, if any, to await.
   */
  arm(connection: Connection, signal: AbortSignal | undefined): () => Promise<void> | undefined {
    const slice: Slice = { settled: false, wake: undefined };
    let interrupting: Promise<void> | undefined;
    const interrupt = () => void (interrupting ??= this.#interrupt(connection, slice));
    signal?.addEventListener('abort', interrupt, { once: true });
    this.#interrupts.add(interrupt);
    if (this.#ctx.closing || signal?.aborted) interrupt();
    return () => {
      signal?.removeEventListener('abort', interrupt);
      this.#interrupts.delete(interrupt);
      slice.settled = true;
      slice.wake?.();
      // An UNBLOCK still on its way must not end the next wait this connection serves.
      return interrupting;
    };
  }

  /** Ends every blocked slice (close()). */
  interruptAll(): void {
    for (const interrupt of this.#interrupts) interrupt();
  }

  /**
   * Ends a blocked slice early, as if it had timed out, by `CLIENT UNBLOCK` from the main connection:
   * the connection stays open and the claim pipelined behind BLMOVE still runs, in the order Redis
   * chose, so it settles the wait itself (a token that arrived first is granted, and given back by
   * the caller). Redis orders this, not the moment it notices a closed socket, and no connection is
   * lost. UNBLOCK answers 0 while the BLMOVE is still on its way (or already served): it is sent
   * again, with backoff, until the slice settles. Closing the connection is the fallback, where the
   * id is unknown, the main connection fails, or the BLMOVE never shows up blocked.
   */
  async #interrupt(connection: Connection, slice: Slice): Promise<void> {
    const ctx = this.#ctx;
    const settled = new Promise<void>((resolve) => (slice.settled ? resolve() : (slice.wake = resolve)));
    const id = ctx.pool.idOf(connection);
    if (id !== undefined) {
      for (let attempt = 0; attempt < UNBLOCK_TRIES && !slice.settled; attempt++) {
        try {
          // The main client, or (the caller closed it) a control connection of the pool's own.
          const control = ctx.client.isOpen ? ctx.client : await ctx.pool.control();
          const unblocked = control.sendCommand(['CLIENT', 'UNBLOCK', id]);
          if (Number(await withDeadline(unblocked, UNBLOCK_ANSWER_MS, 'CLIENT UNBLOCK')) === 1) return;
        } catch {
          break;
        }
        await Promise.race([settled, sleep(unblockBackoffMs(attempt))]);
      }
      if (slice.settled) return;
    }
    await disconnectQuietly(connection);
  }
}
