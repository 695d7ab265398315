import { Contention } from '../../lib/contention';
import { SemaphoreContext } from '../../lib/context';
import { resolveOptions } from '../../lib/options';
import { useFixture } from '../support/fixture';
import { uniqueName } from '../support/redis';

/** Advance registrations (lib/contention.ts): the idle ones end, the others stay known, in any order of expiry. */
const fixture = useFixture();

test('the idle sweep ends the registrations kept more than 200 ms ago and keeps the others', async () => {
  // The sweep judges idleness on the clock it is given: this one moves only when the spec moves it,
  // so however late the sweep's timer fires under load, "old" was kept 250 ms before it and "recent" 100 ms.
  let clock = 0;
  const name = uniqueName('advance');
  const options = resolveOptions({ redis: fixture.redis as never, resources: 1 });
  const ctx = new SemaphoreContext(name, options, () => undefined, async () => undefined);
  const contention = new Contention(ctx, () => clock);
  const until = performance.now() + ctx.registrationLifetimeMs();
  const expiry = String(Date.now() / 1000 + 60);
  await fixture.redis.sendCommand(['ZADD', ctx.keys.waiting, expiry, 'recent', expiry, 'old']);
  const members = async () => (await fixture.redis.sendCommand(['ZRANGE', ctx.keys.waiting, '0', '-1'])) as string[];
  // A registration kept long ago may expire later than one kept just now: the sweep goes by when each was kept.
  contention.keepAdvanceRegistration({ id: 'old', until });
  clock = 150;
  contention.keepAdvanceRegistration({ id: 'recent', until: until - 1_000 });
  clock = 250;
  // The first sweep runs 200 ms (of real time) after the first keep.
  const deadline = performance.now() + 10_000;
  while ((await members()).length === 2 && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
  expect(await members()).toEqual(['recent']);
  // The recent one is still known, so close() would end it.
  expect(contention.takeAllAdvanceRegistrations()).toEqual(['recent']);
});

test('a later sweep ends the registration that was recent at the first one', async () => {
  let clock = 0;
  const name = uniqueName('advance');
  const options = resolveOptions({ redis: fixture.redis as never, resources: 1 });
  const ctx = new SemaphoreContext(name, options, () => undefined, async () => undefined);
  const contention = new Contention(ctx, () => clock);
  const until = performance.now() + ctx.registrationLifetimeMs();
  const expiry = String(Date.now() / 1000 + 60);
  await fixture.redis.sendCommand(['ZADD', ctx.keys.waiting, expiry, 'recent', expiry, 'old']);
  const members = async () => (await fixture.redis.sendCommand(['ZRANGE', ctx.keys.waiting, '0', '-1'])) as string[];
  contention.keepAdvanceRegistration({ id: 'old', until });
  clock = 150;
  contention.keepAdvanceRegistration({ id: 'recent', until });
  clock = 250;
  const deadline = performance.now() + 10_000;
  while ((await members()).length === 2 && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
  expect(await members()).toEqual(['recent']);
  // The sweep re-armed for what it kept: once "recent" is idle too, it ends.
  clock = 400;
  while ((await members()).length === 1 && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
  expect(await members()).toEqual([]);
  expect(contention.takeAllAdvanceRegistrations()).toEqual([]);
});
