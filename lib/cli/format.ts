/** The CLI's text output: durations, tables, and user data made safe for a terminal. */
import type { AuditRecord } from '../admin/audit';
import { leaseCounts, type Holder } from '../admin/leases';
import type { SemaphoreStatus } from '../admin/operations';

/** `850ms`, `12.3s`, `1m 05s`, `2h 03m`, `3d 04h`; `?` for an unknown duration. */
export function formatDuration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '?';
  if (ms < 1000) return `${Math.round(ms)}ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)}s`;
  const s = Math.floor(ms / 1000);
  const pad = (n: number) => String(n).padStart(2, '0');
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h ${pad(Math.floor(s / 60) % 60)}m`;
  return `${Math.floor(s / 86_400)}d ${pad(Math.floor(s / 3600) % 24)}h`;
}

/**
 * Every character a terminal may act on rather than show: C0 controls, DEL, C1 controls (U+009B
 * is CSI, as ESC [ is), the line and paragraph separators, and the bidirectional controls that
 * reorder what follows them on screen (U+202E), so a name cannot hide or fake what is printed.
 */
// eslint-disable-next-line no-control-regex -- these are what it finds
const TERMINAL_ACTIVE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g;

/** `\xNN` for a code below 0x100, else `\uNNNN`. */
function escapeCode(c: string): string {
  const code = c.charCodeAt(0);
  return code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
}

/**
 * Names, tokens and owner labels are user data: the characters a terminal acts on (a terminal
 * escape sequence in a label could rewrite the screen, a bidi override reverse it) are shown as
 * `\xNN`/`\uNNNN`, and an empty string as `""`.
 */
export function printable(text: string): string {
  if (text === '') return '""';
  return text.replace(TERMINAL_ACTIVE, escapeCode);
}

/**
 * `value` as one line of JSON that is safe on a terminal: `JSON.stringify` escapes C0 only, so DEL,
 * C1 and the bidi controls are written as `\uNNNN` escapes too (the same string once parsed).
 */
export function terminalJson(value: unknown): string {
  return JSON.stringify(value).replace(TERMINAL_ACTIVE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** Left-aligned columns separated by two spaces; the header row first. */
export function table(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((header, i) => Math.max(header.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(headers), ...rows.map(line)].join('\n');
}

/** A UTC timestamp to the millisecond, without the `T` and `Z` noise: `2026-11-22 12:00:00.123`. */
export function formatTime(date: Date | null): string {
  return date === null ? '?' : date.toISOString().replace('T', ' ').replace('Z', '');
}

/** `redis://user:***@host:port/db`: never print a password. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.toString();
  } catch {
    return url.replace(/\/\/[^@/]*@/, '//***@');
  }
}

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * `500ms`, `30s`, `1.5m`, `2h`, `1d` in milliseconds; `undefined` if it cannot be read. A unit is
 * required: a bare `30` could mean seconds (the Ruby gem) or milliseconds (this library's API).
 */
export function parseDuration(text: string): number | undefined {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(text.trim());
  if (!match) return undefined;
  const ms = Number(match[1]) * (UNITS[match[2] as string] as number);
  return Number.isFinite(ms) ? ms : undefined;
}

/** A holder's lease in a word or three: `ends in 28.1s`, `EXPIRED 8.7s ago`, `ends in 3.2s, RENEWAL OVERDUE`. */
export function formatLease(h: Holder): string {
  if (h.leaseMs === undefined) return 'not recorded';
  if (h.leaseLeftMs === null) return 'none';
  if (h.expired) return `EXPIRED ${formatDuration(-h.leaseLeftMs)} ago`;
  return `ends in ${formatDuration(h.leaseLeftMs)}${h.overdue ? ', RENEWAL OVERDUE' : ''}`;
}

/** What the holders' leases come to, after the count of holders: ` (1 lease expired: …)`, or `''`. */
export function formatLeaseCounts(holders: readonly Holder[]): string {
  const { expired, overdue } = leaseCounts(holders);
  const parts = [
    ...(expired > 0
      ? [`${expired} lease${expired === 1 ? '' : 's'} EXPIRED: holder dead or cut off, release-stale frees it`]
      : []),
    ...(overdue > 0 ? [`${overdue} renewal${overdue === 1 ? '' : 's'} OVERDUE`] : []),
  ];
  return parts.length === 0 ? '' : ` (${parts.join('; ')})`;
}

/** The tokens set aside for a weighted waiter, as the tokens line's last part ('' when none are). */
function formatCollected({ collected, collector }: SemaphoreStatus): string {
  if (collected === 0 && collector === null) return '';
  const waiter = collector === null ? 'weighted waiters' : `a waiter for ${collector.permits}`;
  return `, ${collected} collected by ${waiter}`;
}

/** `status` as text: a header, then one row per holder, longest-held first, with its lease. */
export function formatStatus(status: SemaphoreStatus): string {
  const lines = [
    `semaphore  ${printable(status.name)}`,
    `tokens     ${status.tokens} (${status.holders.length} held, ${status.available} free${formatCollected(status)})`,
    `waiting    ${status.waiting}`,
    `now        ${formatTime(status.now)} UTC (Redis' clock)`,
  ];
  if (status.holders.length === 0) {
    lines.push('holders    none');
  } else {
    lines.push(`holders    ${status.holders.length}${formatLeaseCounts(status.holders)}`);
    const rows = status.holders.map((h) => [
      printable(h.token),
      formatLease(h),
      formatDuration(h.heldMs),
      formatDuration(h.refreshedMs),
      formatTime(h.since),
      h.fence === undefined ? '-' : String(h.fence),
      h.owner === undefined ? '(not recorded: Ruby gem?)' : printable(h.owner),
    ]);
    lines.push(
      table(['TOKEN', 'LEASE', 'HELD FOR', 'REFRESHED AGO', 'SINCE (UTC)', 'FENCE', 'OWNER'], rows)
        .split('\n')
        .map((line) => `  ${line}`)
        .join('\n'),
    );
  }
  return lines.join('\n');
}

/** The last releases operators made (newest first), under `status`. */
export function formatAudit(records: readonly AuditRecord[], error?: string): string {
  if (error !== undefined) return `released  (the audit log cannot be read: ${printable(error)})`;
  if (records.length === 0) return 'released  none by operators (CLI, dashboard)';
  const rows = records.map((r) => [
    formatTime(new Date(r.at)),
    printable(r.action),
    r.token === '' ? '-' : printable(r.token),
    r.owner === '' ? '-' : printable(r.owner),
    printable(r.by),
    r.reason === '' ? '-' : printable(r.reason),
  ]);
  return [
    `released  by operators, latest ${records.length}`,
    table(['AT (UTC)', 'ACTION', 'TOKEN', 'OWNER', 'BY', 'REASON'], rows)
      .split('\n')
      .map((line) => `  ${line}`)
      .join('\n'),
  ].join('\n');
}
