import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { redisUrl } from './redis';

/** The built CLI (`npm run build` first, as `npm test` does). */
export const CLI = join(__dirname, '..', '..', 'dist', 'cli', 'main.js');

export interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs the real binary as a child process against the run's Redis (unless `--url` is given). */
export function runCli(args: readonly string[], { env = {}, timeoutMs = 15_000 } = {}): Promise<CliResult> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { env: { ...process.env, REDIS_URL: redisUrl(), ...env }, timeout: timeoutMs },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/**
 * Runs the built CLI's `main()` (dist/cli/main.js, what the binary runs) in this process, with
 * stdout and stderr captured, stdin not a terminal and `env` added to the environment, as `runCli`
 * runs the binary but without starting a Node process: for the specs that run a command many times
 * to check what it does. Exit codes and output of the binary itself are checked with `runCli`.
 */
export async function runMain(
  args: readonly string[],
  { env = {} as Record<string, string> } = {},
): Promise<CliResult> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- the built file, loaded when first used
  const { main } = require(CLI) as { main: (argv: readonly string[]) => Promise<number> };
  const output = { stdout: '', stderr: '' };
  const stream = (key: keyof typeof output) => ({
    isTTY: false,
    write: (chunk: string | Uint8Array) => {
      output[key] += typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString();
      return true;
    },
  });
  const replaced = ['stdout', 'stderr', 'stdin'] as const;
  const saved = replaced.map((key) => Object.getOwnPropertyDescriptor(process, key));
  const savedEnv = process.env;
  process.env = { ...process.env, REDIS_URL: redisUrl(), ...env };
  Object.defineProperty(process, 'stdout', { configurable: true, value: stream('stdout') });
  Object.defineProperty(process, 'stderr', { configurable: true, value: stream('stderr') });
  Object.defineProperty(process, 'stdin', { configurable: true, value: { isTTY: false } });
  try {
    const code = await main(args);
    return { code, ...output };
  } finally {
    process.env = savedEnv;
    replaced.forEach((key, i) => Object.defineProperty(process, key, saved[i]!));
  }
}

export interface RunningDashboard {
  /** `http://127.0.0.1:<port>/` */
  readonly url: string;
  /** Everything it printed so far. */
  output(): string;
  /** SIGTERM, then waits for the exit; resolves the exit code. */
  stop(): Promise<number | null>;
}

/** Starts `redis-token-semaphore dashboard --port 0 …` as a child process and waits for its address. */
export async function startDashboard(redisUrl: string, args: readonly string[] = []): Promise<RunningDashboard> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first`);
  const child = spawn(process.execPath, [CLI, 'dashboard', '--port', '0', '--url', redisUrl, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const started = Date.now();
  let match: RegExpExecArray | null = null;
  while (!(match = / on (http:\/\/127\.0\.0\.1:\d+\/)/.exec(output))) {
    if (child.exitCode !== null || Date.now() - started > 15_000) {
      child.kill('SIGKILL');
      throw new Error(`the dashboard did not start: ${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  return {
    url: match[1] as string,
    output: () => output,
    stop: async () => {
      if (child.exitCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
}
