// Lua source: reads a script of lib/redis/scripts/ with its includes expanded and its comments and unused helpers left out, as Redis gets it.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** A Lua script from `lib/redis/scripts/`, with its includes expanded, loaded once per process. */
export interface Script {
  readonly name: string;
  /** Its file in lib/redis/scripts/. */
  readonly file: string;
  readonly source: string;
  readonly sha1: string;
  /** The most KEYS a call passes it (its header says which); null when it varies (reapWaiters.lua). */
  readonly maxKeys: number | null;
}

const SCRIPTS_DIR = join(__dirname, 'scripts');
const INCLUDE = /^--- @include (\w+)[ \t]*$/gm;

/**
 * Comment lines and `--[[ … ]]` blocks are for readers of the files; Redis gets the code alone, since
 * some scripts travel as EVAL text on every blocking wait (prepareWait) and Redis hashes what it gets.
 */
const COMMENTS = /^[ \t]*--\[\[[\s\S]*?\]\][ \t]*\n|^[ \t]*--(?!- @include ).*\n|^[ \t]*\n/gm;

/** `source` without its comments and blank lines (`--- @include` lines stay: they are not comments). */
export function withoutComments(source: string): string {
  return source.replace(COMMENTS, '');
}

/** The text of lib/redis/scripts/`file`. */
export function readScriptFile(file: string): string {
  return readFileSync(join(SCRIPTS_DIR, file), 'utf8');
}

const includes = new Map<string, string>();
/** The text of lib/redis/scripts/includes/`name`.lua (read once: every script expands the same few). */
export function readInclude(name: string): string {
  let text = includes.get(name);
  if (text === undefined) {
    text = readFileSync(join(SCRIPTS_DIR, 'includes', `${name}.lua`), 'utf8');
    includes.set(name, text);
  }
  return text;
}

/** A script's name, from its file name (`tryLock.lua`: tryLock). */
export function scriptNameOf(file: string): string {
  return /^(.*?)(?:-\d+)?\.lua$/.exec(file)?.[1] ?? file;
}

/** An include's function: `local function name(…)` at the start of a line, to the first `end` that starts one. */
const FUNCTION = /^local function (\w+)\([^)]*\)\n[\s\S]*?^end\n/gm;

/**
 * `source` without the include functions it never calls, directly or through the functions it
 * keeps: Redis runs a script's every `local function` statement on every call, used or not.
 */
export function withoutUnusedFunctions(source: string): string {
  const definitions = [...source.matchAll(FUNCTION)].map(([text, name]) => ({ text, name: name! }));
  if (definitions.length === 0) return source;
  const word = new RegExp(`\\b(?:${definitions.map((d) => d.name).join('|')})\\b`, 'g');
  const namesIn = (text: string) => new Set([...text.matchAll(word)].map(([name]) => name));
  // What each function's definitions name, and what the code outside them names: the roots.
  const calls = new Map<string, Set<string>>();
  for (const { text, name } of definitions) {
    const named = calls.get(name) ?? new Set<string>();
    for (const other of namesIn(text)) if (other !== name) named.add(other);
    calls.set(name, named);
  }
  const used = namesIn(source.replace(FUNCTION, ''));
  for (const name of used) for (const other of calls.get(name) ?? []) used.add(other);
  return used.size === calls.size
    ? source
    : source.replace(FUNCTION, (text, name: string) => (used.has(name) ? text : ''));
}

/**
 * `source` with each `--- @include <name>` line replaced by includes/<name>.lua, which may include
 * others; those named in `defined` (already defined around the code) are left out.
 */
export function withIncludes(source: string, defined: ReadonlySet<string> = new Set()): string {
  const expanded = source.replace(INCLUDE, (_, include: string) => (defined.has(include) ? '' : readInclude(include)));
  return expanded === source ? source : withIncludes(expanded, defined);
}

/** lib/redis/scripts/`file` as Redis gets it, taking at most `maxKeys` KEYS. */
export function loadScript(file: string, maxKeys: number | null): Script {
  const source = withoutUnusedFunctions(withoutComments(withIncludes(readScriptFile(file))));
  return { name: scriptNameOf(file), file, source, sha1: createHash('sha1').update(source).digest('hex'), maxKeys };
}
