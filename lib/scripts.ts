import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { replyErrorCode, type RedisClientLike } from './redis-client';

/** A Lua script from `lib/scripts/`, with its includes expanded, loaded once per process. */
export interface Script {
  readonly name: string;
  readonly source: string;
  readonly sha1: string;
}

const SCRIPTS_DIR = join(__dirname, 'scripts');
const INCLUDE = /^--- @include (\w+)[ \t]*$/gm;

/**
 * Comment lines and `--[[ … ]]` blocks are for readers of the files; Redis gets the code alone, since
 * some scripts travel as EVAL text on every blocking wait (prepareWait) and Redis hashes what it gets.
 */
const COMMENTS = /^[ \t]*--\[\[[\s\S]*?\]\][ \t]*\n|^[ \t]*--.*\n|^[ \t]*\n/gm;

function loadScript(file: string): Script {
  const source = readFileSync(join(SCRIPTS_DIR, file), 'utf8')
    .replace(INCLUDE, (_, include: string) => readFileSync(join(SCRIPTS_DIR, 'includes', `${include}.lua`), 'utf8'))
    .replace(COMMENTS, '');
  return { name: file.replace(/(-\d+)?\.lua$/, ''), source, sha1: createHash('sha1').update(source).digest('hex') };
}

export const scripts = {
  tryLock: loadScript('tryLock-9.lua'),
  prepareWait: loadScript('prepareWait-9.lua'),
  claim: loadScript('claim-10.lua'),
  recover: loadScript('recover-10.lua'),
  reapWaiters: loadScript('reapWaiters.lua'),
  release: loadScript('release-9.lua'),
  refresh: loadScript('refresh-9.lua'),
  signal: loadScript('signal-9.lua'),
  releaseStale: loadScript('releaseStale-9.lua'),
  create: loadScript('create-9.lua'),
  inspect: loadScript('inspect-9.lua'),
  // Operators' scripts (lib/admin/): the CLI and the dashboard.
  status: loadScript('status-9.lua'),
  forceRelease: loadScript('forceRelease-9.lua'),
  resize: loadScript('resize-9.lua'),
} as const;

/** `EVAL` with the script's text: never fails with NOSCRIPT (used where a failed step must not be skipped). */
export function evalArguments(script: Script, keys: readonly string[], args: readonly string[]): string[] {
  return ['EVAL', script.source, String(keys.length), ...keys, ...args];
}

/** Runs a script by SHA1, falling back to EVAL (which also caches it) when Redis answers NOSCRIPT. */
export async function runScript(
  client: RedisClientLike,
  script: Script,
  keys: readonly string[],
  args: readonly string[],
): Promise<unknown> {
  try {
    return await client.sendCommand(['EVALSHA', script.sha1, String(keys.length), ...keys, ...args]);
  } catch (error) {
    if (replyErrorCode(error) === 'NOSCRIPT') {
      return client.sendCommand(evalArguments(script, keys, args));
    }
    throw error;
  }
}
