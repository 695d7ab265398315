/**
 * The function library (lib/functions.ts) on a real server that loses it or refuses it: FUNCTION
 * FLUSH (as a restart without persistence would), and ACLs without FUNCTION LOAD or FCALL. Calls go
 * on as EVAL, nothing is lost or left behind.
 */
import { releaseToken } from '../../lib/admin/operations';
import { functionLibrary } from '../../lib/functions';
import { scripts } from '../../lib/scripts';
import { censusProblems, takeCensus } from '../support/census';
import { PrivateServers } from '../support/private-servers';
import { blockedClients, uniqueName, until, type Client } from '../support/redis';

const servers = new PrivateServers();
afterEach(() => servers.close());

/** How often the server ran `command`, and how often it refused it before running it (ACL). */
async function commandStats(admin: Client, command: string): Promise<{ calls: number; rejected: number }> {
  const line = new RegExp(`^cmdstat_${command}:calls=(\\d+).*?rejected_calls=(\\d+)`, 'm').exec(String(await admin.sendCommand(['INFO', 'commandstats'])));
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
  test('FUNCTION FLUSH while a semaphore runs: a waiter\'s claim, refresh and unlock go on as EVAL, and the library is loaded again', async () => {
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
    expect(await releaseToken({ redis: admin, keyPrefix: 'SEMAPHORE:' }, name, '0')).toEqual({ status: 'released', available: 1 });
    expect(await waited).toBe('0');
    expect((await commandStats(admin, 'eval')).calls).toBe(1); // the claim, again as EVAL
    await until(() => hasLibrary(admin), 5000, 'the library to be loaded again');
    expect(await waiter.refresh('0')).toBe(true);
    expect(await waiter.unlock()).toBe(1);
    expect(await holder.unlock()).toBe(false); // its grant was ended by the operator
    await holder.close();
    await waiter.close();
    expect(censusProblems(await takeCensus(admin, name), 1, { idle: true })).toEqual([]);
    expect((await commandStats(admin, 'fcall')).calls).toBeGreaterThanOrEqual(3); // the first lock, then the refresh and unlock
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
    expect((await commandStats(admin, 'evalsha')).calls + (await commandStats(admin, 'eval')).calls).toBeGreaterThanOrEqual(4);
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
