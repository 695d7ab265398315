'use strict';
/**
 * At most 2 requests at once per user, across every server process: HTTP middleware with a
 * semaphore per user, served by one lock manager (`createLocks`). A request that would be a user's 3rd concurrent one gets 429 at once
 * (`lock(0, fn)` never waits); the others run inside `lock`, which gives the token back when the
 * response is over, whatever happens.
 *
 *   npm run build && node examples/http-limit.js
 *   REDIS_URL=redis://127.0.0.1:6379 node examples/http-limit.js
 *
 * The middleware has the Express/Connect shape `(req, res, next)`: `app.use(limitConcurrentRequests
 * ({ … }))` works as is. Here it runs on a bare node:http server on a free loopback port, and this
 * process plays the clients: alice sends 2 slow requests, then a 3rd while they run (429), bob sends
 * one meanwhile (200), and alice's next request after hers finished gets 200 again. It exits with 0
 * when the statuses are exactly those. Without REDIS_URL it starts a throwaway redis-server from PATH.
 */
const http = require('node:http');
const { useRedis, uniqueSuffix, exitAfter } = require('./support/redis');
// In your code: require('redis-token-semaphore'). Here: the package built from this repository.
const { createLocks, LockTimeoutError } = require('..');

// ---------------------------------------------------------------------------------------------------
// The middleware

/**
 * @param {object} options
 * @param {import('redis').RedisClientType} options.redis  a connected node-redis client
 * @param {number} options.limit  concurrent requests allowed per user
 * @param {(req: http.IncomingMessage) => string | undefined} options.userOf  who sent it (no limit when undefined)
 * @param {string} [options.prefix]  semaphore names are `<prefix>:<user>`
 */
function limitConcurrentRequests({ redis, limit, userOf, prefix = 'http:concurrent' }) {
  // Any number of users on one client: the manager makes a user's semaphore on first use and drops
  // it once idle (idleTimeout), so a long-lived server with millions of users keeps only the active.
  const locks = createLocks({
    redis,
    resources: limit,
    // A server that dies mid-request gives the user's token back after a minute (autoRefresh keeps
    // a longer request's token while this process lives).
    staleClientTimeout: 60_000,
    // An idle user's keys vanish from Redis after 10 minutes (never while a request holds one).
    expiration: 600_000,
  });
  const users = new Set(); // for close({ deleteKeys }) only

  const middleware = (req, res, next) => {
    const user = userOf(req);
    if (user === undefined) return next();
    users.add(user);
    // Hold a token until the response is over ('close' comes after 'finish', and on an aborted request).
    locks
      .lock(
        `${prefix}:${user}`,
        0,
        () =>
          new Promise((resolve) => {
            res.once('close', resolve);
            next();
          }),
      )
      .catch((error) => {
        if (res.headersSent) return;
        if (error instanceof LockTimeoutError) {
          res.writeHead(429, { 'content-type': 'text/plain', 'retry-after': '1' });
          res.end(`${user} already has ${limit} requests running\n`);
        } else {
          res.writeHead(503, { 'content-type': 'text/plain' }); // Redis unreachable: fail closed
          res.end('Service unavailable\n');
        }
      });
  };
  /** Closes the lock manager (and, with `deleteKeys`, deletes the users' keys in Redis). */
  middleware.close = async ({ deleteKeys = false } = {}) => {
    if (deleteKeys) for (const user of users) await locks.semaphore(`${prefix}:${user}`).delete();
    await locks.close();
  };
  return middleware;
}

// ---------------------------------------------------------------------------------------------------
// The run: a server with the middleware, and clients

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** GET `path` as `user`; resolves `{ status, body, ms }`. */
function get(port, path, user) {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path, headers: { 'x-user': user }, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => (body += chunk));
      res.on('end', () =>
        resolve({ status: res.statusCode, body: body.trim(), ms: Math.round(performance.now() - started) }),
      );
    });
    req.once('error', reject);
  });
}

async function main() {
  exitAfter(30_000, 'The HTTP example');
  const redis = await useRedis();
  const prefix = `http:concurrent:${uniqueSuffix()}`;
  console.log(`Per-user limit of 2 concurrent requests ("${prefix}:<user>"), Redis at ${redis.url} (${redis.origin})`);

  const running = new Map(); // user -> requests inside the handler right now
  const limiter = limitConcurrentRequests({
    redis: redis.client,
    limit: 2,
    prefix,
    userOf: (req) => req.headers['x-user'],
  });
  const handler = async (req, res) => {
    const user = req.headers['x-user'];
    running.set(user, (running.get(user) ?? 0) + 1);
    const ms = Number(new URL(req.url, 'http://localhost').searchParams.get('ms') ?? 0);
    await sleep(ms); // building the report
    running.set(user, running.get(user) - 1);
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end(`report for ${user}\n`);
  };
  const server = http.createServer((req, res) => limiter(req, res, () => void handler(req, res)));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();

  const results = [];
  const show = (label, response) => {
    console.log(`${label.padEnd(36)} → ${response.status} in ${String(response.ms).padStart(4)} ms  ${response.body}`);
    results.push([label, response.status]);
    return response;
  };

  // alice: 2 slow requests; once both are inside the handler, a 3rd one, and bob's.
  const slow = [1, 2].map((n) =>
    get(port, '/report?ms=600', 'alice').then((response) => show(`alice #${n} (600 ms)`, response)),
  );
  for (let i = 0; i < 500 && running.get('alice') !== 2; i++) await sleep(10);
  console.log(`(alice has ${running.get('alice') ?? 0} requests running)`);
  show('alice #3 (while #1 and #2 run)', await get(port, '/report', 'alice'));
  show('bob #1 (while alice has 2)', await get(port, '/report?ms=50', 'bob'));
  await Promise.all(slow);
  show('alice #4 (after #1 and #2 finished)', await get(port, '/report', 'alice'));

  server.close();
  await limiter.close({ deleteKeys: true });
  await redis.stop();

  const expected = [
    ['alice #3 (while #1 and #2 run)', 429],
    ['bob #1 (while alice has 2)', 200],
    ['alice #1 (600 ms)', 200],
    ['alice #2 (600 ms)', 200],
    ['alice #4 (after #1 and #2 finished)', 200],
  ];
  const statuses = Object.fromEntries(results);
  const wrong = expected.filter(([label, status]) => statuses[label] !== status);
  if (wrong.length > 0) {
    console.error(
      `FAILED: ${wrong.map(([label, status]) => `${label}: expected ${status}, got ${statuses[label]}`).join('; ')}`,
    );
    process.exit(1);
  }
  console.log(
    "OK: alice's 3rd concurrent request got 429, bob got 200 meanwhile, and alice got 200 again once hers finished",
  );
}

main().catch((error) => {
  console.error(error.stack ?? error);
  process.exit(1);
});
