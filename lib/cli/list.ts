/** `list [pattern]`: every semaphore under the prefix, with its counts and most urgent lease, filtered and sorted. */
import { isUnreadable, listSemaphores, readStatuses, type Scope } from '../admin/operations';
import { isUnreadableRow, selectRows, summarize, type Row, type Sort, type StateFilter } from '../admin/overview';
import { existsKeyPattern } from '../redis/keys';
import { EXIT } from './failures';
import { formatDuration, printable, table, terminalJson } from './format';
import type { Io } from './watch';

export interface ListOptions {
  /** A glob over names (`order:*`, `user:[0-9]*`); `''`: all. */
  readonly pattern: string;
  readonly state: StateFilter;
  readonly sort: Sort;
}

/** The most urgent lease of a row: `EXPIRED 8.7s ago`, `ends in 20.0s`, or `-`. */
function leaseCell(leaseLeftMs: number | null): string {
  if (leaseLeftMs === null) return '-';
  return leaseLeftMs < 0 ? `EXPIRED ${formatDuration(-leaseLeftMs)} ago` : `ends in ${formatDuration(leaseLeftMs)}`;
}

export async function listCommand(scope: Scope, io: Io, { pattern, state, sort }: ListOptions): Promise<number> {
  const { names, truncated } = await listSemaphores(scope);
  const statuses = await readStatuses(scope, names, 0);
  const all: Row[] = statuses
    .filter((s) => isUnreadable(s) || s.exists)
    .map((s) => (isUnreadable(s) ? { name: s.name, error: s.error } : summarize(s)));
  const rows = selectRows(all, { pattern, state, sort });
  if (io.json) {
    io.out(terminalJson({ semaphores: rows, truncated }));
    return EXIT.ok;
  }
  if (rows.length === 0) {
    const filtered = pattern !== '' || state !== 'any';
    io.out(
      filtered
        ? `No semaphore matches (${all.length} on this Redis).`
        : `No semaphores (no ${printable(existsKeyPattern(scope.keyPrefix))} key on this Redis).`,
    );
  } else {
    const cells = rows.map((row) =>
      isUnreadableRow(row)
        ? [printable(row.name), '?', '?', '?', '?', '?', '?', `unreadable: ${printable(row.error)}`]
        : [
            printable(row.name),
            String(row.tokens),
            String(row.held),
            String(row.available),
            String(row.waiting),
            String(row.expired),
            row.held > 0 ? formatDuration(row.longestHeldMs) : '-',
            leaseCell(row.leaseLeftMs) + (row.overdue > 0 ? `, ${row.overdue} RENEWAL OVERDUE` : ''),
          ],
    );
    io.out(table(['NAME', 'TOKENS', 'HELD', 'FREE', 'WAITING', 'EXPIRED', 'LONGEST HELD', 'FIRST LEASE END'], cells));
  }
  if (truncated) io.out('(truncated: more semaphores than listed)');
  return EXIT.ok;
}
