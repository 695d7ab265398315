import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

/**
 * The shipped declarations (dist/index.d.ts) compile for a consumer whose `@types/node` is the oldest
 * the `engines` field allows: node >=20.12, so @types/node 20.12.0, installed as the dev dependency
 * alias `@types/node-20.12`. (20.12 because the declarations use `AsyncDisposable` and the generic
 * `EventEmitter<Events>`, which @types/node has from 20.11.21 on.) The consumer checks the declarations
 * themselves (`skipLibCheck: false`); errors inside @types/node's own files (it predates this
 * TypeScript's lib) are not ours and are left out. Needs `npm run build` first (`npm test` does it).
 */
const ROOT = join(__dirname, '..', '..');
const run = promisify(execFile);
const OLD_TYPES = join(ROOT, 'node_modules', '@types', 'node-20.12');

/** A consumer of the API users start from, typed as they would write it. */
const CONSUMER = `
import { createLocks, LockTimeoutError, Mutex, Semaphore, type Lease, type SupportedRedisClient } from '${join(ROOT, 'dist', 'index')}';

declare const redis: SupportedRedisClient;

export async function use(): Promise<number> {
  const sem = new Semaphore('name', { redis, resources: 3 });
  const token: string | null = await sem.lock(0);
  if (token !== null) await sem.unlock(token);
  const mutex = new Mutex('name', { redis });
  const length: number = await mutex.lock(1000, async (held: string, signal: AbortSignal, fence: number) => held.length + fence + Number(signal.aborted));
  const lease: Lease = await sem.acquire({ timeout: 1000 });
  const fence: number = lease.fence;
  await lease.release();
  const locks = createLocks({ redis, maxBlockingConnections: 10 });
  await locks.lock('order:1', async () => undefined);
  const names: number = locks.stats().names;
  await locks.close();
  try {
    await mutex.lock(0, () => undefined);
  } catch (error) {
    if (error instanceof LockTimeoutError) return error.timeout;
  }
  return length + fence + names;
}
`;

let work: string;
afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

test('the published types compile with the oldest @types/node that engines allows (20.12.0)', async () => {
  expect(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).engines.node).toBe('>=20.12');
  expect(JSON.parse(readFileSync(join(OLD_TYPES, 'package.json'), 'utf8')).version).toBe('20.12.0');
  expect(existsSync(join(ROOT, 'dist', 'index.d.ts'))).toBe(true);

  work = mkdtempSync(join(tmpdir(), 'rts-types-'));
  mkdirSync(join(work, 'types'));
  symlinkSync(OLD_TYPES, join(work, 'types', 'node'), 'dir');
  writeFileSync(join(work, 'consumer.ts'), CONSUMER);
  writeFileSync(
    join(work, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'commonjs',
        moduleResolution: 'node10',
        strict: true,
        noEmit: true,
        skipLibCheck: false,
        typeRoots: ['./types'],
        types: ['node'],
      },
      files: ['consumer.ts'],
    }),
  );
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const result = await run(process.execPath, [tsc, '-p', work, '--pretty', 'false', '--listFiles'], {
    cwd: work,
  }).catch((error: { stdout: string; stderr: string }) => error);
  const lines = result.stdout.split('\n');
  // The consumer got the old @types/node, and nothing else of Node's types.
  const nodeTypes = lines.filter((line) => /\/@types\/node[^/]*\/globals\.d\.ts$/.test(line));
  expect(nodeTypes.map((line) => line.replace(/^.*node_modules\//, ''))).toEqual(['@types/node-20.12/globals.d.ts']);

  const errors = lines
    .filter((line) => /error TS\d+/.test(line))
    .filter((line) => !line.includes('/@types/node-20.12/'))
    .map((line) => line.replace(/^.*?\/(dist\/|consumer\.ts)/, '$1').replace(/\(\d+,\d+\)/, ''));
  expect(errors).toEqual([]);
}, 60_000);
