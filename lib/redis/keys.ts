/** Every Redis key name and key pattern of a semaphore: built here and nowhere else. */
import { describe } from '../util/describe';

/**
 * A semaphore's key names. What each key holds and which scripts write it: docs/DESIGN.md "Keys"
 * (the first four are the Ruby gem's, so Ruby and Node processes can share a semaphore by name).
 */
export interface SemaphoreKeys {
  readonly available: string;
  readonly grabbed: string;
  readonly exists: string;
  readonly version: string;
  readonly owners: string;
  readonly waiting: string;
  readonly fence: string;
  readonly leases: string;
  readonly creating: string;
  /** A weighted wait's keys (lib/redis/scripts/includes/give_back.lua): who collects, what is freed for it, what it has. */
  readonly collecting: string;
  readonly pending: string;
  readonly collected: string;
  /** The gem's guard key for `release_stale_locks!`. */
  readonly gemReleaseGuard: string;
  /** The operators' audit stream (lib/admin/audit.ts). */
  readonly audit: string;
  /** The twelve keys scripts receive first, in the order `lib/redis/scripts/includes/holder_keys.lua` names them. */
  readonly scriptKeys: readonly string[];
  /**
   * What the hot-path scripts (tryLock, prepareWait, claim, recover, refresh, and without `expiration`
   * release) are given on a single Redis: AVAILABLE alone; they name the other keys, inboxes too,
   * after its prefix (includes/holder_keys.lua). Null on Cluster, and for a plain client on a
   * Cluster node (`declareAll`), where every key a script touches must be passed.
   */
  readonly shortKeys: readonly string[] | null;
  /** The first three (AVAILABLE, GRABBED, LEASES): all a refresh touches. */
  readonly holderKeys: readonly string[];
  /** The list a blocked waiter's BLMOVE moves its token into: its registration's inbox. */
  inbox(registrationId: string): string;
  /** The inbox of a WAITING entry: `<registration id>`, or `~<registration id>` once abandoned (see recover.lua). */
  inboxOfRegistration(registration: string): string;
}

/**
 * What every key of every semaphore starts with by default (the gem's): the `keyPrefix` option. Ruby
 * and Node processes share a semaphore only under this prefix (the gem's is fixed).
 */
export const DEFAULT_KEY_PREFIX = 'SEMAPHORE:';
/** The last part of the key that says a semaphore exists. */
const EXISTS = 'EXISTS';
/** What an inbox key has between the semaphore's prefix and the grant id. */
const INBOX = 'INBOX:';

/**
 * The keys of semaphore `name` under `keyPrefix` (`<keyPrefix><name>:AVAILABLE`…, see
 * {@link assertKeyPrefix}). With `cluster`, a name without a hash tag gets one, so every key lands
 * in one slot: `SEMAPHORE:{<name>}:AVAILABLE`…; a name that has one (`{jobs}`, `crawl:{eu}`) is kept
 * as is, so the keys stay the gem's and Ruby clients can share the semaphore. The prefix never has a
 * brace, so the hash tag is always the name's. `declareAll` (always with `cluster`): no `shortKeys`,
 * for a server that is a Cluster node even when the client is not.
 */
export function semaphoreKeys(
  name: string,
  {
    cluster = false,
    keyPrefix = DEFAULT_KEY_PREFIX,
    declareAll = cluster,
  }: { cluster?: boolean; keyPrefix?: string; declareAll?: boolean } = {},
): SemaphoreKeys {
  const prefix = `${keyPrefix}${cluster && !hasHashTag(name) ? `{${tagSafe(name)}}` : name}:`;
  const available = `${prefix}AVAILABLE`;
  const grabbed = `${prefix}GRABBED`;
  const exists = `${prefix}${EXISTS}`;
  const version = `${prefix}VERSION`;
  const owners = `${prefix}OWNERS`;
  const waiting = `${prefix}WAITING`;
  const fence = `${prefix}FENCE`;
  const leases = `${prefix}LEASES`;
  const creating = `${prefix}CREATING`;
  const collecting = `${prefix}COLLECTING`;
  const pending = `${prefix}PENDING`;
  const collected = `${prefix}COLLECTED`;
  const inbox = `${prefix}${INBOX}`;
  return {
    available,
    grabbed,
    exists,
    version,
    owners,
    waiting,
    fence,
    leases,
    creating,
    collecting,
    pending,
    collected,
    gemReleaseGuard: `${prefix}release_locks`,
    audit: `${prefix}AUDIT`,
    scriptKeys: [
      available,
      grabbed,
      leases,
      exists,
      version,
      waiting,
      fence,
      creating,
      owners,
      collecting,
      pending,
      collected,
    ],
    shortKeys: declareAll ? null : [available],
    holderKeys: [available, grabbed, leases],
    inbox: (registrationId) => `${inbox}${registrationId}`,
    inboxOfRegistration: (registration) => `${inbox}${registration.replace(/^~/, '')}`,
  };
}

/**
 * SCAN MATCH pattern of every semaphore's `exists` key under `keyPrefix` (`SEMAPHORE:*:EXISTS`): how
 * operators list them. It also matches the semaphores of a longer prefix that starts with this one
 * (`APP:EU:` under `APP:`, listed as `EU:<name>`), whose keys are those names' under `APP:` too.
 */
export function existsKeyPattern(keyPrefix = DEFAULT_KEY_PREFIX): string {
  return `${escapeGlob(keyPrefix)}*:${EXISTS}`;
}

/**
 * The name whose `exists` key is `key` under `keyPrefix` (`SEMAPHORE:<name>:EXISTS` → `<name>`), or
 * `undefined` for any other key. A cluster semaphore's key (`SEMAPHORE:{jobs}:EXISTS`) gives the
 * tagged name `{jobs}`, whose keys are the same with or without `cluster`.
 */
export function nameOfExistsKey(key: string, keyPrefix = DEFAULT_KEY_PREFIX): string | undefined {
  const suffix = `:${EXISTS}`;
  if (!key.startsWith(keyPrefix) || !key.endsWith(suffix) || key.length <= keyPrefix.length + suffix.length)
    return undefined;
  return key.slice(keyPrefix.length, -suffix.length);
}

/** Longest `keyPrefix`: it is part of every key, and of every key of every call. */
const MAX_KEY_PREFIX_LENGTH = 256;

/**
 * Throws unless `keyPrefix` is a usable key prefix: a non-empty string that ends with `:` and has no
 * whitespace or control character, no lone surrogate, none of `{`, `}` (Redis Cluster hashes a key
 * on what lies between its first `{` and the next `}`: a brace in the prefix would take the hash tag
 * from the name, and `{}` would spread one semaphore's keys over slots) and none of `*`, `?`, `[`,
 * `]`, `\` (glob characters: the ACL rule `~<prefix>*` and the operators' `SCAN MATCH <prefix>*`
 * must match exactly the keys under it). The `:` keeps `~APP1:*` from matching the keys of `APP10:`.
 */
export function assertKeyPrefix(what: string, keyPrefix: unknown): asserts keyPrefix is string {
  if (typeof keyPrefix !== 'string') {
    throw new TypeError(
      `Expected ${what} to be a string ending with ':' (such as 'APP1:'), got ${describe(keyPrefix)}`,
    );
  }
  if (keyPrefix.length > MAX_KEY_PREFIX_LENGTH) {
    throw new RangeError(`Expected ${what} to be at most ${MAX_KEY_PREFIX_LENGTH} characters, got ${keyPrefix.length}`);
  }
  const problem =
    keyPrefix.length < 2 || !keyPrefix.endsWith(':')
      ? "to end with ':' after at least one character (such as 'APP1:')"
      : /[{}]/.test(keyPrefix)
        ? "to have no `{` or `}` (on Redis Cluster the hash tag is the name's)"
        : /[*?[\]\\]/.test(keyPrefix)
          ? 'to have no glob character (`*`, `?`, `[`, `]`, `\\`): ACL rules and SCAN patterns are `<prefix>*`'
          : /[\s\p{Cc}]/u.test(keyPrefix) || LONE_SURROGATE.test(keyPrefix)
            ? 'to have no whitespace, control character or lone surrogate'
            : undefined;
  if (problem !== undefined) throw new TypeError(`Expected ${what} ${problem}, got ${describe(keyPrefix)}`);
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * SCAN/KEYS MATCH pattern of every key of a semaphore, its name escaped. It also matches the keys of
 * semaphores whose name continues this one's with `:` (`jobs` and `jobs:eu`).
 */
export function keyPattern(keys: SemaphoreKeys): string {
  return `${escapeGlob(keys.inbox('').slice(0, -INBOX.length))}*`;
}

/** SCAN MATCH pattern of every inbox key of a semaphore (`keys.inbox(<any grant id>)`), its name escaped. */
export function inboxKeyPattern(keys: SemaphoreKeys): string {
  return `${escapeGlob(keys.inbox(''))}*`;
}

/** The grant id whose inbox is `key` (`keys.inbox(id)` → `id`), or `undefined` for any other key. */
export function grantIdOfInboxKey(keys: SemaphoreKeys, key: string): string | undefined {
  const prefix = keys.inbox('');
  return key.startsWith(prefix) ? key.slice(prefix.length) : undefined;
}

function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

/**
 * `{<name>}` hashes on the name up to its first `}`, which is empty, so useless, when the name starts
 * with `}` (`}`, `}abc`): Redis would hash each key whole, and a script's keys would span slots. Such
 * names get a leading `"`; so that no two names share keys, so do names that already start with
 * quotes followed by `}` (`"}abc` → `""}abc`). Every other name is kept.
 */
function tagSafe(name: string): string {
  return /^"*}/.test(name) ? `"${name}` : name;
}

/**
 * Whether Redis Cluster would hash only part of a key made from `name` (after the key prefix, which
 * has no brace): the first `{` is followed, later, by a `}` with something between.
 */
export function hasHashTag(name: string): boolean {
  return hashTag(name) !== undefined;
}

/** Redis Cluster's hash tag of a key: what lies between its first `{` and the next `}`, if not empty. */
export function hashTag(key: string): string | undefined {
  const open = key.indexOf('{');
  if (open < 0) return undefined;
  const close = key.indexOf('}', open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : undefined;
}
