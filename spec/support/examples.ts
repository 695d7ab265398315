import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';

/** The scripts in examples/, run as real processes against the built library (dist/), as a user would run them. */
const EXAMPLES = join(__dirname, '..', '..', 'examples');

export interface Outcome {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface SpawnExampleOptions {
  /** Added to (or, for `undefined` values, removed from) this process's env. */
  readonly env: Record<string, string | undefined>;
  /** The backstop: each example bounds its own run; after this long it is sent `stopSignal`. */
  readonly timeoutMs: number;
  /** The signal it is stopped with; it reaches only the example's own process, which stops what it started. */
  readonly stopSignal: NodeJS.Signals;
}

/** Runs `examples/<file>` with `args` and collects its exit and output. */
export function spawnExample(
  file: string,
  args: readonly string[],
  { env, timeoutMs, stopSignal }: SpawnExampleOptions,
): Promise<Outcome> {
  const childEnv: NodeJS.ProcessEnv = { ...process.env };
  for (const [key, value] of Object.entries(env)) {
    if (value === undefined) delete childEnv[key];
    else childEnv[key] = value;
  }
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(EXAMPLES, file), ...args], {
      env: childEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill(stopSignal), timeoutMs);
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** `pattern`'s match in an example's output, or an error that shows the output. */
export function field(output: string, pattern: RegExp): RegExpExecArray {
  const match = pattern.exec(output);
  if (!match) throw new Error(`No match for ${pattern} in the example's output:\n${output}`);
  return match;
}

export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Whether redis-server is on PATH, for the examples' throwaway-server path. */
export const hasRedisServer = spawnSync('redis-server', ['--version']).status === 0;
