/** The CLI's guard on commands that change Redis: `--dry-run` shows, a terminal asks, `--yes` skips asking. */
import { hostname, userInfo } from 'node:os';
import { createInterface } from 'node:readline';
import { CliError, EXIT, usage } from './failures';

/** How a command that changes Redis may go ahead. */
export interface Consent {
  /** `--dry-run`: show what it would do, change nothing. */
  readonly dryRun: boolean;
  /** `--yes`: do it without asking. */
  readonly yes: boolean;
  /** `--reason <text>`: recorded with each release in the semaphore's audit log. */
  readonly reason: string;
}

/**
 * Refuses, before connecting, a change that nobody can confirm: stdin is not a terminal, and neither
 * `--yes` nor `--dry-run` was given (a script must say `--yes`; nothing is changed by surprise).
 */
export function assertConfirmable(command: string, consent: Consent, isTty = process.stdin.isTTY === true): void {
  if (consent.dryRun || consent.yes || isTty) return;
  throw usage(
    `${command} changes Redis and stdin is not a terminal to ask on: add --yes to go ahead, or --dry-run to see what it would do`,
  );
}

/**
 * Asks `question` on the terminal (stderr, so stdout stays the command's output) unless `--yes`;
 * anything but `y` or `yes` aborts with exit 1 and nothing changed.
 */
export async function confirm(consent: Consent, question: string): Promise<void> {
  if (consent.yes) return;
  const terminal = createInterface({ input: process.stdin, output: process.stderr });
  const answer = await new Promise<string>((resolve) => {
    terminal.question(`${question} [y/N] `, resolve);
    terminal.once('close', () => resolve(''));
  });
  terminal.close();
  if (!/^y(es)?$/i.test(answer.trim())) throw new CliError(EXIT.error, 'aborted', 'not confirmed; nothing changed');
}

/** Who runs the CLI, for the audit log: `<OS user>@<host>`. */
export function cliActor(): string {
  let user: string;
  try {
    user = userInfo().username;
  } catch {
    user = process.env['USER'] ?? process.env['LOGNAME'] ?? `uid ${process.getuid?.() ?? '?'}`;
  }
  return `${user}@${hostname()}`;
}
