import { Contention } from '../../lib/lock/contention';
import { SemaphoreContext } from '../../lib/context';
import { registrationLifetimeMs } from '../../lib/lock/timing';
import { resolveOptions } from '../../lib/options';
import { useFixture } from '../support/fixture';
import { uniqueName } from '../support/redis';

/** Advance registrations (lib/lock/contention.ts): the idle ones end, the others stay known, in any order of expiry. */
const fixture = useFixture();

/**
 * A Contention whose idle sweep judges by `clock.now`, which moves only when the spec moves it: however
 * late the sweep's timer fires under load, what was kept when is what the spec says. WAITING holds
 * "recent" and "old", as claims would have left them.
 */
async function scenario() {
  const clock = { now: 0 };
  const options = resolveOptions({ redis: fixture.redis as never, resources: 1 });
  const ctx = new SemaphoreContext(
    uniqueName('advance'),
    options,
    () => undefined,
    async () => undefined,
  );
  const contention = new Contention(ctx, () => clock.now);
  const expiry = String(Date.now() / 1000 + 60);
  await fixture.redis.sendCommand(['ZADD', ctx.keys.waiting, expiry, 'recent', expiry, 'old']);
  const members = async () => (await fixture.redis.sendCommand(['ZRANGE', ctx.keys.waiting, '0', '-1'])) as string[];
  /** Waits (10 s at most) for the sweep to end registrations, and returns those left in WAITING. */
  const sweptTo = async (count: number) => {
    const deadline = performance.now() + 10_000;
    while ((await members()).length > count && performance.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 5));
    return members();
  };
  return { clock, contention, until: performance.now() + registrationLifetimeMs(ctx.options.waitSlice), sweptTo };
}

test('the idle sweep ends the registrations kept more than 200 ms ago and keeps the others', async () => {
  const { clock, contention, until, sweptTo } = await scenario();
  // A registration kept long ago may expire later than one kept just now: the sweep goes by when each was kept.
  contention.keepAdvanceRegistration({ id: 'old', until });
  clock.now = 150;
  contention.keepAdvanceRegistration({ id: 'recent', until: until - 1_000 });
  clock.now = 250; // "old" kept 250 ms ago, "recent" 100 ms ago, whenever the first sweep (200 ms of real time) runs
  expect(await sweptTo(1)).toEqual(['recent']);
  // The recent one is still known, so close() would end it.
  expect(contention.takeAllAdvanceRegistrations()).toEqual(['recent']);
});

test('a later sweep ends the registration that was recent at the first one', async () => {
  const { clock, contention, until, sweptTo } = await scenario();
  contention.keepAdvanceRegistration({ id: 'old', until });
  clock.now = 150;
  contention.keepAdvanceRegistration({ id: 'recent', until });
  clock.now = 250;
  expect(await sweptTo(1)).toEqual(['recent']);
  // The sweep re-armed for what it kept: once "recent" is idle too, it ends.
  clock.now = 400;
  expect(await sweptTo(0)).toEqual([]);
  expect(contention.takeAllAdvanceRegistrations()).toEqual([]);
});
