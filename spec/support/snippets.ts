// The docs' code blocks for readme-snippets.spec.ts: the blocks and their markers, and what a fragment gets.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(__dirname, '..', '..');

/*
 * A block is marked by an HTML comment after the previous block and before it, usually at the end of
 * the paragraph that introduces it, so that it costs the README no line: `<!-- snippet: KIND -->`,
 * KIND one or more of (separated by `;`):
 *   `fragment`      it uses names made earlier on the page or left to the reader: it gets the library
 *                   exports it uses and the names of CONTEXT (each a module of its own) it does not make
 *   `redis`         each line is a Redis command, sent to a server, which must answer OK
 *   `not run: why`  compiled but not run (or, for another language, only listed)
 * An unknown kind, two markers before one block, or one after the last block is an error.
 */

/** The docs' placeholder for a local Redis. */
export const PLACEHOLDER_URL = 'redis://127.0.0.1:6379';

/**
 * What a `fragment` may use without making it: the names the docs made earlier (`redis`, `sem`) and
 * what they leave to the reader, each a module (`context/<name>.mts`) the fragment imports.
 */
export const CONTEXT: Record<string, string> = {
  redis: `import { createClient } from 'redis';
export const redis = createClient({ url: process.env['REDIS_URL'] });
redis.on('error', (error: unknown) => console.error('Redis client error', error));
await redis.connect();`,
  sem: `import { Semaphore } from 'redis-token-semaphore';
import { redis } from './redis.mjs';
export const sem = new Semaphore('crawler:example.com', { redis, resources: 3 });`,
  url: `export const url = 'https://example.com/';`,
  result: `export const result = 'the report';`,
  work: `export async function work(signal?: AbortSignal, fence?: number): Promise<number> {
  signal?.throwIfAborted();
  return fence ?? 0;
}`,
  buildReport: `export async function buildReport(): Promise<string> {
  return 'the report';
}`,
  store: `export const store = {
  async write(value: string, options: { fence: number; signal?: AbortSignal }): Promise<void> {
    options.signal?.throwIfAborted();
    if (!(options.fence > 0) || value === '') throw new Error('a write needs a fence and a value');
  },
};`,
  handle: `export async function handle(job: string): Promise<void> {
  JSON.parse(job);
}`,
  order: `export const order = { id: '42' };`,
  ship: `export async function ship(order: { id: string }): Promise<string> {
  return order.id;
}`,
  user: `export const user = { id: '7' };`,
  charge: `export async function charge(user: { id: string }): Promise<string> {
  return user.id;
}`,
  path: `export const path = 'reports/nightly.csv';`,
  rewrite: `export async function rewrite(path: string, options: { fence: number }): Promise<void> {
  if (path === '' || !(options.fence > 0)) throw new Error('a rewrite needs a path and a fence');
}`,
  queue: `export const queue: string[] = [];`,
  job: `export const job = { url: 'https://example.com/' };`,
  // A scheduler's message, with a grant really handed over, for the worker's half of the hand-over.
  message: `import { sem } from './sem.mjs';
const lease = await sem.acquire();
export const message = JSON.stringify({ job: { url: 'https://example.com/' }, grant: lease.handOver() });`,
  run: `export async function run(job: { url: string }, options: { fence: number }): Promise<void> {
  if (job.url === '' || !(options.fence > 0)) throw new Error('a job needs a url and a fence');
}`,
  // prom-client's Histogram and Gauge, as much of them as the docs use.
  Histogram: `export class Histogram {
  constructor(readonly configuration: { name: string; help: string; labelNames?: string[] }) {}
  observe(labels: Record<string, string>, value: number): void {
    if (!Number.isFinite(value) || Object.keys(labels).length === 0) throw new Error('not an observation');
  }
}`,
  Gauge: `export class Gauge {
  value = 0;
  constructor(readonly configuration: { name: string; help: string; collect?: (this: Gauge) => void }) {
    configuration.collect?.call(this);
  }
  set(value: number): void {
    this.value = value;
  }
}`,
};

/** Marker kinds (see the header). */
export const KINDS = ['fragment', 'redis', 'not run'] as const;
export type Kind = (typeof KINDS)[number];

export interface Block {
  /** `README.md:33`: the document and the line of the opening fence. */
  readonly where: string;
  readonly language: string;
  readonly code: string;
  readonly kinds: ReadonlySet<Kind>;
}

/** The code blocks of `document`, each with the marker between the previous block and it. */
export function blocks(document: string): Block[] {
  const text = readFileSync(join(ROOT, document), 'utf8');
  const found: Block[] = [];
  let after = 0;
  for (const match of text.matchAll(/^```([^\n]*)\n([\s\S]*?)^```[ \t]*$/gm)) {
    const where = `${document}:${text.slice(0, match.index).split('\n').length}`;
    const markers = [...text.slice(after, match.index).matchAll(/<!-- snippet: ([^>]*?) -->/g)].map((m) => m[1]!);
    if (markers.length > 1) throw new Error(`${where}: more than one snippet marker before the block`);
    const kinds = new Set<Kind>();
    for (const part of markers[0]?.split(';') ?? []) {
      const kind = KINDS.find((known) => part.trim() === known || part.trim().startsWith(`${known}: `));
      if (kind === undefined || (kind === 'not run' && !/: \S/.test(part))) {
        throw new Error(
          `${where}: unknown snippet marker "${part.trim()}" (known: ${KINDS.join(', ')}; not run needs a reason)`,
        );
      }
      kinds.add(kind);
    }
    found.push({ where, language: match[1]!.trim().split(/\s/)[0] ?? '', code: match[2]!, kinds });
    after = match.index + match[0].length;
  }
  if (/<!-- snippet:/.test(text.slice(after))) throw new Error(`${document}: a snippet marker after the last block`);
  return found;
}

const identifiers = (code: string): Set<string> => new Set(code.match(/[A-Za-z_$][\w$]*/g));

/** Names a block makes itself, at its top level (imports, declarations, destructuring). */
function declared(ts: typeof import('typescript'), code: string): Set<string> {
  const names = new Set<string>();
  const file = ts.createSourceFile('block.mts', code, ts.ScriptTarget.ES2022, false, ts.ScriptKind.TS);
  const bind = (name: import('typescript').BindingName): void => {
    if (ts.isIdentifier(name)) names.add(name.text);
    else for (const element of name.elements) if (!ts.isOmittedExpression(element)) bind(element.name);
  };
  for (const statement of file.statements) {
    if (ts.isVariableStatement(statement)) for (const d of statement.declarationList.declarations) bind(d.name);
    else if ((ts.isFunctionDeclaration(statement) || ts.isClassDeclaration(statement)) && statement.name)
      names.add(statement.name.text);
    else if (ts.isImportDeclaration(statement) && statement.importClause) {
      const clause = statement.importClause;
      if (clause.name) names.add(clause.name.text);
      const bindings = clause.namedBindings;
      if (bindings && ts.isNamedImports(bindings))
        for (const element of bindings.elements) names.add(element.name.text);
      else if (bindings) names.add(bindings.name.text);
    }
  }
  return names;
}

/** The source a block compiles as: a fragment gets the imports of what it uses and does not make. */
export function source(
  ts: typeof import('typescript'),
  block: Block,
  libraryExports: readonly string[],
  url: string,
): string {
  const code = block.code.replaceAll(PLACEHOLDER_URL, url);
  if (!block.kinds.has('fragment')) return code;
  const used = identifiers(block.code);
  const own = declared(ts, block.code);
  const wanted = (name: string) => used.has(name) && !own.has(name);
  const library = libraryExports.filter(wanted);
  const context = Object.keys(CONTEXT).filter(wanted);
  return [
    ...(library.length > 0 ? [`import { ${library.join(', ')} } from 'redis-token-semaphore';`] : []),
    ...context.map((name) => `import { ${name} } from './context/${name}.mjs';`),
    code,
  ].join('\n');
}

/** Checks a `sh` block's lines against package.json; resolves what is wrong. */
export function checkShell(block: Block): string[] {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
    name: string;
    scripts: Record<string, string>;
    peerDependencies: Record<string, string>;
  };
  const installable = new Set([pkg.name, ...Object.keys(pkg.peerDependencies)]);
  const wrong: string[] = [];
  for (const line of block.code.split('\n').map((text) => text.replace(/#.*/, '').trim())) {
    if (line === '' || line === 'npm install' || line === 'npm ci') continue;
    const words = line.split(/\s+/);
    const fine =
      (words[0] === 'npm' && words[1] === 'install' && words.slice(2).every((name) => installable.has(name))) ||
      (line === 'npm test' && pkg.scripts['test'] !== undefined) ||
      (words.length === 3 && words[0] === 'npm' && words[1] === 'run' && pkg.scripts[words[2]!] !== undefined);
    if (!fine) wrong.push(`${block.where}: "${line}" is not an npm command of this package`);
  }
  return wrong;
}

/**
 * The compiler options of a strict consumer on Node 20 (ES2022, `nodenext`, `await using` types),
 * which the type and snippet specs compile the docs' code with; `extra` adds a spec's own.
 */
export function consumerOptions(
  ts: typeof import('typescript'),
  extra: import('typescript').CompilerOptions,
): import('typescript').CompilerOptions {
  return {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    lib: ['lib.es2023.d.ts', 'lib.esnext.disposable.d.ts'],
    strict: true,
    skipLibCheck: true,
    types: ['node'],
    typeRoots: [join(ROOT, 'node_modules', '@types')],
    ...extra,
  };
}
