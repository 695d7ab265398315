import { execFile } from 'node:child_process';
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
