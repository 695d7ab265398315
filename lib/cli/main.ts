#!/usr/bin/env node
/** The `redis-token-semaphore` binary: parses the command line, connects, runs one command. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { readAuditOrError } from '../admin/audit';
import { statusJson } from '../admin/json';
import { readStatus, resizeSemaphore, type Scope } from '../admin/operations';
import { nameMatcher, SORTS, type Sort } from '../admin/overview';
import { assertKeyPrefix, DEFAULT_KEY_PREFIX, semaphoreKeys } from '../redis/keys';
import { MAX_RESOURCES, MIN_LEASE_MS } from '../options';
import { assertConfirmable } from './confirm';
import { connect, connectOptions, type ConnectValues } from './connect';
import { CliError, EXIT, missing, usage } from './failures';
import { formatAudit, formatStatus, parseDuration, printable, terminalJson } from './format';
import { listCommand } from './list';
import { deleteCommand, releaseOne, releaseOwner, releaseStaleCommand, type Change } from './release';
import { watch, type Io } from './watch';

const BIN = 'redis-token-semaphore';

const HELP = `Usage: ${BIN} <command> [arguments] [options]

See who holds a semaphore, and free what is stuck.

Commands:
  status <name>                       tokens, free tokens, waiters, holders (lease: ends in / EXPIRED ago,
                                      renewal overdue; age, last refresh, owner, fence), and the last
                                      releases made by operators (the audit log)
  list [pattern]                      every semaphore on this Redis (SCAN; every master of a cluster), with
                                      counts and expired leases; a glob pattern (order:*) keeps matching names
  watch <name>                        status, refreshed until Ctrl-C (or --count refreshes)
  release <name> <token>              free a held token from the grant holding it; a waiter gets it at once
  release --owner <label> <name>...   free every grant of that owner (a dead pod's) in these semaphores;
                                      a label ending with * matches every owner starting with the rest
  release-stale <name>                free every token whose holder's lease has expired (a dead holder);
                                      Ruby gem holders record no lease: see --ruby-older-than
  resize <name> <tokens>              add tokens, or retire free ones (never below those held)
  delete <name>                       delete every key of the semaphore (its audit log too)
  dashboard                           serve the web dashboard (see --port, --host, --token, --watch)

Connection:
  --url <url>          Redis to use (default: $REDIS_URL, else redis://127.0.0.1:6379); rediss:// for TLS;
                       user and password may be in it: redis://user:password@host:6379
  --cluster <urls>     a Redis Cluster: seed node URLs separated by commas
  --sentinel <nodes>   Sentinels as host:port pairs separated by commas (with --sentinel-name)
  --sentinel-name <n>  the primary's name the Sentinels monitor
  --tls-ca <file>      connect with TLS, trusting this CA certificate (PEM)
  --user <name>        ACL user
  --password <secret>  password (default: $REDIS_PASSWORD; visible to other local users in ps: prefer the variable)
  --prefix <prefix>    the semaphores' key prefix, their keyPrefix option (default ${DEFAULT_KEY_PREFIX})

Options:
  --json               machine-readable output on stdout (errors too: {"error":{code,message}})
  --dry-run            release, release-stale, delete: show what would be done; change nothing
  -y, --yes            release, release-stale, delete: do it without asking. Without it they ask on a
                       terminal, and refuse (exit 2) when stdin is not a terminal
  --reason <text>      release, release-stale: why, recorded in the audit log
  --owner <label>      release: every grant of this owner instead of one token
  --ruby-older-than <d>  release-stale: also free Ruby gem holders held longer than this duration
                       (a unit is needed: 500ms, 30s, 5m, 2h); holders of this library go by their lease
  --held, --waiting, --expired
                       list: only semaphores with held tokens, waiters, expired leases
  --sort <key>         list: name (default; numbers in order: user:2 before user:10), trouble
                       (expired leases, then waiters), held, waiting, expired, longest-held
  --interval <d>       watch: time between refreshes (default 1s)
  --count <n>          watch: stop after n refreshes
  --port <n>           dashboard: port (default 8080; 0 picks a free one)
  --host <address>     dashboard: address to bind (default 127.0.0.1)
  --token <secret>     dashboard: bearer token for release buttons
                       (default: $REDIS_TOKEN_SEMAPHORE_TOKEN, else a random one, printed)
  --read-only          dashboard: no release buttons, no state-changing requests
  --watch <name>       dashboard: a semaphore to export on /metrics (repeat for more)
  -h, --help           this help
  -V, --version        the version

Exit codes:
  0  done (also: a dry run, a release --owner that found nothing to release)
  1  error: Redis unreachable or failing, the change was refused (resize below the held tokens,
     a token re-taken since it was shown), or not confirmed at the prompt
  2  usage: unknown command or option, missing or malformed argument, a change without --yes
     when stdin is not a terminal
  3  not found: the semaphore does not exist (no ${semaphoreKeys('<name>').exists}), or the token is not held
`;

/** Options every command takes: where Redis is, and how output is written. */
const COMMON = ['url', 'cluster', 'sentinel', 'sentinel-name', 'tls-ca', 'user', 'password', 'prefix', 'json', 'help'];
/** Options of the commands that change Redis. */
const CHANGE = ['yes', 'dry-run', 'reason'];

/** Which arguments and options each command takes (beyond COMMON). */
const COMMANDS: Record<string, { readonly positionals: readonly string[]; readonly options: readonly string[] }> = {
  status: { positionals: ['name'], options: [] },
  list: { positionals: [], options: ['held', 'waiting', 'expired', 'sort'] },
  watch: { positionals: ['name'], options: ['interval', 'count'] },
  release: { positionals: ['name', 'token'], options: [...CHANGE, 'owner'] },
  'release-stale': { positionals: ['name'], options: [...CHANGE, 'ruby-older-than'] },
  resize: { positionals: ['name', 'tokens'], options: [] },
  delete: { positionals: ['name'], options: ['yes', 'dry-run'] },
  dashboard: { positionals: [], options: ['port', 'host', 'token', 'read-only', 'watch'] },
};

type Values = ConnectValues & {
  prefix?: string;
  json?: boolean;
  help?: boolean;
  version?: boolean;
  yes?: boolean;
  'dry-run'?: boolean;
  reason?: string;
  owner?: string;
  'ruby-older-than'?: string;
  'older-than'?: string;
  held?: boolean;
  waiting?: boolean;
  expired?: boolean;
  sort?: string;
  interval?: string;
  count?: string;
  port?: string;
  host?: string;
  token?: string;
  'read-only'?: boolean;
  watch?: string[];
};

/** The package's version, from its package.json (two levels up from lib/cli and from dist/cli). */
function version(): string {
  return (JSON.parse(readFileSync(join(__dirname, '..', '..', 'package.json'), 'utf8')) as { version: string }).version;
}

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
          cluster: { type: 'string' },
          sentinel: { type: 'string' },
          'sentinel-name': { type: 'string' },
          'tls-ca': { type: 'string' },
          user: { type: 'string' },
          password: { type: 'string' },
          prefix: { type: 'string' },
          json: { type: 'boolean' },
          help: { type: 'boolean', short: 'h' },
          version: { type: 'boolean', short: 'V' },
          yes: { type: 'boolean', short: 'y' },
          'dry-run': { type: 'boolean' },
          reason: { type: 'string' },
          owner: { type: 'string' },
          'ruby-older-than': { type: 'string' },
          'older-than': { type: 'string' },
          held: { type: 'boolean' },
          waiting: { type: 'boolean' },
          expired: { type: 'boolean' },
          sort: { type: 'string' },
          interval: { type: 'string' },
          count: { type: 'string' },
          port: { type: 'string' },
          host: { type: 'string' },
          token: { type: 'string' },
          'read-only': { type: 'boolean' },
          watch: { type: 'string', multiple: true },
        },
      });
    } catch (error) {
      throw usage((error as Error).message);
    }
    const values = parsed.values as Values;
    json = io.json = values.json === true;
    const [command, ...args] = parsed.positionals;
    if (values.version) {
      io.out(json ? terminalJson({ version: version() }) : version());
      return EXIT.ok;
    }
    if (values.help || command === undefined || command === 'help') {
      process.stdout.write(HELP);
      return command === undefined && !values.help ? EXIT.usage : EXIT.ok;
    }
    const spec = COMMANDS[command];
    if (!spec) throw usage(`unknown command "${printable(command)}" (see --help)`);
    for (const option of Object.keys(values)) {
      if (option === 'older-than' && command === 'release-stale') {
        throw usage(
          "--older-than is now --ruby-older-than, for Ruby gem holders only: this library's holders are released when their lease has expired, with no option",
        );
      }
      if (![...COMMON, ...spec.options].includes(option)) {
        throw usage(`--${option} does not apply to ${command}`);
      }
    }
    // release --owner takes one or more names, not a name and a token.
    const byOwner = command === 'release' && values.owner !== undefined;
    // list takes an optional pattern.
    const counted = command === 'list' && args.length === 1 ? 0 : args.length;
    if (byOwner ? args.length === 0 : counted !== spec.positionals.length) {
      const expected = byOwner
        ? '<name>...'
        : command === 'list'
          ? 'at most a [pattern]'
          : spec.positionals.map((p) => `<${p}>`).join(' ');
      throw usage(
        `${command}${byOwner ? ' --owner' : ''} takes ${expected || 'no arguments'}, got ${args.length} argument${args.length === 1 ? '' : 's'}`,
      );
    }
    if (args.some((arg, i) => arg === '' && (byOwner || spec.positionals[i] === 'name')))
      throw usage('the semaphore name must not be empty');
    if (values.owner === '') throw usage('--owner must not be empty');
    const connection = connectOptions(values);
    const keyPrefix = prefixOption(values.prefix);

    if (command === 'dashboard') {
      const { serveDashboard } = await import('./serve-dashboard');
      return await serveDashboard({ connection, keyPrefix, ...dashboardOptions(values) });
    }
    // Validate everything before connecting.
    const run = prepare(command, args, values);
    const { client, close } = await connect(connection);
    try {
      return await run({ redis: client, keyPrefix }, io);
    } finally {
      await close();
    }
  } catch (error) {
    const cliError =
      error instanceof CliError
        ? error
        : new CliError(EXIT.error, 'error', printable((error as Error)?.message ?? String(error)));
    if (json) {
      process.stdout.write(`${terminalJson({ error: { code: cliError.code, message: cliError.message } })}\n`);
    } else {
      process.stderr.write(`${BIN}: ${cliError.message}\n`);
      if (cliError.exitCode === EXIT.usage) process.stderr.write(`Try '${BIN} --help'.\n`);
    }
    return cliError.exitCode;
  }
}

type Run = (scope: Scope, io: Io) => Promise<number>;

function prepare(command: string, args: readonly string[], values: Values): Run {
  const name = args[0] as string;
  switch (command) {
    case 'status':
      return async (scope, io) => {
        const status = await readStatus(scope, name);
        if (!status.exists) throw missing(name, scope);
        const { records, error } = await readAuditOrError(scope, name, AUDIT_SHOWN);
        const json = { ...statusJson(status), audit: records, ...(error !== undefined && { auditError: error }) };
        io.out(io.json ? terminalJson(json) : `${formatStatus(status)}\n${formatAudit(records, error)}`);
        return EXIT.ok;
      };
    case 'list': {
      const sort = values.sort ?? 'name';
      if (!(SORTS as readonly string[]).includes(sort))
        throw usage(`--sort takes one of ${SORTS.join(', ')}, got "${printable(sort)}"`);
      const states = (['held', 'waiting', 'expired'] as const).filter((state) => values[state] === true);
      if (states.length > 1) throw usage(`--${states.join(', --')} exclude each other: give one`);
      const options = { pattern: args[0] ?? '', state: states[0] ?? ('any' as const), sort: sort as Sort };
      try {
        nameMatcher(options.pattern); // a pattern no glob reads is a usage error, before connecting
      } catch (error) {
        throw usage((error as Error).message);
      }
      return (scope, io) => listCommand(scope, io, options);
    }
    case 'watch': {
      const interval = values.interval === undefined ? 1000 : durationOption('interval', values.interval);
      if (interval < 100) throw usage('--interval must be at least 100ms');
      const count = values.count === undefined ? Infinity : positiveInteger('--count', values.count);
      return (scope, io) => watch(scope, io, name, interval, count);
    }
    case 'release': {
      const change = changeOf(command, args, values);
      if (values.owner !== undefined) {
        const owner = values.owner;
        return (scope, io) => releaseOwner(scope, owner, args, { ...change, io });
      }
      const token = args[1] as string;
      return (scope, io) => releaseOne(scope, name, token, { ...change, io });
    }
    case 'release-stale': {
      const option = values['ruby-older-than'];
      const rubyOlderThan = option === undefined ? null : durationOption('ruby-older-than', option);
      if (rubyOlderThan !== null && rubyOlderThan < MIN_LEASE_MS)
        throw usage(`--ruby-older-than must be at least ${MIN_LEASE_MS}ms`);
      const change = changeOf(command, args, values);
      return (scope, io) => releaseStaleCommand(scope, name, rubyOlderThan, { ...change, io });
    }
    case 'resize': {
      const tokens = positiveInteger('<tokens>', args[1] as string);
      if (tokens > MAX_RESOURCES) throw usage(`<tokens> must be at most ${MAX_RESOURCES}`);
      return async (scope, io) => {
        const outcome = await resizeSemaphore(scope, name, tokens);
        if (outcome.status === 'not-found') throw missing(name, scope);
        if (outcome.status === 'below-held') {
          throw new CliError(
            EXIT.error,
            'below_held',
            `cannot resize "${printable(name)}" to ${tokens}: ${outcome.held} tokens are held (nothing changed; release some first)`,
          );
        }
        if (io.json) io.out(terminalJson({ name, before: outcome.before, after: outcome.after, held: outcome.held }));
        else
          io.out(
            `Resized "${printable(name)}" from ${outcome.before} to ${outcome.after} tokens (${outcome.held} held).`,
          );
        return EXIT.ok;
      };
    }
    case 'delete': {
      const change = changeOf(command, args, values);
      return (scope, io) => deleteCommand(scope, name, { ...change, io });
    }
    default:
      throw usage(`unknown command "${printable(command)}"`);
  }
}

/** How many audit entries `status` shows. */
const AUDIT_SHOWN = 5;

/**
 * Consent and the command line the audit log records, for a command that changes Redis; refused
 * here, before connecting, when it could be neither confirmed nor was `--yes` given.
 */
function changeOf(command: string, args: readonly string[], values: Values): Omit<Change, 'io'> {
  const consent = { dryRun: values['dry-run'] === true, yes: values.yes === true, reason: values.reason ?? '' };
  assertConfirmable(command, consent);
  const flags = [
    ...(values.owner === undefined ? [] : ['--owner', values.owner]),
    ...(values['ruby-older-than'] === undefined ? [] : ['--ruby-older-than', values['ruby-older-than']]),
  ];
  return {
    consent,
    command: [BIN, command, ...flags, ...args]
      .map((word) => (/^[\w@%+=:,./*-]+$/.test(word) ? word : JSON.stringify(word)))
      .join(' '),
  };
}

function durationOption(option: string, text: string): number {
  const ms = parseDuration(text);
  if (ms === undefined)
    throw usage(`--${option} takes a duration with a unit (500ms, 30s, 5m, 2h), got "${printable(text)}"`);
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
    if (!/^\d+$/.test(values.port) || Number(values.port) > 65_535)
      throw usage(`--port must be 0 to 65535, got "${printable(values.port)}"`);
    port = Number(values.port);
  }
  const token = values.token ?? (values['read-only'] ? undefined : process.env['REDIS_TOKEN_SEMAPHORE_TOKEN']);
  if (token !== undefined && token.length < 8) throw usage('--token must be at least 8 characters');
  if (token !== undefined && values['read-only']) throw usage('--token and --read-only exclude each other');
  const watched = values.watch ?? [];
  if (watched.includes('')) throw usage('--watch takes a semaphore name, not an empty one');
  return { port, host: values.host ?? '127.0.0.1', token, readOnly: values['read-only'] === true, watched };
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
