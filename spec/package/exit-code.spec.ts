import { execFile } from 'node:child_process';
import { join } from 'node:path';

/**
 * CI runs `npm test`, which trusts jest's exit code. The run's global setup and teardown (a
 * redis-server of its own, the report of leftover handles) once let a failed run exit with 0, so
 * every failure passed CI. This runs jest as `npm test` does, with this repository's config, on a
 * spec that fails on purpose (spec/support/fixtures/exit-code.check.ts, which no other run matches),
 * and on none at all.
 */
const ROOT = join(__dirname, '..', '..');
const JEST = join(ROOT, 'node_modules', 'jest', 'bin', 'jest.js');

function jest(args: readonly string[]): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    // Without REDIS_URL, so the child starts and stops its own server as a real run does.
    const env = { ...process.env };
    delete env['REDIS_URL'];
    execFile(
      process.execPath,
      [JEST, '--runInBand', ...args],
      { cwd: ROOT, env, timeout: 120_000 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === 'number' ? error.code : null;
        resolve({ code, output: `${stdout}${stderr}` });
      },
    );
  });
}

test('a jest run with a failing test exits non-zero, and one whose tests pass exits 0', async () => {
  const failing = await jest(['--testMatch', '**/spec/support/fixtures/exit-code.check.ts']);
  expect(failing.output).toMatch(/Tests:\s+1 failed, 1 total/);
  expect(failing.code).toBe(1);
  const passing = await jest([
    '--testMatch',
    '**/spec/support/fixtures/exit-code.check.ts',
    '--testNamePattern',
    'matches no test',
  ]);
  expect(passing.output).toMatch(/1 skipped/);
  expect(passing.code).toBe(0);
}, 240_000);
