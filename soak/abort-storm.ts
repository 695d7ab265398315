/**
 * The abort storm: worker processes (abort-storm-worker.js) × many concurrent callers each on one
 * semaphore (a mutex by default) of a private redis-server, every lock with a request deadline of a
 * few ms (`AbortSignal.timeout`), so that most calls are cancelled: while queued for a connection,
 * while tryLock is on its way, mid-BLMOVE (CLIENT UNBLOCK) and as a token reaches them. Holds are
 * 0–5 ms. No faults: Redis and the network stay healthy, so every figure is the library's own.
 *
 * It fails when waiting callers go without a grant for longer than one `waitSlice` and neither what
 * Redis did nor the machine explains it: Redis granted nothing meanwhile (a token stuck) while the
 * workers' event loops ran, or (after a warm-up) Redis granted only to callers whose deadline had
 * passed while the workers kept up with their deadlines. On a loaded machine grants reach callers
 * late whatever the library does; the workers' measured event-loop delay says when. It fails when the history
 * shows more holders than resources (or one token held twice), when a call fails with anything but
 * its own signal's reason, and when, after every worker closed, the census is not exact: a token lost
 * or duplicated, an INBOX key, a WAITING registration other than an abandoned mark (`~<grant id>`),
 * a GRABBED or CREATING entry, or a LEASES entry other than one an unlock left for a free token, left
 * (polled briefly, for background settling).
 *
 * A failure explains itself: a gap says whether Redis still granted meanwhile (FENCE rose: the tokens
 * went to callers whose deadline had passed, which is what a saturated machine produces once the
 * workers' event loops lag far behind 5–65 ms deadlines) or not at all (a token stuck), with the
 * workers' event-loop delay and samples of the keys; a token left held is traced to the worker,
 * caller and fence it was granted to. ABORT_STORM_DEBUG=1 logs every 200 ms sample.
 *
 * Used by spec/faults/abort-storm.spec.ts and `npm run soak` (soak/run.ts).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient } from 'redis';
import { inboxKeyPattern, semaphoreKeys, type SemaphoreKeys } from '../lib/redis/keys';
import { censusProblems, describeCensus, takeCensus, tally, type Census } from '../spec/support/census';
import { checkHistory, type HistoryEvent, type Interval } from '../spec/support/history';
import type { Client } from '../spec/support/redis';
import { repoRoot, startRedisServer } from './root';

export interface AbortStormOptions {
  /** How long the callers run. */
  readonly seconds: number;
  /** Tokens: 1 (a mutex, the default) or more. */
  readonly resources?: number;
  /** Worker processes (default 4). */
  readonly workers?: number;
  /** Concurrent callers in each worker, on one Semaphore instance (default 16). */
  readonly callers?: number;
  /** The library's `waitSlice` (default 1000 ms): also the longest gap between grants allowed (see the checks). */
  readonly waitSlice?: number;
  /** `maxBlockingConnections` of each worker's semaphore (default: one per caller). */
  readonly maxBlockingConnections?: number;
  /** Each lock's deadline, drawn uniformly (default 5–65 ms). */
  readonly deadlineMs?: readonly [number, number];
  /** Each hold, drawn uniformly (default 0–5 ms). */
  readonly holdMs?: readonly [number, number];
  /** The built library the workers run (snapshotted first): default `<root>/dist` (npm run build). */
  readonly dist?: string;
  /** Where progress lines go (default: nowhere). */
  readonly log?: (line: string) => void;
}

export interface AbortStormReport {
  readonly grants: number;
  readonly aborts: number;
  readonly grantsPerSecond: number[];
  readonly abortsPerSecond: number[];
  /** Longest time without a grant while callers waited, and when it began (ms since the start). */
  readonly maxGapMs: number;
  readonly maxGapAt: number;
  /**
   * The same after the warm-up (the first 2 s, or half the storm: every worker opens its blocking
   * connections and V8 compiles the library meanwhile), counted from its end.
   */
  readonly steadyMaxGapMs: number;
  readonly maxHolders: number;
  /** Grants Redis made (FENCE delta): to callers still waiting (`grants`) and to callers that had gone. */
  readonly redisGrants: number;
  /** INFO stats total_connections_received over the storm, and per 1,000 aborts. */
  readonly newConnections: number;
  readonly connectionsPer1000Aborts: number;
  readonly errors: string[];
  /** The census after every worker closed (and the settling poll ended). */
  readonly census: Census;
  readonly leftoverInboxKeys: string[];
  readonly checks: Array<{ name: string; ok: boolean; detail: string }>;
  /** The figures, as `npm run soak` and the spec print them. */
  readonly lines: string[];
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

interface Worker {
  readonly id: string;
  readonly process: ChildProcess;
  readonly exited: Promise<void>;
  ready: boolean;
  stopped: boolean;
  closedMs: number;
  client: string;
}

/** A light sample of the semaphore's state, taken every few hundred ms, to explain a gap afterwards. */
interface Sample {
  readonly at: number;
  readonly available: number;
  readonly grabbed: string[];
  readonly waiting: number;
  readonly blocked: number;
  /** FENCE: grants Redis made so far. */
  readonly fence: number;
}

export async function runAbortStorm(options: AbortStormOptions): Promise<AbortStormReport> {
  const {
    seconds,
    resources: N = 1,
    workers: workerCount = 4,
    callers = 16,
    waitSlice = 1000,
    maxBlockingConnections = callers,
    deadlineMs = [5, 65],
    holdMs = [0, 5],
    log = () => undefined,
  } = options;
  const label = N === 1 ? 'mutex' : `semaphore of ${N}`;
  const root = repoRoot();
  // A snapshot, so that a concurrent `npm run build` (rm -rf dist) cannot pull it from under the workers.
  const dist = mkdtempSync(join(tmpdir(), 'rts-storm-dist-'));
  cpSync(options.dist ?? join(root, 'dist'), dist, { recursive: true });
  const server = await startRedisServer();
  const name = `storm:${Date.now().toString(36)}`;
  const keys = semaphoreKeys(name);
  const events: HistoryEvent[] = [];
  const grantTimes: number[] = [];
  const abortTimes: number[] = [];
  /** Workers' event-loop delay, per 250 ms report. */
  const lags: Array<{ at: number; p99: number; max: number }> = [];
  const via = { lock: 0, acquire: 0 };
  const errors: string[] = [];
  /** Every acquisition and release as reported, with fences, to explain a failure. */
  const reported: Array<{ kind: string; holder: string; token: string; fence: number | undefined; at: number }> = [];
  const lostReleases: Array<{ holder: string; token: string; fence: number | undefined; at: number; via: string }> = [];
  const pids = new Map<string, string>();
  const workers: Worker[] = [];
  const samples: Sample[] = [];
  let admin: Client | undefined;
  // The whole run is bounded: workers stop by themselves at stopBy, whatever happens here.
  const stopBy = Date.now() + (seconds + 60) * 1000;

  try {
    admin = createClient({ url: server.url }) as Client;
    admin.on('error', () => undefined);
    await admin.connect();
    const redis = admin;

    for (let i = 0; i < workerCount; i++) {
      const id = `w${i + 1}`;
      const child = fork(join(root, 'soak', 'abort-storm-worker.js'), [], {
        env: {
          ...process.env,
          ABORT_STORM_WORKER: JSON.stringify({
            url: server.url,
            name,
            id,
            options: { resources: N, waitSlice, maxBlockingConnections },
            callers,
            deadlineMs,
            holdMs,
            acquireShare: 0.5,
            stopBy,
            // At most one call per ms per caller: a bound no real run reaches.
            maxCalls: (seconds + 10) * 1000,
          }),
          ABORT_STORM_DIST: dist,
          NODE_PATH: join(root, 'node_modules'),
        },
        execArgv: [],
        stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
      });
      const worker: Worker = {
        id,
        process: child,
        exited: new Promise((resolve) => child.once('exit', () => resolve())),
        ready: false,
        stopped: false,
        closedMs: -1,
        client: '',
      };
      child.on('error', () => undefined);
      child.on('message', (message: Record<string, unknown>) => {
        if (message['ready']) {
          worker.ready = true;
          worker.client = String(message['client']);
          pids.set(String(message['pid']), id);
        }
        if (message['stopped']) {
          worker.stopped = true;
          worker.closedMs = Number(message['closedMs']);
        }
        if (Array.isArray(message['aborts'])) abortTimes.push(...(message['aborts'] as number[]));
        if (message['lag']) lags.push(message['lag'] as { at: number; p99: number; max: number });
        const event = message['event'];
        const holder = String(message['holder']);
        const at = Number(message['at']);
        const fence = message['fence'] === undefined ? undefined : Number(message['fence']);
        if (event === 'acquired' || event === 'released' || event === 'lost') {
          reported.push({ kind: String(event), holder, token: String(message['token']), fence, at });
        }
        if (event === 'acquired' || event === 'released') {
          const token = String(message['token']);
          events.push({ holder, kind: event, token, at });
          if (event === 'acquired') {
            grantTimes.push(at);
            via[message['via'] === 'acquire' ? 'acquire' : 'lock']++;
          }
        } else if (event === 'lost') {
          lostReleases.push({ holder, token: String(message['token']), fence, at, via: String(message['via']) });
        } else if (event === 'error') errors.push(`${holder} ${String(message['op'])}: ${String(message['message'])}`);
      });
      workers.push(worker);
    }

    const readyBy = Date.now() + 30_000;
    while (workers.some((w) => !w.ready && w.process.exitCode === null) && Date.now() < readyBy) await sleep(50);
    if (!workers.every((w) => w.ready)) throw new Error(`workers not ready within 30 s: ${errors.join('; ')}`);
    const clients = [...new Set(workers.map((w) => w.client))].join(', ');
    log(
      `abort storm (${label}): ${seconds} s, ${workerCount} workers × ${callers} callers (${clients}), ` +
        `deadlines ${deadlineMs[0]}–${deadlineMs[1]} ms, holds ${holdMs[0]}–${holdMs[1]} ms, waitSlice ${waitSlice} ms, ` +
        `maxBlockingConnections ${maxBlockingConnections}, redis-server ${server.port}`,
    );

    const connectionsBefore = await connectionsReceived(redis);
    // FENCE is INCRed by every grant Redis makes, to a live caller or to one that had gone.
    const fenceBefore = Number(await redis.get(keys.fence));
    const started = Date.now();
    for (const worker of workers) worker.process.send('start');
    const stopAt = started + seconds * 1000;
    // Samples of the state, every 200 ms, to tell what a gap looked like.
    // Connections counted again after a warm-up (the pools open theirs at the start): the steady state.
    const warmUpEnd = started + Math.min(2000, (seconds * 1000) / 2);
    let connectionsAtWarmUp: number | undefined;
    while (Date.now() < stopAt) {
      if (connectionsAtWarmUp === undefined && Date.now() >= warmUpEnd) {
        connectionsAtWarmUp = await connectionsReceived(redis);
      }
      samples.push(await sample(redis, keys));
      await sleep(Math.min(200, Math.max(0, stopAt - Date.now())));
    }
    const stopSent = Date.now();
    const connectionsAfter = await connectionsReceived(redis);
    const fenceAfter = Number(await redis.get(keys.fence));
    for (const worker of workers) if (worker.process.connected) worker.process.send('stop');
    // Every caller's deadline is at most 65 ms and holds 5 ms, so stopping and closing take moments.
    const closeBy = Date.now() + 15_000;
    while (workers.some((w) => !w.stopped && w.process.exitCode === null) && Date.now() < closeBy) await sleep(20);
    const unclosed = workers.filter((w) => !w.stopped).map((w) => w.id);
    for (const worker of workers) {
      if (!worker.stopped && worker.process.pid !== undefined) {
        try {
          process.kill(worker.process.pid, 'SIGKILL');
        } catch {
          // already gone
        }
        // Whatever its callers held, they stopped using it now.
        const at = Date.now();
        for (let c = 0; c < callers; c++) events.push({ holder: `${worker.id}c${c}`, kind: 'killed', at });
      }
      await worker.exited;
    }
    const endOfHistory = Date.now();

    // Background settling: a token going back from an abandoned inbox, a registration ending.
    const settleStarted = Date.now();
    const settleBy = settleStarted + 2 * waitSlice + 1000;
    let census = await takeCensus(redis, name);
    let inboxKeys = await scanInboxes(redis, keys);
    while (!settled(census, inboxKeys, N) && Date.now() < settleBy) {
      await sleep(50);
      census = await takeCensus(redis, name);
      inboxKeys = await scanInboxes(redis, keys);
    }
    const settleMs = Date.now() - settleStarted;
    // This library's grant index by lease end, and a creation cursor: neither may outlive the grants
    // (an unlock that leaves its token the only free one leaves its entry for the next grant to
    // overwrite: such an entry, of a free token and due some day, may stay).
    const leases = (await redis.zRangeWithScores(keys.leases, 0, -1))
      .filter(({ value, score }) => !(census.available.includes(value) && Number.isFinite(score)))
      .map(({ value }) => value);
    const creating = await redis.get(keys.creating);

    // Grants per second, aborts per second, and the longest stretch without a grant while callers waited.
    const perSecond = (times: number[]) => {
      const buckets = new Array<number>(seconds).fill(0);
      for (const at of times) {
        const second = Math.floor((at - started) / 1000);
        if (second >= 0 && second < seconds) buckets[second]!++;
      }
      return buckets;
    };
    const grantsPerSecond = perSecond(grantTimes);
    const abortsPerSecond = perSecond(abortTimes);
    const inWindow = grantTimes.filter((at) => at >= started && at <= stopSent).sort((a, b) => a - b);
    let maxGapMs = 0;
    let maxGapAt = 0;
    const gaps: Array<{ from: number; ms: number }> = [];
    let steadyMaxGapMs = 0;
    let previous = started;
    for (const at of [...inWindow, stopSent]) {
      if (at - previous > maxGapMs) {
        maxGapMs = at - previous;
        maxGapAt = previous - started;
      }
      if (at - previous > waitSlice) gaps.push({ from: previous, ms: at - previous });
      // After the warm-up, a gap counts from its end at the earliest.
      if (at > warmUpEnd) steadyMaxGapMs = Math.max(steadyMaxGapMs, at - Math.max(previous, warmUpEnd));
      previous = at;
    }

    const history = checkHistory(events, endOfHistory);
    const count = tally(census, N);
    const problems = censusProblems(census, N, { idle: true, marksAllowed: true });
    const registrationsLeft = census.waiting.filter((w) => !w.registration.startsWith('~')).map((w) => w.registration);
    // The admin connection was open before the first reading: every connection counted is a worker's.
    const newConnections = connectionsAfter - connectionsBefore;
    const aborts = abortTimes.filter((at) => at >= started).length;
    const redisGrants = fenceAfter - fenceBefore;
    const stormLags = lags.filter((l) => l.at >= started && l.at <= stopSent + 250);
    const lagP99 = Math.max(0, ...stormLags.map((l) => l.p99));
    const lagMax = Math.max(0, ...stormLags.map((l) => l.max));
    const sortedLags = stormLags.map((l) => l.p99).sort((a, b) => a - b);
    const medianLag = sortedLags[Math.floor(sortedLags.length / 2)] ?? 0;
    const connectionsPer1000Aborts = aborts === 0 ? 0 : (newConnections * 1000) / aborts;
    const steadyConnections = connectionsAfter - (connectionsAtWarmUp ?? connectionsBefore);
    const steadyAborts = abortTimes.filter((at) => at >= warmUpEnd && at <= stopSent).length;
    /** Grants Redis made during a gap (FENCE rose), as far as the samples tell. */
    const movedDuring = (gap: { from: number; ms: number }): number | undefined => {
      const during = samples.filter((s) => s.at >= gap.from && s.at <= gap.from + gap.ms);
      return during.length >= 2 ? during.at(-1)!.fence - during[0]!.fence : undefined;
    };
    /** The workers' longest event-loop delay during a gap (their reports every 250 ms). */
    const lagDuring = (gap: { from: number; ms: number }): number =>
      Math.max(0, ...lags.filter((l) => l.at >= gap.from && l.at <= gap.from + gap.ms + 250).map((l) => l.max));
    // A gap is judged by what Redis did meanwhile (FENCE) and by how late the workers' event loops ran,
    // not by its length alone: on a loaded machine grants reach callers late, whatever the library does.
    // - Redis granted nothing (a token stuck), or the samples cannot tell (and it lasted 3 slices):
    //   fails, unless the workers' event loops were held up for a slice themselves (a holder that
    //   cannot run cannot release).
    // - Redis kept granting, but only to callers whose deadline had passed (after the warm-up): fails
    //   unless the workers' event loops ran later than the longest deadline meanwhile (callers could
    //   not take the grants in time); on a machine that keeps up, grants must reach waiting callers.
    const stuckGaps = gaps.filter((gap) => {
      const moved = movedDuring(gap);
      const still = moved === 0 || (moved === undefined && gap.ms > 3 * waitSlice);
      if (still) return lagDuring(gap) < waitSlice;
      return gap.from + gap.ms > warmUpEnd && lagDuring(gap) <= deadlineMs[1];
    });
    /** A hold of an overlap: its holder, fencing number and times (ms from the start). */
    const describeHold = (hold: Interval) => {
      const grant = reported.find(
        (r) => r.kind === 'acquired' && r.holder === hold.holder && r.token === hold.token && r.at === hold.start,
      );
      return `${hold.holder} (fence ${grant?.fence ?? '?'}) +${hold.start - started}..+${hold.end - started} ms, ${hold.ending}`;
    };
    const describeGap = (gap: { from: number; ms: number }) => {
      const during = samples.filter((s) => s.at >= gap.from && s.at <= gap.from + gap.ms);
      const states = during.map(
        (s) =>
          `+${s.at - started}ms AVAILABLE ${s.available} GRABBED [${s.grabbed}] WAITING ${s.waiting} blocked ${s.blocked}`,
      );
      // Whether the tokens moved meanwhile (granted to callers that had gone) or stood still.
      const moved = during.length >= 2 ? during.at(-1)!.fence - during[0]!.fence : undefined;
      const lagMax = Math.max(
        0,
        ...lags.filter((l) => l.at >= gap.from && l.at <= gap.from + gap.ms + 250).map((l) => l.max),
      );
      const motion =
        moved === undefined
          ? ''
          : moved === 0
            ? ', no grant at all in Redis meanwhile (tokens stuck)'
            : `, Redis made ${moved} grants meanwhile, all to callers that had gone`;
      const state = states.length > 0 ? ` (${states.slice(0, 4).join('; ')})` : '';
      return `${gap.ms} ms from +${gap.from - started} ms${motion}, worker event-loop delay up to ${lagMax.toFixed(0)} ms${state}`;
    };

    /** What a failure needs explained: the records left, who made them, and each lost release's token history. */
    const forensics = (): string[] => {
      const lines: string[] = [];
      const event = (r: (typeof reported)[number]) =>
        `${r.kind} ${r.holder}${r.fence === undefined ? '' : ` f${r.fence}`} +${r.at - started}`;
      const workerOf = (record: string) => {
        const pid = /:(\d+)$/.exec(record)?.[1] ?? '';
        return pids.get(pid) ?? '?';
      };
      // Grant records: "<stamp> <grant id> <fence> <lease ms> <acquired stamp> <owner label>", the label "host:pid".
      for (const [token, record] of Object.entries(census.grabbed)) {
        const fence = Number(record.split(' ')[2]);
        const told = reported.filter((r) => r.kind === 'acquired' && r.fence === fence && r.token === token);
        const whom =
          told.length === 0
            ? 'never reported to a caller'
            : `reported to ${told.map((r) => `${r.holder} at +${r.at - started} ms`).join(', ')}`;
        lines.push(
          `left held: token ${token} GRABBED "${record}" ` +
            `(worker ${workerOf(record)}); its fence ${fence} was ${whom}`,
        );
        const near = reported.filter(
          (r) => r.token === token && r.fence !== undefined && Math.abs(r.fence - fence) <= 3,
        );
        lines.push(`  token ${token} near fence ${fence}: ${near.map(event).join(', ')}`);
      }
      for (const lostRelease of lostReleases.slice(0, 3)) {
        const near = reported.filter((r) => r.token === lostRelease.token && Math.abs(r.at - lostRelease.at) <= 300);
        lines.push(
          `lost release: ${lostRelease.holder} token ${lostRelease.token} fence ${lostRelease.fence} ` +
            `at +${lostRelease.at - started} ms; token ${lostRelease.token} ±300 ms: ${near.map(event).join(', ')}`,
        );
      }
      return lines;
    };

    const checks = [
      {
        name: `waiting callers are granted within a slice (${waitSlice} ms) but while the machine holds the workers up`,
        ok: stuckGaps.length === 0 && (inWindow.length > 0 || medianLag > deadlineMs[1]),
        detail:
          gaps.length === 0
            ? `max gap ${maxGapMs} ms`
            : `${stuckGaps.length} unexplained of ${gaps.length} gaps: ${(stuckGaps.length > 0 ? stuckGaps : gaps)
                .slice(0, 3)
                .map(describeGap)
                .join(' | ')}`,
      },
      {
        name: `never more holders than resources (${N})`,
        ok: history.maxConcurrent <= N,
        detail: `max ${history.maxConcurrent} at +${history.maxConcurrentAt - started} ms`,
      },
      {
        name: 'no token held by two holders at once',
        ok: history.tokenOverlaps.length === 0,
        detail: `${history.tokenOverlaps.length} overlaps${history.tokenOverlaps
          .slice(0, 3)
          .map(([a, b]) => ` | token ${a.token}: ${describeHold(a)}, ${describeHold(b)}`)
          .join('')}`,
      },
      {
        name: 'a consistent history',
        ok: history.anomalies.length === 0,
        detail: history.anomalies.slice(0, 3).join('; '),
      },
      {
        name: 'every call ends in a grant or its own abort',
        ok: errors.length === 0,
        detail: errors.slice(0, 3).join(' | '),
      },
      {
        name: 'no grant lost while held',
        ok: lostReleases.length === 0,
        detail:
          `${lostReleases.length} releases found the grant gone: ` +
          lostReleases
            .slice(0, 3)
            .map(
              (l) =>
                `${l.holder} (${l.via === 'lock' ? 'unlock(token)' : 'lease.release()'}) token ${l.token} fence ${l.fence} at +${l.at - started} ms`,
            )
            .join('; '),
      },
      {
        name: 'every worker closes',
        ok: unclosed.length === 0,
        detail: unclosed.length === 0 ? '' : `not closed within 15 s: ${unclosed}`,
      },
      {
        // Where the workers keep up with the deadlines (median event-loop delay within the longest): at
        // least 10 grants a second to waiting callers, by lock and by acquire. Where they do not, the
        // callers are gone before any grant reaches them: Redis must still grant (to be given back).
        name: 'the storm aborts and grants',
        ok:
          aborts > 0 &&
          (medianLag > deadlineMs[1]
            ? redisGrants > 0
            : inWindow.length >= seconds * 10 && via.lock > 0 && via.acquire > 0),
        detail: `${aborts} aborts, ${inWindow.length} grants (lock ${via.lock}, acquire ${via.acquire}), ${redisGrants} in Redis, median worker event-loop delay ${medianLag.toFixed(0)} ms`,
      },
      {
        name: 'census exact: no token lost or duplicated',
        ok:
          count.lost.length + count.duplicated.length + count.unknown.length + count.stranded.length === 0 &&
          census.available.length === N,
        detail:
          `lost [${count.lost}] duplicated [${count.duplicated}] unknown [${count.unknown}] stranded [${count.stranded}]; ` +
          `${census.available.length} of ${N} free`,
      },
      { name: 'no INBOX key left', ok: inboxKeys.length === 0, detail: inboxKeys.join(', ') },
      {
        name: 'no WAITING registration left (but abandoned ~ marks)',
        ok: registrationsLeft.length === 0,
        detail: registrationsLeft.join(', '),
      },
      {
        name: 'no GRABBED entry left (and nothing in OWNERS, which no script writes)',
        ok: Object.keys(census.grabbed).length === 0 && Object.keys(census.ownerRecords).length === 0,
        detail: `GRABBED [${Object.keys(census.grabbed)}] OWNERS [${Object.keys(census.ownerRecords)}]`,
      },
      {
        name: 'no LEASES entry left but for a free token, and no CREATING',
        ok: leases.length === 0 && creating === null,
        detail: `LEASES [${leases}] CREATING ${String(creating)}`,
      },
      { name: 'census clean', ok: problems.length === 0, detail: problems.join('; ') },
    ];
    if (process.env['ABORT_STORM_DEBUG']) {
      for (const l of lags.filter((l) => l.at <= started + 4000)) {
        log(`  lag +${l.at - started}ms p99 ${l.p99.toFixed(0)} max ${l.max.toFixed(0)}`);
      }
      for (const s of samples) {
        log(
          `  +${s.at - started}ms AVAILABLE ${s.available} GRABBED [${s.grabbed}] WAITING ${s.waiting} blocked ${s.blocked} ` +
            `FENCE +${s.fence - fenceBefore} grants so far ${inWindow.filter((at) => at <= s.at).length}`,
        );
      }
    }
    const passed = checks.filter((check) => check.ok).length;
    const failed = checks.filter((check) => !check.ok);
    const sum = (list: number[]) => list.reduce((a, b) => a + b, 0);
    const lines = [
      ...failed.map((check) => `FAILED: ${check.name} (${check.detail})`),
      ...(failed.length > 0
        ? [
            `final state (after ${settleMs} ms of settling): ${describeCensus(census)}; INBOX keys [${inboxKeys}]`,
            ...forensics(),
          ]
        : []),
      `abort storm (${label}) grants/s: ${grantsPerSecond.join(',')}`,
      `abort storm (${label}) aborts/s: ${abortsPerSecond.join(',')}`,
      `abort storm (${label}): ${inWindow.length} grants (lock ${via.lock}, acquire ${via.acquire}), ${aborts} aborts in ${seconds} s ` +
        `(${(sum(grantsPerSecond) / seconds).toFixed(0)} grants/s, ${(sum(abortsPerSecond) / seconds).toFixed(0)} aborts/s); ` +
        `longest gap between grants ${maxGapMs} ms (at +${(maxGapAt / 1000).toFixed(1)} s, limit ${waitSlice} ms), ` +
        `${steadyMaxGapMs} ms after the first ${((warmUpEnd - started) / 1000).toFixed(0)} s`,
      `abort storm (${label}): grants made in Redis ${redisGrants} (FENCE), ${inWindow.length} of them to callers still waiting, ` +
        `${redisGrants - inWindow.length} to callers that had gone (given back); ` +
        `worker event-loop delay p99 up to ${lagP99.toFixed(0)} ms, max ${lagMax.toFixed(0)} ms`,
      `abort storm (${label}): max holders ${history.maxConcurrent} of ${N}; tokens shared at once ${history.tokenOverlaps.length}; ` +
        `failed calls ${errors.length}; lost grants ${lostReleases.length}`,
      `abort storm (${label}): new connections on Redis ${newConnections} (${connectionsPer1000Aborts.toFixed(1)} per 1,000 aborts; ` +
        `${workerCount * maxBlockingConnections} blocking connections at most in use; ` +
        `after the first ${((warmUpEnd - started) / 1000).toFixed(0)} s: ${steadyConnections} for ${steadyAborts} aborts, ` +
        `${steadyAborts === 0 ? 0 : ((steadyConnections * 1000) / steadyAborts).toFixed(1)} per 1,000); ` +
        `workers closed in ${Math.max(...workers.map((w) => w.closedMs))} ms at most`,
      `abort storm (${label}): final census ${describeCensus(census)} (settled in ${settleMs} ms)`,
      `abort storm (${label}): ${passed} passed, ${checks.length - passed} failed`,
    ];
    return {
      grants: inWindow.length,
      aborts,
      grantsPerSecond,
      abortsPerSecond,
      maxGapMs,
      maxGapAt,
      steadyMaxGapMs,
      maxHolders: history.maxConcurrent,
      redisGrants,
      newConnections,
      connectionsPer1000Aborts,
      errors,
      census,
      leftoverInboxKeys: inboxKeys,
      checks,
      lines,
    };
  } finally {
    for (const worker of workers) {
      if (worker.process.exitCode === null && worker.process.signalCode === null && worker.process.pid !== undefined) {
        try {
          process.kill(worker.process.pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    }
    await Promise.all(workers.map((worker) => worker.exited));
    await admin?.quit().catch(() => admin?.disconnect().catch(() => undefined));
    await server.stop();
    rmSync(dist, { recursive: true, force: true });
  }
}

/** Every token free, nothing held, no inbox, no registration but abandoned marks. */
function settled(census: Census, inboxKeys: readonly string[], resources: number): boolean {
  return (
    inboxKeys.length === 0 &&
    census.available.length === resources &&
    Object.keys(census.grabbed).length === 0 &&
    census.waiting.every((w) => w.registration.startsWith('~')) &&
    censusProblems(census, resources, { idle: true, marksAllowed: true }).length === 0
  );
}

async function connectionsReceived(redis: Client): Promise<number> {
  const info = await redis.info('stats');
  return Number(/total_connections_received:(\d+)/.exec(info)?.[1] ?? NaN);
}

/** Every INBOX key of the semaphore (an empty list does not exist, so each holds a token). */
async function scanInboxes(redis: Client, semaphore: SemaphoreKeys): Promise<string[]> {
  const keys: string[] = [];
  // node-redis v4 yields keys one by one, v5+ in batches.
  const match = inboxKeyPattern(semaphore);
  for await (const batch of redis.scanIterator({ MATCH: match, COUNT: 1000 }) as AsyncIterable<string | string[]>) {
    keys.push(...[batch].flat());
  }
  return keys;
}

async function sample(redis: Client, keys: SemaphoreKeys): Promise<Sample> {
  const at = Date.now();
  const [[available, grabbed, waiting, fence], info] = await Promise.all([
    redis
      .multi()
      .lLen(keys.available)
      .hKeys(keys.grabbed)
      .zCard(keys.waiting)
      .get(keys.fence)
      .exec() as unknown as Promise<[number, string[], number, string | null]>,
    redis.info('clients'),
  ]);
  const blocked = Number(/blocked_clients:(\d+)/.exec(info)?.[1] ?? 0);
  return { at, available, grabbed, waiting, fence: Number(fence), blocked };
}
