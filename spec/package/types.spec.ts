import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { consumerOptions } from '../support/snippets';

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

const made: string[] = [];
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

test('the published types compile with the oldest @types/node that engines allows (20.12.0)', async () => {
  expect(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).engines.node).toBe('>=20.12');
  expect(JSON.parse(readFileSync(join(OLD_TYPES, 'package.json'), 'utf8')).version).toBe('20.12.0');
  expect(existsSync(join(ROOT, 'dist', 'index.d.ts'))).toBe(true);

  const work = mkdtempSync(join(tmpdir(), 'rts-types-'));
  made.push(work);
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

/**
 * Every documented snippet that hands the library a client (README.md, docs/DEPLOYMENT.md,
 * docs/USAGE.md, read from the docs at run time) compiles, with no cast, against every client
 * version it applies to, as a user's ES module under TypeScript's strict `nodenext`: node-redis v4
 * (`redis`), v5 (`redis5`) and v6 (`redis6`), ioredis 5 (`ioredis`) and 6 (`ioredis6`), each
 * installed as the package name the snippet imports. A snippet that imports its client compiles as
 * written against each version of that package (a Sentinel one against v5 and v6, v4 has none); one
 * that uses a `redis` it does not make gets, in turn, each standalone and Sentinel client of every
 * version (the docs call a Cluster client `cluster`). What a snippet leaves to its reader (`order`,
 * `ship`, a `sem` made earlier) is declared `any`; the library's exports and the clients never are.
 */
const DOCUMENTS = ['README.md', 'docs/DEPLOYMENT.md', 'docs/USAGE.md'];
const VERSIONS = {
  v4: { redis: 'redis' },
  v5: { redis: 'redis5' },
  v6: { redis: 'redis6' },
  io5: { ioredis: 'ioredis' },
  io6: { ioredis: 'ioredis6' },
} as const;
type Version = keyof typeof VERSIONS;
/** How a snippet's free `redis` is made, per version: as the docs make clients. */
const FREE_REDIS: Array<{ version: Version; kind: string; make: string }> = [
  ...(['v4', 'v5', 'v6'] as const).map((version) => ({
    version,
    kind: 'createClient',
    make: `import { createClient as makeClient } from 'redis';\nconst redis = makeClient({ url: 'redis://127.0.0.1:6379' });`,
  })),
  ...(['v5', 'v6'] as const).map((version) => ({
    version,
    kind: 'createSentinel',
    make:
      `import { createSentinel as makeSentinel } from 'redis';\n` +
      `const redis = makeSentinel({ name: 'mymaster', sentinelRootNodes: [{ host: '127.0.0.1', port: 26380 }] });`,
  })),
  ...(['io5', 'io6'] as const).map((version) => ({
    version,
    kind: 'new Redis',
    make: `import { Redis as MakeRedis } from 'ioredis';\nconst redis = new MakeRedis('redis://127.0.0.1:6379');`,
  })),
];
const CLIENT_NAMES = { redis: ['createClient', 'createCluster', 'createSentinel'], ioredis: ['Redis', 'Cluster'] };

interface Snippet {
  readonly where: string;
  readonly code: string;
}

/** The ts and js code blocks of `document` that hand the library a client or make one. */
function clientSnippets(document: string): Snippet[] {
  const text = readFileSync(join(ROOT, document), 'utf8');
  const snippets: Snippet[] = [];
  for (const match of text.matchAll(/^```(?:ts|js)\n([\s\S]*?)^```/gm)) {
    const code = match[1]!;
    if (
      !/\{\s*redis\b|\bredis:|from '(io)?redis'|\bnew (Redis|Cluster)\(|\bcreate(Client|Cluster|Sentinel)\(/.test(code)
    )
      continue;
    snippets.push({ where: `${document}:${text.slice(0, match.index).split('\n').length}`, code });
  }
  return snippets;
}

const identifiers = (code: string): Set<string> => new Set(code.match(/[A-Za-z_$][\w$]*/g));
const imported = (code: string, from: string): boolean => new RegExp(`from '${from}'`).test(code);

/** The files to compile for one snippet: one per client version it applies to, with the imports it leaves to its reader. */
function variants(
  snippet: Snippet,
  exports: readonly string[],
): Array<{ version: Version; what: string; code: string }> {
  const { code } = snippet;
  const used = identifiers(code);
  const library = exports.filter(
    (name) => used.has(name) && !new RegExp(`\\b${name}\\b[^;]*from 'redis-token-semaphore'`).test(code),
  );
  const lines = library.length > 0 ? [`import { ${library.join(', ')} } from 'redis-token-semaphore';`] : [];
  const clients = (['redis', 'ioredis'] as const).filter(
    (pkg) => imported(code, pkg) || CLIENT_NAMES[pkg].some((name) => new RegExp(`\\b${name}\\(`).test(code)),
  );
  for (const pkg of clients) {
    const missing = CLIENT_NAMES[pkg].filter((name) => used.has(name) && !imported(code, pkg));
    if (missing.length > 0) lines.push(`import { ${missing.join(', ')} } from '${pkg}';`);
  }
  const header = lines.join('\n');
  if (clients.length > 0) {
    const versions = (Object.keys(VERSIONS) as Version[]).filter(
      (version) =>
        clients.every((pkg) => pkg in VERSIONS[version]) && !(version === 'v4' && used.has('createSentinel')),
    );
    return versions.map((version) => ({ version, what: version, code: `${header}\n${code}` }));
  }
  expect(/\bredis\b/.test(code) && !/\b(const|let) redis\b/.test(code)).toBe(true);
  // A `sem` made earlier on the page, as the page makes it.
  const sem = used.has('sem') && !/\b(const|let) sem\b/.test(code);
  const extra = sem ? `const sem = new Semaphore('crawler:example.com', { redis, resources: 3 });` : '';
  const imports = sem && !library.includes('Semaphore') ? `import { Semaphore } from 'redis-token-semaphore';` : '';
  return FREE_REDIS.map(({ version, kind, make }) => ({
    version,
    what: `${version} ${kind}`,
    code: `${header}\n${imports}\n${make}\n${extra}\n${code}`,
  }));
}

/**
 * The option objects of `lock`, `acquire` and the constructors refuse a key they do not know, where
 * TypeScript can (an object literal): each line must be an error, or TS2578 (unused directive) says it was not.
 */
const UNKNOWN_OPTIONS = (makeRedis: string) => `
import { createLocks, Mutex, Semaphore } from 'redis-token-semaphore';
${makeRedis}
const sem = new Semaphore('name', { redis, resources: 3 });
const mutex = new Mutex('name', { redis });
const locks = createLocks({ redis });
// @ts-expect-error -- not an option
await sem.acquire({ priority: 3 });
// @ts-expect-error -- not an option
await sem.acquire({ timeout: 1000, priority: 3 });
// @ts-expect-error -- not an option
await sem.lock(1000, { priority: 3 });
// @ts-expect-error -- not an option
await sem.lock(1000, { signal: AbortSignal.timeout(10), priority: 3 });
// @ts-expect-error -- not an option
await mutex.acquire({ timeout: 1000, priority: 3 });
// @ts-expect-error -- not an option
await mutex.lock(1000, { priority: 3 });
// @ts-expect-error -- not an option
await locks.acquire('order:1', { timeout: 1000, priority: 3 });
// @ts-expect-error -- not an option
new Semaphore('name', { redis, permits: 3 });
// @ts-expect-error -- not an option
new Mutex('name', { redis, permits: 3 });
// @ts-expect-error -- not an option
createLocks({ redis, permits: 3 });
export {};
`;

/** What a snippet leaves to its reader: "Cannot find name 'x'" (TS2304, TS2552), or a shorthand `{ x }` (TS18004). */
const MISSING_NAME = /^Cannot find name '([^']+)'/;
const MISSING_SHORTHAND = /^No value exists in scope for the shorthand property '([^']+)'/;

test('every documented client snippet compiles against every client version, with no cast (TypeScript strict, nodenext)', async () => {
  expect(existsSync(join(ROOT, 'dist', 'index.d.mts'))).toBe(true);
  const exports = Object.keys(await import('../../lib'));
  const snippets = DOCUMENTS.flatMap(clientSnippets);
  // The docs' own: the quick start, the ioredis, Cluster and Sentinel sections, the lock manager.
  expect(snippets.length).toBeGreaterThanOrEqual(10);
  expect(snippets.map((snippet) => snippet.code).join('\n')).toMatch(/createSentinel\(/);
  for (const snippet of snippets) expect(snippet.code).not.toMatch(/\bas (never|any|unknown)\b|<any>/);

  const work = mkdtempSync(join(tmpdir(), 'rts-snippets-'));
  made.push(work);
  for (const [version, packages] of Object.entries(VERSIONS)) {
    mkdirSync(join(work, version, 'node_modules'), { recursive: true });
    symlinkSync(ROOT, join(work, version, 'node_modules', 'redis-token-semaphore'), 'dir');
    for (const [as, installed] of Object.entries(packages))
      symlinkSync(join(ROOT, 'node_modules', installed), join(work, version, 'node_modules', as), 'dir');
  }
  const files = new Map<string, string>();
  for (const snippet of snippets) {
    for (const [index, variant] of variants(snippet, exports).entries()) {
      const file = join(work, variant.version, `${snippet.where.replace(/[/:.]/g, '-')}-${index}.mts`);
      files.set(file, `${snippet.where} (${variant.what})`);
      writeFileSync(file, `${variant.code}\nexport {};\n`);
    }
  }
  expect([...files.values()].filter((what) => what.includes('createSentinel')).length).toBeGreaterThan(0);
  for (const version of ['v4', 'v6', 'io6'] as const) {
    const file = join(work, version, 'unknown-options.mts');
    files.set(file, `unknown options (${version})`);
    writeFileSync(file, UNKNOWN_OPTIONS(version.startsWith('io') ? FREE_REDIS[5]!.make : FREE_REDIS[0]!.make));
  }

  const ts = await import('typescript');
  const options = consumerOptions(ts, { noEmit: true });
  // Each compile parses only the snippets again: the clients' and Node's declarations, parsed once,
  // are shared between the programs, as an editor's language service shares them.
  const host = ts.createCompilerHost(options);
  const parsed = new Map<string, import('typescript').SourceFile | undefined>();
  const read = host.getSourceFile.bind(host);
  host.getSourceFile = (fileName, ...rest) => {
    if (files.has(fileName)) return read(fileName, ...rest);
    if (!parsed.has(fileName)) parsed.set(fileName, read(fileName, ...rest));
    return parsed.get(fileName);
  };
  const compile = (): import('typescript').Diagnostic[] => {
    const program = ts.createProgram([...files.keys()], options, host);
    return [...program.getSemanticDiagnostics(), ...program.getSyntacticDiagnostics()];
  };
  // Until none is left: the names each snippet leaves to its reader, declared `any`.
  const never = new Set([
    'redis',
    'cluster',
    'sentinel',
    'sem',
    ...exports,
    ...CLIENT_NAMES.redis,
    ...CLIENT_NAMES.ioredis,
  ]);
  let diagnostics = compile();
  for (let pass = 0; pass < 3; pass++) {
    const left = new Map<string, Set<string>>();
    for (const diagnostic of diagnostics) {
      const text = ts.flattenDiagnosticMessageText(diagnostic.messageText, ' ');
      const name = (MISSING_NAME.exec(text) ?? MISSING_SHORTHAND.exec(text))?.[1];
      if (diagnostic.file && name !== undefined) {
        left.set(diagnostic.file.fileName, (left.get(diagnostic.file.fileName) ?? new Set<string>()).add(name));
      }
    }
    if (left.size === 0) break;
    for (const [file, names] of left) {
      expect([...names].filter((name) => never.has(name))).toEqual([]);
      const declared = [...names].map((name) => `declare const ${name}: any;`).join('\n');
      writeFileSync(file, `${declared}\n${readFileSync(file, 'utf8')}`);
    }
    diagnostics = compile();
  }
  const errors = diagnostics.map((diagnostic) => {
    const where = diagnostic.file ? (files.get(diagnostic.file.fileName) ?? diagnostic.file.fileName) : '';
    return `${where}: TS${diagnostic.code} ${ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n').slice(0, 400)}`;
  });
  expect(errors).toEqual([]);
}, 300_000);
