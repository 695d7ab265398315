/**
 * The function library (lib/redis/functions.ts) on a real server that loses it or refuses it: FUNCTION
 * FLUSH (as a restart without persistence would), and ACLs without FUNCTION LOAD or FCALL. Calls go
 * on as EVAL, nothing is lost or left behind.
 */
import { releaseToken } from '../../lib/admin/operations';
import { functionLibrary } from '../../lib/redis/functions';
import { scripts } from '../../lib/redis/registry';
import { censusProblems, takeCensus } from '../support/census';
import { PrivateServers } from '../support/private-servers';
import { blockedClients, uniqueName, until, type Client } from '../support/redis';

const servers = new PrivateServers();
afterEach(() => servers.close());

/** How often the server ran `command`, and how often it refused it before running it (ACL). */
async function commandStats(admin: Client, command: string): Promise<{ calls: number; rejected: number }> {
  const line = new RegExp(`^cmdstat_${command}:calls=(\\d+).*?rejected_calls=(\\d+)`, 'm').exec(
    String(await admin.sendCommand(['INFO', 'commandstats'])),
  );
  return { calls: Number(line?.[1] ?? 0), rejected: Number(line?.[2] ?? 0) };
}

async function hasLibrary(admin: Client): Promise<boolean> {
  const listed = (await admin.sendCommand(['FUNCTION', 'LIST', 'LIBRARYNAME', functionLibrary.name])) as unknown[];
  return listed.length === 1;
}

/** A mutex held by `holder` while `waiter` blocks on it; then `between` runs, and the holder unlocks. Checks the waiter's grant and the census. */
async function handOff(admin: Client, url: string, between: () => Promise<void>, functions = true): Promise<void> {
  const name = uniqueName('fn');
  const holder = servers.semaphore(name, { url, functions });
  const waiter = servers.semaphore(name, { url, functions });
  expect(await holder.lock(0)).toBe('0');
  const base = await blockedClients(admin);
  const waited = waiter.lock(10_000);
  await until(async () => (await blockedClients(admin)) > base, 5000, 'the waiter to block');
  await between();
  expect(await holder.unlock()).toEqual(expect.any(Number));
  expect(await waited).toBe('0');
  expect(await waiter.refresh('0')).toBe(true);
  expect(await waiter.unlock()).toBe(1);
  expect(await holder.lock(0)).toBe('0');
  expect(await holder.unlock()).toBe(1);
  await holder.close();
  await waiter.close();
  const census = await takeCensus(admin, name);
  expect(censusProblems(census, 1, { idle: true })).toEqual([]);
}

describe('the function library on a server that loses it or refuses it', () => {
  test("FUNCTION FLUSH while a semaphore runs: a waiter's claim, refresh and unlock go on as EVAL, and the library is loaded again", async () => {
    const { server, admin } = await servers.start([]);
    const name = uniqueName('fn');
    const holder = servers.semaphore(name, { url: server.url });
    const waiter = servers.semaphore(name, { url: server.url });
    expect(await holder.lock(0)).toBe('0');
    expect(await hasLibrary(admin)).toBe(true); // loaded at first use
    const base = await blockedClients(admin);
    const waited = waiter.lock(10_000);
    await until(async () => (await blockedClients(admin)) > base, 5000, 'the waiter to block');
    await admin.sendCommand(['SCRIPT', 'LOAD', scripts.forceRelease.source]); // so the operator's call below is no EVAL
    await admin.sendCommand(['FUNCTION', 'FLUSH']); // as a restart without persistence would
    // An operator frees the token (a script of its own, not in the library): the waiter's claim, an
    // FCALL pipelined behind its BLMOVE, is the first call to find the library gone.
    expect(await releaseToken({ redis: admin, keyPrefix: 'SEMAPHORE:' }, name, '0')).toEqual({
      status: 'released',
      available: 1,
    });
    expect(await waited).toBe('0');
    expect((await commandStats(admin, 'eval')).calls).toBe(1); // the claim, again as EVAL
    await until(() => hasLibrary(admin), 5000, 'the library to be loaded again');
    // (Redis counts a refused FCALL among its calls: hence counts from here on.)
    const fcalls = (await commandStats(admin, 'fcall')).calls;
    expect(await waiter.refresh('0')).toBe(true);
    expect(await waiter.unlock()).toBe(1);
    expect((await commandStats(admin, 'fcall')).calls).toBe(fcalls + 2); // by FCALL again
    expect((await commandStats(admin, 'eval')).calls).toBe(1);
    expect(await holder.unlock()).toBe(false); // its grant was ended by the operator
    await holder.close();
    await waiter.close();
    expect(censusProblems(await takeCensus(admin, name), 1, { idle: true })).toEqual([]);
  });

  test('a library that cannot be loaded again (FUNCTION LOAD taken from the ACL, then FUNCTION FLUSH): calls go by EVALSHA, not by a refused FCALL each', async () => {
    const { server, admin } = await servers.start([]);
    await admin.sendCommand(['ACL', 'SETUSER', 'app', 'on', '>pw', '~*', '&*', '+@all']);
    const url = server.url.replace('redis://', 'redis://app:pw@');
    const sem = servers.semaphore(uniqueName('fn'), { url });
    expect(await sem.lock(0)).toBe('0'); // loads the library
    expect(await sem.unlock()).toBe(1);
    await admin.sendCommand(['ACL', 'SETUSER', 'app', '-function|load']);
    await admin.sendCommand(['FUNCTION', 'FLUSH']);
    const before = await commandStats(admin, 'fcall');
    for (let i = 0; i < 20; i++) {
      expect(await sem.lock(0)).toBe('0');
      expect(await sem.unlock()).toBe(1);
    }
    // The first FCALL found the library gone (EVAL, and a refused load); the rest went by EVALSHA.
    expect((await commandStats(admin, 'fcall')).calls - before.calls).toBeLessThanOrEqual(2);
    expect((await commandStats(admin, 'evalsha')).calls).toBeGreaterThanOrEqual(38);
  });

  test('a server that does not know FCALL (renamed away): calls go by EVAL once, then EVALSHA', async () => {
    const { server, admin } = await servers.start(['--rename-command', 'FCALL', '']);
    const sem = servers.semaphore(uniqueName('fn'), { url: server.url });
    for (let i = 0; i < 5; i++) {
      expect(await sem.lock(0)).toBe('0');
      expect(await sem.unlock()).toBe(1);
    }
    // One FCALL refused as unknown (then that tryLock as EVAL), and the first release NOSCRIPT on a
    // fresh server (then EVAL); an FCALL tried again on every call would make an EVAL of each.
    expect((await commandStats(admin, 'eval')).calls).toBe(2);
    expect((await commandStats(admin, 'evalsha')).calls).toBe(9); // the other 8 calls, and the first release's (refused with NOSCRIPT)
  });

  test('min-replicas-to-write without replicas (NOREPLICAS): an unlock or refresh of a grant already lost still answers, and the holder is told "reclaimed"', async () => {
    const { server, admin } = await servers.start([]);
    const name = uniqueName('fn');
    const losses: string[] = [];
    const sem = servers.semaphore(name, {
      url: server.url,
      autoRefresh: false,
      onLockLost: (_token, reason) => void losses.push(reason),
    });
    expect(await sem.lock(0)).toBe('0');
    expect(await sem.lock(0)).toBeNull(); // both tries by FCALL: the library is in use
    expect((await commandStats(admin, 'fcall')).calls).toBe(2);
    await admin.sendCommand(['HDEL', `SEMAPHORE:${name}:GRABBED`, '0']); // an operator forgot the holder
    await admin.sendCommand(['LPUSH', `SEMAPHORE:${name}:AVAILABLE`, '0']);
    await admin.sendCommand(['CONFIG', 'SET', 'min-replicas-to-write', '1']);
    expect(await sem.refresh('0')).toBe(false); // refused as FCALL, answered as EVAL
    expect(losses).toEqual(['reclaimed']);
    expect(await sem.unlock('0')).toBe(false);
    await admin.sendCommand(['CONFIG', 'SET', 'min-replicas-to-write', '0']);
  });

  test.each([
    ['neither FUNCTION LOAD nor FCALL', ['-function', '-fcall'], false],
    ['FUNCTION LOAD but not FCALL', ['-fcall'], true],
  ])('an ACL that allows %s: every call goes by EVALSHA or EVAL, and works', async (_, denied, loads) => {
    const { server, admin } = await servers.start([]);
    await admin.sendCommand(['ACL', 'SETUSER', 'scripts', 'on', '>pw', '~*', '&*', '+@all', ...denied]);
    const url = server.url.replace('redis://', 'redis://scripts:pw@');
    await handOff(admin, url, async () => undefined);
    expect(await hasLibrary(admin)).toBe(loads);
    const fcall = await commandStats(admin, 'fcall');
    expect(fcall.calls).toBe(0);
    // Without FUNCTION LOAD nothing tries FCALL; with it, a connection's first FCALL is refused and
    // goes again as EVAL, and that connection calls by EVALSHA from then on (two semaphores: two
    // main connections and two blocking ones).
    if (!loads) expect(fcall.rejected).toBe(0);
    else expect(fcall.rejected).toBeGreaterThan(0);
    expect(fcall.rejected).toBeLessThanOrEqual(4);
    expect(
      (await commandStats(admin, 'evalsha')).calls + (await commandStats(admin, 'eval')).calls,
    ).toBeGreaterThanOrEqual(4);
  });

  test('`functions: false`: the library is not loaded, and every call goes by EVALSHA', async () => {
    const { server, admin } = await servers.start([]);
    await handOff(admin, server.url, async () => undefined, false);
    expect(await hasLibrary(admin)).toBe(false);
    expect(await commandStats(admin, 'fcall')).toEqual({ calls: 0, rejected: 0 });
    expect((await commandStats(admin, 'evalsha')).calls).toBeGreaterThanOrEqual(6);
  });

  test('with the library, a cycle goes by FCALL alone', async () => {
    const { server, admin } = await servers.start([]);
    await handOff(admin, server.url, async () => undefined);
    expect((await commandStats(admin, 'fcall')).calls).toBeGreaterThanOrEqual(6);
    expect((await commandStats(admin, 'eval')).calls).toBe(0);
  });
});
