/**
 * The abort storm (soak/abort-storm.ts): 4 worker processes × 16 callers on one mutex, every
 * lock with a request deadline of 5–65 ms (`AbortSignal.timeout`), holds of 0–5 ms, for 30 s
 * (ABORT_STORM_SECONDS; 15 s in the v5 and v6 passes); then the same on a semaphore of 3 for half as long. Fails when grants stop
 * for more than one slice while callers wait (after the first 2 s; at any time when Redis grants nothing meanwhile), on more holders than resources, on a failed call, and
 * on anything left behind once the workers closed (a lost or duplicated token, an INBOX key, a
 * registration other than an abandoned mark, a GRABBED entry). `npm run soak` runs it too.
 */
import { runAbortStorm, type AbortStormReport } from '../../soak/abort-storm';
import { isFirstPass } from '../support/redis';

// 30 s in the v4 pass; 15 s in the v5 and v6 passes (cancellation differs by major, but CI time adds
// up: `npm run soak` storms longer, on any major).
const SECONDS = Number(process.env['ABORT_STORM_SECONDS'] ?? (isFirstPass() ? 30 : 15));
const VARIANT_SECONDS = Math.max(5, Math.round(SECONDS / 2));

function expectClean(report: AbortStormReport, seconds: number): void {
  console.log(report.lines.join('\n'));
  // The report's own check fails on any gap in which Redis granted nothing (a token stuck), warm-up
  // included. A gap in the first 2 s, while 64 blocking connections open and V8 compiles under
  // 1,500 aborts a second, can pass a slice on a loaded 2-vCPU machine with Redis still granting
  // (1,104 ms at +0.3 s in a CI run): past that, grants must come within a slice.
  expect(report.checks.filter((check) => !check.ok)).toEqual([]);
  expect(report.steadyMaxGapMs).toBeLessThanOrEqual(1000);
  expect(report.leftoverInboxKeys).toEqual([]);
  expect(report.errors).toEqual([]);
  expect(report.aborts).toBeGreaterThan(0);
  expect(report.grants).toBeGreaterThan(seconds * 10);
}

test(
  `an abort storm on a mutex for ${SECONDS} s: grants never stall, one holder at most, nothing left behind`,
  async () => {
    const report = await runAbortStorm({ seconds: SECONDS, resources: 1 });
    expectClean(report, SECONDS);
    expect(report.maxHolders).toBe(1);
  },
  (SECONDS + 90) * 1000,
);

test(
  `an abort storm on a semaphore of 3 for ${VARIANT_SECONDS} s: the same, three holders at most`,
  async () => {
    const report = await runAbortStorm({ seconds: VARIANT_SECONDS, resources: 3 });
    expectClean(report, VARIANT_SECONDS);
    expect(report.maxHolders).toBeLessThanOrEqual(3);
  },
  (VARIANT_SECONDS + 90) * 1000,
);
