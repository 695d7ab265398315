/**
 * Model-based property test (fast-check): random sequences of lock / lock with a timeout / unlock /
 * consume / signal / refresh / reclaim across three semaphore instances on one name, run against the
 * real Redis and against a small model of the semaphore. After every step the call's result and the
 * Redis state (AVAILABLE in order, the GRABBED tokens, the LEASES index) must equal the model's.
 */
import fc from 'fast-check';
import { Semaphore } from '../../lib';
import { useFixture } from '../support/fixture';
import { uniqueName } from '../support/redis';

const fixture = useFixture();
const CLIENTS = 3;
const N = 2;
/**
 * Holders of jobs outside the model (no lease, indexed at +inf, never reclaimed): holders of tokens
 * other than "0".."15", so LEASES exists and reclaim counts them against the index.
 */
const CROWD = 14;
const isCrowd = (token: string) => token.startsWith('crowd');
/** The canonical tokens "0".."15", which LEASES never indexes (includes/grant.lua `is_small`). */
const isSmall = (token: string) => /^(?:\d|1[0-5])$/.test(token);

/** One acquisition as the model sees it; `valid` is false once signalled back, reclaimed or wiped. */
interface Grant {
  readonly token: string;
  valid: boolean;
}

class Model {
  /** AVAILABLE, head first (tokens are taken from the head and pushed back onto it). */
  available: string[] = Array.from({ length: N }, (_, i) => String(i));
  /** Token → the valid grant holding it. */
  readonly held = new Map<string, Grant>();
  /** Each client's grants, oldest first, as its Semaphore instance keeps them. */
  readonly grants: Grant[][] = Array.from({ length: CLIENTS }, () => []);
  /** The tokens LEASES names. */
  readonly indexed = new Set<string>();
  jobs = 0;
  /** Whether each client's instance skips tryLock on its next lock with a timeout (Contention.contended). */
  readonly contended: boolean[] = Array.from({ length: CLIENTS }, () => false);

  /**
   * The grant of `client` for `token` that `unlock(token)` and `refresh(token)` act on: its newest
   * grant of that token that Redis no longer records, if any (a lost one goes first, so a call never
   * ends another live grant of the same token), else its newest.
   */
  last(client: number, token: string): Grant | undefined {
    const mine = this.grants[client]?.filter((grant) => grant.token === token) ?? [];
    return mine.findLast((grant) => !grant.valid) ?? mine.at(-1);
  }

  forget(client: number, grant: Grant): void {
    const list = this.grants[client] ?? [];
    list.splice(list.lastIndexOf(grant), 1);
  }

  /**
   * A reclaim's read of GRABBED (always, or with more holders of tokens other than "0".."15" than
   * entries for such tokens) indexes every live grant of such a token.
   */
  heal(always = false): void {
    const others = [...this.held.keys()].filter((token) => !isSmall(token));
    const entries = [...this.indexed].filter((token) => !isSmall(token)).length;
    if (!always && CROWD + others.length <= CROWD + entries) return;
    for (const token of others) this.indexed.add(token);
  }

  invalidate(token: string): void {
    const grant = this.held.get(token);
    if (grant) grant.valid = false;
    this.held.delete(token);
  }
}

interface Real {
  readonly sems: Semaphore[];
  readonly name: string;
}

type Command = fc.AsyncCommand<Model, Real>;

/** Picks one of the client's grants (any, valid or not) by an index drawn in advance. */
function grantOf(model: Model, client: number, pick: number): Grant | undefined {
  const list = model.grants[client] ?? [];
  return list.length === 0 ? undefined : list[pick % list.length];
}

class Lock implements Command {
  constructor(
    readonly client: number,
    readonly timeout: 0 | 30,
  ) {}
  check = () => true;
  async run(model: Model, real: Real): Promise<void> {
    const expected = model.available[0] ?? null;
    // An instance whose last lock(0) missed skips tryLock: its lock with a timeout registers in the
    // pipeline of its first slice, whose prepareWait reclaims first (prepareWait.lua).
    const waitsAtOnce = this.timeout !== 0 && model.contended[this.client]!;
    if (waitsAtOnce) model.heal();
    // A free token comes at once, but a wait that skips tryLock (contended) may first open a blocking
    // connection, which can take longer than 30 ms on a loaded machine: such a wait gets a deadline
    // that only a lost token would reach. With none free, 30 ms is the timeout that must pass.
    const timeout = this.timeout === 0 || expected === null ? this.timeout : 10_000;
    const token = await real.sems[this.client]!.lock(timeout);
    expect(token).toBe(expected); // a free token is taken from the head; none free: null once the timeout passes
    // Contended (lib/lock/take.ts): after a lock(0) that missed; a grant says nobody else waits (no
    // registration is left in the model), a wait that timed out proves nothing.
    model.contended[this.client] = expected === null && this.timeout === 0;
    // A miss reclaims: with more holders of other tokens than entries, it reads GRABBED and indexes
    // the live grants without an entry (includes/reclaim.lua).
    if (expected === null) model.heal();
    if (expected !== null) {
      model.available.shift();
      // A token name signalled twice has two copies; holder records are keyed by token, so the
      // newer grant replaces the older one's record (the documented cost of signalling a name twice).
      model.invalidate(expected);
      const grant = { token: expected, valid: true };
      model.held.set(expected, grant);
      model.grants[this.client]!.push(grant);
      // Indexed at once, but "0".."15" never (an entry the token kept goes).
      if (isSmall(expected)) model.indexed.delete(expected);
      else model.indexed.add(expected);
      // (A grant by claim also reclaims, once in 16 grants (claim.lua), through the index and the
      // records of "0".."15" only: it never reads GRABBED whole, and indexes nothing.)
    }
  }
  toString = () => `c${this.client}.lock(${this.timeout})`;
}

class Release implements Command {
  constructor(
    readonly client: number,
    readonly pick: number,
    readonly putBack: boolean,
  ) {}
  check = (model: Readonly<Model>) => (model.grants[this.client]?.length ?? 0) > 0;
  async run(model: Model, real: Real): Promise<void> {
    const { token } = grantOf(model, this.client, this.pick)!;
    const grant = model.last(this.client, token)!;
    const sem = real.sems[this.client]!;
    const result = this.putBack ? await sem.unlock(token) : await sem.consume(token);
    if (grant.valid) {
      model.held.delete(token);
      if (this.putBack) model.available.unshift(token);
      // An unlock leaves the entry of a token it leaves as the only free one (release.lua).
      if (!this.putBack || model.available.length > 1) model.indexed.delete(token);
      expect(result).toBe(this.putBack ? model.available.length : true);
    } else {
      expect(result).toBe(false); // lost: nothing is put back
    }
    model.forget(this.client, grant);
  }
  toString = () => `c${this.client}.${this.putBack ? 'unlock' : 'consume'}(#${this.pick})`;
}

class Refresh implements Command {
  constructor(
    readonly client: number,
    readonly pick: number,
  ) {}
  check = (model: Readonly<Model>) => (model.grants[this.client]?.length ?? 0) > 0;
  async run(model: Model, real: Real): Promise<void> {
    const { token } = grantOf(model, this.client, this.pick)!;
    const grant = model.last(this.client, token)!;
    // A lost grant stays with its instance until it is released.
    expect(await real.sems[this.client]!.refresh(token)).toBe(grant.valid);
    if (grant.valid && !isSmall(token)) model.indexed.add(token);
  }
  toString = () => `c${this.client}.refresh(#${this.pick})`;
}

/** signal(a held or free token) or signal(a new job string). */
class Signal implements Command {
  constructor(
    readonly client: number,
    readonly pick: number | 'job',
  ) {}
  check = () => true;
  async run(model: Model, real: Real): Promise<void> {
    const known = [...new Set([...model.held.keys(), ...model.available])];
    const token = this.pick === 'job' || known.length === 0 ? `job-${++model.jobs}` : known[this.pick % known.length]!;
    const pushed = await real.sems[this.client]!.signal(token);
    // The signalled token's holder no longer holds it (its instance keeps the lost grant until released).
    model.invalidate(token);
    model.indexed.delete(token);
    model.available.push(token); // at the tail: jobs in signal order
    expect(pushed).toBe(model.available.length);
  }
  toString = () => `c${this.client}.signal(${this.pick === 'job' ? 'job' : `#${this.pick}`})`;
}

/** A holder that looks dead (its lease's start set far back, in GRABBED and LEASES), reclaimed by releaseStaleLocks. */
class Reclaim implements Command {
  constructor(
    readonly client: number,
    readonly pick: number,
  ) {}
  check = (model: Readonly<Model>) => model.held.size > 0;
  async run(model: Model, real: Real): Promise<void> {
    const tokens = [...model.held.keys()];
    const token = tokens[this.pick % tokens.length]!;
    const key = (suffix: string) => `SEMAPHORE:${real.name}:${suffix}`;
    const record = (await fixture.redis.hGet(key('GRABBED'), token))!;
    await fixture.redis.hSet(key('GRABBED'), token, record.replace(/^\S+/, '1000.000000'));
    await fixture.redis.zAdd(key('LEASES'), { score: 1060e6, value: token }); // the 60 s lease below, in µs
    expect(await real.sems[this.client]!.releaseStaleLocks()).toBe(1);
    model.invalidate(token);
    model.indexed.delete(token);
    model.heal(true);
    model.available.unshift(token);
  }
  toString = () => `c${this.client}.releaseStaleLocks(#${this.pick})`;
}

/** The whole state in Redis must be the model's, after every step. */
function verified<C extends Command>(command: C): C {
  const run = command.run.bind(command);
  command.run = async (model: Model, real: Real) => {
    await run(model, real);
    const key = (suffix: string) => `SEMAPHORE:${real.name}:${suffix}`;
    expect(await fixture.redis.lRange(key('AVAILABLE'), 0, -1)).toEqual(model.available);
    expect((await fixture.redis.hKeys(key('GRABBED'))).filter((token) => !isCrowd(token)).sort()).toEqual(
      [...model.held.keys()].sort(),
    );
    expect(await fixture.redis.exists(key('OWNERS'))).toBe(0); // one record per grant, in GRABBED: nothing writes OWNERS
    const indexed = (await fixture.redis.zRange(key('LEASES'), 0, -1)).filter((token) => !isCrowd(token));
    expect(indexed.sort()).toEqual([...model.indexed].sort());
    expect(await fixture.redis.zCard(key('WAITING'))).toBe(0);
  };
  return command;
}

const client = fc.integer({ min: 0, max: CLIENTS - 1 });
const pick = fc.nat(50);
const commands = [
  fc.tuple(client, fc.constantFrom(0 as const, 30 as const)).map(([c, t]) => verified(new Lock(c, t))),
  fc.tuple(client, pick).map(([c, p]) => verified(new Release(c, p, true))),
  fc.tuple(client, pick).map(([c, p]) => verified(new Release(c, p, false))),
  fc.tuple(client, pick).map(([c, p]) => verified(new Refresh(c, p))),
  fc.tuple(client, fc.oneof(pick, fc.constant('job' as const))).map(([c, p]) => verified(new Signal(c, p))),
  fc.tuple(client, pick).map(([c, p]) => verified(new Reclaim(c, p))),
];

/**
 * Runs `sequence` against a new semaphore (with the crowd of outside holders) and a new model;
 * `fence`: the fencing number of the grant before the first.
 */
async function runAgainstModel(sequence: Iterable<Command>, fence?: number): Promise<void> {
  const name = uniqueName('model');
  const options = { resources: N, staleClientTimeout: 60_000, waitSlice: 100 };
  const sems = Array.from({ length: CLIENTS }, () => fixture.semaphore(options, name));
  await sems[0]!.existsOrCreate();
  if (fence !== undefined) await fixture.redis.set(`SEMAPHORE:${name}:FENCE`, String(fence));
  const crowd = Array.from({ length: CROWD }, (_, n) => `crowd${n}`);
  await fixture.redis.hSet(
    `SEMAPHORE:${name}:GRABBED`,
    Object.fromEntries(crowd.map((token, n) => [token, `1000.000000 c${n} ${n + 1} 0 1000.000000 other`])),
  );
  await fixture.redis.sendCommand(['ZADD', `SEMAPHORE:${name}:LEASES`, ...crowd.flatMap((token) => ['+inf', token])]);
  await fc.asyncModelRun(() => ({ model: new Model(), real: { sems, name } }), sequence);
  await Promise.all(sems.map((sem) => sem.close()));
}

test('lock, unlock, consume, signal, refresh, reclaim and timeouts across three clients follow the model', async () => {
  let runs = 0;
  await fc.assert(
    fc.asyncProperty(fc.commands(commands, { maxCommands: 40, size: 'max' }), async (sequence) => {
      runs++;
      await runAgainstModel(sequence);
    }),
    { numRuns: 300, interruptAfterTimeLimit: 20_000, markInterruptAsFailure: false },
  );
  expect(runs).toBeGreaterThanOrEqual(5);
}, 60_000);

test('a lock that skips tryLock reclaims before its grant (a sequence a CI run found)', async () => {
  // c1's lock(0) missed, so its lock with a timeout goes straight to a wait, whose prepareWait reads
  // GRABBED (17 holders, 15 entries) and indexes tokens 0 and 1 before job-2 is granted.
  const sequence = [
    new Lock(0, 0),
    new Lock(0, 0),
    new Lock(1, 0),
    new Signal(0, 'job'),
    new Signal(0, 'job'),
    new Lock(0, 0),
    new Lock(1, 30),
  ];
  await runAgainstModel(sequence.map((command) => verified<Command>(command)));
});

test.each([16_000, 16_001])('a grant by claim with fencing number %i indexes only itself', async (fence) => {
  // Tokens 0 and 1 granted (never indexed); c1's lock(0) missed, so its lock with a timeout waits at
  // once: its prepareWait finds every other holder indexed (nothing to index), and its grant of the
  // job is indexed. The claim's reclaim, one grant in 16 (16,000), reads 0 and 1 (live) and the index.
  const sequence = [new Lock(0, 0), new Lock(0, 0), new Lock(1, 0), new Signal(0, 'job'), new Lock(1, 30)];
  await runAgainstModel(
    sequence.map((command) => verified<Command>(command)),
    fence - 3,
  );
});
