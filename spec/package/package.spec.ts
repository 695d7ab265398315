import { execFile } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, posix } from 'node:path';
import { promisify } from 'node:util';
import * as api from '../../lib';
import { redisUrl, uniqueName } from '../support/redis';

/**
 * The package as a user gets it: `npm pack`, installed with npm into a fresh project outside the
 * repository, then used from a real `require()`, a real `import` and the TypeScript compiler
 * (node16 and bundler resolution) against the run's Redis. Needs `npm run build` first (`npm test`
 * does it); packs with --ignore-scripts so the build under test is the one jest runs against.
 */
const ROOT = join(__dirname, '..', '..');
const run = promisify(execFile);
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { name: string; version: string };

/** The environment for child npm and node processes: none of the `npm_*` variables `npm test` sets. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) if (!/^npm_/i.test(key)) env[key] = value;
  return { ...env, NO_UPDATE_NOTIFIER: '1', ...extra };
}

async function npm(args: readonly string[], cwd: string): Promise<string> {
  const { stdout } = await run('npm', [...args], { cwd, env: cleanEnv(), maxBuffer: 16 * 1024 * 1024 });
  return stdout;
}

/** Where a package the repository installed lives (node_modules may be a symlink to a shared install). */
function installed(name: string): string {
  return realpathSync(join(ROOT, 'node_modules', name));
}

let work: string; // the temporary directory: tarballs, the unpacked tarball, the consumer project
let tarball: string;
let files: string[]; // paths in the tarball, as npm reports them
let project: string;

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'rts-package-'));
  const [packed] = JSON.parse(
    await npm(['pack', '--ignore-scripts', '--json', '--pack-destination', work, ROOT], work),
  ) as Array<{
    filename: string;
    files: Array<{ path: string }>;
  }>;
  tarball = join(work, packed!.filename);
  files = packed!.files.map((file) => file.path).sort();

  // A fresh project, installed by npm from the tarball. npm must not reach the registry (CI may be
  // offline, and `npm ci` caches no metadata), so the one dependency, nanoid, comes as a tarball
  // packed from the repository's install, and the peer (redis) and @types/node are linked in the way
  // a user's own install would provide them.
  project = join(work, 'consumer');
  mkdirSync(project);
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true }));
  const [nanoid] = JSON.parse(
    await npm(['pack', '--ignore-scripts', '--json', '--pack-destination', work, installed('nanoid')], work),
  ) as Array<{
    filename: string;
  }>;
  await npm(
    [
      'install',
      '--offline',
      '--cache',
      join(work, 'npm-cache'),
      '--no-audit',
      '--no-fund',
      '--legacy-peer-deps',
      '--no-package-lock',
      tarball,
      join(work, nanoid!.filename),
    ],
    project,
  );
  for (const name of ['redis', '@types/node']) {
    mkdirSync(dirname(join(project, 'node_modules', name)), { recursive: true });
    symlinkSync(installed(name), join(project, 'node_modules', name), 'dir');
  }
}, 120_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('the tarball', () => {
  test('holds the build, the Lua scripts, the README, the LICENSE and the CHANGELOG, and nothing else', () => {
    const outside = files.filter((file) => !file.startsWith('dist/'));
    expect(outside.sort()).toEqual(['CHANGELOG.md', 'LICENSE', 'README.md', 'package.json']);
    expect(files).toEqual(
      expect.arrayContaining(['dist/index.js', 'dist/index.d.ts', 'dist/index.mjs', 'dist/index.d.mts']),
    );
    expect(
      files.filter((file) =>
        /(^|\/)(spec|tests?|__tests__)\/|\.(spec|test)\.|\.tsbuildinfo$|\.ts$(?<!\.d\.ts)/.test(file),
      ),
    ).toEqual([]);

    // Every Lua file of lib/redis/scripts, where dist/redis/lua-source.js reads them from.
    const lua = (dir: string, prefix = ''): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
        entry.isDirectory()
          ? lua(join(dir, entry.name), `${prefix}${entry.name}/`)
          : entry.name.endsWith('.lua')
            ? [`${prefix}${entry.name}`]
            : [],
      );
    const scripts = lua(join(ROOT, 'lib', 'redis', 'scripts'));
    expect(scripts.length).toBeGreaterThan(5);
    expect(files.filter((file) => file.startsWith('dist/redis/scripts/'))).toEqual(
      scripts.map((file) => `dist/redis/scripts/${file}`).sort(),
    );
  });

  test('every source map carries its sources, so none points to a file the package lacks', () => {
    const dist = join(project, 'node_modules', pkg.name, 'dist');
    const maps = files.filter((file) => file.endsWith('.map'));
    expect(maps.length).toBeGreaterThan(0);
    for (const file of maps) {
      const map = JSON.parse(readFileSync(join(dist, '..', file), 'utf8')) as {
        sources: string[];
        sourcesContent?: Array<string | null>;
      };
      map.sources.forEach((source, i) => {
        const shipped = files.includes(posix.join(posix.dirname(file), source));
        expect({ file, source, resolved: shipped || typeof map.sourcesContent?.[i] === 'string' }).toEqual({
          file,
          source,
          resolved: true,
        });
      });
    }
    // Each file that names a map names one that is in the package.
    for (const file of files.filter((name) => /\.(m?js|d\.m?ts)$/.test(name))) {
      const url = /\/\/# sourceMappingURL=(\S+)\s*$/.exec(readFileSync(join(dist, '..', file), 'utf8'))?.[1];
      if (url) expect(files).toContain(posix.join(posix.dirname(file), url));
    }
  });

  test('installs as a user would get it: package.json, exports map and engines', () => {
    const installedPkg = JSON.parse(readFileSync(join(project, 'node_modules', pkg.name, 'package.json'), 'utf8'));
    expect(installedPkg.exports['.']).toEqual({
      import: { types: './dist/index.d.mts', default: './dist/index.mjs' },
      require: { types: './dist/index.d.ts', default: './dist/index.js' },
    });
    expect(installedPkg.engines.node).toMatch(/^>=\d+/);
    expect(installedPkg.sideEffects).toBe(false);
    // Where npm's page links: the repository (which also resolves the README's relative links to docs/), its README, its issues.
    const github = 'https://github.com/redis-token-semaphore/redis-token-semaphore';
    expect(installedPkg.repository).toEqual({ type: 'git', url: `git+${github}.git` });
    expect(installedPkg.homepage).toBe(`${github}#readme`);
    expect(installedPkg.bugs).toEqual({ url: `${github}/issues` });
    for (const target of [
      './dist/index.d.mts',
      './dist/index.mjs',
      './dist/index.d.ts',
      './dist/index.js',
      installedPkg.main,
      installedPkg.types,
    ]) {
      expect(existsSync(join(project, 'node_modules', pkg.name, target))).toBe(true);
    }
  });
});

/** A consumer that locks and unlocks for real, in the module system of the file it is written to. */
function consumerSource(kind: 'require' | 'import'): string {
  const load =
    kind === 'require'
      ? `const { Semaphore, Mutex, LockTimeoutError, SemaphoreError } = require('redis-token-semaphore');
const { createClient } = require('redis');
const same = require('redis-token-semaphore').Semaphore === Semaphore;
const entry = require.resolve('redis-token-semaphore');
const names = () => Object.keys(require('redis-token-semaphore'));`
      : `import { Semaphore, Mutex, LockTimeoutError, SemaphoreError } from 'redis-token-semaphore';
import { createClient } from 'redis';
import { createRequire } from 'node:module';
const require = createRequire(import.meta.url);
const same = require('redis-token-semaphore').Semaphore === Semaphore; // one build: no dual-package hazard
const entry = import.meta.resolve('redis-token-semaphore');
const names = async () => Object.keys(await import('redis-token-semaphore'));`;
  return `${load}
const main = async () => {
  const name = process.argv[2];
  const redis = createClient({ url: process.env.REDIS_URL });
  await redis.connect();
  const sem = new Semaphore(name, { redis, resources: 1 });
  const first = await sem.lock();
  const none = await sem.lock(0);
  const waiting = sem.lock(10000); // blocks in BLMOVE: the contended path's scripts
  await new Promise((resolve) => setTimeout(resolve, 100));
  const freed = await sem.unlock(first);
  const handedOver = await waiting;
  const mutex = new Mutex(name + ':mutex', { redis });
  const ran = await mutex.lock(0, async () => mutex.lock(0, () => 'inner').catch((error) => error));
  const result = {
    entry: entry.replace(/^.*node_modules/, 'node_modules'),
    names: (await names()).filter((name) => name !== '__esModule').sort(),
    same,
    first,
    none,
    freed,
    handedOver,
    unlocked: await sem.unlock(handedOver),
    available: await sem.availableCount(),
    timeout: ran instanceof LockTimeoutError && ran instanceof SemaphoreError && ran.name,
  };
  await sem.delete();
  await mutex.delete();
  await sem.close();
  await mutex.close();
  await redis.quit();
  console.log(JSON.stringify(result));
};
main().catch((error) => {
  console.error(error);
  process.exit(1);
});
`;
}

describe.each([
  ['require', 'consumer.cjs', 'node_modules/redis-token-semaphore/dist/index.js'],
  ['import', 'consumer.mjs', 'node_modules/redis-token-semaphore/dist/index.mjs'],
] as const)('a real %s() of the installed package', (kind, file, entry) => {
  test('locks, waits in Redis, hands over and unlocks; the Lua scripts load from dist/redis/scripts', async () => {
    writeFileSync(join(project, file), consumerSource(kind));
    const name = uniqueName('package');
    const { stdout, stderr } = await run(process.execPath, [file, name], {
      cwd: project,
      env: cleanEnv({ REDIS_URL: redisUrl() }),
    });
    expect(stderr).toBe('');
    expect(JSON.parse(stdout)).toEqual({
      entry,
      names: Object.keys(api).sort(), // the ES entry re-exports every export of the CommonJS build
      same: true,
      first: '0',
      none: null,
      freed: 1,
      handedOver: '0',
      unlocked: 1,
      available: 1,
      timeout: 'LockTimeoutError',
    });
  }, 30_000);
});

describe('TypeScript consumers type-check against the shipped declarations', () => {
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const body = `
const redis = createClient({ url: 'redis://127.0.0.1:6379' });
const sem: Semaphore = new Semaphore('name', { redis, resources: 3, staleClientTimeout: 5000 });
const mutex = new Mutex('name', { redis });
export async function use(): Promise<number> {
  const token: string | null = await sem.lock(0);
  const value: number = await mutex.lock(1000, async (held: string) => held.length);
  const freed: number | false = await sem.unlock(token ?? undefined);
  try {
    await mutex.lock(0, () => undefined);
  } catch (error) {
    if (error instanceof LockTimeoutError) return error.timeout;
  }
  // @ts-expect-error a Mutex has no \`resources\` option
  new Mutex('name', { redis, resources: 2 });
  // @ts-expect-error lock resolves a token, not a number
  const wrong: number = await sem.lock();
  void wrong;
  return value + (freed === false ? 0 : freed);
}
`;
  const imports = `import { Semaphore, Mutex, LockTimeoutError } from 'redis-token-semaphore';\nimport { createClient } from 'redis';\n`;

  test.each([
    ['node16', { module: 'node16', moduleResolution: 'node16' }, ['consumer-cjs.cts', 'consumer-esm.mts']],
    ['nodenext', { module: 'nodenext', moduleResolution: 'nodenext' }, ['consumer-cjs.cts', 'consumer-esm.mts']],
    ['bundler', { module: 'esnext', moduleResolution: 'bundler' }, ['consumer-bundler.ts']],
    ['node10', { module: 'commonjs', moduleResolution: 'node10' }, ['consumer-node10.ts']],
  ])(
    'moduleResolution %s',
    async (label, options, sources) => {
      const dir = join(project, `ts-${label}`);
      mkdirSync(dir);
      for (const source of sources) writeFileSync(join(dir, source), imports + body);
      writeFileSync(
        join(dir, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            ...options,
            target: 'ES2022',
            strict: true,
            noEmit: true,
            skipLibCheck: true,
            types: ['node'],
          },
          files: sources,
        }),
      );
      // --explainFiles shows which declaration file each import resolved to.
      const result = await run(process.execPath, [tsc, '-p', dir, '--explainFiles'], {
        cwd: dir,
        env: cleanEnv(),
      }).catch((error: { stdout: string; stderr: string }) => error);
      const errors = result.stdout.split('\n').filter((line) => /error TS\d+/.test(line));
      expect(errors).toEqual([]);
      // Which declaration file each consumer's `import … from 'redis-token-semaphore'` resolved to.
      const resolved: Record<string, string> = {};
      let file = '';
      for (const line of result.stdout.split('\n')) {
        if (!line.startsWith(' ')) file = line.trim();
        const from = /^ +Imported via 'redis-token-semaphore' from file '([^']+)'/.exec(line)?.[1];
        if (from) resolved[from] = file.replace(/^.*node_modules\//, '');
      }
      const types = (entry: string) => `redis-token-semaphore/dist/${entry}`;
      expect(resolved).toEqual(
        {
          node16: { 'consumer-cjs.cts': types('index.d.ts'), 'consumer-esm.mts': types('index.d.mts') },
          nodenext: { 'consumer-cjs.cts': types('index.d.ts'), 'consumer-esm.mts': types('index.d.mts') },
          bundler: { 'consumer-bundler.ts': types('index.d.mts') },
          node10: { 'consumer-node10.ts': types('index.d.ts') },
        }[label],
      );
    },
    60_000,
  );
});
