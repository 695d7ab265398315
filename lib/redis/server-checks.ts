// The server checks of a first use (one INFO): version, eviction policy, connection limit, and loading the function library.
import type { Connection } from './client/connection';
import { isConnectionError, isMisattributedReply } from './client/classify';
import { UnsupportedServerError } from '../errors';
import { loadFunctionLibrary, MINIMUM_FUNCTIONS_VERSION } from './functions';

/**
 * Checks of the Redis server that the protocol cannot make itself, made once per client at first use
 * and off the hot path, with one INFO: a server too old for `BLMOVE` (an error), an eviction policy
 * that can take a semaphore's keys (a warning); and a connection limit that keeps blocking waits from
 * getting a connection (named in the error). On Redis 7 and later, not Cluster, the same first use
 * loads the function library of the hot-path scripts (lib/redis/functions.ts).
 */

/** The oldest Redis this library runs on: waiters block with `BLMOVE`, new in 6.2.0. */
export const MINIMUM_REDIS_VERSION = '6.2.0';

/** What a client's server reported in INFO (fields it did not report are null). */
interface ServerInfo {
  /** `redis_version` (Valkey reports the Redis version it is compatible with there too). */
  readonly version: string | null;
  readonly maxmemory: number;
  readonly policy: string | null;
  /** `cluster_enabled:1`: a node of a Redis Cluster, whoever talks to it. */
  readonly clusterEnabled: boolean;
}

/**
 * What the checks found: whether they ran (false: INFO failed with its connection, so the next use
 * asks again; true also when INFO is refused, and nothing is checked), and whether the server is a
 * Redis Cluster node.
 */
export interface ServerCheck {
  readonly checked: boolean;
  readonly clusterEnabled: boolean;
  /** Whether the server has the function library: the hot-path scripts go by FCALL. */
  readonly functions: boolean;
}

/**
 * One INFO per client the user gave (or the semaphore made), not per semaphore, so semaphores
 * sharing a client share one check; in a cluster, one per slot, since each node answers for its own.
 * Resolves null when INFO is refused for good (an ACL without +info, a renamed command): nothing is
 * checked. An entry whose INFO failed with its connection is dropped, so the next use asks again.
 */
const infos = new WeakMap<object, Map<string, Promise<ServerInfo | null>>>();
/** Whether the function library loaded, per client and slot as INFO (see `infos`). */
const libraries = new WeakMap<object, Map<string, Promise<boolean>>>();
const warned = new WeakMap<object, Set<string>>();

/** The `process.emitWarning` code of the eviction warning. */
export const EVICTION_WARNING_CODE = 'RTS_EVICTION_POLICY';

/** Which semaphore a server check is for, and which server answers for it. */
export interface CheckedSemaphore {
  /** The semaphore's name, for the error and the warning. */
  readonly name: string;
  /** The client as the user knows it: the check is made once per it. */
  readonly identity: object;
  /** In a cluster, the semaphore's slot (each node is checked on its own); otherwise null. */
  readonly slot: number | null;
  /** Whether the semaphore sets TTLs (`expiration`), which `volatile-*` policies may evict. */
  readonly withExpiration: boolean;
  /** Whether to load the function library (the `functions` option). */
  readonly withFunctions: boolean;
}

/**
 * The checks at a semaphore's first use, through `client` (which routes INFO to the node serving the
 * semaphore's slot). Rejects with `UnsupportedServerError` when the server is older than
 * MINIMUM_REDIS_VERSION: scripts would run, and the first contended wait fail on `BLMOVE`. Warns
 * about the eviction policy (see warnAboutEviction). Resolves true once checked, or when INFO is
 * refused (then nothing is checked: `+info` is optional); false when INFO failed with its connection,
 * so the caller checks again at its next call (which meets the same connection anyway).
 */
export async function checkServer(client: Connection, semaphore: CheckedSemaphore): Promise<ServerCheck> {
  const scope = semaphore.slot === null ? '' : String(semaphore.slot);
  let info: ServerInfo | null;
  try {
    info = await once(infos, semaphore.identity, scope, () => readServerInfo(client));
  } catch {
    return { checked: false, clusterEnabled: false, functions: false };
  }
  if (!info) return { checked: true, clusterEnabled: false, functions: false };
  if (info.version !== null && isOlder(info.version, MINIMUM_REDIS_VERSION)) {
    throw new UnsupportedServerError(semaphore.name, info.version, MINIMUM_REDIS_VERSION);
  }
  warnAboutEviction(info, semaphore);
  // Not on Cluster, where every primary would need the library, loaded again after each reshard
  // or failover that brings in a node without it.
  const canLoad =
    semaphore.withFunctions &&
    semaphore.slot === null &&
    !info.clusterEnabled &&
    info.version !== null &&
    !isOlder(info.version, MINIMUM_FUNCTIONS_VERSION);
  let functions = false;
  if (canLoad) {
    try {
      functions = await once(libraries, semaphore.identity, scope, () => loadFunctionLibrary(client));
    } catch {
      return { checked: false, clusterEnabled: info.clusterEnabled, functions: false };
    }
  }
  return { checked: true, clusterEnabled: info.clusterEnabled, functions };
}

/**
 * `make()`'s promise, made once per client and scope and shared; one that rejects (its connection
 * failed) is dropped, so the next use tries again.
 */
function once<T>(
  cache: WeakMap<object, Map<string, Promise<T>>>,
  identity: object,
  scope: string,
  make: () => Promise<T>,
): Promise<T> {
  let byScope = cache.get(identity);
  if (!byScope) cache.set(identity, (byScope = new Map()));
  let made = byScope.get(scope);
  if (!made) {
    const scoped = byScope;
    made = make().catch((error: unknown) => {
      if (scoped.get(scope) === made) scoped.delete(scope);
      throw error;
    });
    scoped.set(scope, made);
  }
  return made;
}

/** INFO's default sections (one reply holds both `server` and `memory`; `INFO server memory` needs 7.0). Rejects on a connection failure. */
async function readServerInfo(client: Connection): Promise<ServerInfo | null> {
  let info: string;
  try {
    info = String(await client.sendCommand(['INFO']));
  } catch (error) {
    if (isConnectionError(error) || isMisattributedReply(error)) throw error;
    return null; // INFO denied (NOPERM) or unknown (renamed): no check, no noise
  }
  return {
    version: /^redis_version:(\S+)/m.exec(info)?.[1] ?? null,
    maxmemory: Number(/^maxmemory:(\d+)/m.exec(info)?.[1] ?? 0),
    policy: /^maxmemory_policy:(\S+)/m.exec(info)?.[1] ?? null,
    clusterEnabled: /^cluster_enabled:1/m.test(info),
  };
}

/** Whether `version` (`major.minor.patch`, maybe with a suffix) is below `minimum`; false when it does not parse. */
export function isOlder(version: string, minimum: string): boolean {
  const parse = (text: string) =>
    /^(\d+)\.(\d+)(?:\.(\d+))?/
      .exec(text)
      ?.slice(1)
      .map((part) => Number(part ?? 0));
  const found = parse(version);
  const needed = parse(minimum);
  if (!found || !needed) return false;
  for (let i = 0; i < 3; i++) {
    const a = found[i] ?? 0;
    const b = needed[i] ?? 0;
    if (a !== b) return a < b;
  }
  return false;
}

/**
 * Warns (process.emitWarning, once per client and policy) when the server may evict this semaphore's
 * keys: any `allkeys-*` policy, or a `volatile-*` policy when the semaphore sets TTLs (`expiration`).
 * Evicting AVAILABLE loses free tokens; evicting GRABBED forgets holders. Never throws.
 */
function warnAboutEviction(found: ServerInfo, { name, identity, withExpiration }: CheckedSemaphore): void {
  if (found.policy === null || found.maxmemory === 0) return;
  const policy = found.policy;
  const risky = policy.startsWith('allkeys-') || (withExpiration && policy.startsWith('volatile-'));
  if (!risky) return;
  const done = warned.get(identity) ?? new Set<string>();
  warned.set(identity, done);
  if (done.has(policy)) return;
  done.add(policy);
  const why = policy.startsWith('allkeys-')
    ? 'it can evict any key'
    : 'it can evict keys with a TTL, and `expiration` gives the semaphore keys one';
  process.emitWarning(
    `Redis runs with maxmemory-policy ${policy} (maxmemory ${found.maxmemory} bytes): ${why}. ` +
      `An evicted AVAILABLE list loses free tokens and an evicted GRABBED hash forgets holders ` +
      `(first seen on semaphore "${name}"). Use maxmemory-policy noeviction, or a volatile-* policy ` +
      `without \`expiration\`.`,
    { type: 'RedisTokenSemaphoreWarning', code: EVICTION_WARNING_CODE },
  );
}

/**
 * Blocking connections that keep failing to open may be refused by `maxclients`: Redis says so in an
 * error reply and closes, but node-redis drops that reply and reports "Socket closed unexpectedly".
 * When the main connection still works, ask the server, and name the limit in the error. Resolves
 * `error` itself when that is not the cause (or cannot be known within a second).
 */
export async function explainConnectionFailure(client: Connection, error: unknown): Promise<unknown> {
  if (!isConnectionError(error) || !client.isReady) return error;
  try {
    const info = String(
      await Promise.race([
        client.sendCommand(['INFO', 'clients']),
        new Promise((_, reject) => setTimeout(() => reject(new Error('no answer')), 1000).unref()),
      ]),
    );
    const connected = Number(/^connected_clients:(\d+)/m.exec(info)?.[1]);
    const max = Number(/^maxclients:(\d+)/m.exec(info)?.[1]);
    if (!(max > 0) || connected < max - 1) return error;
    const message = (error as { message?: unknown } | null)?.message;
    return new Error(
      `${String(message ?? error)}: Redis has ${connected} of maxclients ${max} connections, so the ` +
        `connection a blocking wait needs was refused (raise maxclients, or lower maxBlockingConnections)`,
      { cause: error },
    );
  } catch {
    return error;
  }
}
