import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { redisUrl } from './redis';

/**
 * The Ruby gem redis-semaphore 0.3.1, run by Debian's `ruby` with redis-rb (`ruby-redis`), for the
 * interoperability spec. The gem is test data (rubygems is not reachable from CI): its `lib/` is
 * GEM_LIB, or `<repo>/../shared/fixtures/ruby-redis-semaphore-0.3.1/lib`.
 */
export const GEM_LIB = process.env['GEM_LIB']
  ? resolve(process.env['GEM_LIB'])
  : resolve(__dirname, '..', '..', '..', 'shared', 'fixtures', 'ruby-redis-semaphore-0.3.1', 'lib');

export type RubyAvailability =
  | { readonly available: true; readonly gemLib: string; readonly versions: string }
  | { readonly available: false; readonly gemLib: string; readonly reason: string };

let availability: RubyAvailability | undefined;

/**
 * Whether the gem is there and `ruby` can load it with redis-rb (checked once, synchronously, so a
 * spec can choose `describe` or `describe.skip` while it is being defined).
 */
export function rubyAvailability(): RubyAvailability {
  if (availability) return availability;
  const gemLib = GEM_LIB;
  if (!existsSync(join(gemLib, 'redis', 'semaphore.rb'))) {
    availability = {
      available: false,
      gemLib,
      reason: `the gem redis-semaphore 0.3.1 is not at ${gemLib} (set GEM_LIB to its lib/ folder)`,
    };
    return availability;
  }
  const probe = spawnSync('ruby', [...rubyArgs(), '-e', 'print "ruby #{RUBY_VERSION}, redis-rb #{Redis::VERSION}"'], {
    encoding: 'utf8',
    timeout: 20_000,
    killSignal: 'SIGKILL',
  });
  if (probe.error || probe.status !== 0) {
    const why = probe.error
      ? (probe.error as NodeJS.ErrnoException).code === 'ENOENT'
        ? '`ruby` is not installed'
        : String(probe.error.message)
      : `ruby could not load redis-rb and the gem (exit ${probe.status}): ${probe.stderr.trim().split('\n')[0]}`;
    availability = { available: false, gemLib, reason: `${why} (apt-get install ruby ruby-redis)` };
    return availability;
  }
  availability = { available: true, gemLib, versions: probe.stdout.trim() };
  return availability;
}

/**
 * Defined before every snippet: `REDIS` (a redis-rb client on the URL given), `semaphore(name, **opts)`
 * (a `Redis::Semaphore` on it) and `monotonic` (seconds). redis-rb 4.8 deprecation warnings about the
 * gem's `multi` style are silenced, so that stderr carries only real failures.
 */
const PRELUDE = `
$stdout.sync = true
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
REDIS = Redis.new(url: ENV.fetch('RTS_RUBY_REDIS_URL'))
def semaphore(name, **options)
  Redis::Semaphore.new(name, redis: REDIS, **options)
end
def monotonic
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end
`;

function rubyArgs(): string[] {
  return ['-I', GEM_LIB, '-rredis', '-rredis/semaphore', '-rjson'];
}

function rubyCommand(script: string, args: readonly string[]): string[] {
  return [...rubyArgs(), '-e', `${PRELUDE}\n${script}`, '--', ...args];
}

export interface RunRubyOptions {
  /** Where `REDIS` connects (the run's Redis unless given). */
  readonly url?: string;
  /** The script's ARGV (names and numbers are passed here rather than spliced into the source). */
  readonly args?: readonly (string | number)[];
  /** The child is SIGKILLed (by its pid) after this long, and the call rejects. */
  readonly timeoutMs?: number;
}

/**
 * Runs a short Ruby snippet (after the prelude above) to completion and resolves its stdout;
 * rejects with its stderr when it exits non-zero or runs past `timeoutMs`.
 */
export function runRuby(
  script: string,
  { url = redisUrl(), args = [], timeoutMs = 20_000 }: RunRubyOptions = {},
): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    execFile(
      'ruby',
      rubyCommand(script, args.map(String)),
      {
        env: { ...process.env, RTS_RUBY_REDIS_URL: url },
        timeout: timeoutMs,
        killSignal: 'SIGKILL',
        maxBuffer: 16 << 20,
      },
      (error, stdout, stderr) => {
        if (!error) return resolvePromise(stdout);
        const how = error.killed ? `was killed after ${timeoutMs} ms` : `failed (exit ${String(error.code)})`;
        reject(new Error(`ruby ${how}: ${stderr.trim() || error.message}\nstdout: ${stdout.trim()}`));
      },
    );
  });
}

/** The lines a JSON-printing Ruby snippet wrote, parsed (one JSON value per line). */
export function parseLines<T = unknown>(stdout: string): T[] {
  return stdout
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as T);
}

const running = new Set<RubyProcess>();

/**
 * A Ruby child process started by this file, talked to line by line (stdout in, stdin out), and
 * killed only by its own pid. Every one is SIGKILLed after `timeoutMs` whatever it is doing.
 */
export class RubyProcess {
  readonly #child: ChildProcess;
  readonly #lines: string[] = [];
  #partial = '';
  #stderr = '';
  readonly #guard: NodeJS.Timeout;
  /** Resolves with the exit code (null when killed by a signal) once the process is gone. */
  readonly exited: Promise<number | null>;

  constructor(script: string, { url = redisUrl(), args = [], timeoutMs = 30_000 }: RunRubyOptions = {}) {
    this.#child = spawn('ruby', rubyCommand(script, args.map(String)), {
      env: { ...process.env, RTS_RUBY_REDIS_URL: url },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.#child.stdout?.on('data', (chunk: Buffer) => {
      const parts = (this.#partial + chunk.toString()).split('\n');
      this.#partial = parts.pop() ?? '';
      this.#lines.push(...parts);
    });
    this.#child.stderr?.on('data', (chunk: Buffer) => (this.#stderr += chunk.toString()));
    this.#child.stdin?.on('error', () => undefined);
    this.#child.on('error', (error) => (this.#stderr += String(error)));
    this.exited = new Promise((resolvePromise) =>
      this.#child.once('exit', (code) => {
        clearTimeout(this.#guard);
        if (this.#partial !== '') this.#lines.push(this.#partial);
        this.#partial = '';
        running.delete(this);
        resolvePromise(code);
      }),
    );
    this.#guard = setTimeout(() => void this.kill(), timeoutMs);
    this.#guard.unref();
    running.add(this);
  }

  get pid(): number {
    const pid = this.#child.pid;
    if (pid === undefined) throw new Error(`ruby did not start: ${this.#stderr}`);
    return pid;
  }

  get alive(): boolean {
    return this.#child.exitCode === null && this.#child.signalCode === null;
  }

  /** Every complete line printed so far. */
  get lines(): readonly string[] {
    return this.#lines;
  }

  get stderr(): string {
    return this.#stderr;
  }

  /** Writes one line to the script's stdin (`$stdin.gets`). */
  send(line: string): void {
    if (this.alive) this.#child.stdin?.write(`${line}\n`);
  }

  /** The first printed line matching `pattern` (seen already or within `timeoutMs`). */
  async waitForLine(pattern: RegExp, timeoutMs = 15_000): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.#lines.find((line) => pattern.test(line));
      if (found !== undefined) return found;
      if (!this.alive)
        throw new Error(
          `ruby exited before printing ${pattern}: ${this.#stderr.trim()}\nstdout: ${this.#lines.join('\n')}`,
        );
      if (Date.now() > deadline)
        throw new Error(`ruby printed no ${pattern} within ${timeoutMs} ms; stdout: ${this.#lines.join('\n')}`);
      await new Promise((resolvePromise) => setTimeout(resolvePromise, 10));
    }
  }

  /** Resolves stdout once the process has exited by itself with code 0 (rejects otherwise, or after `timeoutMs`). */
  async finished(timeoutMs = 30_000): Promise<string> {
    let timer: NodeJS.Timeout | undefined;
    const code = await Promise.race([
      this.exited,
      new Promise<'timeout'>((resolvePromise) => (timer = setTimeout(() => resolvePromise('timeout'), timeoutMs))),
    ]).finally(() => clearTimeout(timer));
    if (code === 'timeout') throw new Error(`ruby (pid ${this.pid}) still runs after ${timeoutMs} ms`);
    if (code !== 0)
      throw new Error(`ruby exited with ${String(code ?? this.#child.signalCode)}: ${this.#stderr.trim()}`);
    return this.#lines.join('\n');
  }

  /** SIGKILLs this process by its pid (if still running) and waits until it is gone. */
  async kill(): Promise<void> {
    if (this.alive && this.#child.pid !== undefined) {
      try {
        process.kill(this.#child.pid, 'SIGKILL');
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
      }
    }
    await this.exited;
  }
}

/** SIGKILLs every Ruby process started through this file that still runs (for afterAll/afterEach). */
export async function killRubyProcesses(): Promise<void> {
  await Promise.all([...running].map((ruby) => ruby.kill()));
}

export interface RubyWorkerOptions {
  readonly name: string;
  readonly resources: number;
  /** The gem's `stale_client_timeout`, in seconds (null: none). */
  readonly staleClientTimeout: number | null;
  /** The loop stops taking tokens after this long. */
  readonly durationMs: number;
  /** ... or after this many grants, whichever comes first. */
  readonly maxGrants: number;
  /** Each grant is held for a random time between these, in milliseconds. */
  readonly holdMs: readonly [number, number];
  /** The gem's `lock(timeout)` per attempt, in seconds (> 0: BLPOP). */
  readonly lockTimeout?: number;
  /**
   * A counter key INCRed right after each grant and DECRed right before each release, shared with
   * the other holders, so the worker can report the most holders it saw at once.
   */
  readonly occupancyKey?: string;
  readonly url?: string;
}

/** What a worker printed when its loop ended. */
export interface RubyWorkerReport {
  readonly grants: number;
  readonly timeouts: number;
  /** Unlocks that found the token no longer recorded as held (the gem's `unlock` returning false). */
  readonly lost: number;
  /** The most holders counted on `occupancyKey` at once (0 without it). */
  readonly maxOccupancy: number;
  readonly tokens: Record<string, number>;
}

const WORKER_LOOP = `
name, resources, stale, duration_ms, max_grants, hold_min, hold_max, lock_timeout, occupancy_key = ARGV
resources = Integer(resources)
stale = stale.empty? ? nil : Float(stale)
deadline = monotonic + Float(duration_ms) / 1000
max_grants = Integer(max_grants)
hold_min = Float(hold_min) / 1000
hold_max = Float(hold_max) / 1000
lock_timeout = Float(lock_timeout)
lock_timeout = lock_timeout.to_i if lock_timeout == lock_timeout.to_i
report = { grants: 0, timeouts: 0, lost: 0, maxOccupancy: 0, tokens: Hash.new(0) }
puts JSON.generate(started: Process.pid)
while monotonic < deadline && report[:grants] < max_grants
  # A fresh Redis::Semaphore each time, as a short-lived job would make: its token list is its own.
  sem = semaphore(name, resources: resources, stale_client_timeout: stale)
  token = sem.lock(lock_timeout)
  unless token
    report[:timeouts] += 1
    next
  end
  report[:grants] += 1
  report[:tokens][token] += 1
  unless occupancy_key.empty?
    inside = REDIS.incr(occupancy_key)
    report[:maxOccupancy] = inside if inside > report[:maxOccupancy]
  end
  sleep(hold_min + rand * (hold_max - hold_min))
  REDIS.decr(occupancy_key) unless occupancy_key.empty?
  report[:lost] += 1 if sem.unlock == false
end
puts JSON.generate(report)
`;

/**
 * Starts a Ruby process that loops `lock` / hold / `unlock` on a gem semaphore until `durationMs` or
 * `maxGrants`, then prints a {@link RubyWorkerReport} and exits by itself. It is SIGKILLed if it
 * runs well past its duration; `killRubyProcesses()` in afterAll kills any left.
 */
export function startRubyWorker(options: RubyWorkerOptions): {
  process: RubyProcess;
  report(): Promise<RubyWorkerReport>;
} {
  const lockTimeout = options.lockTimeout ?? 1;
  const ruby = new RubyProcess(WORKER_LOOP, {
    url: options.url,
    args: [
      options.name,
      options.resources,
      options.staleClientTimeout ?? '',
      options.durationMs,
      options.maxGrants,
      options.holdMs[0],
      options.holdMs[1],
      lockTimeout,
      options.occupancyKey ?? '',
    ],
    timeoutMs: options.durationMs + lockTimeout * 1000 + 30_000,
  });
  return {
    process: ruby,
    async report() {
      const stdout = await ruby.finished(options.durationMs + lockTimeout * 1000 + 25_000);
      const last = stdout.trim().split('\n').pop() ?? '';
      return JSON.parse(last) as RubyWorkerReport;
    },
  };
}
