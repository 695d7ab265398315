import { Contention } from '../../lib/contention';
import { SemaphoreContext } from '../../lib/context';
import { resolveOptions } from '../../lib/options';
import { useFixture } from '../support/fixture';
import { uniqueName } from '../support/redis';

/** Advance registrations (lib/contention.ts): the idle ones end, the others stay known, in any order of expiry. */
const fixture = useFixture();

test('the idle sweep ends exactly the idle registrations, whatever order their claims answered in', async () => {
  const name = uniqueName('advance');
  const options = resolveOptions({ redis: fixture.redis as never, resources: 1 });
  const ctx = new SemaphoreContext(name, options, () => undefined, async () => undefined);
  const contention = new Contention(ctx);
  const lifetime = ctx.registrationLifetimeMs();
  const now = performance.now();
  // Slices sent at different moments answer in any order: a recent one first, then an old one.
  await fixture.redis.sendCommand(['ZADD', ctx.keys.waiting, String(Date.now() / 1000 + 60), 'recent', String(Date.now() / 1000 + 60), 'old']);
  contention.keepAdvanceRegistration({ id: 'recent', until: now + lifetime + 10_000 });
  contention.keepAdvanceRegistration({ id: 'old', until: now + lifetime - 1_000 });
  await new Promise((resolve) => setTimeout(resolve, 400));
  expect(await fixture.redis.sendCommand(['ZRANGE', ctx.keys.waiting, '0', '-1'])).toEqual(['recent']);
  // The recent one is still known, so close() would end it.
  expect(contention.takeAllAdvanceRegistrations()).toEqual(['recent']);
});
