/**
 * Weighted grants (`permits` > 1): the pairs of operations one process can have in flight at once on
 * one weighted grant or collection, each in both orders on the real Redis. The order is forced, not
 * left to timing:
 *   - a refresh and a release of the same grant go on one connection (the main client), so Redis runs
 *     them in the order they were sent; the test picks that order, through the `refresh:before`
 *     checkpoint where it must send the release between the refresh's start and its script;
 *   - a collecting waiter's slices are held at the `lock:waiting` checkpoint (its outcome is not read
 *     until the test lets it), while the test reads Redis until the step it waits for has run there
 *     (a claim granted, a slice unblocked, a token parked) and only then sends the other operation.
 * After each: the census is exact (spec/support/census.ts; no token lost, duplicated or stranded in an
 * inbox, PENDING or COLLECTED), no grant holds more tokens than its permits, and once every holder has
 * released and every instance closed, every token is free and only the semaphore's usual keys are left.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { SemaphoreClosedError, type GrantHandle, type Lease, type LostEvent, type Semaphore } from '../../lib';
import * as commands from '../../lib/redis/commands';
import { keyPattern, semaphoreKeys } from '../../lib/redis/keys';
import { setCheckpointHook, type CheckpointStep } from '../../lib/util/checkpoint';
import { censusProblems, describeCensus, grantsOf, takeCensus, type Census } from '../support/census';
import { useFixture } from '../support/fixture';
import { until } from '../support/redis';

const fixture = useFixture();
afterEach(() => {
  setCheckpointHook(undefined);
  jest.restoreAllMocks();
});

/** Every macrotask and microtask queued so far has run (a send made synchronously is on its socket). */
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** The keys an idle semaphore keeps (FENCE: the fencing counter). */
const USUAL_KEYS = ['AVAILABLE', 'EXISTS', 'FENCE', 'VERSION'];

/** A semaphore's keys, without its prefix. */
async function keysOf(name: string): Promise<string[]> {
  const prefix = `SEMAPHORE:${name}:`;
  const keys = await fixture.redis.keys(keyPattern(semaphoreKeys(name)));
  return keys.map((key) => key.slice(prefix.length)).sort();
}

/**
 * The census now, checked: exact (no token in an inbox, and a collection only where
 * `collectionAllowed`, and then only of a registered waiter), and each grant holding exactly its
 * permits: `permits` names the known grants; any other (the collector's, whose grant id only the
 * library knows) holds `k`.
 */
async function soundCensus(
  sem: Semaphore,
  permits: ReadonlyMap<string, number>,
  k: number,
  { collectionAllowed = false } = {},
): Promise<Census> {
  const census = await takeCensus(fixture.redis, sem.name);
  const sizes = [...grantsOf(census)].map(([id, tokens]) => ({ id, held: tokens.length }));
  expect({
    problems: censusProblems(census, sem.resources, { collectionAllowed }),
    oversized: sizes.filter(({ id, held }) => held !== (permits.get(id) ?? k)),
    census: describeCensus(census),
  }).toEqual({ problems: [], oversized: [], census: expect.any(String) });
  return census;
}

/** Closes every instance, then: every token free, nobody registered, and only the usual keys left. */
async function expectIdleAfterClose(name: string, resources: number, instances: Semaphore[]): Promise<void> {
  await Promise.all(instances.map((sem) => sem.close()));
  const census = await takeCensus(fixture.redis, name);
  expect({ problems: censusProblems(census, resources, { idle: true }), census: describeCensus(census) }).toEqual({
    problems: [],
    census: expect.any(String),
  });
  expect(await keysOf(name)).toEqual(USUAL_KEYS);
}

/** The permits of known grants, by grant id. */
function permitsOf(...leases: Lease[]): Map<string, number> {
  return new Map(leases.map((lease) => [lease.grantId, lease.tokens.length]));
}

/** A promise's outcome, read without awaiting it (`settled` turns true once it settles). */
function watch<T>(promise: Promise<T>): { settled: boolean; outcome: Promise<{ value?: T; error?: unknown }> } {
  const watched = {
    settled: false,
    outcome: promise.then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    ),
  };
  void watched.outcome.then(() => (watched.settled = true));
  return watched;
}

// ---------------------------------------------------------------------------------------------------
// 1. refresh vs release of one weighted grant
// ---------------------------------------------------------------------------------------------------

/** The order in which refresh.lua and release.lua calls were built (a ready instance sends each as it builds it). */
function recordSends(): string[] {
  const sent: string[] = [];
  const { refresh, release } = commands;
  jest.spyOn(commands, 'refresh').mockImplementation((...args: Parameters<typeof refresh>) => {
    sent.push(`refresh ${args[2]}`);
    return refresh(...args);
  });
  jest.spyOn(commands, 'release').mockImplementation((...args: Parameters<typeof release>) => {
    sent.push(`release ${args[2]}`);
    return release(...args);
  });
  return sent;
}

/** The losses `sem` reports. */
function losses(sem: Semaphore): LostEvent[] {
  const lost: LostEvent[] = [];
  sem.on('lost', (event) => void lost.push(event));
  return lost;
}

/** A handle naming `lease`'s grant, as a process that received it would hold (the holder keeps its lease). */
function handleOf(sem: Semaphore, lease: Lease): GrantHandle {
  return {
    semaphore: sem.name,
    token: lease.token,
    tokens: lease.tokens,
    grantId: lease.grantId,
    fence: lease.fence,
    leaseMs: 60_000,
  };
}

const LEASED = { resources: 4, staleClientTimeout: 60_000, autoRefresh: false } as const;

describe('refresh vs release of one weighted grant', () => {
  test('the refresh script lands first: it renews, the release then ends the grant, all k back once', async () => {
    const sem = fixture.semaphore(LEASED);
    const lost = losses(sem);
    const lease = await sem.acquire({ permits: 3 });
    const before = await soundCensus(sem, permitsOf(lease), 3);
    const sent = recordSends();
    // Both sent in one tick (the instance is ready: it acquired), refresh first, on the main connection:
    // neither answered before the other went, and Redis runs them in that order.
    const refreshing = watch(lease.refresh());
    const releasing = watch(lease.release());
    expect(sent).toEqual([`refresh ${lease.grantId}`, `release ${lease.grantId}`]);
    expect(await refreshing.outcome).toEqual({ value: true }); // it ran while the grant was held
    expect(await releasing.outcome).toEqual({ value: true }); // and the release ended it
    expect(lost).toEqual([]);
    expect(lease.signal.aborted).toBe(false);
    expect(await lease.release()).toBe(true); // settled once: the same answer, nothing sent again
    expect(sent).toHaveLength(2);
    expect(await sem.release(handleOf(sem, lease))).toBe(false); // Redis ended it once: nothing left to end
    const after = await soundCensus(sem, new Map(), 3);
    expect(after.grabbed).toEqual({});
    expect([...after.available].sort()).toEqual(['0', '1', '2', '3']);
    expect(Object.keys(before.grabbed).sort()).toEqual([...lease.tokens].sort());
    await expectIdleAfterClose(sem.name, 4, [sem]);
  });

  test("the holder's release goes first: its refresh, already begun, says false and is no loss", async () => {
    const sem = fixture.semaphore(LEASED);
    const lost = losses(sem);
    const lease = await sem.acquire({ permits: 3 });
    const sent = recordSends();
    let releasing: ReturnType<typeof watch<boolean>> | undefined;
    // The refresh found its holding; before its script goes, the holder releases.
    setCheckpointHook((step) => {
      if (step === 'refresh:before' && releasing === undefined) releasing = watch(lease.release());
    });
    const refreshed = await sem.refresh(lease.token);
    expect(releasing?.settled).toBe(false); // the release was in flight when the refresh answered
    expect(refreshed).toBe(false); // the grant is being released: not the caller's to renew
    expect(await releasing!.outcome).toEqual({ value: true });
    expect(sent).toEqual([`release ${lease.grantId}`]); // a refresh behind it would have nothing to renew
    expect(lost).toEqual([]); // its own release is no loss
    expect(lease.signal.aborted).toBe(false);
    expect(await sem.release(handleOf(sem, lease))).toBe(false); // Redis ended it once: nothing left to end
    const after = await soundCensus(sem, new Map(), 3);
    expect([...after.available].sort()).toEqual(['0', '1', '2', '3']);
    await expectIdleAfterClose(sem.name, 4, [sem]);
  });

  test('the release script lands first (a handed-over grant): the refresh behind it says false and writes nothing', async () => {
    const sem = fixture.semaphore(LEASED);
    const lease = await sem.acquire({ permits: 3 });
    const handle = lease.handOver();
    const receiver = fixture.semaphore(LEASED, sem.name); // holds no holding of it: no guard in this process
    // Ready, so its calls go out as they are made (before its first use they wait for its checks, and
    // then leave in no set order).
    expect(await receiver.exists()).toBe(true);
    const sent = recordSends();
    let releasing: ReturnType<typeof watch<boolean>> | undefined;
    setCheckpointHook((step) => {
      if (step === 'refresh:before' && releasing === undefined) releasing = watch(receiver.release(handle));
    });
    const refreshing = watch(receiver.refresh(handle));
    await flush();
    // Both sent, release first, before either answered (one connection: Redis runs them in this order).
    expect(sent).toEqual([`release ${handle.grantId}`, `refresh ${handle.grantId}`]);
    expect(await refreshing.outcome).toEqual({ value: false });
    expect(await releasing!.outcome).toEqual({ value: true });
    const after = await soundCensus(sem, new Map(), 3);
    expect(after.grabbed).toEqual({}); // the refresh restamped no record
    expect([...after.available].sort()).toEqual(['0', '1', '2', '3']);
    expect(await receiver.release(handle)).toBe(false); // ended once
    await expectIdleAfterClose(sem.name, 4, [sem, receiver]);
  });

  test("the release lands first and the k tokens are granted again: the holder's refresh says lost, touches nothing of the new grant", async () => {
    const resources = 3;
    const options = { ...LEASED, resources };
    const sem = fixture.semaphore(options);
    const lost = losses(sem);
    const lease = await sem.acquire({ permits: 3 });
    // Another process that holds a handle of this grant (or an operator) ends it, and a third takes
    // the same three tokens, between the holder's refresh finding its holding and its script.
    const other = fixture.semaphore(options, sem.name);
    const third = fixture.semaphore(options, sem.name);
    let again: Lease | undefined;
    let ended: boolean | undefined;
    let written: Record<string, string> = {};
    setCheckpointHook(async (step) => {
      if (step !== 'refresh:before' || ended !== undefined) return;
      ended = await other.release(handleOf(sem, lease));
      again = await third.acquire({ permits: 3, timeout: 0 });
      written = await fixture.redis.hGetAll(semaphoreKeys(sem.name).grabbed);
    });
    const refreshed = await sem.refresh(lease.token);
    expect(ended).toBe(true);
    expect(refreshed).toBe(false);
    expect([...again!.tokens].sort()).toEqual([...lease.tokens].sort()); // the very same tokens
    // The holder hears 'reclaimed' once, and gives back what it still holds: nothing. (Its release
    // below goes on the same connection after that give-back: once it answers, both have run.)
    expect(lost.map((event) => [event.reason, event.fence])).toEqual([['reclaimed', lease.fence]]);
    expect(lease.signal.aborted).toBe(true);
    expect(await lease.release()).toBe(false);
    const census = await soundCensus(sem, permitsOf(again!), 3);
    // The new grant's records are exactly as its grant wrote them (no stamp renewed, none deleted).
    expect(Object.keys(written).sort()).toEqual([...again!.tokens].sort());
    expect(census.grabbed).toEqual({ ...written });
    expect(census.available).toEqual([]);
    expect(await again!.release()).toBe(true);
    expect(lost).toHaveLength(1);
    await expectIdleAfterClose(sem.name, resources, [sem, other, third]);
  });
});

// ---------------------------------------------------------------------------------------------------
// 2 and 3. A collecting waiter: its abort, or its semaphore's close(), vs the completion of its collection
// ---------------------------------------------------------------------------------------------------

/**
 * Holds the calls made in `run()` at checkpoint `step`: at `lock:waiting` (the default) each slice's
 * pipeline (BLMOVE and claim) is sent and runs in Redis as usual, but the wait reads its outcome only
 * once the test opens that slice's gate; at `lock:before-wait` a wait whose tryLock missed sends its
 * first slice only once the test opens the gate.
 */
class SliceGates {
  readonly #scope = new AsyncLocalStorage<true>();
  readonly #gates: Array<() => void> = [];

  constructor(step: CheckpointStep = 'lock:waiting') {
    setCheckpointHook((reached) => {
      if (reached !== step || this.#scope.getStore() !== true) return undefined;
      return new Promise<void>((resolve) => void this.#gates.push(resolve));
    });
  }

  run<T>(call: () => T): T {
    return this.#scope.run(true, call);
  }

  /** How many gates were reached (slices sent, at `lock:waiting`). */
  get sent(): number {
    return this.#gates.length;
  }

  /** Opens the n-th gate (from 1) once it was reached. */
  async slice(n: number): Promise<() => void> {
    await until(() => this.#gates.length >= n, 10_000, `gate ${n} of the held wait reached`);
    return this.#gates[n - 1]!;
  }

  /** Lets every held call go (a failed test must not leave a wait, and close(), hanging). */
  openAll(): void {
    for (const open of this.#gates) open();
  }
}

/** The clients of the spec's Redis, as CLIENT LIST shows them. */
async function clients(): Promise<Array<{ id: string; cmd: string; blocked: boolean }>> {
  const list = String(await fixture.redis.sendCommand(['CLIENT', 'LIST']));
  return list
    .split('\n')
    .filter((line) => line.startsWith('id='))
    .map((line) => ({
      id: /^id=(\d+)/.exec(line)![1]!,
      cmd: /\bcmd=(\S+)/.exec(line)?.[1] ?? '',
      blocked: /\bflags=\S*b/.test(line),
    }));
}

const blockedInBlmove = async () => (await clients()).filter((c) => c.cmd === 'blmove' && c.blocked);

/** Until the client `id` is blocked in BLMOVE. */
async function untilBlocked(id: string, what: string): Promise<void> {
  await until(async () => (await blockedInBlmove()).some((c) => c.id === id), 10_000, what);
}

/**
 * Until the client `id` left its BLMOVE and ran the claim pipelined behind it (its last command is
 * no longer BLMOVE, and it is not blocked).
 */
async function untilClaimedAfterUnblock(id: string): Promise<void> {
  await until(
    async () => (await clients()).some((c) => c.id === id && c.cmd !== 'blmove' && !c.blocked),
    10_000,
    'the unblocked slice claimed',
  );
}

const RESOURCES = 3;
const K = 2;

/**
 * The scene of every test below, on a semaphore of 3 tokens: three holders of one token each (an
 * instance of their own), and W waiting for 2 on `sem` with its slices held. The first holder's
 * release makes W the collector (one token in COLLECTED); W's next slice blocks on PENDING (held).
 */
async function collectorScene(sem: Semaphore, gates: SliceGates, signal?: AbortSignal) {
  const holders = fixture.semaphore({ resources: RESOURCES }, sem.name);
  const held = await Promise.all([1, 2, 3].map(() => holders.acquire({ permits: 1 })));
  expect(await blockedInBlmove()).toEqual([]);
  const w = watch(gates.run(() => sem.acquire({ permits: K, timeout: 20_000, ...(signal && { signal }) })));
  const first = await gates.slice(1);
  await until(async () => (await blockedInBlmove()).length === 1, 10_000, 'W blocked');
  const wClient = (await blockedInBlmove())[0]!.id;
  return { holders, held, w, first, wClient };
}

/** W's first token: the first holder releases; W's claim makes it the collector (seen in Redis). */
async function firstTokenCollected(sem: Semaphore, held: Lease[]): Promise<void> {
  expect(await held[0]!.release()).toBe(true);
  await until(
    async () => {
      const { collection } = await takeCensus(fixture.redis, sem.name);
      return collection.registration !== null && collection.collected.length === 1;
    },
    10_000,
    'W collecting one token',
  );
}

/** W's collection completed in Redis: its claim granted it k tokens (a grant id no holder has). */
async function untilCollectionGranted(sem: Semaphore, known: Lease[]): Promise<void> {
  const ids = new Set(known.map((lease) => lease.grantId));
  await until(
    async () => {
      const census = await takeCensus(fixture.redis, sem.name);
      return (
        census.collection.registration === null &&
        [...grantsOf(census)].some(([id, tokens]) => !ids.has(id) && tokens.length === K)
      );
    },
    10_000,
    "W's collection granted in Redis",
  );
}

describe('abort of a collecting waiter vs the completion of its collection', () => {
  let gates: SliceGates;
  beforeEach(() => (gates = new SliceGates()));
  afterEach(() => gates.openAll());

  /**
   * W collects, N (also for 2, on the same instance) waits behind it on AVAILABLE. Returns what each
   * order needs; every order ends with N served and everything idle.
   */
  async function scene() {
    const { sem, controller, holders, held, w, first, wClient, n } = await waitersScene(K);
    await firstTokenCollected(sem, held);
    await soundCensus(sem, permitsOf(...held), K, { collectionAllowed: true });
    first();
    const second = await gates.slice(2);
    await untilBlocked(wClient, 'W blocked on PENDING');
    return { sem, controller, holders, held, w, n, second, wClient };
  }

  /** W waits for 2 (its slices held), N for `nPermits` behind it, on one instance; nobody collects yet. */
  async function waitersScene(nPermits: number) {
    const sem = fixture.semaphore({ resources: RESOURCES, waitSlice: 10_000 });
    const controller = new AbortController();
    const { holders, held, w, first, wClient } = await collectorScene(sem, gates, controller.signal);
    const n = watch(sem.acquire({ permits: nPermits, timeout: 20_000 }));
    await until(async () => (await blockedInBlmove()).length === 2, 10_000, 'N blocked behind W');
    return { sem, controller, holders, held, w, first, wClient, n };
  }

  /** W rejected with its signal's AbortError; N is served its tokens; all back once released. */
  async function expectAbortedAndNextServed(
    s: Pick<Awaited<ReturnType<typeof waitersScene>>, 'sem' | 'controller' | 'holders' | 'held' | 'w' | 'n'>,
    nPermits = K,
  ) {
    const outcome = await s.w.outcome;
    expect(outcome.error).toBe(s.controller.signal.reason);
    expect((outcome.error as Error).name).toBe('AbortError');
    const nLease = (await s.n.outcome).value!;
    expect(nLease.tokens).toHaveLength(nPermits);
    const census = await soundCensus(s.sem, permitsOf(nLease, s.held[2]!), K);
    expect(census.collection).toEqual({ registration: null, pending: [], collected: [] });
    expect(Object.keys(census.grabbed)).toHaveLength(nPermits + 1);
    expect(await nLease.release()).toBe(true);
    expect(await s.held[2]!.release()).toBe(true);
    await expectIdleAfterClose(s.sem.name, RESOURCES, [s.sem, s.holders]);
  }

  test('the last token arrives first: the claim grants in Redis, then the abort; the grant goes back, N is served', async () => {
    const s = await scene();
    expect(await s.held[1]!.release()).toBe(true);
    await untilCollectionGranted(s.sem, s.held);
    await soundCensus(s.sem, permitsOf(...s.held), K);
    expect(s.w.settled).toBe(false); // W's wait has not read its grant yet
    s.controller.abort();
    expect((await s.w.outcome).error).toBe(s.controller.signal.reason); // told at once
    expect(s.n.settled).toBe(false);
    s.second(); // the grant W's wait reads now is given back: N takes it
    await expectAbortedAndNextServed(s);
  });

  test('the abort reaches Redis first (the slice unblocked and renewed), the token arrives before the wait ends: it comes back, N is served', async () => {
    const s = await scene();
    s.controller.abort();
    expect((await s.w.outcome).error).toBe(s.controller.signal.reason);
    // CLIENT UNBLOCK ended W's BLMOVE, and its claim ran: an empty slice, the collection kept.
    await untilClaimedAfterUnblock(s.wClient);
    const unblocked = await soundCensus(s.sem, permitsOf(...s.held), K, { collectionAllowed: true });
    expect(unblocked.collection.collected).toHaveLength(1);
    expect(unblocked.waiting.map((w) => w.registration)).toContain(unblocked.collection.registration);
    // The last token arrives while the collection is still W's: parked in PENDING, where W no longer waits.
    expect(await s.held[1]!.release()).toBe(true);
    const parked = await soundCensus(s.sem, permitsOf(s.held[2]!), K, { collectionAllowed: true });
    expect(parked.collection.pending).toEqual([s.held[1]!.token]);
    expect(s.n.settled).toBe(false);
    s.second(); // W's wait settles: its registration and collection end
    await expectAbortedAndNextServed(s);
  });

  test('the abort ends the collection in Redis first, the last token arrives after: N collects it', async () => {
    const s = await scene();
    s.controller.abort();
    expect((await s.w.outcome).error).toBe(s.controller.signal.reason);
    s.second();
    // W's registration ends (N's alone is left), and its collection with it.
    await until(
      async () => {
        const census = await takeCensus(fixture.redis, s.sem.name);
        return census.waiting.length === 1 && census.collection.registration === census.waiting[0]!.registration;
      },
      10_000,
      "W's registration ended and its token handed on to N",
    );
    // W's token went on to N, the next in line, which collects now.
    const handedOn = await soundCensus(s.sem, permitsOf(s.held[1]!, s.held[2]!), K, { collectionAllowed: true });
    expect(handedOn.collection.collected).toEqual([s.held[0]!.token]);
    expect(s.n.settled).toBe(false);
    expect(await s.held[1]!.release()).toBe(true);
    await expectAbortedAndNextServed(s);
  });

  test('the abort comes before its first token (not collecting yet): nothing of W stays in Redis, N is served', async () => {
    const s = await waitersScene(1);
    const collecting = semaphoreKeys(s.sem.name).collecting;
    const [w] = (await takeCensus(fixture.redis, s.sem.name)).waiting;
    expect(await fixture.redis.hGetAll(collecting)).toEqual({ [`#${w!.registration}`]: String(K) }); // listed for 2
    s.controller.abort();
    expect((await s.w.outcome).error).toBe(s.controller.signal.reason);
    await untilClaimedAfterUnblock(s.wClient); // its BLMOVE ended empty, the claim renewed the registration
    s.first();
    // Its registration ends, and its entry in COLLECTING with it (N, for 1, has none).
    await until(
      async () =>
        (await takeCensus(fixture.redis, s.sem.name)).waiting.length === 1 &&
        (await fixture.redis.exists(collecting)) === 0,
      10_000,
      "W's registration and COLLECTING entry ended",
    );
    expect(s.n.settled).toBe(false);
    expect(await s.held[0]!.release()).toBe(true); // N, next in line, takes it
    expect(await s.held[1]!.release()).toBe(true);
    await expectAbortedAndNextServed(s, 1);
  });
});

describe('close() vs a collection in flight', () => {
  /** The scene with W the collector, its next slice blocked on PENDING (held: `second` lets it settle). */
  async function blockedOnPending() {
    const sem = fixture.semaphore({ resources: RESOURCES, waitSlice: 10_000 });
    const { holders, held, w, first, wClient } = await collectorScene(sem, gates);
    await firstTokenCollected(sem, held);
    first();
    const second = await gates.slice(2);
    await untilBlocked(wClient, 'W blocked on PENDING');
    return { sem, holders, held, w, second, wClient };
  }

  let gates: SliceGates;
  beforeEach(() => (gates = new SliceGates()));
  afterEach(() => gates.openAll());

  /** W rejected with SemaphoreClosedError, close() resolved; the holders left release; all idle. */
  async function expectClosedAndIdle(sem: Semaphore, holders: Semaphore, w: ReturnType<typeof watch<Lease>>) {
    const outcome = await w.outcome;
    expect(outcome.error).toBeInstanceOf(SemaphoreClosedError);
    await expectIdleAfterClose(sem.name, RESOURCES, [sem, holders]);
  }

  test('before its first slice (its tryLock missed and registered it): nothing of it stays, close() resolves', async () => {
    gates = new SliceGates('lock:before-wait');
    const sem = fixture.semaphore({ resources: RESOURCES, waitSlice: 10_000 });
    const holders = fixture.semaphore({ resources: RESOURCES }, sem.name);
    const held = await Promise.all([1, 2, 3].map(() => holders.acquire({ permits: 1 })));
    const w = watch(gates.run(() => sem.acquire({ permits: K, timeout: 20_000 })));
    const go = await gates.slice(1);
    const collecting = semaphoreKeys(sem.name).collecting;
    const registered = await takeCensus(fixture.redis, sem.name);
    expect(registered.waiting).toHaveLength(1); // the miss registered W, a waiter for 2
    expect(await fixture.redis.hGetAll(collecting)).toEqual({ [`#${registered.waiting[0]!.registration}`]: String(K) });
    const closing = watch(sem.close());
    await flush();
    expect(closing.settled).toBe(false); // close() waits for W's wait
    go();
    expect(await closing.outcome).toEqual({ value: undefined });
    expect(await blockedInBlmove()).toEqual([]); // no slice was sent
    // The wait's end is sent before close() resolves, not awaited (another client may read first).
    await until(
      async () =>
        (await takeCensus(fixture.redis, sem.name)).waiting.length === 0 &&
        (await fixture.redis.exists(collecting)) === 0,
      10_000,
      "W's registration and COLLECTING entry ended",
    );
    await soundCensus(sem, permitsOf(...held), K);
    for (const lease of held) expect(await lease.release()).toBe(true);
    await expectClosedAndIdle(sem, holders, w);
  });

  test("before the collector's slice: its first token comes back, close() resolves", async () => {
    const sem = fixture.semaphore({ resources: RESOURCES, waitSlice: 10_000 });
    const { holders, held, w, first } = await collectorScene(sem, gates);
    await firstTokenCollected(sem, held);
    // W's claim made it the collector; its wait has not read that yet, nor sent its slice on PENDING.
    const closing = watch(sem.close());
    await flush();
    expect(closing.settled).toBe(false);
    first();
    expect(await closing.outcome).toEqual({ value: undefined });
    expect(gates.sent).toBe(1); // the collector's slice was never sent
    const census = await soundCensus(sem, permitsOf(...held), K);
    expect(census.available).toEqual([held[0]!.token]);
    expect(census.collection).toEqual({ registration: null, pending: [], collected: [] });
    expect(census.waiting).toEqual([]);
    for (const lease of held.slice(1)) expect(await lease.release()).toBe(true);
    await expectClosedAndIdle(sem, holders, w);
  });

  test('while it holds part of its tokens, blocked on PENDING (a token arriving as it settles): all come back', async () => {
    const { sem, holders, held, w, second, wClient } = await blockedOnPending();
    const closing = watch(sem.close());
    // close()'s CLIENT UNBLOCK ended the slice, whose claim kept the collection (an empty slice).
    await untilClaimedAfterUnblock(wClient);
    const unblocked = await soundCensus(sem, permitsOf(...held), K, { collectionAllowed: true });
    expect(unblocked.collection.collected).toEqual([held[0]!.token]);
    expect(await held[1]!.release()).toBe(true); // parked for W, which will not block again
    const parked = await soundCensus(sem, permitsOf(held[2]!), K, { collectionAllowed: true });
    expect(parked.collection.pending).toEqual([held[1]!.token]);
    expect(closing.settled).toBe(false);
    second();
    expect(await closing.outcome).toEqual({ value: undefined });
    const census = await soundCensus(sem, permitsOf(held[2]!), K);
    expect([...census.available].sort()).toEqual([held[0]!.token, held[1]!.token].sort());
    expect(census.collection).toEqual({ registration: null, pending: [], collected: [] });
    expect(census.waiting).toEqual([]);
    expect(await held[2]!.release()).toBe(true);
    await expectClosedAndIdle(sem, holders, w);
  });

  test('the collection completes in Redis before close() reaches it: the grant goes back, close() resolves', async () => {
    const { sem, holders, held, w, second } = await blockedOnPending();
    expect(await held[1]!.release()).toBe(true);
    await untilCollectionGranted(sem, held);
    const closing = watch(sem.close());
    await flush();
    expect(closing.settled).toBe(false);
    expect(w.settled).toBe(false);
    second();
    expect(await closing.outcome).toEqual({ value: undefined });
    const census = await soundCensus(sem, permitsOf(held[2]!), K);
    expect([...census.available].sort()).toEqual([held[0]!.token, held[1]!.token].sort());
    expect(census.waiting).toEqual([]);
    expect(await held[2]!.release()).toBe(true);
    await expectClosedAndIdle(sem, holders, w);
  });
});
