// The options of a semaphore: each one a documented field, a default in DEFAULTS and a check in CHECKS.
import { hostname } from 'node:os';
import type { BlockingPool } from './pool/blocking-pool';
import { assertSupportedClient } from './redis/client/adapt';
import type { SupportedRedisClient } from './redis/client/types';
import { describe } from './util/describe';
import { assertDuration, MAX_TIMER_MS } from './util/durations';
import { assertKeyPrefix, DEFAULT_KEY_PREFIX } from './redis/keys';

/**
 * Why a holder lost its token:
 * - `'reclaimed'`: Redis no longer records this acquisition as the token's holder (reclaimed as
 *   stale, signalled back, deleted, or wiped by a Redis restart without persistence);
 * - `'expired'`: no refresh was confirmed within `staleClientTimeout` (Redis unreachable or too slow),
 *   so by this process's own clock the token may already be reclaimed and granted to another holder.
 */
export type LockLostReason = 'reclaimed' | 'expired';

/** `waitReplicas`: Redis `WAIT` after each grant and release. */
export interface WaitReplicasOptions {
  /** How many replicas must acknowledge. */
  readonly replicas: number;
  /** How long `WAIT` waits for them, in milliseconds (at least 1). */
  readonly timeoutMs: number;
  /**
   * What a shortfall does: `'reject'` (the default) rejects with `ReplicationError` (a lock gives its
   * token back first); `'warn'` emits the error as a process warning and goes on.
   * @default 'reject'
   */
  readonly onShortfall?: 'reject' | 'warn';
}

/**
 * The options of `new Semaphore(name, options)` (and, without `resources`, of `new Mutex`). Every
 * duration is in milliseconds. A bad value throws a `TypeError` or `RangeError` naming the option.
 */
export interface SemaphoreOptions {
  /**
   * A connected node-redis client, v4, v5 or v6: a standalone client (`createClient()`), a cluster
   * client (`createCluster()`) or (v5+) a Sentinel client (`createSentinel()`); or an ioredis client,
   * v5 or v6 (`new Redis()`, `new Cluster()`), as the application has it: where its options would
   * resend commands after a reconnect or prefix keys, the library runs on one duplicate of it, shared
   * by all its semaphores. It runs every non-blocking step; blocking waits run on connections
   * duplicated from it. The semaphore never closes it. Anything else throws a `TypeError`.
   * When absent, the semaphore creates its own from `url`, and `close()` quits it.
   */
  readonly redis?: SupportedRedisClient;
  /**
   * Where to connect when `redis` is absent.
   * @default process.env.REDIS_URL || 'redis://127.0.0.1:6379'
   */
  readonly url?: string;
  /**
   * How many holders may hold the semaphore at once (the number of tokens created). `0` makes a
   * queue that starts empty: nothing is created but the keys, and every `wait()` waits for a `signal`.
   * @default 1
   */
  readonly resources?: number;
  /**
   * The lease of every token this semaphore takes, in milliseconds: a holder is considered dead once
   * its token has gone this long without a refresh (since the acquisition or the last `refresh`), and
   * any client's `lock`, waiting slice or `releaseStaleLocks` then returns the token to the pool.
   * The lease is recorded with the grant, so every reclaimer (another process with another setting,
   * an operator's tool) honours the holder's own. With `autoRefresh` (the default) a live holder
   * keeps its token for as long as it holds it. Also the age after which this semaphore reclaims a
   * Ruby gem holder's token. `null` opts out: tokens taken by this semaphore never go stale (the
   * gem's default, where a crashed holder keeps its token for good). At least 100 (else a
   * `RangeError`): refreshes cannot reliably keep a shorter lease, which is most likely seconds meant.
   * @default 30000
   */
  readonly staleClientTimeout?: number | null;
  /**
   * Take timestamps from this process's clock instead of Redis `TIME`. Only safe when every client's
   * clock agrees; kept for parity with the Ruby gem.
   * @default false
   */
  readonly useLocalTime?: boolean;
  /**
   * On Redis 7 and later (not Cluster), load the scripts of every lock and unlock as a Redis
   * function library at first use and call them by `FCALL`, which costs Redis about 15% fewer
   * instructions per call than `EVALSHA`. `false` calls them by `EVALSHA` only: for a user whose
   * ACL does not grant `FUNCTION LOAD` (each client's attempt would otherwise appear in `ACL LOG`),
   * or a server where users who do not trust each other may load functions (see docs/OPERATIONS.md).
   * @default true
   */
  readonly functions?: boolean;
  /**
   * Every key of the semaphore expires this many milliseconds after its last use, but never while a
   * token is held, nor before the lease of the last waiter's registration ends. `null` (the default)
   * never expires.
   * @default null
   */
  readonly expiration?: number | null;
  /**
   * Blocking waits are cut into BLMOVE calls of at most this many milliseconds, so a dead connection
   * is noticed and stale holders are reclaimed while waiting. Longer slices keep FIFO order across
   * processes for longer waits (a waiter that re-arms joins the back of Redis' queue).
   * @default 10000
   */
  readonly waitSlice?: number;
  /**
   * Most connections this semaphore opens for blocking waits; further concurrent waiters in this
   * process queue locally, in arrival order, for a free one.
   * @default 10
   */
  readonly maxBlockingConnections?: number;
  /**
   * A label recorded with every token this semaphore takes, so `holders()` (and the CLI and
   * dashboard) can tell who holds what. Free text.
   * @default `${os.hostname()}:${process.pid}`
   */
  readonly owner?: string;
  /**
   * While a token is held, refresh it every third of `staleClientTimeout` so it is never reclaimed
   * from a live holder; stops when the token is released. Needs `staleClientTimeout`: left out with
   * `staleClientTimeout: null`, it is `false`.
   * @default true
   */
  readonly autoRefresh?: boolean;
  /**
   * Called when a held token is lost (see {@link LockLostReason}), as soon as this process can know
   * it. The callback form's function also gets an `AbortSignal` that aborts then. Errors thrown here
   * are reported with `process.emitWarning`, never thrown.
   */
  readonly onLockLost?: (token: string, reason: LockLostReason) => void;
  /**
   * After each grant and each release, wait until this many replicas have it (Redis `WAIT`, on the
   * connection that wrote it), so that a failover cannot silently undo it. `null` (the default)
   * does not wait. Narrows the failover window; does not close it (see docs/DEPLOYMENT.md, "Sentinel and failover").
   * @default null
   */
  readonly waitReplicas?: WaitReplicasOptions | null;
  /**
   * What every key of the semaphore starts with: `<keyPrefix><name>:AVAILABLE`…. The default is the
   * Ruby gem's, so Ruby and Node processes share a semaphore by name; another prefix (`'APP1:'`) gives
   * an application a namespace of its own, which a Redis ACL can confine it to (`~APP1:*`). It must
   * end with `:` and have no `{`, `}`, glob character (`*?[]\`), whitespace or control character; a
   * bad one throws a `TypeError`. Every process sharing a semaphore must use the same prefix.
   * @default 'SEMAPHORE:'
   */
  readonly keyPrefix?: string;
}

type OptionName = keyof SemaphoreOptions;

/**
 * Every option's default, written once: the option names, `resolveOptions` and the docs' check
 * (spec/package/docs.spec.ts) derive from it. `undefined`: the option has none.
 */
export const DEFAULTS = {
  redis: undefined,
  get url(): string {
    return process.env['REDIS_URL'] || 'redis://127.0.0.1:6379';
  },
  resources: 1,
  staleClientTimeout: 30_000,
  useLocalTime: false,
  functions: true,
  expiration: null,
  waitSlice: 10_000,
  maxBlockingConnections: 10,
  get owner(): string {
    return `${hostname()}:${process.pid}`;
  },
  autoRefresh: true,
  onLockLost: undefined,
  waitReplicas: null,
  keyPrefix: DEFAULT_KEY_PREFIX,
} satisfies Record<OptionName, unknown> & SemaphoreOptions;

const OPTION_NAMES = Object.keys(DEFAULTS) as OptionName[];

/**
 * How a lock manager (lib/locks.ts) hands its semaphores the pool they share: a symbol-keyed option,
 * invisible to `SemaphoreOptions` and to the unknown-option check.
 */
export const SHARED_POOL = Symbol('redis-token-semaphore.sharedPool');

/** The options as a semaphore reads them: defaults applied, each checked by its entry in CHECKS. */
export type ResolvedOptions = { readonly [K in OptionName]: ReturnType<(typeof CHECKS)[K]> } & {
  /** The lock manager's pool of blocking connections, when the semaphore is one of a manager's. */
  readonly sharedPool: BlockingPool | undefined;
};

/**
 * Most tokens a semaphore may have (`resources`, and the CLI's `resize`): created in batches of
 * 10,000 (a few ms of Redis each), and a list and hash of this size stay a few tens of MB.
 */
export const MAX_RESOURCES = 1_000_000;

/**
 * Shortest lease (`staleClientTimeout`): it is refreshed every third of it, and below 100 ms that third
 * (33 ms) no longer covers a round trip plus a late timer or a GC pause, so one slow refresh loses it.
 */
export const MIN_LEASE_MS = 100;

/** Longest `owner` label: it is stored with every grant. */
const MAX_OWNER_LENGTH = 1024;

/** Longest `waitSlice`: an hour keeps every timer derived from it far below setTimeout's limit. */
const MAX_WAIT_SLICE = 3_600_000;

export function assertName(name: unknown): asserts name is string {
  if (typeof name !== 'string' || name.length === 0) {
    throw new TypeError(`Expected the semaphore name to be a non-empty string, got ${describe(name)}`);
  }
  // A lone surrogate has no UTF-8 encoding (it is sent as U+FFFD), so two different names would share keys.
  if (LONE_SURROGATE.test(name)) {
    throw new TypeError(
      `Expected the semaphore name to be well-formed Unicode (no lone surrogate), got ${describe(name)}`,
    );
  }
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * One check per option (the compiler asks for one), run in this order: throws a `TypeError` or `RangeError` naming the option,
 * or returns the value to use. `value` is the caller's, or the default when `defaulted`; `resolved`
 * holds the options checked before it.
 */
type Check = (value: unknown, resolved: Readonly<Partial<Record<OptionName, unknown>>>, defaulted: boolean) => unknown;

const CHECKS = {
  redis(value) {
    if (value !== undefined) assertSupportedClient(value);
    return value as SupportedRedisClient | undefined;
  },
  url(value, resolved) {
    if (resolved.redis === undefined && (typeof value !== 'string' || value.length === 0)) {
      throw new TypeError(`Expected \`url\` to be a Redis URL string, got ${describe(value)}`);
    }
    return value as string;
  },
  resources(value) {
    // 0: a queue that starts empty (jobs come from `signal`).
    if (typeof value !== 'number') {
      throw new TypeError(`Expected \`resources\` to be a number of tokens from 0 up, got ${describe(value)}`);
    }
    if (!Number.isInteger(value) || value < 0 || value > MAX_RESOURCES) {
      throw new RangeError(
        `Expected \`resources\` to be an integer from 0 (a queue that starts empty) to ${MAX_RESOURCES}, got ${value}`,
      );
    }
    return value;
  },
  staleClientTimeout(value) {
    // Seconds taken for milliseconds (the Ruby gem's unit): `30` would be a lease of 30 ms.
    if (typeof value === 'number' && value > 0 && value < MIN_LEASE_MS) {
      throw new RangeError(
        `Expected \`staleClientTimeout\` to be at least ${MIN_LEASE_MS} milliseconds (30 seconds is 30000), got ${value}`,
      );
    }
    // The holder's lease runs on a timer, whose range is 2^31-1 ms (about 24.8 days).
    return wholeMsOrNull('staleClientTimeout', value, MAX_TIMER_MS);
  },
  useLocalTime: (value) => boolean('useLocalTime', value),
  functions: (value) => boolean('functions', value),
  expiration: (value) => wholeMsOrNull('expiration', value, Infinity),
  waitSlice(value) {
    assertDuration('waitSlice', value, true);
    if (value < 10 || value > MAX_WAIT_SLICE) {
      throw new RangeError(`Expected \`waitSlice\` to be from 10 ms to one hour, got ${value}`);
    }
    return value;
  },
  maxBlockingConnections: (value) => positiveInteger('maxBlockingConnections', value),
  owner(value) {
    if (typeof value !== 'string') throw new TypeError(`Expected \`owner\` to be a string, got ${describe(value)}`);
    if (value.length > MAX_OWNER_LENGTH) {
      throw new RangeError(`Expected \`owner\` to be at most ${MAX_OWNER_LENGTH} characters, got ${value.length}`);
    }
    return value;
  },
  autoRefresh(value, resolved, defaulted) {
    const autoRefresh = boolean('autoRefresh', value);
    if (!autoRefresh || resolved.staleClientTimeout !== null) return autoRefresh;
    // Without a lease nothing goes stale: the default gives way, a caller's `true` is a mistake.
    if (defaulted) return false;
    throw new TypeError('`autoRefresh` needs the `staleClientTimeout` option: without it nothing goes stale');
  },
  onLockLost(value) {
    if (value !== undefined && typeof value !== 'function') {
      throw new TypeError(`Expected \`onLockLost\` to be a function, got ${describe(value)}`);
    }
    return value as SemaphoreOptions['onLockLost'];
  },
  keyPrefix(value) {
    assertKeyPrefix('`keyPrefix`', value);
    return value;
  },
  waitReplicas(value): Required<WaitReplicasOptions> | null {
    if (value === null) return null;
    if (typeof value !== 'object') {
      throw new TypeError(`Expected \`waitReplicas\` to be { replicas, timeoutMs } or null, got ${describe(value)}`);
    }
    const { replicas, timeoutMs, onShortfall = 'reject' } = value as WaitReplicasOptions;
    positiveInteger('waitReplicas.replicas', replicas);
    // WAIT reads 0 as "wait forever".
    assertDuration('waitReplicas.timeoutMs', timeoutMs, true);
    if (timeoutMs < 1) {
      throw new RangeError(`Expected \`waitReplicas.timeoutMs\` to be at least 1 ms, got ${timeoutMs}`);
    }
    if (onShortfall !== 'reject' && onShortfall !== 'warn') {
      throw new TypeError(
        `Expected \`waitReplicas.onShortfall\` to be 'reject' or 'warn', got ${describe(onShortfall)}`,
      );
    }
    return { replicas, timeoutMs: Math.max(1, Math.ceil(timeoutMs)), onShortfall };
  },
} satisfies Record<OptionName, Check>;

export function resolveOptions(options: SemaphoreOptions): ResolvedOptions {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`Expected options to be an object, got ${describe(options)}`);
  }
  const unknown = Object.keys(options).filter((key) => !Object.hasOwn(DEFAULTS, key));
  if (unknown.length > 0) {
    throw new TypeError(
      `Unknown option${unknown.length > 1 ? 's' : ''} ${unknown.map((key) => `\`${key}\``).join(', ')}; ` +
        `the options are ${OPTION_NAMES.map((key) => `\`${key}\``).join(', ')}`,
    );
  }
  const resolved: Partial<Record<OptionName, unknown>> = {};
  for (const name of Object.keys(CHECKS) as OptionName[]) {
    const value = options[name];
    resolved[name] = CHECKS[name](value === undefined ? DEFAULTS[name] : value, resolved, value === undefined);
  }
  return {
    ...(resolved as Omit<ResolvedOptions, 'sharedPool'>),
    sharedPool: (options as { [SHARED_POOL]?: BlockingPool })[SHARED_POOL],
  };
}

function boolean(name: string, value: unknown): boolean {
  if (typeof value !== 'boolean') throw new TypeError(`Expected \`${name}\` to be a boolean, got ${describe(value)}`);
  return value;
}

function positiveInteger(name: string, value: unknown): number {
  if (typeof value !== 'number') {
    throw new TypeError(`Expected \`${name}\` to be a positive integer, got ${describe(value)}`);
  }
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`Expected \`${name}\` to be a positive safe integer, got ${value}`);
  }
  return value;
}

/** A duration Redis keeps in whole milliseconds (a lease, a key's expiry), at most `max`; or null. */
function wholeMsOrNull(name: string, value: unknown, max: number): number | null {
  if (value === null) return null;
  assertDuration(name, value, true);
  if (value < 1) throw new RangeError(`Expected \`${name}\` to be at least 1 ms, got ${value}`);
  if (value > max) throw new RangeError(`Expected \`${name}\` to be at most ${max} ms, got ${value}`);
  return value;
}
