// The hot-path scripts' raw calls as the Lua specs write them: the caller's fields in, each reply's fields out.
import { scriptRunner } from '../support/script-calls';
import type { Client } from '../support/redis';

type Run = ReturnType<typeof scriptRunner>['run'];

/**
 * The settings argument of tryLock.lua and claim.lua (includes/settings.lua) from the caller's fields
 * as these specs write them: '' for no lease, no registration, no expiration.
 */
export function settingsArgument(
  resources: string,
  lease: string,
  lifetime: string,
  keep: string,
  expiration: string,
  label: string,
): string {
  return [lease || '0', resources, lifetime || '-', keep === '1' ? '1' : '0', '1', expiration || '-', label].join(' ');
}

/** The fields of a one-string reply "<grant id> <field>…", and "<n> <id>… <token>" after `count` of them. */
function split(reply: unknown, count: number): { grant: string; fields: number[]; expired: string[]; rest: string } {
  if (typeof reply !== 'string') throw new Error(`not a one-string reply: ${JSON.stringify(reply)}`);
  const parts = reply.split(' ');
  const grant = parts.shift()!;
  const fields = parts.splice(0, count).map(Number); // (claim's flags: NaN, read apart)
  const n = Number(parts.shift());
  const expired = parts.splice(0, n);
  return { grant, fields, expired, rest: parts.join(' ') };
}

/**
 * `run` of scriptRunner for the hot-path scripts with the fields a caller has, in the order these
 * specs write them, and their replies as arrays of the fields each script's header lists:
 *   tryLock [resources, grant id, lease ms or '', registration lifetime s or '', owner label, local time?,
 *     expiration?] → [token or null, fence (0 on a miss), grant id, expired registration…];
 *   claim [registration id, resources, lease, lifetime s or '' (last slice), label, grant id or '' (the
 *     registration id), keep '1' or '', local time?, expiration?] → [token or null, renewed 1/0, fence,
 *     others 1/0, grant id, expired registration…];
 *   release [token, grant id, '1' unlock or '0' consume, expiration?] → [ended 1/0 (+/-), available, grant id].
 * Other scripts go as they are.
 */
export function hotCalls(run: Run): Run {
  return async (script, args, extraKeys = []) => {
    if (script === 'tryLock') {
      const [resources, grant, lease, lifetime, label, now = '', expiration = ''] = args as string[];
      const argv = [grant!, settingsArgument(resources!, lease!, lifetime!, '', expiration, label!)];
      if (now !== '') argv.push(now);
      const { grant: id, fields, expired, rest } = split(await run(script, argv, extraKeys), 1);
      const fence = fields[0]!;
      return [fence === 0 ? null : rest, fence, id, ...expired];
    }
    if (script === 'claim') {
      const [registration, resources, lease, lifetime, label, grant = '', keep = '', now = '', expiration = ''] =
        args as string[];
      const argv = [
        registration!,
        grant === '' ? registration! : grant,
        settingsArgument(resources!, lease!, lifetime!, keep, expiration, label!),
      ];
      if (now !== '') argv.push(now);
      const reply = await run(script, argv, extraKeys);
      const { grant: id, fields, expired, rest } = split(reply, 2);
      const [fence, flags] = [fields[0]!, String((reply as string).split(' ')[2])];
      return [fence === 0 ? null : rest, flags[0] === 'K' ? 1 : 0, fence, flags[1] === 'W' ? 1 : 0, id, ...expired];
    }
    if (script === 'release') {
      const reply = await run(script, args, extraKeys);
      if (typeof reply !== 'string') throw new Error(`not a one-string reply: ${JSON.stringify(reply)}`);
      const [grant, field = ''] = reply.split(' ');
      return [field.startsWith('+') ? 1 : 0, Number(field.slice(1)), grant];
    }
    return run(script, args, extraKeys);
  };
}

/** scriptRunner with `run` for the hot-path scripts as `hotCalls` makes it, and `raw`, scriptRunner's own. */
export function hotScriptRunner(redis: Client, prefix: string) {
  const runner = scriptRunner(redis, prefix);
  return { ...runner, run: hotCalls(runner.run), raw: runner.run };
}
