/** The CLI's errors and exit codes. */
import { keysOf, type Scope } from '../admin/operations';
import { printable } from './format';

/** What the CLI exits with: documented in docs/OPERATIONS.md ("Command line") and in `--help`. */
export const EXIT = { ok: 0, error: 1, usage: 2, notFound: 3 } as const;

/** An error with an exit code and a machine-readable code for `--json`. */
export class CliError extends Error {
  constructor(
    readonly exitCode: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}
export const usage = (message: string) => new CliError(EXIT.usage, 'usage', message);
export const notFound = (message: string) => new CliError(EXIT.notFound, 'not_found', message);

/** The semaphore has no EXISTS key (as `scope` names it: under its prefix, with a hash tag on a cluster). */
export function missing(name: string, scope: Scope): CliError {
  return notFound(`semaphore "${printable(name)}" does not exist (no ${printable(keysOf(scope, name).exists)} key)`);
}

/** The message of a connection failure (node-redis may reject with an AggregateError of each address tried). */
export function describeError(error: unknown): string {
  const { message, code, errors } = (error ?? {}) as { message?: string; code?: string; errors?: unknown[] };
  if (message) return message;
  if (Array.isArray(errors) && errors.length > 0) return describeError(errors[0]);
  return code ?? String(error);
}
