import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { Worker } from 'node:worker_threads';
import { join } from 'node:path';
import { createClient } from 'redis';
import { Semaphore } from '../../lib';
import { PrivateServers } from '../support/private-servers';
import { uniqueName } from '../support/redis';
import { blocks, checkShell, consumerOptions, CONTEXT, source, type Block } from '../support/snippets';

/**
 * Every code block of README.md and docs/USAGE.md works as shown on the Node.js of this machine (the
 * oldest the README supports, 20), against the built package (`dist/`, so `npm run build` first).
 *
 * - A `ts` or `js` block is compiled, all of them in one TypeScript program (strict, `nodenext`, no
 *   cast added), as a user's ES module (`.mts`; a `js` block that calls `require` as `.cjs`), then
 *   run against a redis-server of this spec's, in a database of its own: all of them one after
 *   another in one worker thread (the packages loaded once, the costly part), each with its own copy
 *   of the context modules a fragment imports. It runs as written, but for two stand-ins:
 *   the docs' placeholder address `redis://127.0.0.1:6379` is that server, and a `fetch` to a host
 *   other than loopback reaches a local HTTP server instead (no traffic leaves the machine; the spec
 *   checks the quick start's request came).
 * - A `sh` block: each line must be an `npm` command of this package (`npm install` of it and its
 *   peers, `npm test`, `npm run <a script of package.json>`).
 * - A fragment, a block of Redis commands or one not to run says so by a marker (the convention is in
 *   spec/support/snippets.ts): any other block that is neither compiled nor checked fails the spec.
 *
 * And what the docs say of `await using`: TypeScript compiles it for Node 20 and it runs there; as
 * plain JavaScript it is a SyntaxError on Node 20 (and runs on Node 24), each in a node process.
 */
const ROOT = join(__dirname, '..', '..');
const DOCUMENTS = ['README.md', 'docs/USAGE.md'];
/** How long a snippet may run. */
const SNIPPET_MS = 20_000;
/** Runs `node args` in `cwd` with `env`; resolves its exit code and output (killed after `timeoutMs`). */
async function node(
  args: readonly string[],
  cwd: string,
  env: Record<string, string>,
  timeoutMs = 30_000,
): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, args, {
    cwd,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  const [code] = (await once(child, 'close')) as [number | null];
  clearTimeout(timer);
  return { code, output };
}

/**
 * Runs the snippets `files` one after another, each with `REDIS_URL` set to its own database, in a
 * worker thread of this process (RUNNER): they share its loaded packages, but each has modules of its
 * own, its context included (see the test). Resolves each file's outcome ('ok' or why not), and what
 * the thread printed.
 */
async function runInThread(
  work: string,
  snippets: ReadonlyArray<{ file: string; url: string }>,
  env: Record<string, string>,
): Promise<{ outcomes: Record<string, string>; output: string }> {
  const results = join(work, 'results.json');
  const worker = new Worker(join(work, 'runner.mjs'), {
    argv: [JSON.stringify(snippets), results],
    env: { ...process.env, ...env },
    stdout: true,
    stderr: true,
  });
  let output = '';
  worker.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  worker.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  worker.on('error', (error: Error) => (output += `${error.stack ?? String(error)}\n`));
  const timer = setTimeout(() => void worker.terminate(), 30_000 + snippets.length * SNIPPET_MS);
  await once(worker, 'exit');
  clearTimeout(timer);
  const outcomes = JSON.parse(readFileSync(results, 'utf8')) as Record<string, string>;
  return { outcomes, output };
}

/**
 * Imports each snippet in turn (its `fetch` through OFFLINE), then exits: a client a snippet leaves
 * open must not keep the thread alive. A snippet still running after SNIPPET_MS counts as failed.
 */
const RUNNER = `import { writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
await import('./offline.mjs');
const [snippets, results] = [JSON.parse(process.argv[2]), process.argv[3]];
const outcomes = {};
for (const { file, url } of snippets) {
  process.env.REDIS_URL = url;
  let timer;
  outcomes[file] = await Promise.race([
    import(pathToFileURL(file).href).then(() => 'ok', (error) => String(error?.stack ?? error)),
    new Promise((resolve) => (timer = setTimeout(resolve, ${SNIPPET_MS}, 'still running after ${SNIPPET_MS} ms'))),
  ]);
  clearTimeout(timer);
}
writeFileSync(results, JSON.stringify(outcomes));
process.exit(0);
`;

/** Sends a fetch to a host other than loopback to the spec's HTTP server, as /<host><path>. */
const OFFLINE = `const realFetch = globalThis.fetch;
globalThis.fetch = (input, init) => {
  const url = new URL(input instanceof Request ? input.url : String(input));
  if (['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) return realFetch(input, init);
  return realFetch(process.env.SNIPPET_HTTP + '/' + url.host + url.pathname + url.search, init);
};
`;

const made: string[] = [];
const servers = new PrivateServers();
let http: Server | undefined;
afterAll(async () => {
  http?.close();
  await servers.close();
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

test('every code block of the README and USAGE compiles and runs as shown on this Node.js', async () => {
  const ts = await import('typescript');
  const exports = Object.keys(await import('../../lib'));
  const all = DOCUMENTS.flatMap(blocks);
  // A database per snippet, so that what one leaves (a token held when its process exits) is not another's.
  const { server } = await servers.start(['--databases', '64']);
  const requested: string[] = [];
  http = createServer((request, response) => {
    requested.push(request.url ?? '');
    response.end('<!doctype html><title>Example Domain</title>');
  });
  http.listen(0, '127.0.0.1');
  await once(http, 'listening');
  const env = {
    REDIS_URL: server.url,
    SNIPPET_HTTP: `http://127.0.0.1:${(http.address() as AddressInfo).port}`,
  };

  const work = mkdtempSync(join(tmpdir(), 'rts-readme-'));
  made.push(work);
  mkdirSync(join(work, 'node_modules'));
  symlinkSync(ROOT, join(work, 'node_modules', 'redis-token-semaphore'), 'dir');
  for (const client of ['redis', 'ioredis'])
    symlinkSync(join(ROOT, 'node_modules', client), join(work, 'node_modules', client), 'dir');
  mkdirSync(join(work, 'src', 'context'), { recursive: true });
  writeFileSync(join(work, 'runner.mjs'), RUNNER);
  writeFileSync(join(work, 'offline.mjs'), OFFLINE);

  /** What happened to each block, by `where`. */
  const outcome = new Map<string, string>();
  const problems: string[] = [];
  /** The files to compile (source → block), and those to run once compiled (emitted file → block). */
  const files = new Map<string, Block>();
  const runs = new Map<string, Block>();
  const databases = new Map<Block, number>();
  for (const name of Object.keys(CONTEXT)) writeFileSync(join(work, 'src', 'context', `${name}.mts`), CONTEXT[name]!);
  for (const block of all) {
    if (block.language === 'ts' || block.language === 'js') {
      expect({ where: block.where, cast: /\bas (never|any|unknown)\b|<any>/.test(block.code) }).toEqual({
        where: block.where,
        cast: false,
      });
      const commonJs = block.language === 'js' && /\brequire\(/.test(block.code);
      const base = block.where.replace(/[/:.]/g, '-');
      const file = join(work, 'src', `${base}.${commonJs ? 'cjs' : 'mts'}`);
      databases.set(block, databases.size + 1);
      writeFileSync(
        file,
        `${source(ts, block, exports, `${server.url}/${databases.get(block)!}`)}\n${commonJs ? '' : 'export {};\n'}`,
      );
      files.set(file, block);
      if (!block.kinds.has('not run')) runs.set(join(work, 'out', `${base}.${commonJs ? 'cjs' : 'mjs'}`), block);
      outcome.set(block.where, block.kinds.has('not run') ? 'compiled (marked not run)' : 'compiled');
    } else if (block.language === 'sh' && !block.kinds.has('not run')) {
      problems.push(...checkShell(block));
      outcome.set(block.where, 'npm commands checked');
    } else if (block.kinds.has('redis')) {
      const admin = createClient({ url: server.url });
      await admin.connect();
      for (const line of block.code.split('\n').filter((text) => text.trim() !== '')) {
        const reply = await admin.sendCommand(line.trim().split(/\s+/)).catch((error: Error) => error.message);
        if (reply !== 'OK') problems.push(`${block.where}: "${line.slice(0, 40)}…" answered ${String(reply)}`);
      }
      await admin.quit();
      outcome.set(block.where, 'sent to Redis');
    } else if (block.kinds.has('not run')) {
      outcome.set(block.where, 'marked not run');
    }
  }
  const unmarked = all.filter((block) => !outcome.has(block.where)).map((block) => block.where);
  expect(unmarked).toEqual([]);

  // What USAGE says of `await using`, compiled by TypeScript for Node 20 (and run below).
  const usage = readFileSync(join(ROOT, 'docs', 'USAGE.md'), 'utf8').replace(/\s+/g, ' ');
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  expect(readme).toMatch(/`await using lease = …`: TypeScript 5\.2\+, or Node 24 \(a SyntaxError on Node 20\)/);
  expect(usage).toMatch(/That syntax needs TypeScript 5\.2 or later \(which compiles it for Node 20/);
  expect(usage).toMatch(/in plain JavaScript on Node 20 it is a `SyntaxError`/);
  const declaration = /`(await using lease = await sem\.acquire\(\))`/.exec(usage)?.[1];
  expect(declaration).toBeDefined();
  const disposing = `import { createClient } from 'redis';
import { Semaphore } from 'redis-token-semaphore';
const redis = createClient({ url: process.env.REDIS_URL });
await redis.connect();
const sem = new Semaphore('${uniqueName('await-using')}', { redis, resources: 1 });
{
  ${declaration};
  console.log('held', lease.token, await sem.availableCount());
}
console.log('after the block', await sem.availableCount());
await redis.quit();
`;
  writeFileSync(join(work, 'src', 'await-using.mts'), `${disposing}export {};\n`);
  writeFileSync(join(work, 'await-using-plain.mjs'), disposing);

  const options = consumerOptions(ts, {
    allowJs: true,
    checkJs: true,
    rootDir: join(work, 'src'),
    outDir: join(work, 'out'),
  });
  const compiling = performance.now();
  const program = ts.createProgram(
    [
      ...files.keys(),
      join(work, 'src', 'await-using.mts'),
      ...Object.keys(CONTEXT).map((n) => join(work, 'src', 'context', `${n}.mts`)),
    ],
    options,
  );
  const diagnostics = [...ts.getPreEmitDiagnostics(program), ...program.emit().diagnostics];
  const errors = diagnostics.map((diagnostic) => {
    const where = diagnostic.file ? (files.get(diagnostic.file.fileName)?.where ?? diagnostic.file.fileName) : '';
    return `${where}: TS${diagnostic.code} ${ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n').slice(0, 300)}`;
  });
  const compileMs = performance.now() - compiling;
  expect(errors).toEqual([]);
  // TypeScript lowered the declaration (target ES2022): what Node 20 runs has no `await using`.
  expect(readFileSync(join(work, 'out', 'await-using.mjs'), 'utf8')).not.toMatch(/await using/);

  // The runnable blocks, one after another in one worker thread, each with a copy of the context
  // of its own (so that the `sem` one leaves holding is not the next one's) and a database of its own.
  const running = performance.now();
  const snippets = [...runs].map(([file, block], index) => {
    const own = `context-${index}`;
    cpSync(join(work, 'out', 'context'), join(work, 'out', own), { recursive: true });
    writeFileSync(file, readFileSync(file, 'utf8').replaceAll("from './context/", `from './${own}/`));
    return { file, url: `${server.url}/${databases.get(block)!}` };
  });
  const { outcomes, output } = await runInThread(work, snippets, env);
  for (const [file, block] of runs) {
    if (outcomes[file] === 'ok') outcome.set(block.where, `${outcome.get(block.where)!} and run`);
    else problems.push(`${block.where}: ${outcomes[file] ?? 'not run'}`);
  }
  if (problems.length > 0) problems.push(`what the snippets printed:\n${output}`);
  const runMs = performance.now() - running;
  expect(problems).toEqual([]);
  // The quick start's callback fetched its page (through the local server).
  expect(requested).toContain('/example.com/');

  // `await using`, compiled by TypeScript, releases the lease at the end of the block on this Node.
  const compiled = await node(['out/await-using.mjs'], work, env);
  expect(compiled).toEqual({ code: 0, output: 'held 0 0\nafter the block 1\n' });
  // As plain JavaScript: a SyntaxError before Node 24, as the docs say.
  const plain = await node(['await-using-plain.mjs'], work, env);
  if (Number(process.versions.node.split('.')[0]) < 24) {
    expect(plain.code).not.toBe(0);
    // The parser stops at the declaration itself (`using` read as an identifier), before anything runs.
    expect(plain.output).toMatch(
      /await using lease = await sem\.acquire\(\);\n.*\n\s*SyntaxError: Unexpected identifier 'lease'/,
    );
    expect(plain.output).not.toMatch(/held/);
  } else {
    expect(plain).toEqual({ code: 0, output: 'held 0 0\nafter the block 1\n' });
  }

  // With the README's ACL (sent above), and `functions: false` as it says, a semaphore works.
  const acl = all.find((block) => block.kinds.has('redis') && /ACL SETUSER semaphore on >password/.test(block.code));
  expect(acl).toBeDefined();
  const confined = createClient({ url: server.url, username: 'semaphore', password: 'password' });
  await confined.connect();
  const sem = new Semaphore(uniqueName('acl'), { redis: confined, functions: false });
  const weighted = new Semaphore(uniqueName('acl'), { redis: confined, functions: false, resources: 3 });
  try {
    const token = await sem.lock(0);
    expect(token).toBe('0');
    expect(await sem.unlock(token!)).toBe(1);
    // Weighted permits use only those commands too: a grant of 2, then a collection that times out.
    const lease = await weighted.acquire({ permits: 2 });
    expect(await weighted.lock(300, { permits: 2 })).toBeNull();
    expect(await lease.release()).toBe(true);
    expect(await weighted.availableCount()).toBe(3);
  } finally {
    await weighted.close();
    await sem.close();
    await confined.quit();
  }

  const counts = new Map<string, number>();
  for (const what of outcome.values()) counts.set(what, (counts.get(what) ?? 0) + 1);
  console.log(
    `${all.length} code blocks in ${DOCUMENTS.join(' and ')}: ` +
      [...counts].map(([what, count]) => `${what} ${count}`).join(', ') +
      `; fragments (with CONTEXT) ${all.filter((block) => block.kinds.has('fragment')).length}; on Node ${process.versions.node}, TypeScript ${ts.version}; ` +
      `the TypeScript program took ${Math.round(compileMs)} ms, the runs ${Math.round(runMs)} ms`,
  );
  expect(all.length).toBeGreaterThanOrEqual(20);
}, 300_000);
