// The scripts of every lock and unlock as one Redis function library (Redis 7: FUNCTION LOAD once, then FCALL), with their helpers defined once per server instead of once per call.
import { createHash } from 'node:crypto';
import type { Connection } from './client/connection';
import { isConnectionError, isMisattributedReply, replyErrorCode } from './client/classify';
import { readInclude, readScriptFile, withIncludes, withoutComments, withoutUnusedFunctions } from './lua-source';
import { LIBRARY_SCRIPTS } from './registry';

/** Redis 7.0 brought functions. */
export const MINIMUM_FUNCTIONS_VERSION = '7.0.0';

export interface FunctionLibrary {
  /** `rts_` and a hash of the code: processes of different versions each load their own. */
  readonly name: string;
  /** What `FUNCTION LOAD` takes. */
  readonly source: string;
  /** Each script's function, by the script's name (`tryLock`: `rts_<hash>_tryLock`). */
  readonly functions: ReadonlyMap<string, string>;
}

const NAME = '@LIBRARY@';
const LEADING_INCLUDE = /^--- @include (\w+)[ \t]*$/;

/** An include as a library holds it: its `local` names, what each call sets them to, and its functions. */
interface HoistedInclude {
  readonly declarations: string[];
  /** Statements each call runs first (a fresh value for every name the include keeps per call). */
  readonly perCall: string[];
  readonly functions: string[];
}

/** `source`'s leading `--- @include` lines (comments removed) and the code after them. */
function leadingIncludes(source: string): { includes: string[]; rest: string } {
  const lines = withoutComments(source).split('\n');
  const includes: string[] = [];
  while (lines.length > 0) {
    const include = LEADING_INCLUDE.exec(lines[0]!)?.[1];
    if (include === undefined) break;
    includes.push(include);
    lines.shift();
  }
  return { includes, rest: lines.join('\n') };
}

/**
 * `code`'s top-level statements: each starts at a line with no indentation (not a block's `end`,
 * `else` or `elseif`) and runs to the next.
 */
function statements(code: string): string[] {
  const found: string[] = [];
  for (const line of code.split('\n')) {
    if (line === '') continue;
    if (/^\S/.test(line) && !/^(?:end|else|elseif)\b/.test(line)) found.push(line);
    else if (found.length > 0) found[found.length - 1] += `\n${line}`;
    else throw new Error(`an include starts inside a block: ${line}`);
  }
  return found;
}

/** One include split for a library: `local function`s are defined once; other `local`s are declared once and set by every call. */
function hoist(code: string): HoistedInclude {
  const hoisted: HoistedInclude = { declarations: [], perCall: [], functions: [] };
  for (const statement of statements(code)) {
    if (/^local function \w+\(/.test(statement)) {
      hoisted.functions.push(statement);
      continue;
    }
    const local = /^local ([\w, ]+?)(?:\s*=\s*([\s\S]*))?$/.exec(statement);
    if (local && /^[A-Z][A-Z0-9_]*$/.test(local[1]!) && /^-?\d+(?:\.\d+)?(?:e\d+)?$/.test(local[2]?.trim() ?? '')) {
      hoisted.declarations.push(statement); // a constant (one capitalised name, a number): set once
    } else if (local && /^LIBRARY_[A-Z0-9_]+$/.test(local[1]!) && local[2] === undefined) {
      // The library's own state, kept across calls (a script run by EVALSHA has it nil).
      hoisted.declarations.push(`local ${local[1]} = {}`);
    } else if (local) {
      hoisted.declarations.push(`local ${local[1]}`);
      hoisted.perCall.push(`${local[1]} = ${local[2] ?? 'nil'}`);
    } else {
      hoisted.perCall.push(statement);
    }
  }
  return hoisted;
}

/**
 * Builds the library from LIBRARY_SCRIPTS: their leading includes hoisted (each once), their own code
 * as functions. A script run by EVALSHA defines its helpers on every call; the library, once.
 */
export function buildFunctionLibrary(): FunctionLibrary {
  const hoisted = new Map<string, HoistedInclude>();
  /** Hoists `include` after the includes it starts with; returns them all, in order. */
  const hoistWithDependencies = (include: string): string[] => {
    const { includes, rest } = leadingIncludes(readInclude(include));
    const order = includes.flatMap(hoistWithDependencies);
    if (!hoisted.has(include)) {
      if (/^--- @include /m.test(rest))
        throw new Error(`includes/${include}.lua includes another after its first line of code`);
      hoisted.set(include, hoist(rest));
    }
    return [...order, include];
  };
  const scripts = LIBRARY_SCRIPTS.map(({ name, file }) => ({ name, ...leadingIncludes(readScriptFile(file)) }));
  for (const { includes } of scripts) includes.forEach(hoistWithDependencies);
  const defined = new Set(hoisted.keys());
  /** The includes `code` names further down, with those they name in turn, that the library defines. */
  const definedWithin = (code: string): string[] =>
    [...code.matchAll(/^--- @include (\w+)[ \t]*$/gm)].flatMap(([, include]) =>
      defined.has(include!) ? [include!] : definedWithin(readInclude(include!)),
    );
  // Each call sets afresh what the includes it uses keep per call: those it starts with, and those
  // its own code includes further down that the library defines already.
  const bodies = scripts.map(({ name, includes, rest }) => ({
    name,
    order: [...new Set([...includes, ...definedWithin(rest)].flatMap(hoistWithDependencies))],
    rest,
  }));
  const parts = [...hoisted.values()];
  const functions = new Map(bodies.map(({ name }) => [name, `${NAME}_${name}`]));
  const source = [
    `#!lua name=${NAME}`,
    'local KEYS, ARGV',
    ...parts.flatMap((part) => part.declarations),
    ...parts.flatMap((part) => part.functions),
    ...bodies.map(({ name, order, rest }) =>
      [
        `redis.register_function('${NAME}_${name}', function(keys, args)`,
        'KEYS, ARGV = keys, args',
        ...order.flatMap((include) => hoisted.get(include)!.perCall),
        // Includes inside the script's own code that the library already defines are left out.
        withoutUnusedFunctions(withoutComments(withIncludes(rest, defined))).trimEnd(),
        'end)',
      ].join('\n'),
    ),
  ].join('\n');
  const name = `rts_${createHash('sha1').update(source).digest('hex').slice(0, 12)}`;
  return {
    name,
    source: `${source.replaceAll(NAME, name)}\n`,
    functions: new Map([...functions].map(([script, fn]) => [script, fn.replace(NAME, name)])),
  };
}

export const functionLibrary = buildFunctionLibrary();

/** Whether `error` says the server does not have the function called (a restart that lost it, `FUNCTION FLUSH`). */
function isFunctionMissing(error: unknown): boolean {
  return replyErrorCode(error) === 'ERR' && /function not found/i.test(messageOf(error));
}

/**
 * Loads the library through `client`: true once the server has it (loaded now, or already), false
 * when the server refuses it (no functions before Redis 7, an ACL without `FUNCTION LOAD`): then
 * calls go by `EVALSHA`. Rejects on a connection failure, so the next use tries again.
 */
export async function loadFunctionLibrary(client: Connection): Promise<boolean> {
  try {
    await client.sendCommand(['FUNCTION', 'LOAD', functionLibrary.source]);
    return true;
  } catch (error) {
    if (isConnectionError(error) || isMisattributedReply(error)) throw error;
    return /already exists/i.test(messageOf(error));
  }
}

const reloading = new WeakSet<object>();
/**
 * Connections that call by EVALSHA from now on, whatever the first use found: an ACL refused their
 * FCALL, the server no longer knows FCALL, or it refused to load the library again.
 */
const evalshaOnly = new WeakSet<object>();

/** Whether `client` calls the library's functions (see `evalshaOnly`). */
export function mayFcall(client: Connection): boolean {
  return !evalshaOnly.has(client);
}

const messageOf = (error: unknown) => String((error as { message?: unknown } | null)?.message ?? '');

/**
 * Whether Redis refused an FCALL on `client` before running any of it, where EVAL would run: the
 * library is missing (it is loaded again); OOM, MISCONF or NOREPLICAS, which refuse a function that
 * may write as a whole but a script only at its first write; an ACL refuses FCALL, or the server does
 * not know it (those two make `client` call by EVALSHA from then on).
 */
export function refusedBeforeRunning(client: Connection, error: unknown): boolean {
  const code = replyErrorCode(error);
  if (code === 'OOM' || code === 'MISCONF' || code === 'NOREPLICAS') return true;
  if (isFunctionMissing(error)) {
    reload(client);
    return true;
  }
  const aboutFcall = /'fcall'/i.test(messageOf(error));
  if (
    (code === 'NOPERM' && aboutFcall) ||
    (code === 'ERR' && aboutFcall && /unknown command/i.test(messageOf(error)))
  ) {
    evalshaOnly.add(client);
    return true;
  }
  return false;
}

/**
 * Loads the library again after a call found it missing, one load at a time per client; calls go
 * by EVAL meanwhile. A refused load (an ACL without FUNCTION LOAD now, OOM) makes `client` call by
 * EVALSHA from then on, so that each call does not pay a refused FCALL and a refused load.
 */
function reload(client: Connection): void {
  if (reloading.has(client)) return;
  reloading.add(client);
  loadFunctionLibrary(client).then(
    (loaded) => {
      reloading.delete(client);
      if (!loaded) evalshaOnly.add(client);
    },
    () => void reloading.delete(client),
  );
}
