/** `createDashboard`: the dashboard's routes, its JSON API, authentication and security headers. */
import { timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import { appendAudit, auditEntry, releaseStaleLogged, type Actor, type AuditRecord } from '../admin/audit';
import { statusJson, type StatusJson } from '../admin/json';
import { readStatus, releaseToken, staleHolders, type Scope, type SemaphoreStatus } from '../admin/operations';
import { adaptClient, topologyOf } from '../redis/client/adapt';
import type { SupportedRedisClient } from '../redis/client/types';
import { describe } from '../util/describe';
import { assertKeyPrefix, DEFAULT_KEY_PREFIX } from '../redis/keys';
import { MIN_LEASE_MS } from '../options';
import { metricsText, METRICS_TYPE } from './metrics';
import { notFoundPage, page } from './page';
import {
  allow,
  decodeSegment,
  digest,
  hostAllowed,
  HttpError,
  LOOPBACK_NAMES,
  readJson,
  SECURITY_HEADERS,
  send,
  sendJson,
  withTimeout,
} from './http';
import { Overview, QueryError } from './overview';
import { Sampler, type HandOff } from './sampler';

/** What `createDashboard` takes. */
export interface DashboardOptions {
  /**
   * A connected client: node-redis (standalone, cluster or Sentinel) or ioredis. The dashboard never
   * closes it. Listing semaphores on a cluster needs a node-redis cluster client (it scans every master).
   */
  readonly redis: SupportedRedisClient;
  /**
   * The bearer token that state-changing requests (the release buttons) must send
   * (`Authorization: Bearer <token>`). Without it the dashboard is read-only.
   */
  readonly token?: string;
  /**
   * Serve no release buttons and refuse every state-changing request (403).
   * @default true when no `token` is given, else false
   */
  readonly readOnly?: boolean;
  /**
   * The path the dashboard is mounted under in your server (`'/ops/semaphores'`); requests outside
   * it get 404. The handler strips it itself.
   * @default ''
   */
  readonly basePath?: string;
  /**
   * How often the page polls for fresh state, in milliseconds.
   * @default 1000
   */
  readonly refreshMs?: number;
  /**
   * The key prefix of the semaphores to show (their `keyPrefix` option): the dashboard lists, reads
   * and releases only semaphores under it.
   * @default 'SEMAPHORE:'
   */
  readonly keyPrefix?: string;
  /**
   * The semaphores `/metrics` reports on. Its only label is the semaphore's name, so the number of
   * series is bounded by this list, never by what happens to be in Redis.
   * @default []
   */
  readonly watch?: readonly string[];
  /**
   * The host names (as in the `Host` header, without the port) the dashboard answers; any other gets
   * 421. This stops DNS rebinding: a web page elsewhere whose name was rebound to your server's
   * address reaches it with its own name in `Host`, and would read the dashboard. Give the names
   * your operators use (`['ops.example.com']`), or `'any'` behind a proxy that checks `Host` itself.
   * @default ['localhost', '127.0.0.1', '[::1]'] and the address the request arrived on
   */
  readonly allowedHosts?: readonly string[] | 'any';
  /**
   * How the page's header names this Redis besides the address, role and version the server reports
   * (`'redis://cache-eu:6379'`; never put a password in it).
   * @default none
   */
  readonly redisName?: string;
}

/** A node:http request handler (`http.createServer(createDashboard({ redis }))`). */
export type DashboardHandler = (request: IncomingMessage, response: ServerResponse) => void;

const PUBLIC = join(__dirname, 'public');
const ASSETS: Record<string, { readonly file: string; readonly type: string }> = {
  '/common.js': { file: 'common.js', type: 'text/javascript; charset=utf-8' },
  '/card.js': { file: 'card.js', type: 'text/javascript; charset=utf-8' },
  '/app.js': { file: 'app.js', type: 'text/javascript; charset=utf-8' },
  '/app.css': { file: 'app.css', type: 'text/css; charset=utf-8' },
};

/** A request Redis has not answered by then gets a 503 (a client with an offline queue waits forever). */
const REDIS_TIMEOUT_MS = 5000;

/** Longest `reason` a release request may give (it is stored with each audit entry). */
const MAX_REASON = 500;

/** How long `/healthz` waits for PING. */
const PING_TIMEOUT_MS = 2000;

/**
 * The dashboard as a request handler for node:http: a page listing every semaphore (held and free
 * tokens, holders and their ages, waiters, recent hand-offs), refreshed live by polling its JSON
 * API, with release and release-stale buttons that need the bearer `token`.
 */
export function createDashboard(options: DashboardOptions): DashboardHandler {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`Expected options to be an object, got ${describe(options)}`);
  }
  const { redis, token, basePath = '', refreshMs = 1000, keyPrefix = DEFAULT_KEY_PREFIX, watch = [] } = options;
  const probe = redis as { sendCommand?: unknown; call?: unknown } | null | undefined;
  if (typeof probe?.sendCommand !== 'function' && typeof probe?.call !== 'function') {
    throw new TypeError('Expected `redis` to be a connected node-redis or ioredis client');
  }
  if (token !== undefined && (typeof token !== 'string' || token.length === 0)) {
    throw new TypeError(`Expected \`token\` to be a non-empty string, got ${describe(token)}`);
  }
  const readOnly = options.readOnly ?? token === undefined;
  if (typeof readOnly !== 'boolean')
    throw new TypeError(`Expected \`readOnly\` to be a boolean, got ${describe(readOnly)}`);
  if (!readOnly && token === undefined) {
    throw new TypeError('`readOnly: false` needs a `token`: state-changing requests must be authenticated');
  }
  if (typeof basePath !== 'string' || !/^(\/[^/?#]+)*$/.test(basePath)) {
    throw new TypeError(`Expected \`basePath\` to be '' or a path like '/ops/semaphores', got ${describe(basePath)}`);
  }
  if (typeof refreshMs !== 'number' || !Number.isFinite(refreshMs) || refreshMs < 100) {
    throw new RangeError(`Expected \`refreshMs\` to be a number of milliseconds ≥ 100, got ${describe(refreshMs)}`);
  }
  assertKeyPrefix('`keyPrefix`', keyPrefix);
  if (!Array.isArray(watch) || !watch.every((name) => typeof name === 'string' && name !== '')) {
    throw new TypeError(`Expected \`watch\` to be an array of semaphore names, got ${describe(watch)}`);
  }
  const watched = [...new Set(watch)];
  const allowedHosts = options.allowedHosts ?? LOOPBACK_NAMES;
  if (
    allowedHosts !== 'any' &&
    !(Array.isArray(allowedHosts) && allowedHosts.every((host) => typeof host === 'string' && host !== ''))
  ) {
    throw new TypeError(
      `Expected \`allowedHosts\` to be an array of host names or 'any', got ${describe(allowedHosts)}`,
    );
  }
  const hosts = allowedHosts === 'any' ? undefined : new Set(allowedHosts.map((host) => host.toLowerCase()));
  const scope: Scope = { redis, keyPrefix };
  const expected = token === undefined ? undefined : digest(token);
  const sampler = new Sampler(scope);
  if (options.redisName !== undefined && typeof options.redisName !== 'string') {
    throw new TypeError(`Expected \`redisName\` to be a string, got ${describe(options.redisName)}`);
  }
  const overview = new Overview(scope, options.redisName ?? null);
  const assets = new Map<string, Buffer>();
  const config = { basePath, readOnly, refreshMs, keyPrefix, cluster: topologyOf(redis) === 'cluster' };

  const authorize = (request: IncomingMessage) => {
    if (readOnly) throw new HttpError(403, 'read_only', 'This dashboard is read-only');
    const match = /^Bearer (.+)$/.exec(request.headers.authorization ?? '');
    if (!match || expected === undefined || !timingSafeEqual(digest(match[1] as string), expected)) {
      throw new HttpError(401, 'unauthorized', 'A valid bearer token is needed (Authorization: Bearer <token>)');
    }
  };

  const route = async (request: IncomingMessage, response: ServerResponse) => {
    const url = new URL(request.url ?? '/', 'http://dashboard.invalid');
    const path = url.pathname.startsWith(basePath) ? url.pathname.slice(basePath.length) || '/' : '';
    if (!path.startsWith('/')) throw new HttpError(404, 'not_found', 'Not found'); // outside basePath
    // Split before decoding, so a name may contain '/' (sent as %2F).
    const segments = path.split('/').slice(1).map(decodeSegment);
    const method = request.method ?? 'GET';
    const [first, name, action, ...rest] = segments;

    if (path === '/' || (first === 'semaphores' && name !== undefined && action === undefined && name !== '')) {
      allow(method, ['GET', 'HEAD']);
      if (path === '/') return send(response, 200, 'text/html; charset=utf-8', page(config));
      const status = await sampler.one(name as string);
      if (!status.exists) return send(response, 404, 'text/html; charset=utf-8', notFoundPage(config, name as string));
      return send(response, 200, 'text/html; charset=utf-8', page(config, name));
    }
    if (path === '/healthz') {
      allow(method, ['GET', 'HEAD']);
      const problem = await ping(redis);
      return send(
        response,
        problem === undefined ? 200 : 503,
        'text/plain; charset=utf-8',
        problem === undefined ? 'ok\n' : `Redis: ${problem}\n`,
      );
    }
    if (path === '/metrics') {
      allow(method, ['GET', 'HEAD']);
      const statuses = await withTimeout(Promise.all(watched.map((name) => sampler.one(name))), PING_TIMEOUT_MS).catch(
        () => undefined,
      );
      return send(response, 200, METRICS_TYPE, metricsText(statuses));
    }
    const asset = ASSETS[path];
    if (asset) {
      allow(method, ['GET', 'HEAD']);
      let body = assets.get(asset.file);
      if (!body) assets.set(asset.file, (body = readFileSync(join(PUBLIC, asset.file))));
      return send(response, 200, asset.type, body, 'public, max-age=60');
    }
    if (first !== 'api' || name !== 'semaphores') throw new HttpError(404, 'not_found', 'Not found');
    const semaphore = action;
    const [verb, ...extra] = rest;
    if (semaphore === undefined) {
      allow(method, ['GET', 'HEAD']);
      const answer = await overview.answer(url.searchParams).catch((error: unknown) => {
        throw error instanceof QueryError ? new HttpError(400, 'bad_request', error.message) : error;
      });
      return sendJson(response, 200, { readOnly, ...answer });
    }
    if (semaphore === '' || extra.length > 0) throw new HttpError(404, 'not_found', 'Not found');
    if (verb === undefined) {
      allow(method, ['GET', 'HEAD']);
      const status = await sampler.one(semaphore);
      if (!status.exists) throw semaphoreNotFound(semaphore);
      return sendJson(response, 200, {
        readOnly,
        semaphore: semaphoreJson(status, sampler.handOffs(semaphore), sampler.audit(semaphore)),
      });
    }
    if (verb !== 'release' && verb !== 'release-stale') throw new HttpError(404, 'not_found', 'Not found');
    allow(method, ['POST']);
    authorize(request);
    const body = await readJson(request);
    const { reason = '' } = body as { reason?: unknown };
    if (typeof reason !== 'string' || reason.length > MAX_REASON) {
      throw new HttpError(
        400,
        'bad_request',
        `Expected "reason", if given, to be a string of at most ${MAX_REASON} characters`,
      );
    }
    const actor: Actor = {
      by: `dashboard ${request.socket.remoteAddress ?? '?'}`,
      command: `${method} ${path}`,
      reason,
    };
    if (verb === 'release') {
      const { token: held, grantId = '' } = body as { token?: unknown; grantId?: unknown };
      if (typeof held !== 'string' || typeof grantId !== 'string') {
        throw new HttpError(400, 'bad_request', 'Expected {"token": string, "grantId"?: string, "reason"?: string}');
      }
      // The holder, for the log: the grant named, or whoever holds the token when none is.
      const holder = (await readStatus(scope, semaphore, 0)).holders.find(
        (h) => h.token === held && (grantId === '' || h.grantId === grantId),
      );
      const outcome = await releaseToken(scope, semaphore, held, grantId);
      switch (outcome.status) {
        case 'released': {
          const entry = auditEntry(
            'release',
            holder ?? { token: held, grantId: grantId || undefined, owner: undefined },
            actor,
          );
          const auditError = await appendAudit(scope, semaphore, [entry]).then(
            () => undefined,
            (error: unknown) => String((error as { message?: unknown } | null)?.message ?? error),
          );
          sampler.forget(semaphore);
          overview.forget(semaphore);
          return sendJson(response, 200, {
            released: true,
            token: held,
            available: outcome.available,
            ...(auditError && { auditError }),
          });
        }
        case 'not-found':
          throw semaphoreNotFound(semaphore);
        case 'not-held':
          throw new HttpError(404, 'not_held', `Token "${held}" is not held; nothing released`);
        case 'holder-changed':
          throw new HttpError(
            409,
            'holder_changed',
            `Token "${held}" was released and taken again since; nothing released`,
          );
      }
    }
    // Holders whose lease has expired; Ruby gem holders (no lease) only by the age given.
    const { rubyOlderThanMs = null } = body as { rubyOlderThanMs?: unknown };
    if (
      rubyOlderThanMs !== null &&
      (typeof rubyOlderThanMs !== 'number' || !Number.isFinite(rubyOlderThanMs) || rubyOlderThanMs < MIN_LEASE_MS)
    ) {
      throw new HttpError(
        400,
        'bad_request',
        `Expected {"rubyOlderThanMs"?: a number ≥ ${MIN_LEASE_MS}, "reason"?: string}`,
      );
    }
    const before = await readStatus(scope, semaphore, 0);
    if (!before.exists) throw semaphoreNotFound(semaphore);
    const { released, auditError } = await releaseStaleLogged(
      scope,
      semaphore,
      rubyOlderThanMs,
      staleHolders(before, rubyOlderThanMs),
      actor,
    );
    sampler.forget(semaphore);
    overview.forget(semaphore);
    return sendJson(response, 200, { released, ...(auditError && { auditError }) });
  };

  return (request, response) => {
    if (hosts !== undefined && !hostAllowed(request, hosts)) {
      response.writeHead(421, { ...SECURITY_HEADERS, 'content-type': 'text/plain; charset=utf-8' });
      response.end(
        'Misdirected request: this dashboard answers only to the host names it is given (its allowedHosts option)\n',
      );
      return;
    }
    const timer = setTimeout(() => {
      if (response.headersSent) return;
      const message = `Redis did not answer within ${REDIS_TIMEOUT_MS} ms${request.method === 'POST' ? '; the change may still happen' : ''}`;
      sendJson(response, 503, { error: { code: 'timeout', message } });
    }, REDIS_TIMEOUT_MS);
    timer.unref();
    const done = route(request, response).catch((error: unknown) => {
      if (response.headersSent) {
        if (!response.writableEnded) response.destroy();
        return;
      }
      if (error instanceof HttpError) {
        if (error.status === 401) response.setHeader('www-authenticate', 'Bearer');
        if (error.status === 405) response.setHeader('allow', error.message.replace(/^.*: /, ''));
        return sendJson(response, error.status, { error: { code: error.code, message: error.message } });
      }
      // Redis down, or anything unexpected: a 503 with the reason, never a crash.
      const message = (error as { message?: unknown } | null)?.message;
      sendJson(response, 503, {
        error: { code: 'redis', message: `Redis: ${typeof message === 'string' ? message : String(error)}` },
      });
    });
    void done.finally(() => clearTimeout(timer));
  };
}

function semaphoreNotFound(name: string): HttpError {
  return new HttpError(404, 'semaphore_not_found', `Semaphore "${name}" does not exist`);
}

/** A semaphore in the API: its status, the hand-offs the dashboard saw, and the latest operator releases (newest first). */
function semaphoreJson(
  status: SemaphoreStatus,
  handOffs: readonly HandOff[],
  audit: readonly AuditRecord[],
): StatusJson & { readonly handOffs: readonly HandOff[]; readonly audit: readonly AuditRecord[] } {
  return { ...statusJson(status), handOffs, audit };
}

/** Why Redis does not answer PING within {@link PING_TIMEOUT_MS}, or `undefined` when it does. */
async function ping(redis: SupportedRedisClient): Promise<string | undefined> {
  try {
    const reply = await withTimeout(adaptClient(redis, 'healthz').sendCommand(['PING']), PING_TIMEOUT_MS);
    return reply === 'PONG' ? undefined : `PING answered ${String(reply)}`;
  } catch (error) {
    return String((error as { message?: unknown } | null)?.message ?? error);
  }
}
