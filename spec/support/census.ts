/** The one reader of a semaphore's state in Redis for the specs: where every token is (a census), and what is wrong with it. */
import { grantIdOf } from '../../lib/redis/status';
import { grantIdOfInboxKey, inboxKeyPattern, semaphoreKeys } from '../../lib/redis/keys';
import type { Client } from './redis';

/** Where every token of a semaphore is, read in one MULTI (inbox keys found by SCAN just before). */
export interface Census {
  /** AVAILABLE, head first. */
  readonly available: string[];
  /**
   * GRABBED as stored: token → its grant record
   * `"<stamp> <grant id> <fence> <lease ms> <acquired stamp> <owner label>"` (a Ruby holder's: a plain stamp).
   */
  readonly grabbed: Record<string, string>;
  /** The holders this library recorded: token → the grant id its GRABBED record names. */
  readonly owners: Record<string, string>;
  /**
   * OWNERS as stored. No script writes it any more (earlier versions kept the acquisition time and
   * label there), so any entry is old data or a bug.
   */
  readonly ownerRecords: Record<string, string>;
  /** WAITING: registration (`<grant id>` or `~<grant id>`) and its expiry in seconds, earliest first. */
  readonly waiting: Array<{ registration: string; expiry: number }>;
  /** Every inbox that holds a token, registered in WAITING or not. */
  readonly inboxes: Array<{ key: string; grantId: string; tokens: string[]; registered: boolean }>;
  /**
   * A weighted waiter's partial collection (lib/redis/scripts/includes/give_back.lua): the
   * registration the hash COLLECTING names (null: none), and the tokens in PENDING and COLLECTED.
   */
  readonly collection: { registration: string | null; pending: string[]; collected: string[] };
}

/** What a census says about the tokens "0".."resources-1". */
export interface Tally {
  /** Initial tokens found nowhere. */
  readonly lost: string[];
  /** Tokens found more than once (each listed once). */
  readonly duplicated: string[];
  /** Tokens that are not initial tokens. */
  readonly unknown: string[];
  /** Tokens sitting in inboxes (in flight from BLMOVE to a claim, or stranded). */
  readonly inInboxes: string[];
  /** Tokens in an inbox with no registration left: nothing will ever return them. */
  readonly stranded: string[];
  /** Tokens in a weighted waiter's collection (PENDING, COLLECTED). */
  readonly collecting: string[];
  /**
   * Held tokens without a whole grant record of this library (a Ruby holder's plain stamp, a record
   * cut short, or one as earlier versions wrote it), and tokens with an OWNERS entry, which nothing writes.
   */
  readonly unrecorded: string[];
}

/**
 * Inboxes are found by SCAN (`inboxKeyPattern`), so a semaphore named `<name>:INBOX…` on the same
 * server would be taken for inboxes (the library itself never scans; only this census does). With
 * `scanInboxes: false`, only the inboxes of registrations in WAITING are read (no stranded ones).
 * `keyPrefix`: the semaphore's `keyPrefix` option (the gem's `SEMAPHORE:` by default).
 */
export async function takeCensus(
  redis: Client,
  name: string,
  { scanInboxes = true, keyPrefix }: { scanInboxes?: boolean; keyPrefix?: string } = {},
): Promise<Census> {
  const semaphore = semaphoreKeys(name, { keyPrefix });
  const inboxKeys = new Set<string>();
  // node-redis v4 yields keys one by one, v5+ in batches.
  const scanned = scanInboxes ? redis.scanIterator({ MATCH: inboxKeyPattern(semaphore), COUNT: 1000 }) : [];
  for await (const keys of scanned as AsyncIterable<string | string[]>) {
    for (const key of [keys].flat()) inboxKeys.add(key);
  }
  // Registered inboxes too, in case one appeared after the SCAN.
  for (const registration of await redis.zRange(semaphore.waiting, 0, -1)) {
    inboxKeys.add(semaphore.inboxOfRegistration(registration));
  }
  const keys = [...inboxKeys];
  const multi = redis
    .multi()
    .lRange(semaphore.available, 0, -1)
    .hGetAll(semaphore.grabbed)
    .hGetAll(semaphore.owners)
    .zRangeWithScores(semaphore.waiting, 0, -1)
    .hGet(semaphore.collecting, 'registration')
    .lRange(semaphore.pending, 0, -1)
    .lRange(semaphore.collected, 0, -1);
  for (const key of keys) multi.lRange(key, 0, -1);
  const [available, grabbed, owners, waiting, collecting, pending, collected, ...inboxLists] =
    (await multi.exec()) as unknown as [
      string[],
      Record<string, string>,
      Record<string, string>,
      Array<{ value: string; score: number }>,
      string | null,
      string[],
      string[],
      ...string[][],
    ];
  const registered = new Set(waiting.map((entry) => entry.value.replace(/^~/, '')));
  const inboxes = keys
    .map((key, i) => {
      const grantId = grantIdOfInboxKey(semaphore, key) ?? key;
      return { key, grantId, tokens: inboxLists[i] ?? [], registered: registered.has(grantId) };
    })
    .filter((inbox) => inbox.tokens.length > 0);
  return {
    available,
    grabbed: { ...grabbed },
    owners: Object.fromEntries(
      Object.entries(grabbed).flatMap(([token, record]) => {
        const grantId = grantIdOf(record);
        return grantId === undefined ? [] : [[token, grantId]];
      }),
    ),
    ownerRecords: { ...owners },
    waiting: waiting.map((entry) => ({ registration: entry.value, expiry: entry.score })),
    inboxes,
    collection: { registration: collecting, pending, collected },
  };
}

/**
 * A whole grant record as this version writes it (includes/grant.lua): stamp, grant id, fence,
 * lease ms, acquired stamp, then the owner label (any text, possibly empty).
 */
const WHOLE_RECORD = /^\S+ \S+ \d+ \d+ \S+ [\s\S]*$/;

/** A token's GRABBED and OWNERS values, for a problem report. */
function describeRecord(census: Census, token: string): string {
  const owners = census.ownerRecords[token];
  return `${token} GRABBED ${JSON.stringify(census.grabbed[token] ?? null)}${owners === undefined ? '' : ` OWNERS ${JSON.stringify(owners)}`}`;
}

/** Counts every token across AVAILABLE, GRABBED and the inboxes against "0".."resources-1". */
export function tally(census: Census, resources: number): Tally {
  const counts = new Map<string, number>();
  const count = (token: string) => counts.set(token, (counts.get(token) ?? 0) + 1);
  census.available.forEach(count);
  Object.keys(census.grabbed).forEach(count);
  const inInboxes = census.inboxes.flatMap((inbox) => inbox.tokens);
  inInboxes.forEach(count);
  const collecting = [...census.collection.pending, ...census.collection.collected];
  collecting.forEach(count);
  const initial = Array.from({ length: resources }, (_, i) => String(i));
  return {
    lost: initial.filter((token) => !counts.has(token)),
    duplicated: [...counts].filter(([, n]) => n > 1).map(([token]) => token),
    unknown: [...counts.keys()].filter((token) => !initial.includes(token)),
    inInboxes,
    stranded: census.inboxes.filter((inbox) => !inbox.registered).flatMap((inbox) => inbox.tokens),
    collecting,
    unrecorded: [
      ...new Set([
        ...Object.entries(census.grabbed)
          .filter(([, record]) => !WHOLE_RECORD.test(record))
          .map(([token]) => token),
        ...Object.keys(census.ownerRecords),
      ]),
    ],
  };
}

export interface CensusExpectation {
  /** Accept tokens in registered inboxes (a hand-off in flight, or one the reaper has not reached yet). */
  readonly inboxesAllowed?: boolean;
  /** Accept a weighted waiter's partial collection (a registered waiter's: any other is stranded). */
  readonly collectionAllowed?: boolean;
  /** Also require every token free: nothing held, nobody registered as waiting. */
  readonly idle?: boolean;
  /** With `idle`, accept abandoned marks (`~<grant id>`, left by recover.lua until they expire). */
  readonly marksAllowed?: boolean;
}

/**
 * What is wrong with a census, as readable sentences (empty when the count is exact): every initial
 * token exactly once, none unknown, every holder with a whole grant record (and nothing in OWNERS),
 * no token stranded in an inbox.
 */
export function censusProblems(census: Census, resources: number, expectation: CensusExpectation = {}): string[] {
  const t = tally(census, resources);
  const problems: string[] = [];
  if (t.lost.length > 0) problems.push(`lost tokens ${t.lost.join(',')}`);
  if (t.duplicated.length > 0) problems.push(`duplicated tokens ${t.duplicated.join(',')}`);
  if (t.unknown.length > 0) problems.push(`unknown tokens ${t.unknown.join(',')}`);
  if (t.unrecorded.length > 0) {
    problems.push(
      `held without a grant record, or in OWNERS: ${t.unrecorded.map((token) => describeRecord(census, token)).join(', ')}`,
    );
  }
  if (t.stranded.length > 0) problems.push(`tokens stranded in unregistered inboxes ${t.stranded.join(',')}`);
  if (!expectation.inboxesAllowed && t.inInboxes.length > 0) {
    problems.push(`tokens in inboxes ${t.inInboxes.join(',')}`);
  }
  const { registration, pending, collected } = census.collection;
  if (registration !== null && !census.waiting.some((w) => w.registration === registration)) {
    problems.push(`a collection of unregistered ${registration}: [${t.collecting.join(',')}]`);
  } else if (registration === null && collected.length > 0) {
    problems.push(`tokens collected for nobody ${collected.join(',')}`);
  }
  // Without a collector, PENDING holds tokens freed together, handed on to waiters one at a time.
  if (registration === null && pending.length > 0 && expectation.idle) {
    problems.push(`tokens freed together still waiting to be handed on ${pending.join(',')}`);
  }
  if (!expectation.collectionAllowed && registration !== null) {
    problems.push(`a collection in progress for ${registration}: [${t.collecting.join(',')}]`);
  }
  if (expectation.idle) {
    if (census.available.length !== resources) problems.push(`${census.available.length} of ${resources} tokens free`);
    const left = census.waiting.filter((w) => !(expectation.marksAllowed && w.registration.startsWith('~')));
    if (left.length > 0) {
      problems.push(`registrations left in WAITING ${left.map((w) => w.registration).join(',')}`);
    }
  }
  return problems;
}

/** The grant groups GRABBED records: grant id → its tokens (sorted); a record with no grant id (a Ruby holder's) stands alone. */
export function grantsOf(census: Census): Map<string, string[]> {
  const groups = new Map<string, string[]>();
  for (const [token, record] of Object.entries(census.grabbed)) {
    const id = grantIdOf(record) ?? `?${record}`;
    groups.set(id, [...(groups.get(id) ?? []), token].sort());
  }
  return groups;
}

/** A one-line summary for logs and failure messages. */
export function describeCensus(census: Census): string {
  const inboxes = census.inboxes.map((inbox) => `${inbox.registered ? '' : '!'}${inbox.grantId}=[${inbox.tokens}]`);
  return (
    `AVAILABLE=[${census.available}] GRABBED=[${Object.keys(census.grabbed)}] ` +
    `holders=[${Object.entries(census.owners).map(([t, g]) => `${t}:${g}`)}] ` +
    (Object.keys(census.ownerRecords).length > 0 ? `OWNERS=[${Object.keys(census.ownerRecords)}] ` : '') +
    `WAITING=[${census.waiting.map((w) => w.registration)}] INBOXES=[${inboxes}]` +
    (census.collection.registration === null &&
    census.collection.collected.length === 0 &&
    census.collection.pending.length === 0
      ? ''
      : ` COLLECTING=${census.collection.registration} PENDING=[${census.collection.pending}] COLLECTED=[${census.collection.collected}]`)
  );
}
