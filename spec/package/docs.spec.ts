import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import * as api from '../../lib';

/**
 * The API reference (`npm run docs`, TypeDoc with typedoc.json) builds with no warning: every public
 * export is documented, every `{@link}` resolves, and nothing public refers to an unexported type.
 * typedoc.json treats warnings as errors; this checks the output too, so a warning fails CI either way.
 */
const ROOT = join(__dirname, '..', '..');
const run = promisify(execFile);

let out: string;
afterAll(() => {
  if (out) rmSync(out, { recursive: true, force: true });
});

test('npm run docs builds the API reference from the JSDoc with no warning', async () => {
  out = mkdtempSync(join(tmpdir(), 'rts-docs-'));
  const typedoc = join(ROOT, 'node_modules', 'typedoc', 'bin', 'typedoc');
  const result = await run(process.execPath, [typedoc, '--out', out, '--logLevel', 'Warn'], { cwd: ROOT, env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' } }).then(
    ({ stdout, stderr }) => ({ code: 0, output: `${stdout}${stderr}` }),
    (error: { code: number; stdout: string; stderr: string }) => ({ code: error.code, output: `${error.stdout}${error.stderr}` }),
  );
  expect(result).toEqual({ code: 0, output: '' });

  // A page for every runtime export, and for the option types users write.
  for (const name of Object.keys(api)) {
    const page = ['classes', 'functions', 'variables'].some((kind) => existsSync(join(out, kind, `${name}.html`)));
    expect({ name, page }).toEqual({ name, page: true });
  }
  for (const name of ['SemaphoreOptions', 'RedisClientLike', 'Watchdog', 'WatchdogOptions']) {
    expect(existsSync(join(out, 'interfaces', `${name}.html`))).toBe(true);
  }
  expect(existsSync(join(out, 'types', 'MutexOptions.html'))).toBe(true);
  // The JSDoc made it in: an option's @default, and the package's example.
  expect(readFileSync(join(out, 'interfaces', 'SemaphoreOptions.html'), 'utf8')).toContain('10000');
  expect(readFileSync(join(out, 'index.html'), 'utf8')).toContain('crawler:example.com');
}, 120_000);
