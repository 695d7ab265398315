#!/usr/bin/env node
/** The `redis-token-semaphore` binary: parses the command line, connects, runs one command. */
import { parseArgs } from 'node:util';
import { createClient } from 'redis';
import { statusJson, summaryJson, unreadableJson } from '../admin/json';
import {
  deleteSemaphore,
  isUnreadable,
  listSemaphores,
  readStatus,
  readStatuses,
  releaseStale,
  releaseToken,
  resizeSemaphore,
  semaphoreExists,
  type Scope,
} from '../admin/operations';
import { assertKeyPrefix, DEFAULT_KEY_PREFIX, existsKeyPattern, semaphoreKeys } from '../keys';
import type { RedisClientLike } from '../client/types';
import { MAX_RESOURCES } from '../options';
import { CliError, EXIT, missing, notFound, usage } from './errors';
import { formatDuration, formatStatus, parseDuration, printable, redactUrl, table } from './format';
import { watch, type Io } from './watch';

const BIN = 'redis-token-semaphore';

const HELP = `Usage: ${BIN} <command> [arguments] [options]

See who holds a semaphore, and free what is stuck.

Commands:
  status <name>                       tokens, free tokens, holders (age, last refresh, owner, fence), waiters
  list                                every semaphore on this Redis (SCAN), with counts
  watch <name>                        status, refreshed until Ctrl-C (or --count refreshes)
  release <name> <token>              free a held token, whoever holds it; a waiter gets it at once
  release-stale <name> --older-than <duration>
                                      free every token whose holder's lease is over,
                                      and Ruby gem holders' held longer than that
  resize <name> <tokens>              add tokens, or retire free ones (never below those held)
  delete <name>                       delete every key of the semaphore
  dashboard                           serve the web dashboard (see --port, --host, --token)

Options:
  --url <url>          Redis to use (default: $REDIS_URL, else redis://127.0.0.1:6379)
  --prefix <prefix>    the semaphores' key prefix, their keyPrefix option (default ${DEFAULT_KEY_PREFIX})
  --json               machine-readable output on stdout (errors too: {"error":{code,message}})
  --older-than <d>     release-stale: a duration with a unit: 500ms, 30s, 5m, 2h
  --interval <d>       watch: time between refreshes (default 1s)
  --count <n>          watch: stop after n refreshes
  --port <n>           dashboard: port (default 8080; 0 picks a free one)
  --host <address>     dashboard: address to bind (default 127.0.0.1)
  --token <secret>     dashboard: bearer token for release buttons
                       (default: $REDIS_TOKEN_SEMAPHORE_TOKEN, else a random one, printed)
  --read-only          dashboard: no release buttons, no state-changing requests
  -h, --help           this help

Exit codes:
  0  done
  1  error: Redis unreachable or failing, or the change was refused (resize below the held tokens,
     a token re-taken since the dashboard showed it)
  2  usage: unknown command or option, missing or malformed argument
  3  not found: the semaphore does not exist (no ${semaphoreKeys('<name>').exists}), or the token is not held
`;

/** Which options each command takes (beyond --url, --prefix, --json, --help). */
const COMMANDS: Record<string, { readonly positionals: readonly string[]; readonly options: readonly string[] }> = {
  status: { positionals: ['name'], options: [] },
  list: { positionals: [], options: [] },
  watch: { positionals: ['name'], options: ['interval', 'count'] },
  release: { positionals: ['name', 'token'], options: [] },
  'release-stale': { positionals: ['name'], options: ['older-than'] },
  resize: { positionals: ['name', 'tokens'], options: [] },
  delete: { positionals: ['name'], options: [] },
  dashboard: { positionals: [], options: ['port', 'host', 'token', 'read-only'] },
};

type Values = {
  url?: string;
  prefix?: string;
  json?: boolean;
  help?: boolean;
  'older-than'?: string;
  interval?: string;
  count?: string;
  port?: string;
  host?: string;
  token?: string;
  'read-only'?: boolean;
};

export async function main(argv: readonly string[]): Promise<number> {
  let json = argv.includes('--json');
  const io: Io = { out: (text) => process.stdout.write(`${text}\n`), json };
  try {
    let parsed;
    try {
      parsed = parseArgs({
        args: [...argv],
        allowPositionals: true,
        strict: true,
        options: {
          url: { type: 'string' },
          prefix: { type: 'string' },
          json: { type: 'boolean' },
          help: { type: 'boolean', short: 'h' },
          'older-than': { type: 'string' },
          interval: { type: 'string' },
          count: { type: 'string' },
          port: { type: 'string' },
          host: { type: 'string' },
          token: { type: 'string' },
          'read-only': { type: 'boolean' },
        },
      });
    } catch (error) {
      throw usage((error as Error).message);
    }
    const values = parsed.values as Values;
    json = io.json = values.json === true;
    const [command, ...args] = parsed.positionals;
    if (values.help || command === undefined || command === 'help') {
      process.stdout.write(HELP);
      return command === undefined && !values.help ? EXIT.usage : EXIT.ok;
    }
    const spec = COMMANDS[command];
    if (!spec) throw usage(`unknown command "${printable(command)}" (see --help)`);
    if (args.length !== spec.positionals.length) {
      const expected = spec.positionals.map((p) => `<${p}>`).join(' ');
      throw usage(`${command} takes ${expected || 'no arguments'}, got ${args.length} argument${args.length === 1 ? '' : 's'}`);
    }
    for (const option of Object.keys(values)) {
      if (!['url', 'prefix', 'json', 'help', ...spec.options].includes(option)) {
        throw usage(`--${option} does not apply to ${command}`);
      }
    }
    if (args[0] === '') throw usage('the semaphore name must not be empty');
    const url = values.url ?? process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
    const keyPrefix = prefixOption(values.prefix);

    if (command === 'dashboard') {
      const { serveDashboard } = await import('./serve-dashboard');
      return await serveDashboard({ url, keyPrefix, ...dashboardOptions(values) });
    }
    // Validate everything before connecting.
    const run = prepare(command, args, values);
    const client = await connect(url);
    try {
      return await run({ redis: client, keyPrefix }, io);
    } finally {
      await client.quit().catch(() => client.disconnect());
    }
  } catch (error) {
    const cliError =
      error instanceof CliError ? error : new CliError(EXIT.error, 'error', (error as Error)?.message ?? String(error));
    if (json) {
      process.stdout.write(`${JSON.stringify({ error: { code: cliError.code, message: cliError.message } })}\n`);
    } else {
      process.stderr.write(`${BIN}: ${cliError.message}\n`);
      if (cliError.exitCode === EXIT.usage) process.stderr.write(`Try '${BIN} --help'.\n`);
    }
    return cliError.exitCode;
  }
}

type Run = (scope: Scope<RedisClientLike>, io: Io) => Promise<number>;

function prepare(command: string, args: readonly string[], values: Values): Run {
  const name = args[0] as string;
  switch (command) {
    case 'status':
      return async (scope, io) => {
        const status = await readStatus(scope, name);
        if (!status.exists) throw missing(name, scope.keyPrefix);
        io.out(io.json ? JSON.stringify(statusJson(status)) : formatStatus(status));
        return EXIT.ok;
      };
    case 'list':
      return async (scope, io) => {
        const { names, truncated } = await listSemaphores(scope);
        const statuses = await readStatuses(scope, names, 0);
        const present = statuses.filter((s) => isUnreadable(s) || s.exists);
        if (io.json) {
          const summaries = present.map((s) => (isUnreadable(s) ? unreadableJson(s) : summaryJson(s)));
          io.out(JSON.stringify({ semaphores: summaries, truncated }));
        } else if (present.length === 0) {
          io.out(`No semaphores (no ${printable(existsKeyPattern(scope.keyPrefix))} key on this Redis).`);
        } else {
          const rows = present.map((s) =>
            isUnreadable(s)
              ? [printable(s.name), '?', '?', '?', '?', `unreadable: ${printable(s.error)}`]
              : [
                  printable(s.name),
                  String(s.tokens),
                  String(s.holders.length),
                  String(s.available),
                  String(s.waiting),
                  s.holders.length > 0 ? formatDuration(s.holders[0]?.heldMs) : '-',
                ],
          );
          io.out(table(['NAME', 'TOKENS', 'HELD', 'FREE', 'WAITING', 'LONGEST HELD'], rows));
          if (truncated) io.out('(truncated: more semaphores than listed)');
        }
        return EXIT.ok;
      };
    case 'watch': {
      const interval = values.interval === undefined ? 1000 : durationOption('interval', values.interval);
      if (interval < 100) throw usage('--interval must be at least 100ms');
      const count = values.count === undefined ? Infinity : positiveInteger('--count', values.count);
      return (scope, io) => watch(scope, io, name, interval, count);
    }
    case 'release': {
      const token = args[1] as string;
      return async (scope, io) => {
        const outcome = await releaseToken(scope, name, token);
        if (outcome.status === 'not-found') throw missing(name, scope.keyPrefix);
        if (outcome.status !== 'released') {
          throw notFound(`token "${printable(token)}" of semaphore "${printable(name)}" is not held; nothing released`);
        }
        if (io.json) io.out(JSON.stringify({ name, token, released: true, available: outcome.available }));
        else io.out(`Released token "${printable(token)}" of "${printable(name)}": the longest-blocked waiter gets it, else it is free.`);
        return EXIT.ok;
      };
    }
    case 'release-stale': {
      if (values['older-than'] === undefined) throw usage('release-stale needs --older-than <duration>, e.g. --older-than 30s');
      const olderThan = durationOption('older-than', values['older-than']);
      if (olderThan <= 0) throw usage('--older-than must be more than 0');
      return async (scope, io) => {
        await assertExists(scope, name);
        const released = await releaseStale(scope, name, olderThan);
        if (io.json) io.out(JSON.stringify({ name, olderThanMs: olderThan, released }));
        else io.out(`Released ${released} token${released === 1 ? '' : 's'} of "${printable(name)}" whose holder's lease was over (Ruby holders: held longer than ${formatDuration(olderThan)}).`);
        return EXIT.ok;
      };
    }
    case 'resize': {
      const tokens = positiveInteger('<tokens>', args[1] as string);
      if (tokens > MAX_RESOURCES) throw usage(`<tokens> must be at most ${MAX_RESOURCES}`);
      return async (scope, io) => {
        const outcome = await resizeSemaphore(scope, name, tokens);
        if (outcome.status === 'not-found') throw missing(name, scope.keyPrefix);
        if (outcome.status === 'below-held') {
          throw new CliError(
            EXIT.error,
            'below_held',
            `cannot resize "${printable(name)}" to ${tokens}: ${outcome.held} tokens are held (nothing changed; release some first)`,
          );
        }
        if (io.json) io.out(JSON.stringify({ name, before: outcome.before, after: outcome.after, held: outcome.held }));
        else io.out(`Resized "${printable(name)}" from ${outcome.before} to ${outcome.after} tokens (${outcome.held} held).`);
        return EXIT.ok;
      };
    }
    case 'delete':
      return async (scope, io) => {
        await assertExists(scope, name);
        await deleteSemaphore(scope, name);
        io.out(io.json ? JSON.stringify({ name, deleted: true }) : `Deleted semaphore "${printable(name)}".`);
        return EXIT.ok;
      };
    default:
      throw usage(`unknown command "${printable(command)}"`);
  }
}

async function assertExists(scope: Scope<RedisClientLike>, name: string): Promise<void> {
  if (!(await semaphoreExists(scope, name))) throw missing(name, scope.keyPrefix);
}

function durationOption(option: string, text: string): number {
  const ms = parseDuration(text);
  if (ms === undefined) throw usage(`--${option} takes a duration with a unit (500ms, 30s, 5m, 2h), got "${printable(text)}"`);
  return ms;
}

function positiveInteger(what: string, text: string): number {
  if (!/^[1-9]\d*$/.test(text) || !Number.isSafeInteger(Number(text))) {
    throw usage(`${what} must be a positive integer, got "${printable(text)}"`);
  }
  return Number(text);
}

function prefixOption(text: string | undefined): string {
  if (text === undefined) return DEFAULT_KEY_PREFIX;
  try {
    assertKeyPrefix('--prefix', text);
  } catch (error) {
    throw usage((error as Error).message);
  }
  return text;
}

function dashboardOptions(values: Values) {
  let port = 8080;
  if (values.port !== undefined) {
    if (!/^\d+$/.test(values.port) || Number(values.port) > 65_535) throw usage(`--port must be 0 to 65535, got "${printable(values.port)}"`);
    port = Number(values.port);
  }
  const token = values.token ?? (values['read-only'] ? undefined : process.env['REDIS_TOKEN_SEMAPHORE_TOKEN']);
  if (token !== undefined && token.length < 8) throw usage('--token must be at least 8 characters');
  if (token !== undefined && values['read-only']) throw usage('--token and --read-only exclude each other');
  return { port, host: values.host ?? '127.0.0.1', token, readOnly: values['read-only'] === true };
}

/** A client that fails fast: no offline queue, no reconnection, a connect timeout. */
async function connect(url: string): Promise<RedisClientLike> {
  let client;
  try {
    client = createClient({ url, disableOfflineQueue: true, socket: { connectTimeout: 5000, reconnectStrategy: false } });
  } catch (error) {
    throw usage(`--url: ${(error as Error).message}`);
  }
  client.on('error', () => undefined); // failures reach the command as rejections
  try {
    await client.connect();
  } catch (error) {
    throw new CliError(EXIT.error, 'connection', `cannot connect to ${redactUrl(url)}: ${describeError(error)}`);
  }
  return client as unknown as RedisClientLike;
}

function describeError(error: unknown): string {
  const { message, code, errors } = (error ?? {}) as { message?: string; code?: string; errors?: unknown[] };
  if (message) return message;
  if (Array.isArray(errors) && errors.length > 0) return describeError(errors[0]);
  return code ?? String(error);
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      process.stderr.write(`${BIN}: ${String(error)}\n`);
      process.exitCode = EXIT.error;
    },
  );
}
