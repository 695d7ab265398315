/** The dashboard's `/metrics`: the watched semaphores as Prometheus gauges (text format 0.0.4), labelled by name, and their holders' leases, labelled by name and token. */
import { leaseCounts, type Holder } from '../admin/leases';
import type { SemaphoreStatus } from '../admin/operations';

/** The Content-Type of the Prometheus text exposition format. */
export const METRICS_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

const PREFIX = 'redis_token_semaphore';

/** Each gauge per semaphore: its name after the prefix, its help, and its value. */
const GAUGES: ReadonlyArray<readonly [string, string, (status: SemaphoreStatus) => number]> = [
  ['exists', 'Whether the semaphore exists in Redis (1) or not (0).', (s) => (s.exists ? 1 : 0)],
  ['tokens', 'Tokens of the semaphore: held, free and collected.', (s) => s.tokens],
  ['available', 'Free tokens.', (s) => s.available],
  ['held', 'Held tokens.', (s) => s.holders.length],
  ['collected', 'Tokens set aside for a weighted waiter (permits > 1) until it has them all.', (s) => s.collected],
  ['waiting', 'Registered waiters.', (s) => s.waiting],
  [
    'oldest_hold_age_seconds',
    "How long the longest-held token has been held, on Redis' clock (0 when none is held).",
    (s) => (s.holders[0]?.heldMs ?? 0) / 1000,
  ],
  [
    'expired_leases',
    "Holders whose lease is over on Redis' clock: dead or cut-off processes, whose tokens release-stale frees.",
    (s) => leaseCounts(s.holders).expired,
  ],
  [
    'overdue_renewals',
    'Holders more than one renewal interval late (a third of the lease), their lease not over yet.',
    (s) => leaseCounts(s.holders).overdue,
  ],
];

/** Per holder (labelled by semaphore and token): at most this many per semaphore, longest-held first. */
export const HOLDER_SERIES = 100;

/** Each gauge per holder: its name, its help, and its value (`null`: no sample for this holder). */
const HOLDER_GAUGES: ReadonlyArray<readonly [string, string, (holder: Holder) => number | null]> = [
  [
    'holder_lease_remaining_seconds',
    "Seconds until the holder's lease ends, negative once it is over (expired for that long); none for a holder without a lease.",
    (h) => (h.leaseLeftMs === null ? null : h.leaseLeftMs / 1000),
  ],
  [
    'holder_held_seconds',
    'Seconds since the holder acquired its token.',
    (h) => (h.heldMs === null ? null : h.heldMs / 1000),
  ],
  [
    'holder_refreshed_seconds_ago',
    "Seconds since the holder's last refresh (or its acquisition).",
    (h) => (h.refreshedMs === null ? null : h.refreshedMs / 1000),
  ],
  [
    'holder_acquired_timestamp_seconds',
    'When the holder acquired its token (Unix time).',
    (h) => (h.since === null ? null : h.since.getTime() / 1000),
  ],
];

/** A label value escaped as the text format wants: backslash, double quote and line feed. */
function labelValue(text: string): string {
  return text.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

/**
 * The exposition: `redis_token_semaphore_up` (1 when Redis answered, 0 when `statuses` is
 * `undefined` because it did not), then each gauge for every watched semaphore.
 */
export function metricsText(statuses: readonly SemaphoreStatus[] | undefined): string {
  const lines = [
    `# HELP ${PREFIX}_up Whether Redis answered the dashboard's reads for this scrape (1) or not (0).`,
    `# TYPE ${PREFIX}_up gauge`,
    `${PREFIX}_up ${statuses === undefined ? 0 : 1}`,
  ];
  if (statuses !== undefined && statuses.length > 0) {
    for (const [name, help, value] of GAUGES) {
      lines.push(`# HELP ${PREFIX}_${name} ${help}`, `# TYPE ${PREFIX}_${name} gauge`);
      for (const status of statuses) {
        lines.push(`${PREFIX}_${name}{semaphore="${labelValue(status.name)}"} ${value(status)}`);
      }
    }
    for (const [name, help, value] of HOLDER_GAUGES) {
      lines.push(`# HELP ${PREFIX}_${name} ${help}`, `# TYPE ${PREFIX}_${name} gauge`);
      for (const status of statuses) {
        for (const holder of status.holders.slice(0, HOLDER_SERIES)) {
          const sample = value(holder);
          if (sample === null) continue;
          const labels = `semaphore="${labelValue(status.name)}",token="${labelValue(holder.token)}"`;
          lines.push(`${PREFIX}_${name}{${labels}} ${sample}`);
        }
      }
    }
  }
  return `${lines.join('\n')}\n`;
}
