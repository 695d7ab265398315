// How a test recognises a call of one of the library's scripts on the wire: EVALSHA of its SHA1, or FCALL of its function where the server has the library (lib/redis/functions.ts).
import { functionLibrary } from '../../lib/redis/functions';
import { semaphoreKeys } from '../../lib/redis/keys';
import { scripts, type Script } from '../../lib/redis/registry';
import { runScript, scriptCall } from '../../lib/redis/send';
import { uniqueName, type Client } from './redis';

/** The names a call of `script` goes by: its SHA1 (EVALSHA) and, for a script of the library, its function (FCALL). */
export function wireNames(script: Script): string[] {
  const fn = functionLibrary.functions.get(script.name);
  return fn === undefined ? [script.sha1] : [script.sha1, fn];
}

/** Whether `args`, a command as sent, calls `script` (by EVALSHA or FCALL). */
export function callsScript(script: Script): (args: string[]) => boolean {
  const names = wireNames(script);
  return (args) => {
    const command = args[0]?.toUpperCase();
    return (command === 'EVALSHA' || command === 'FCALL') && names.includes(args[1] ?? '');
  };
}

/**
 * Field `name` of a reply that is a map: a flat [key, value, …] array (RESP2), or an object or a
 * Map (RESP3, node-redis v6). For FUNCTION LIST's and ACL LOG's entries.
 */
export function replyField(entry: unknown, name: string): unknown {
  if (Array.isArray(entry)) return entry[entry.indexOf(name) + 1];
  if (entry instanceof Map) return entry.get(name);
  return (entry as Record<string, unknown>)[name];
}

/**
 * A fresh semaphore name (`<prefix>:…`) and `run`, which calls one of its scripts through `redis`
 * with every standard key and raw ARGV, as the specs of the Lua scripts do.
 */
export function scriptRunner(redis: Client, prefix: string) {
  const name = uniqueName(prefix);
  const keys = semaphoreKeys(name);
  const client = redis as unknown as Parameters<typeof runScript>[0];
  const run = (script: keyof typeof scripts, args: string[], extraKeys: string[] = []) =>
    runScript(client, scriptCall(scripts[script], [...keys.scriptKeys, ...extraKeys], args));
  return { name, keys, run };
}
