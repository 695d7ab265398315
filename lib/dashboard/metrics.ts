/** The dashboard's `/metrics`: the watched semaphores as Prometheus gauges (text format 0.0.4), labelled by name only. */
import type { SemaphoreStatus } from '../admin/operations';

/** The Content-Type of the Prometheus text exposition format. */
export const METRICS_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

const PREFIX = 'redis_token_semaphore';

/** Each gauge per semaphore: its name after the prefix, its help, and its value. */
const GAUGES: ReadonlyArray<readonly [string, string, (status: SemaphoreStatus) => number]> = [
  ['exists', 'Whether the semaphore exists in Redis (1) or not (0).', (s) => (s.exists ? 1 : 0)],
  ['tokens', 'Tokens of the semaphore: held and free.', (s) => s.tokens],
  ['available', 'Free tokens.', (s) => s.available],
  ['held', 'Held tokens.', (s) => s.holders.length],
  ['waiting', 'Registered waiters.', (s) => s.waiting],
  [
    'oldest_hold_age_seconds',
    "How long the longest-held token has been held, on Redis' clock (0 when none is held).",
    (s) => (s.holders[0]?.heldMs ?? 0) / 1000,
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
  }
  return `${lines.join('\n')}\n`;
}
