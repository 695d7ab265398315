// What a failed command means: the connection failed, a refusal a retry may pass (and that retry), a command never sent, Redis' error code.

/** Most tries of a command that a cluster or a failover answered "not now" (TRYAGAIN, CLUSTERDOWN…). */
const TRANSIENT_RETRIES = 8;

/** What the Sentinel adapter says when node-redis' Sentinel client fails a command while it reconfigures (a connection error). */
export const SENTINEL_RECONFIGURATION = 'Connection lost during a Sentinel reconfiguration';

/** Sends again, with backoff, a command a cluster or failover refused before running it (`wasRefusedForNow`). */
export async function retryRefused<T>(send: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await send();
    } catch (error) {
      if (attempt >= TRANSIENT_RETRIES || !wasRefusedForNow(error)) throw error;
      await new Promise((resolve) => setTimeout(resolve, Math.min(1000, 25 * 2 ** attempt)));
    }
  }
}

/** What the ioredis Cluster adapter says when it knows no connection to the semaphore's slot master (never sent). */
export const NO_SLOT_MASTER = 'No connection to the master of slot';

// node-redis' messages for SocketClosedUnexpectedlyError, ClientClosedError, ClientOfflineError,
// DisconnectsClientError, ConnectionTimeoutError and (v5+) SocketTimeoutError, the socket errors
// behind them, and the Sentinel adapter's own (SENTINEL_RECONFIGURATION). The messages are the same in v4, v5 and v6.
// ioredis' (v5, v6): "Connection is closed." (also the ioredis adapter's for a reply lost with its
// connection), its offline refusal ("Stream isn't writeable…"), MaxRetriesPerRequestError ("Reached
// the max retries per request limit"), "Command timed out" (`commandTimeout`), "Command aborted due
// to connection close", a Cluster's "Cluster is ended.", "Failed to refresh slots cache.", "None of
// startup nodes is available", and the ioredis Cluster adapter's own (NO_SLOT_MASTER).
const CONNECTION_ERROR = new RegExp(
  [
    'Socket closed unexpectedly|client is closed|client is offline|Disconnects client|Connection timeout|Socket timeout',
    'Sentinel reconfiguration|ECONNRESET|ECONNREFUSED|EPIPE|ETIMEDOUT',
    "Connection is closed|Stream isn't writeable|max retries per request|Command timed out|Command aborted due to connection close",
    'Cluster is ended|Failed to refresh slots cache|None of startup nodes is available',
    NO_SLOT_MASTER,
  ].join('|'),
  'i',
);

/** Errors that say the connection failed, not the command: the command may or may not have run. */
export function isConnectionError(error: unknown): boolean {
  const { message, code } = (error ?? {}) as { message?: unknown; code?: unknown };
  return CONNECTION_ERROR.test(`${String(message)} ${String(code)}`);
}

/**
 * A reply that answers another command: node-redis v5 can pair replies with the wrong commands after
 * a connection reset during its reconnect handshake (one command gets `ERR unknown subcommand
 * 'SETINFO'`, the next ones each other's replies). The command itself may or may not have run, like
 * one whose connection failed. The scripts whose replies a decision rests on echo the grant id they
 * acted on, and `lib/redis/commands.ts` throws this when the reply does not.
 */
export class MisattributedReplyError extends Error {
  override readonly name = 'MisattributedReplyError';

  constructor(script: string, reply: string) {
    super(`${script} got a reply that answers another command: ${reply}`);
  }
}

const MISATTRIBUTED = /reply that answers another command|unknown subcommand 'SETINFO'/i;

/**
 * A reply meant for another command (`MisattributedReplyError`, or the handshake's own SETINFO
 * refusal handed to a command of ours), also wrapped in a `SemaphoreRedisError`: the command's outcome is unknown.
 */
export function isMisattributedReply(error: unknown): boolean {
  return MISATTRIBUTED.test(String((error as { message?: unknown } | null)?.message));
}

// node-redis: offline or closed; ioredis: offline with no offline queue, or closed for good; the
// ioredis Cluster adapter: no connection to the slot's master. ("Connection is closed." is not here:
// ioredis also fails written commands with it.)
const NEVER_SENT = new RegExp(
  `client is offline|client is closed|Stream isn't writeable|Cluster is ended|${NO_SLOT_MASTER}`,
  'i',
);

/** A command the client rejected before sending it (offline, or closed): it did not run. */
export function wasNeverSent(error: unknown): boolean {
  const { cause, message } = (error ?? {}) as { cause?: unknown; message?: unknown };
  return NEVER_SENT.test(String(message)) || (cause !== undefined && wasNeverSent(cause));
}

/**
 * Replies with which a cluster or a server changing roles refuses a command before running any of
 * it, so it is safe to send again a moment later: TRYAGAIN (a multi-key command during a slot
 * migration), CLUSTERDOWN (a failover in progress), LOADING, MASTERDOWN, READONLY (a demoted primary:
 * no script here writes before it reads TIME and state, and a replica refuses the first write),
 * UNBLOCKED (a blocked BLMOVE ended by a role change: it moved nothing), MOVED/ASK that node-redis
 * gave up following (v6: "Too many Cluster redirections").
 */
export function wasRefusedForNow(error: unknown): boolean {
  const code = replyErrorCode(error);
  if (code !== undefined && /^(TRYAGAIN|CLUSTERDOWN|LOADING|MASTERDOWN|READONLY|UNBLOCKED|MOVED|ASK)$/.test(code)) {
    return true;
  }
  return /Too many Cluster redirections/.test(String((error as { message?: unknown } | null)?.message));
}

/** Redis' reply error code (`NOSCRIPT`, `WRONGTYPE`…). Read by shape, not instanceof: errors may come from another realm. */
export function replyErrorCode(error: unknown): string | undefined {
  const message = (error as { message?: unknown } | null)?.message;
  return typeof message === 'string' ? /^[A-Z]+/.exec(message)?.[0] : undefined;
}
