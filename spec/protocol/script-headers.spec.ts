/**
 * Every script's header (lib/redis/scripts/*.lua), as STYLE.md asks: what it does, how many keys a
 * call passes, every KEYS and ARGV it reads, and what it returns; the registry lists every file with
 * the key count its header gives, and no builder sends more arguments than its script's header lists.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as commands from '../../lib/redis/commands';
import { semaphoreKeys } from '../../lib/redis/keys';
import { withoutComments } from '../../lib/redis/lua-source';
import * as operatorCommands from '../../lib/redis/operator-commands';
import { scripts } from '../../lib/redis/registry';
import type { ScriptCall } from '../../lib/redis/send';

const DIR = join(__dirname, '..', '..', 'lib', 'redis', 'scripts');
const FILES = readdirSync(DIR)
  .filter((file) => file.endsWith('.lua'))
  .sort();

/** A script's header (the `--[[ … ]]` it opens with) and its code after it, comments removed. */
function parts(file: string): { header: string; code: string } {
  const source = readFileSync(join(DIR, file), 'utf8');
  const match = /^--\[\[\n([\s\S]*?)\n\]\]\n/.exec(source);
  if (match === null) throw new Error(`${file} does not open with a --[[ … ]] header`);
  return { header: match[1]!, code: withoutComments(source.slice(match[0].length)) };
}

/** The distinct `NAME[…]` index expressions in `text` (`ARGV[2]`, `KEYS[#KEYS]`, `ARGV[i]`). */
function indexes(text: string, name: 'KEYS' | 'ARGV'): string[] {
  return [...new Set([...text.matchAll(new RegExp(`${name}\\[([^\\]]+)\\]`, 'g'))].map(([, index]) => index!))];
}

test('the registry holds every script file and no other, by a name that is no key count', () => {
  expect(Object.values(scripts).map((script) => script.file)).toEqual(expect.arrayContaining(FILES));
  expect(Object.values(scripts)).toHaveLength(FILES.length);
  for (const file of FILES) expect(file).toMatch(/^[a-z][A-Za-z]*\.lua$/);
});

describe.each(FILES)('%s', (file) => {
  const { header, code } = parts(file);
  const script = Object.values(scripts).find((s) => s.file === file)!;

  test('says what it does, then Keys, Input and Output, in that order', () => {
    const lines = header.split('\n');
    const at = (label: string) => lines.findIndex((line) => line.startsWith(`  ${label}:`));
    expect(at('Keys')).toBeGreaterThan(0); // a description first
    expect(at('Input')).toBeGreaterThan(at('Keys'));
    expect(at('Output')).toBeGreaterThan(at('Input'));
  });

  test("its Keys line gives the registry's most keys", () => {
    const [, count, perRegistration] = /^ {2}Keys: (?:at most )?(\d+)(, then one inbox per registration)?/m.exec(
      header,
    ) ?? [undefined, undefined];
    expect(count).toBeDefined();
    expect(script.maxKeys).toBe(perRegistration === undefined ? Number(count) : null);
  });

  test('lists the twelve keys in order, and every KEYS and ARGV its code reads', () => {
    expect(header).toContain(
      'KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE\n    KEYS[8] CREATING  KEYS[9] OWNERS  KEYS[10] COLLECTING  KEYS[11] PENDING  KEYS[12] COLLECTED',
    );
    const unlisted = (['KEYS', 'ARGV'] as const).flatMap((name) => {
      const listed = indexes(header, name);
      // A computed index (`ARGV[i]`, `KEYS[8 + i]`) is listed as a range (`ARGV[2..]`).
      const hasRange = listed.some((index) => index.endsWith('..'));
      return indexes(code, name)
        .filter((index) => (/^\d+$|^#/.test(index) ? !listed.includes(index) : !hasRange))
        .map((index) => `${name}[${index}]`);
    });
    expect(unlisted).toEqual([]);
  });

  test('every ARGV its header lists is read', () => {
    const read = indexes(code, 'ARGV');
    const unread = indexes(header, 'ARGV').filter((index) => /^\d+$/.test(index) && !read.includes(index));
    expect(unread).toEqual([]);
  });
});

describe('the builders', () => {
  // Every optional argument present: a Cluster client, `expiration`, local time.
  const target = {
    keys: semaphoreKeys('headers', { cluster: true }),
    resources: 2,
    options: { staleClientTimeout: 30_000, expiration: 60_000, useLocalTime: true, owner: 'me' },
  };
  const calls: Array<ScriptCall<unknown>> = [
    commands.tryLock(target, 'g1', 10_000),
    commands.prepareWait(target, 'r1', 10_000, 2),
    commands.claim(target, 'r1', { grantId: 'g1', nextLifetimeMs: 10_000, keep: true }),
    commands.recover(target, 'g1', 'r1', 10_000),
    commands.release(target, '0', 'g1', true, ['1']),
    commands.refresh(target, '0', 'g1', ['1']),
    commands.signal(target, 'job'),
    commands.releaseStale(target),
    commands.reapWaiters(target, ['r1', '~r2']),
    commands.create(target),
    commands.inspect(target, true),
    operatorCommands.status(target, 10),
    operatorCommands.forceRelease(target, '0', 'g1'),
    operatorCommands.resize(target, 3),
  ];

  test('cover every script', () => {
    expect(calls.map((call) => call.script.name).sort()).toEqual(Object.keys(scripts).sort());
  });

  test.each(calls.map((call) => [call.script.file, call] as const))(
    '%s: no more arguments than its header lists',
    (file, call) => {
      const listed = indexes(parts(file).header, 'ARGV');
      const range = listed.find((index) => index.endsWith('..'));
      // A range (`ARGV[2..]`) takes any number from its start on; the sample passes some.
      if (range !== undefined) expect(call.args.length).toBeGreaterThanOrEqual(Number(range.slice(0, -2)));
      else expect(call.args.length).toBeLessThanOrEqual(Math.max(...listed.map(Number)));
    },
  );
});
