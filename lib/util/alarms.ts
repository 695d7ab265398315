// Many deadlines of any length on one timer: a min-heap of alarms, each cancelled in O(log n).

/** One alarm: when it rings (`performance.now()`), and what it calls then. */
export interface Alarm {
  readonly at: number;
  readonly ring: () => void;
  /** Its place in the heap; -1 once it rang or was cancelled. */
  index: number;
}

/**
 * Alarms of any length with one timer for all, armed for the earliest: what a `setTimeout` per call
 * would do, without a timer per call (a blocking slice's guard). The timer is re-armed only when it
 * fires, or when an alarm earlier than it is set. Rings after I/O already due (see `afterIo`).
 */
export class Alarms {
  readonly #heap: Alarm[] = [];
  #timer: NodeJS.Timeout | undefined;
  /** When the armed timer fires (`performance.now()`). */
  #timerAt = Infinity;

  /** Calls `ring` in `ms` from `now`, unless `cancel` came first. */
  set(ms: number, ring: () => void, now = performance.now()): Alarm {
    const alarm: Alarm = { at: now + ms, ring, index: this.#heap.length };
    this.#heap.push(alarm);
    this.#up(alarm.index);
    if (alarm.at < this.#timerAt) this.#arm(alarm.at);
    return alarm;
  }

  /** `alarm` no longer rings (a no-op once it rang or was cancelled). */
  cancel(alarm: Alarm): void {
    const { index } = alarm;
    if (index < 0) return;
    alarm.index = -1;
    const last = this.#heap.pop()!;
    if (last === alarm) return;
    this.#heap[index] = last;
    last.index = index;
    this.#down(index);
    this.#up(last.index);
    // The timer stays armed: when it fires early, it re-arms for the new head.
  }

  #arm(at: number): void {
    clearTimeout(this.#timer);
    this.#timerAt = at;
    this.#timer = setTimeout(() => setImmediate(() => this.#ring()), Math.max(1, at - performance.now()));
    this.#timer.unref();
  }

  #ring(): void {
    this.#timer = undefined;
    this.#timerAt = Infinity;
    const now = performance.now();
    for (let head = this.#heap[0]; head !== undefined && head.at <= now; head = this.#heap[0]) {
      this.cancel(head);
      try {
        head.ring();
      } catch {
        // An alarm's own failure is its own: the others still ring.
      }
    }
    const head = this.#heap[0];
    if (head !== undefined && head.at < this.#timerAt) this.#arm(head.at);
  }

  #up(index: number): void {
    const heap = this.#heap;
    const alarm = heap[index]!;
    while (index > 0) {
      const parentIndex = (index - 1) >> 1;
      const parent = heap[parentIndex]!;
      if (parent.at <= alarm.at) break;
      heap[index] = parent;
      parent.index = index;
      index = parentIndex;
    }
    heap[index] = alarm;
    alarm.index = index;
  }

  #down(index: number): void {
    const heap = this.#heap;
    const alarm = heap[index]!;
    for (;;) {
      const left = 2 * index + 1;
      if (left >= heap.length) break;
      const right = left + 1;
      const child = right < heap.length && heap[right]!.at < heap[left]!.at ? right : left;
      if (heap[child]!.at >= alarm.at) break;
      heap[index] = heap[child]!;
      heap[index]!.index = index;
      index = child;
    }
    heap[index] = alarm;
    alarm.index = index;
  }
}
