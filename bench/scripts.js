'use strict';
// Owns the per-script instruction benchmark: Redis instructions per call of each hot-path script
// (tryLock hit, claim of a token, release), and the unit costs they are made of, counted by callgrind.
//
// Where `bench:instructions` counts whole lock + unlock cycles, this says which part of a script
// costs what, so a change to a script can be judged on its own. Each case sets up the keys it needs
// (the same commands before every call), runs the script N times by SHA1, and reports the counted
// instructions minus those of the set-up alone. Calls are built by the library's own script layer
// (dist/redis/commands.js), so KEYS and ARGV are exactly what a semaphore sends.
//
//   npm run bench:scripts                      # this build (dist/)
//   node bench/scripts.js --dist /other/dist   # another build, to compare
//   node bench/scripts.js --calls 1000         # calls per case (default 500)
const { rmSync, statSync } = require('node:fs');
const path = require('node:path');
const { createClient } = require('redis');
const {
  dumpCounters,
  hasCallgrind,
  lastDumpInclusive,
  lastDumpTotal,
  startUnderCallgrind,
  zeroCounters,
} = require('./lib/callgrind');
const { gitCommit } = require('./lib/provenance');
const { option, scriptLayer } = require('./lib/report');

const dist = path.resolve(option('dist', path.join(__dirname, '..', 'dist')));
const calls = Number(option('calls', '500'));
const lib = scriptLayer(dist);
const { semaphoreKeys } = require(path.join(dist, 'redis', 'keys.js'));

const keys = semaphoreKeys('bench');
/** A semaphore as its scripts see it, with the defaults: a 30 s lease, Redis TIME, no expiration. */
const target = {
  keys,
  resources: 1,
  options: { staleClientTimeout: 30_000, expiration: null, useLocalTime: false, owner: 'host:1234' },
};
const record = '1763800000.123456 g1 1795561087434814 30000 1763800000.123456 host:1234';

/** Each case: the script call (for a target), and the commands that put Redis in the state it needs before every call. */
const CASES = [
  {
    name: 'tryLock, a hit',
    call: (t) => lib.tryLock(t, 'g1', null),
    setup: [
      ['SET', keys.exists, '1'],
      ['HDEL', keys.grabbed, '0'],
      ['DEL', keys.available],
      ['LPUSH', keys.available, '0'],
    ],
  },
  {
    name: 'claim of a token (others wait: registration kept)',
    call: (t) => lib.claim(t, 'r1', { grantId: 'g1', nextLifetimeMs: 10_000, keep: true }),
    setup: [
      ['SET', keys.exists, '1'],
      // Emptied first: the set-up also runs alone (its own count is subtracted), and the tokens it
      // pushed would otherwise wait in the inbox for the first measured claim to drain.
      ['DEL', keys.inbox('r1')],
      ['LPUSH', keys.inbox('r1'), '0'],
      ['ZADD', keys.waiting, '9999999999', 'r1', '9999999999', 'r2'],
      ['HDEL', keys.grabbed, '0'],
      ['DEL', keys.available],
      ['SET', keys.fence, '1795561087434000'], // never a multiple of 16 after INCR: no sampled reclaim
    ],
  },
  {
    name: 'release (unlock)',
    call: (t) => lib.release(t, '0', 'g1', true),
    setup: [
      ['HSET', keys.grabbed, '0', record],
      // The grant's index entry, as in a real cycle (so a build whose release removes it counts that).
      ['ZADD', keys.leases, '1763800030123456', '0'],
      ['DEL', keys.available],
    ],
  },
];

/** Unit costs: one command in a loop of 10 inside a script with no keys or arguments. */
const UNITS = [
  ['EVALSHA of `return 1`', 'return 1', 1],
  ['a redis.call TIME', "for i = 1, 10 do redis.call('TIME') end return 1", 10],
  ['a redis.call EXISTS', "for i = 1, 10 do redis.call('EXISTS', 'k') end return 1", 10],
  ["string.format('%d', fence)", "for i = 1, 10 do local s = string.format('%d', 1795561087434814) end return 1", 10],
  ["string.format('%.6f', score)", "for i = 1, 10 do local s = string.format('%.6f', 1763800030.5) end return 1", 10],
];

async function main() {
  if (lib === null) {
    throw new Error(`no build in ${dist}: run npm run build first`);
  }
  if (!hasCallgrind()) throw new Error('bench/scripts.js needs valgrind (apt-get install valgrind)');
  const { server, dir } = await startUnderCallgrind();
  const client = createClient({ url: server.url });
  await client.connect();
  // serverCron runs 10 times a second and its instructions would count against whichever case runs.
  await client.sendCommand(['CONFIG', 'SET', 'hz', '1']);
  /** The instructions counted between `callgrind_control -z` and `-d` while `work` runs. */
  const counted = async (work) => {
    zeroCounters(server);
    await work();
    dumpCounters(server);
    return lastDumpTotal(dir);
  };
  const repeat = async (n, step) => {
    for (let i = 0; i < n; i++) await step();
  };
  try {
    const build = option('dist', null) === null ? `dist/ of ${gitCommit()}` : dist;
    console.log(`# Redis instructions per script call (callgrind), ${calls} calls each, library from ${build}\n`);
    // Builds before the function library (lib/redis/functions.ts) call by EVALSHA alone.
    const functions = statSync(path.join(dist, 'redis', 'functions.js'), { throwIfNoEntry: false }) !== undefined;
    if (functions) await require(path.join(dist, 'redis', 'functions.js')).loadFunctionLibrary(client);
    const breakdown = [];
    console.log('| script call | KEYS + ARGV | by EVALSHA | by FCALL (the function library) |');
    console.log('|---|---|---|---|');
    /** Redis instructions per call of `call` (its set-up's own count subtracted). */
    const perCall = async (call, setup) => {
      const prepare = async () => {
        for (const command of setup) await client.sendCommand(command);
      };
      const run = async () => {
        await prepare();
        return client.sendCommand((lib.storedCommand ?? lib.evalshaCommand)(call));
      };
      call.decode(await run()); // throws if the script did not answer as the library expects
      const base = await counted(() => repeat(calls, prepare));
      const total = await counted(() => repeat(calls, run));
      // Where a call's instructions go (the set-up runs no script, so these are the script's alone).
      const inclusive = lastDumpInclusive(dir, ['fcallCommand', 'evalShaCommand', 'lua_pcall', 'scriptCall']);
      const each = (n) => Math.round(n / calls);
      parts.push({
        call:
          (inclusive.fcallCommand || inclusive.evalShaCommand) > 0
            ? each(inclusive.fcallCommand || inclusive.evalShaCommand)
            : null,
        lua: each(inclusive.lua_pcall),
        commands: each(inclusive.scriptCall),
      });
      return Math.round((total - base) / calls).toLocaleString('en-US');
    };
    /** Per measured call, in the order made: the script command's, Lua's and its commands' inclusive counts. */
    const parts = [];
    for (const { name, call, setup } of CASES) {
      const byEvalsha = call(target);
      await client.sendCommand(lib.scriptLoadCommand(byEvalsha.script));
      const evalsha = await perCall(byEvalsha, setup);
      const fcall = functions ? await perCall(call({ ...target, functions: true }), setup) : '—';
      console.log(`| ${name} | ${byEvalsha.keys.length} + ${byEvalsha.args.length} | ${evalsha} | ${fcall} |`);
      breakdown.push({ name, byFcall: functions ? parts.at(-1) : null, byEvalsha: parts.at(functions ? -2 : -1) });
    }
    const n = (x) => (x === null ? '—' : x.toLocaleString('en-US'));
    console.log('\nWhere they go (callgrind_annotate, inclusive, per call): the script command as a whole, inside Lua');
    console.log("(its code, and each redis.call's arguments and reply), and of that the commands it calls.\n");
    console.log('| script call | by | command | inside Lua | its commands | Lua without them | command outside Lua |');
    console.log('|---|---|---|---|---|---|---|');
    for (const { name, byFcall, byEvalsha } of breakdown) {
      for (const [by, p] of [
        ['EVALSHA', byEvalsha],
        ['FCALL', byFcall],
      ]) {
        if (p === null) continue;
        console.log(
          `| ${name} | ${by} | ${n(p.call)} | ${n(p.lua)} | ${n(p.commands)} | ${n(p.lua - p.commands)} | ${p.call === null ? '—' : n(p.call - p.lua)} |`,
        );
      }
    }
    console.log('\n| unit cost | Redis instructions each |');
    console.log('|---|---|');
    const empty = await client.sendCommand(['SCRIPT', 'LOAD', 'return 1']);
    const evalOverhead =
      (await counted(() => repeat(calls, () => client.sendCommand(['EVALSHA', empty, '0'])))) / calls;
    for (const [name, source, times] of UNITS) {
      const sha = await client.sendCommand(['SCRIPT', 'LOAD', source]);
      const perRun = (await counted(() => repeat(calls, () => client.sendCommand(['EVALSHA', sha, '0'])))) / calls;
      const each = times === 1 ? perRun : (perRun - evalOverhead) / times;
      console.log(`| ${name} | ${Math.round(each).toLocaleString('en-US')} |`);
    }
    if (functions) {
      await client.sendCommand([
        'FUNCTION',
        'LOAD',
        'REPLACE',
        "#!lua name=bench_unit\nredis.register_function('bench_one', function() return 1 end)",
      ]);
      const fcall = (await counted(() => repeat(calls, () => client.sendCommand(['FCALL', 'bench_one', '0'])))) / calls;
      console.log(`| FCALL of a function returning 1 | ${Math.round(fcall).toLocaleString('en-US')} |`);
    }
  } finally {
    await client.quit().catch(() => client.disconnect());
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
