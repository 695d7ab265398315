/**
 * A checker over acquisition histories: holders report when they got a token and when they gave it
 * up (times from one host clock), the test records when it killed a holder, and the checker rebuilds
 * the intervals in which each live holder believed it held a token.
 */

export type HistoryEvent =
  /** The holder's lock resolved `token` (stamped after the grant). */
  | { readonly holder: string; readonly kind: 'acquired'; readonly token: string; readonly at: number }
  /** The holder is about to unlock `token` (stamped before the release is sent). */
  | { readonly holder: string; readonly kind: 'released'; readonly token: string; readonly at: number }
  /** The holder was SIGKILLed: whatever it held, it stopped using at `at`. */
  | { readonly holder: string; readonly kind: 'killed'; readonly at: number };

export interface Interval {
  readonly holder: string;
  readonly token: string;
  readonly start: number;
  readonly end: number;
  /** How it ended: released, cut by the holder's death, or still open at the end of the history. */
  readonly ending: 'released' | 'killed' | 'open';
}

export interface HistoryReport {
  readonly intervals: Interval[];
  readonly acquisitions: number;
  /** Most intervals open at one instant (an interval ending at t does not overlap one starting at t). */
  readonly maxConcurrent: number;
  readonly maxConcurrentAt: number;
  /** Pairs of intervals of the same token that overlap: two holders believed they held one token. */
  readonly tokenOverlaps: Array<[Interval, Interval]>;
  /** Events that make no sense (a release without an acquisition, two acquisitions of one token). */
  readonly anomalies: string[];
}

/**
 * Rebuilds the intervals from events in the order each holder reported them (IPC keeps one process's
 * messages in order); an interval still open ends at the holder's kill, or at `endOfHistory`.
 */
export function intervalsOf(
  events: readonly HistoryEvent[],
  endOfHistory: number,
): { intervals: Interval[]; anomalies: string[] } {
  const intervals: Interval[] = [];
  const anomalies: string[] = [];
  // A holder is dead after its kill, so the kill closes whatever it still held, whatever the stamps say.
  const killedAt = new Map<string, number>();
  // Open acquisitions per holder: token → start.
  const open = new Map<string, Map<string, number>>();
  for (const event of events) {
    if (event.kind === 'killed') {
      killedAt.set(event.holder, event.at);
      continue;
    }
    const held = open.get(event.holder) ?? new Map<string, number>();
    open.set(event.holder, held);
    if (event.kind === 'acquired') {
      if (held.has(event.token)) anomalies.push(`${event.holder} acquired ${event.token} twice at ${event.at}`);
      held.set(event.token, event.at);
    } else {
      const start = held.get(event.token);
      if (start === undefined) {
        anomalies.push(`${event.holder} released ${event.token} it did not hold at ${event.at}`);
        continue;
      }
      held.delete(event.token);
      intervals.push({ holder: event.holder, token: event.token, start, end: event.at, ending: 'released' });
    }
  }
  for (const [holder, held] of open) {
    const killed = killedAt.get(holder);
    for (const [token, start] of held) {
      const end = Math.max(start, killed ?? endOfHistory);
      intervals.push({ holder, token, start, end, ending: killed === undefined ? 'open' : 'killed' });
    }
  }
  return { intervals, anomalies };
}

export function checkHistory(events: readonly HistoryEvent[], endOfHistory: number): HistoryReport {
  const { intervals, anomalies } = intervalsOf(events, endOfHistory);
  // Sweep: at equal times ends come before starts, since a release is stamped before the next grant.
  const points = intervals.flatMap((i) => [
    { at: i.start, delta: +1 },
    { at: i.end, delta: -1 },
  ]);
  points.sort((a, b) => a.at - b.at || a.delta - b.delta);
  let current = 0;
  let maxConcurrent = 0;
  let maxConcurrentAt = 0;
  for (const point of points) {
    current += point.delta;
    if (current > maxConcurrent) {
      maxConcurrent = current;
      maxConcurrentAt = point.at;
    }
  }
  const tokenOverlaps: Array<[Interval, Interval]> = [];
  const byToken = new Map<string, Interval[]>();
  for (const interval of intervals) byToken.set(interval.token, [...(byToken.get(interval.token) ?? []), interval]);
  // Two holds overlap when each starts before the other ends. Stamps are whole ms, so a hold can
  // start and end in the ms another starts in (a hold of 0 ms, then the next grant): they touch.
  for (const list of byToken.values()) {
    list.sort((a, b) => a.start - b.start);
    for (let i = 0; i < list.length; i++) {
      for (let j = i + 1; j < list.length && list[j]!.start < list[i]!.end; j++) {
        if (list[i]!.start < list[j]!.end) tokenOverlaps.push([list[i]!, list[j]!]);
      }
    }
  }
  return {
    intervals,
    acquisitions: events.filter((e) => e.kind === 'acquired').length,
    maxConcurrent,
    maxConcurrentAt,
    tokenOverlaps,
    anomalies,
  };
}
