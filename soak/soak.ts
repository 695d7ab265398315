/**
 * The soak: many worker processes (crash-worker.js, mode 'soak') lock, hold and unlock one semaphore
 * on a private redis-server (AOF everysec), through our TCP proxy, while random faults from the fault
 * table hit them (SIGKILL, CLIENT KILL, a black-holed blocking connection, a Redis restart, CLIENT
 * PAUSE shorter than the stale timeout); then the
 * history checker (history.ts) and the token census (census.ts) judge the run. Used by `npm run soak`
 * (soak/run.ts, default 60 s; `npm test` runs it for 10 s).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient } from 'redis';
import type * as Library from '../lib';
import { censusProblems, takeCensus, tally } from '../spec/support/census';
import { checkHistory, type HistoryEvent } from '../spec/support/history';
import { carried, FaultProxy } from '../spec/support/proxy';
import { repoRoot, startRedisServer } from './root';

export type FaultKind = 'sigkill-worker' | 'client-kill' | 'blackhole' | 'restart-aof' | 'pause';
const KINDS: readonly FaultKind[] = ['sigkill-worker', 'client-kill', 'blackhole', 'restart-aof', 'pause'];

export interface SoakOptions {
  readonly seconds: number;
  readonly workers?: number;
  readonly resources?: number;
  /** Where progress lines go (default: nowhere). */
  readonly log?: (line: string) => void;
}

export interface SoakReport {
  readonly acquisitions: number;
  readonly faults: Record<FaultKind, number>;
  /** Times the number of live holders rose above `resources`. */
  readonly overAdmissions: number;
  /** Pairs of holders that held one token at once. */
  readonly sharedTokens: number;
  readonly lostTokens: number;
  readonly duplicatedTokens: number;
  /** Longest time from a fault to the first acquisition after it (of the token a killed holder held). */
  readonly maxRecoveryMs: number;
  readonly maxRecoveryKind: FaultKind | '';
  /** Unlocks that found the grant gone on their first attempt (the holder was reclaimed while it held). */
  readonly lostGrants: number;
  readonly errors: number;
  readonly checks: Array<{ name: string; ok: boolean; detail: string }>;
  /** The closing lines, as `npm run soak` prints them. */
  readonly lines: string[];
}

const STALE = 2000;
const SLICE = 500;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const pick = <T>(items: readonly T[]): T | undefined => items[Math.floor(Math.random() * items.length)];

interface Worker {
  readonly id: string;
  readonly process: ChildProcess;
  readonly exited: Promise<void>;
  stopped: boolean;
  ready: boolean;
}

export async function runSoak(options: SoakOptions): Promise<SoakReport> {
  const { seconds, workers: workerCount = 8, resources: N = 3, log = () => undefined } = options;
  const root = repoRoot();
  const dist = mkdtempSync(join(tmpdir(), 'rts-soak-dist-'));
  cpSync(join(root, 'dist'), dist, { recursive: true });
  const server = await startRedisServer([
    '--appendonly',
    'yes',
    '--appendfsync',
    'everysec',
    '--enable-debug-command',
    'local',
  ]);
  // Workers connect through our proxy, so that one of their blocking connections can be black-holed.
  const proxy = await FaultProxy.start(server.port);
  const name = `soak:${Date.now().toString(36)}`;
  const events: HistoryEvent[] = [];
  const faults: Array<{ kind: FaultKind; at: number; token?: string }> = [];
  const live = new Map<string, Worker>();
  let spawned = 0;
  let lostGrants = 0;
  let errors = 0;

  const admin = createClient({
    url: server.url,
    socket: { reconnectStrategy: (retries: number) => Math.min(50 * 2 ** retries, 500) },
  });
  admin.on('error', () => undefined);
  await admin.connect();
  // The watcher runs the built library, as the workers do (loaded now, before any rebuild could start).
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- a path known only at run time
  const { Semaphore } = require(join(root, 'dist')) as typeof Library;
  const watcher = new Semaphore(name, { url: server.url, resources: N, staleClientTimeout: STALE, waitSlice: SLICE });
  try {
    const spawn = (): Worker => {
      const id = `w${++spawned}`;
      const child = fork(join(root, 'spec', 'support', 'crash-worker.js'), [], {
        env: {
          ...process.env,
          CRASH_WORKER: JSON.stringify({
            mode: 'soak',
            url: proxy.url,
            name,
            options: { resources: N, staleClientTimeout: STALE, waitSlice: SLICE },
            holdMs: [5, 40],
            lockTimeout: 3000,
          }),
          CRASH_WORKER_DIST: dist,
          NODE_PATH: join(root, 'node_modules'),
        },
        execArgv: [],
        stdio: ['ignore', 'ignore', 'ignore', 'ipc'],
      });
      const worker: Worker = {
        id,
        process: child,
        exited: new Promise((resolve) => child.once('exit', () => resolve())),
        stopped: false,
        ready: false,
      };
      child.on('error', () => undefined);
      child.on(
        'message',
        (message: { event?: string; token: string; at: number; stopped?: boolean; ready?: boolean }) => {
          if (message.event === 'acquired' || message.event === 'released') {
            events.push({ holder: id, kind: message.event, token: message.token, at: message.at });
          } else if (message.event === 'lost') lostGrants++;
          else if (message.event === 'error') errors++;
          if (message.stopped) worker.stopped = true;
          if (message.ready) worker.ready = true;
          if ('stuck' in message && process.env['SOAK_DEBUG'])
            log(`${id} stuck at stop: ${String((message as { stuck?: string }).stuck)} (now ${Date.now()})`);
        },
      );
      live.set(id, worker);
      return worker;
    };
    const kill = async (worker: Worker): Promise<number> => {
      live.delete(worker.id);
      try {
        if (worker.process.pid !== undefined) process.kill(worker.process.pid, 'SIGKILL');
      } catch {
        // already gone
      }
      const at = Date.now();
      await worker.exited;
      return at;
    };
    const holding = (id: string) => {
      const last = events.findLast((event) => event.holder === id);
      return last?.kind === 'acquired' ? last.token : undefined;
    };

    for (let i = 0; i < workerCount; i++) spawn();
    await watcher.existsOrCreate();
    // The clock starts once every worker runs (starting node processes takes seconds on a busy machine).
    const readyBy = Date.now() + 30_000;
    while ([...live.values()].some((worker) => !worker.ready) && Date.now() < readyBy) await sleep(50);
    const watchdog = watcher.startWatchdog(250, { onError: () => undefined });
    const started = Date.now();
    const until = started + seconds * 1000;
    log(
      `soak: ${seconds} s, ${workerCount} workers, ${N} tokens, staleClientTimeout ${STALE} ms, waitSlice ${SLICE} ms, redis-server ${server.port} (AOF everysec), workers through a proxy`,
    );

    // Faults every 400–1200 ms; closer in a short soak, so that every kind comes at least twice.
    const faultWindow = seconds * 1000 - 1000 - STALE - 2000;
    const meanGap = Math.max(200, Math.min(800, faultWindow / (2 * KINDS.length)));
    try {
      await sleep(1000);
      let i = 0;
      // No fault in the last stale timeout + 2 s: time for the last one to be recovered from, and seen.
      while (Date.now() < until - STALE - 2000) {
        await sleep(meanGap * (0.5 + Math.random()));
        const kind = KINDS[i++ % KINDS.length] as FaultKind; // round robin: every kind gets its share
        if (kind === 'sigkill-worker') {
          // Every other kill aims at a worker that holds a token.
          const holders = [...live.values()].filter((worker) => holding(worker.id) !== undefined);
          const victim = (i % 2 === 0 ? pick(holders) : undefined) ?? pick([...live.values()]);
          if (!victim) continue;
          const token = holding(victim.id);
          const at = await kill(victim);
          events.push({ holder: victim.id, kind: 'killed', at });
          faults.push({ kind, at, ...(token === undefined ? {} : { token }) });
          spawn();
        } else if (kind === 'client-kill') {
          const list = await admin.clientList().catch(() => []);
          const blocked = list.filter((client) => client.cmd === 'blmove');
          const victim = pick(blocked) ?? pick(list.filter((client) => client.cmd !== 'client|list'));
          if (!victim) continue;
          faults.push({ kind, at: Date.now() });
          await admin.sendCommand(['CLIENT', 'KILL', 'ID', String(victim.id)]).catch(() => undefined);
        } else if (kind === 'blackhole') {
          // One blocking connection goes silent both ways (no RST); its waiter must notice by itself.
          const blocking = carried('BLMOVE');
          const victim = pick(proxy.connections((connection) => connection.mode === 'pass' && blocking(connection)));
          if (!victim) continue;
          faults.push({ kind, at: Date.now() });
          proxy.blackhole((connection) => connection.id === victim.id);
        } else if (kind === 'restart-aof') {
          faults.push({ kind, at: Date.now() });
          await server.kill('SIGKILL');
          await sleep(100 + Math.random() * 200);
          await server.restart();
        } else {
          // Shorter than staleClientTimeout: a stall the holders did not cause must not reclaim them.
          faults.push({ kind, at: Date.now() });
          const ms = 200 + Math.floor(Math.random() * 600);
          await admin.sendCommand(['CLIENT', 'PAUSE', String(ms), 'ALL']).catch(() => undefined);
        }
      }
      await sleep(Math.max(0, until - Date.now()));
    } finally {
      for (const worker of live.values()) if (worker.process.connected) worker.process.send('stop');
      const stopSent = Date.now();
      const stopBy = Date.now() + 8000;
      for (const worker of [...live.values()]) {
        while (!worker.stopped && Date.now() < stopBy && worker.process.exitCode === null) await sleep(20);
        if (!worker.stopped) {
          if (process.env['SOAK_DEBUG'])
            log(
              `${worker.id} did not stop within 8 s; last: ${JSON.stringify(events.findLast((event) => event.holder === worker.id))}`,
            );
          events.push({ holder: worker.id, kind: 'killed', at: await kill(worker) });
        }
        await worker.exited;
      }
      await watchdog.stop();
      if (process.env['SOAK_DEBUG']) log(`workers stopped in ${Date.now() - stopSent} ms`);
    }
    const endOfHistory = Date.now();

    // Settle: stale grants of killed holders and tokens of dead waiters come back (lease: 2 s).
    const settleBy = Date.now() + STALE + 6000;
    for (;;) {
      await watcher.releaseStaleLocks().catch(() => 0);
      const census = await takeCensus(admin, name);
      if (census.available.length === N || Date.now() > settleBy) break;
      await sleep(200);
    }
    const census = await takeCensus(admin, name);
    const count = tally(census, N);
    const history = checkHistory(events, endOfHistory);

    // Over-admissions: times the number of live holders rose above N.
    const points = history.intervals.flatMap((interval) => [
      { at: interval.start, delta: 1 },
      { at: interval.end, delta: -1 },
    ]);
    points.sort((a, b) => a.at - b.at || a.delta - b.delta);
    let current = 0;
    let overAdmissions = 0;
    for (const point of points) {
      current += point.delta;
      if (point.delta > 0 && current === N + 1) overAdmissions++;
    }

    // Recovery: from each fault to the first acquisition after it (of the killed holder's token).
    const acquisitions = events.filter((event) => event.kind === 'acquired');
    let maxRecoveryMs = 0;
    let maxRecoveryKind: FaultKind | '' = '';
    let unrecovered = 0;
    const maxByKind = Object.fromEntries(KINDS.map((kind) => [kind, 0])) as Record<FaultKind, number>;
    for (const fault of faults) {
      const next = acquisitions.find(
        (event) => event.at >= fault.at && (fault.token === undefined || event.token === fault.token),
      );
      if (!next) {
        unrecovered++;
        continue;
      }
      maxByKind[fault.kind] = Math.max(maxByKind[fault.kind], next.at - fault.at);
      if (process.env['SOAK_DEBUG'])
        log(
          `${fault.kind} at +${fault.at - started} ms${fault.token === undefined ? '' : ` (held ${fault.token})`}: recovered in ${next.at - fault.at} ms`,
        );
      if (next.at - fault.at > maxRecoveryMs) {
        maxRecoveryMs = next.at - fault.at;
        maxRecoveryKind = fault.kind;
      }
    }
    const byKind = Object.fromEntries(
      KINDS.map((kind) => [kind, faults.filter((f) => f.kind === kind).length]),
    ) as Record<FaultKind, number>;
    const lastFault = faults.at(-1)?.at ?? started;
    const problems = censusProblems(census, N, { idle: false });
    const checks = [
      {
        name: 'never more than N live holders',
        ok: overAdmissions === 0 && history.maxConcurrent <= N,
        detail: `max ${history.maxConcurrent}`,
      },
      {
        name: 'no token held by two holders at once',
        ok: history.tokenOverlaps.length === 0,
        detail: `${history.tokenOverlaps.length} overlaps`,
      },
      {
        name: 'no token lost',
        ok: count.lost.length === 0 && count.stranded.length === 0,
        detail: `lost [${count.lost}] stranded [${count.stranded}]`,
      },
      {
        name: 'no token duplicated or unknown',
        ok: count.duplicated.length === 0 && count.unknown.length === 0,
        detail: `duplicated [${count.duplicated}] unknown [${count.unknown}]`,
      },
      {
        name: 'every token free at the end',
        ok: problems.length === 0 && census.available.length === N,
        detail: problems.join('; ') || `${census.available.length} free`,
      },
      {
        name: 'every fault recovered from',
        ok: unrecovered === 0 && faults.length > 0,
        detail: `${unrecovered} of ${faults.length} not recovered`,
      },
      {
        name: 'every fault kind injected',
        ok: KINDS.every((kind) => byKind[kind] > 0),
        detail: JSON.stringify(byKind),
      },
      { name: 'progress after the last fault', ok: acquisitions.some((event) => event.at > lastFault), detail: '' },
      {
        name: 'more than 10 acquisitions a second',
        ok: acquisitions.length > seconds * 10,
        detail: `${acquisitions.length} in ${seconds} s`,
      },
      {
        name: 'a consistent history',
        ok: history.anomalies.length === 0,
        detail: history.anomalies.slice(0, 3).join('; '),
      },
    ];
    const passed = checks.filter((check) => check.ok).length;
    const lines = [
      ...checks.filter((check) => !check.ok).map((check) => `FAILED: ${check.name} (${check.detail})`),
      `acquisitions: ${acquisitions.length} by ${spawned} workers (faults for ${seconds} s, history of ${((endOfHistory - started) / 1000).toFixed(1)} s)`,
      `faults injected: ${KINDS.map((kind) => `${kind} ${byKind[kind]}`).join(', ')} (total ${faults.length})`,
      `over-admissions: ${overAdmissions} (max live holders ${history.maxConcurrent} of ${N}; tokens shared at once ${history.tokenOverlaps.length})`,
      `lost tokens: ${count.lost.length + count.stranded.length}`,
      `duplicated tokens: ${count.duplicated.length + count.unknown.length}`,
      `max recovery time: ${maxRecoveryMs} ms${maxRecoveryKind ? ` (${maxRecoveryKind})` : ''}; by kind: ${KINDS.map((kind) => `${kind} ${maxByKind[kind]} ms`).join(', ')}`,
      `lost grants told at unlock: ${lostGrants}; failed calls retried: ${errors}`,
      `${passed} passed, ${checks.length - passed} failed`,
    ];
    return {
      acquisitions: acquisitions.length,
      faults: byKind,
      overAdmissions,
      sharedTokens: history.tokenOverlaps.length,
      lostTokens: count.lost.length + count.stranded.length,
      duplicatedTokens: count.duplicated.length + count.unknown.length,
      maxRecoveryMs,
      maxRecoveryKind,
      lostGrants,
      errors,
      checks,
      lines,
    };
  } finally {
    for (const worker of live.values()) {
      try {
        if (worker.process.pid !== undefined) process.kill(worker.process.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    await watcher.close().catch(() => undefined);
    await admin.quit().catch(() => admin.disconnect().catch(() => undefined));
    await proxy.close();
    await server.stop();
    rmSync(dist, { recursive: true, force: true });
  }
}
