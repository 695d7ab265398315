import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import * as os from 'node:os';
import { promisify } from 'node:util';
import { runInNewContext } from 'node:vm';
import * as ts from 'typescript';
import * as api from '../../lib';
import { DEFAULTS } from '../../lib/options';

/**
 * The documentation: the README stays a first hour's read, every link in it and in docs/ resolves,
 * it agrees with CI on the test command, and the API reference (`npm run docs`, TypeDoc with
 * typedoc.json) builds with no warning: every public export is documented, every `{@link}` resolves,
 * and nothing public refers to an unexported type. typedoc.json treats warnings as errors; this
 * checks the output too, so a warning fails CI either way.
 */
const ROOT = join(__dirname, '..', '..');
const run = promisify(execFile);

const README = join(ROOT, 'README.md');
const DOCS = join(ROOT, 'docs');
const PAGES = [
  README,
  ...readdirSync(DOCS)
    .filter((file) => file.endsWith('.md'))
    .map((file) => join(DOCS, file)),
];
const read = (file: string): string => readFileSync(file, 'utf8');
const name = (file: string): string => relative(ROOT, file);

/** The text outside fenced code blocks: what GitHub renders as Markdown. */
function prose(markdown: string): string[] {
  let fence: string | undefined;
  return markdown.split('\n').map((line) => {
    const marker = /^ {0,3}(`{3,}|~{3,})/.exec(line)?.[1];
    if (fence === undefined && marker) {
      fence = marker;
      return '';
    }
    if (fence !== undefined) {
      if (marker && marker[0] === fence[0] && marker.length >= fence.length && line.trim() === marker)
        fence = undefined;
      return '';
    }
    return line;
  });
}

/** A heading's anchor as GitHub makes it (github-slugger on the rendered text). */
function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // links and images: their text
    .replace(/`/g, '')
    .replace(/\*\*|__/g, '')
    .replace(/<[^>]+>/g, '')
    .trim();
  return text
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/** Every anchor a page's headings give, numbered as GitHub numbers repeated ones (`-1`, `-2`…). */
function anchors(file: string): Set<string> {
  const seen = new Map<string, number>();
  const result = new Set<string>();
  for (const line of prose(read(file))) {
    const heading = /^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const base = slug(heading);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    result.add(count === 0 ? base : `${base}-${count}`);
  }
  return result;
}

/** Every link target of a page: inline links and images, reference definitions, autolinks. */
function links(file: string): Array<{ line: number; target: string }> {
  const found: Array<{ line: number; target: string }> = [];
  prose(read(file)).forEach((text, index) => {
    const line = text.replace(/(`+)[^`]*?\1/g, ''); // code spans are not links
    for (const match of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g))
      found.push({ line: index + 1, target: match[1]! });
    const definition = /^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$/.exec(line)?.[1];
    if (definition) found.push({ line: index + 1, target: definition });
    for (const match of line.matchAll(/<(https?:\/\/[^>\s]+)>/g)) found.push({ line: index + 1, target: match[1]! });
  });
  return found;
}

/** Why a link from `file` does not resolve, or undefined when it does. */
function brokenLink(file: string, target: string): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) {
    if (target.startsWith('mailto:'))
      return /^mailto:[^@\s]+@[^@\s]+$/.test(target) ? undefined : 'a malformed mailto: link';
    if (!/^https?:\/\//.test(target)) return 'neither http(s) nor a relative path';
    try {
      const url = new URL(target);
      return url.hostname.includes('.') ? undefined : 'no host name';
    } catch {
      return 'not a well-formed URL';
    }
  }
  const [path = '', anchor] = target.split('#', 2) as [string, string | undefined];
  const destination = path === '' ? file : resolve(dirname(file), decodeURIComponent(path));
  if (!destination.startsWith(ROOT + '/') && destination !== ROOT) return 'outside the repository';
  if (!existsSync(destination)) return `${name(destination)} does not exist`;
  if (anchor === undefined) return undefined;
  if (statSync(destination).isDirectory() || !destination.endsWith('.md'))
    return 'an anchor into something other than a Markdown page';
  return anchors(destination).has(anchor) ? undefined : `${name(destination)} has no heading #${anchor}`;
}

describe('the README and the docs pages', () => {
  test('the README is a first hour: at most 250 lines', () => {
    const lines = read(README).split('\n').length - (read(README).endsWith('\n') ? 1 : 0);
    expect(lines).toBeLessThanOrEqual(250);
  });

  test('GitHub anchors: what the slugs of a few headings are', () => {
    expect(slug('`new Semaphore(name, options?)` and `new Mutex(name, options?)`')).toBe(
      'new-semaphorename-options-and-new-mutexname-options',
    );
    expect(slug('`lock` — the fast path (one round trip)')).toBe('lock--the-fast-path-one-round-trip');
    expect(slug('Events, tracing and metrics')).toBe('events-tracing-and-metrics');
    expect(slug('node-redis v4, v5 and v6')).toBe('node-redis-v4-v5-and-v6');
  });

  test.each(PAGES.map((file) => [name(file), file]))('every link in %s resolves', (_, file) => {
    const found = links(file);
    const broken = found.flatMap(({ line, target }) => {
      const why = brokenLink(file, target);
      return why === undefined ? [] : [`${name(file)}:${line} ${target}: ${why}`];
    });
    expect(broken).toEqual([]);
  });

  test('every docs page is listed in the README and in the docs index', () => {
    const pages = readdirSync(DOCS).filter((file) => file.endsWith('.md') && file !== 'README.md');
    const linkedFrom = (file: string) =>
      new Set(links(file).map(({ target }) => resolve(dirname(file), target.split('#')[0]!)));
    const fromReadme = linkedFrom(README);
    const fromIndex = linkedFrom(join(DOCS, 'README.md'));
    expect(fromReadme.has(join(DOCS, 'README.md'))).toBe(true);
    for (const page of pages) {
      expect({ page, readme: fromReadme.has(join(DOCS, page)), index: fromIndex.has(join(DOCS, page)) }).toEqual({
        page,
        readme: true,
        index: true,
      });
    }
  });

  test("CI runs the README's test command, npm test, and the README names what it needs", () => {
    const readme = read(README);
    const development = readme.slice(readme.indexOf('\n## Development'));
    const commands = [...development.matchAll(/```sh\n([\s\S]*?)```/g)].flatMap((block) =>
      block[1]!.split('\n').map((line) => line.replace(/#.*/, '').trim()),
    );
    expect(commands).toContain('npm test');
    const ci = read(join(ROOT, '.ci', 'run'))
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => line !== '' && !line.startsWith('#'));
    expect(ci.at(-1)).toBe('npm test');
    expect(ci).toContain('npm ci --no-audit --no-fund');
    // What `npm test` needs beyond npm install, each of which .ci/run installs when missing.
    for (const need of [
      'Node.js 20',
      'redis-server',
      '7.0',
      'REDIS_URL',
      'ruby-redis',
      '/usr/bin/chromium',
      'npm run docs',
    ]) {
      expect({ need, named: development.includes(need) }).toEqual({ need, named: true });
    }
    for (const installed of ['redis-server', 'ruby-redis', 'chromium'])
      expect(read(join(ROOT, '.ci', 'run'))).toMatch(new RegExp(`apt-get install -y -qq [a-z -]*\\b${installed}\\b`));
  });

  test('the README and OPERATIONS.md give the same minimal ACL', () => {
    const acl = (file: string) => read(file).match(/^ACL SETUSER semaphore .+$/gm);
    expect(acl(README)).toHaveLength(1);
    expect(acl(join(DOCS, 'OPERATIONS.md'))).toEqual(acl(README));
  });
});

/** Each `SemaphoreOptions` field's `@default` text, as lib/options.ts writes it. */
function jsdocDefaults(): Map<string, string | undefined> {
  const file = join(ROOT, 'lib', 'options.ts');
  const source = ts.createSourceFile(file, read(file), ts.ScriptTarget.Latest, true);
  const options = source.statements.find(
    (node): node is ts.InterfaceDeclaration => ts.isInterfaceDeclaration(node) && node.name.text === 'SemaphoreOptions',
  );
  const found = new Map<string, string | undefined>();
  for (const member of options?.members ?? []) {
    const tag = ts.getJSDocTags(member).find((t) => t.tagName.text === 'default');
    found.set(member.name!.getText(), typeof tag?.comment === 'string' ? tag.comment.trim() : undefined);
  }
  return found;
}

/** The rows of the Markdown table under `heading` whose first column is a code span: name → cells. */
function tableRows(markdown: string, heading: string): Map<string, string[]> {
  const section = markdown.slice(markdown.indexOf(`\n${heading}\n`) + 1);
  const table = section.slice(section.indexOf('\n|') + 1).split('\n\n')[0]!;
  const rows = new Map<string, string[]>();
  for (const line of table.split('\n').slice(2)) {
    const cells = line
      .slice(1, -1)
      .split(/(?<!\\)\|/)
      .map((cell) => cell.trim().replace(/\\\|/g, '|'));
    const name = /^`(\w+)`$/.exec(cells[0]!)?.[1];
    if (name) rows.set(name, cells.slice(1));
  }
  return rows;
}

/** The content of the code span a Markdown cell starts with, or undefined. */
const leadingCode = (cell: string): string | undefined => /^(`+) ?(.*?) ?\1(?!`)/.exec(cell)?.[2];

describe('the options the docs give are the options DEFAULTS has, with its defaults', () => {
  const names = Object.keys(DEFAULTS);
  const jsdoc = jsdocDefaults();
  /** A `@default` read as the expression it is (`30000`, `'SEMAPHORE:'`, `process.env.REDIS_URL || …`). */
  const evaluate = (text: string): unknown => runInNewContext(`(${text})`, { process, os });

  test('every SemaphoreOptions field with a default has a @default equal to its DEFAULTS entry', () => {
    expect([...jsdoc.keys()]).toEqual(names);
    const url = process.env['REDIS_URL'];
    // With and without the environment a default reads (`url`'s REDIS_URL).
    for (const env of [url, undefined]) {
      if (env === undefined) delete process.env['REDIS_URL'];
      try {
        for (const name of names) {
          const text = jsdoc.get(name); // none where the default is `undefined`
          const documented = text === undefined ? undefined : evaluate(text);
          expect({ name, default: documented }).toEqual({ name, default: DEFAULTS[name as keyof typeof DEFAULTS] });
        }
      } finally {
        if (url !== undefined) process.env['REDIS_URL'] = url;
      }
    }
  });

  test('USAGE.md lists every option, in order, each with the same default', () => {
    const rows = tableRows(read(join(DOCS, 'USAGE.md')), '## Options');
    expect([...rows.keys()]).toEqual(names);
    for (const name of names) {
      const cell = rows.get(name)![1]!; // option | type | default | meaning
      const expected = DEFAULTS[name as keyof typeof DEFAULTS] === undefined ? '—' : jsdoc.get(name);
      // A default may be followed by when it differs: `true` unless `staleClientTimeout` is `null`.
      expect({ name, default: cell === '—' ? cell : leadingCode(cell) }).toEqual({ name, default: expected });
    }
  });

  test("the README's short list names options with their defaults", () => {
    const readme = read(README).replace(/\s+/g, ' ');
    const list = /The options you are likely to set: (.*?)\. Every option/.exec(readme)?.[1] ?? '';
    const named = [...list.matchAll(/(?:^|, )`(\w+)`(?: \((\S+?)[ ),])?/g)];
    expect(named.length).toBeGreaterThanOrEqual(5);
    for (const [, name, value] of named) {
      expect({ name, option: Object.hasOwn(DEFAULTS, name!) }).toEqual({ name, option: true });
      if (value !== undefined)
        expect({ name, value }).toEqual({ name, value: String(DEFAULTS[name as keyof typeof DEFAULTS]) });
    }
  });
});

let out: string;
afterAll(() => {
  if (out) rmSync(out, { recursive: true, force: true });
});

test('npm run docs builds the API reference from the JSDoc with no warning', async () => {
  out = mkdtempSync(join(tmpdir(), 'rts-docs-'));
  const typedoc = join(ROOT, 'node_modules', 'typedoc', 'bin', 'typedoc');
  const result = await run(process.execPath, [typedoc, '--out', out, '--logLevel', 'Warn'], {
    cwd: ROOT,
    env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
  }).then(
    ({ stdout, stderr }) => ({ code: 0, output: `${stdout}${stderr}` }),
    (error: { code: number; stdout: string; stderr: string }) => ({
      code: error.code,
      output: `${error.stdout}${error.stderr}`,
    }),
  );
  expect(result).toEqual({ code: 0, output: '' });

  // A page for every runtime export, and for the option types users write.
  for (const name of Object.keys(api)) {
    const page = ['classes', 'functions', 'variables'].some((kind) => existsSync(join(out, kind, `${name}.html`)));
    expect({ name, page }).toEqual({ name, page: true });
  }
  for (const name of ['SemaphoreOptions', 'LocksOptions', 'RedisClientLike', 'Watchdog', 'WatchdogOptions']) {
    expect(existsSync(join(out, 'interfaces', `${name}.html`))).toBe(true);
  }
  expect(existsSync(join(out, 'types', 'MutexOptions.html'))).toBe(true);
  // The index lists the classes and functions users start from, and carries the package's example.
  const index = readFileSync(join(out, 'index.html'), 'utf8');
  for (const entry of ['Semaphore', 'Mutex', 'createLocks', 'Locks']) expect(index).toContain(`>${entry}<`);
  // Read as text: the highlighter may split the example's string across spans.
  expect(index.replace(/<[^>]*>/g, '')).toContain('crawler:example.com');
  // The JSDoc made it in: an option's @default.
  expect(readFileSync(join(out, 'interfaces', 'SemaphoreOptions.html'), 'utf8')).toContain('10000');
}, 180_000); // TypeDoc over the whole API passed 60 s on a loaded machine
