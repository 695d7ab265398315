/**
 * The short soak CI runs (about 30 s): worker processes under random faults from the fault table
 * (SIGKILLed workers, CLIENT KILL, black-holed connections, Redis restarted with AOF, CLIENT PAUSE),
 * judged by the history checker and the token census. `npm run soak` runs the same for longer
 * (soak/soak.ts).
 */
import { runSoak } from '../../soak/soak';

const SECONDS = Number(process.env['SOAK_SECONDS'] ?? 30);

test(
  `a ${SECONDS} s soak under random faults: no over-admission, no token lost or duplicated`,
  async () => {
    const report = await runSoak({ seconds: SECONDS });
    console.log(report.lines.join('\n'));
    expect(report.checks.filter((check) => !check.ok)).toEqual([]);
    expect(report.overAdmissions).toBe(0);
    expect(report.sharedTokens).toBe(0);
    expect(report.lostTokens).toBe(0);
    expect(report.duplicatedTokens).toBe(0);
    expect(report.acquisitions).toBeGreaterThan(SECONDS * 10);
    for (const count of Object.values(report.faults)) expect(count).toBeGreaterThan(0);
  },
  (SECONDS + 60) * 1000,
);
