/** `watch <name>`: the CLI's refreshing status. */
import { statusJson } from '../admin/json';
import { readStatus, type Scope } from '../admin/operations';
import { EXIT, missing } from './failures';
import { formatDuration, formatStatus, formatTime, printable, terminalJson } from './format';

/** Where a command writes: lines on stdout, as text or JSON. */
export interface Io {
  out(text: string): void;
  json: boolean;
}

/**
 * `watch <name>`: the status every `interval` ms, `count` times or until SIGINT/SIGTERM (exit 0).
 * On a terminal each refresh replaces the screen; otherwise frames follow each other.
 */
export async function watch(scope: Scope, io: Io, name: string, interval: number, count: number): Promise<number> {
  let stopped = false;
  let wake: () => void = () => undefined;
  const stop = () => {
    stopped = true;
    wake();
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  const tty = process.stdout.isTTY === true && !io.json;
  try {
    for (let frame = 1; frame <= count && !stopped; frame++) {
      const status = await readStatus(scope, name);
      if (frame === 1 && !status.exists) throw missing(name, scope);
      if (io.json) {
        io.out(terminalJson(statusJson(status)));
      } else {
        const body = status.exists ? formatStatus(status) : `semaphore  ${printable(name)}\n(does not exist any more)`;
        const header = `${formatTime(status.now)} UTC, every ${formatDuration(interval)}${tty ? ' (Ctrl-C to stop)' : ''}`;
        io.out(tty ? `\x1b[H\x1b[2J${header}\n\n${body}` : `--- ${header}\n${body}`);
      }
      if (frame < count && !stopped) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, interval);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
    }
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
  }
  return EXIT.ok;
}
