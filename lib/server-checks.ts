import type { Connection } from './client/connection';
import { isConnectionError } from './client/errors';

/**
 * Checks of the Redis server's configuration that the protocol cannot enforce itself, made once per
 * client and off the hot path: an eviction policy that can take a semaphore's keys (a warning at first
 * use), and a connection limit that keeps blocking waits from getting a connection (named in the error).
 */

/** What a client's server reported, read once per client (null when INFO could not be read). */
interface MemoryPolicy {
  readonly maxmemory: number;
  readonly policy: string;
}

// Keyed by the client the user gave (or the semaphore made), not by the per-semaphore adapter
// around it, so semaphores sharing one client share one check.
const policies = new WeakMap<object, Promise<MemoryPolicy | null>>();
const warned = new WeakMap<object, Set<string>>();

/** The `process.emitWarning` code of the eviction warning. */
export const EVICTION_WARNING_CODE = 'RTS_EVICTION_POLICY';

/**
 * Warns (process.emitWarning, once per client and policy) when the server may evict this semaphore's
 * keys: any `allkeys-*` policy, or a `volatile-*` policy when the semaphore sets TTLs (`expiration`).
 * Evicting AVAILABLE loses free tokens; evicting GRABBED forgets holders. Never throws and
 * never delays the caller: INFO runs in the background, and where it is denied (an ACL) nothing is said.
 * `identity` is the client as the user knows it (once per it); `client` is what the INFO goes through.
 */
export function checkEvictionPolicy(
  client: Connection,
  identity: object,
  semaphore: string,
  withExpiration: boolean,
): void {
  let read = policies.get(identity);
  if (!read) {
    read = readMemoryPolicy(client);
    policies.set(identity, read);
  }
  void read.then((found) => {
    if (!found || found.maxmemory === 0) return;
    const risky = found.policy.startsWith('allkeys-') || (withExpiration && found.policy.startsWith('volatile-'));
    if (!risky) return;
    const done = warned.get(identity) ?? new Set<string>();
    warned.set(identity, done);
    if (done.has(found.policy)) return;
    done.add(found.policy);
    const why = found.policy.startsWith('allkeys-')
      ? 'it can evict any key'
      : 'it can evict keys with a TTL, and `expiration` gives the semaphore keys one';
    process.emitWarning(
      `Redis runs with maxmemory-policy ${found.policy} (maxmemory ${found.maxmemory} bytes): ${why}. ` +
        `An evicted AVAILABLE list loses free tokens and an evicted GRABBED hash forgets holders ` +
        `(first seen on semaphore "${semaphore}"). Use maxmemory-policy noeviction, or a volatile-* policy ` +
        `without \`expiration\`.`,
      { type: 'RedisTokenSemaphoreWarning', code: EVICTION_WARNING_CODE },
    );
  });
}

async function readMemoryPolicy(client: Connection): Promise<MemoryPolicy | null> {
  try {
    const info = String(await client.sendCommand(['INFO', 'memory']));
    const policy = /^maxmemory_policy:(\S+)/m.exec(info)?.[1];
    const maxmemory = Number(/^maxmemory:(\d+)/m.exec(info)?.[1] ?? 0);
    return policy ? { maxmemory, policy } : null;
  } catch {
    return null; // INFO denied or the connection failed: no check, no noise
  }
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
