'use strict';
// Runs the server-dependent specs (jest.config.js) on each server of the matrix: Redis 6.2.16 and Valkey 8.0.1.
/*
 * `npm run test:servers`, the last jest pass of `npm test`. The servers are test fixtures outside the
 * repository: SERVER_FIXTURES names their folder (default: ../shared/fixtures/servers beside the
 * clone, as on the project's machines), REDIS_6_2_SERVER or VALKEY_8_SERVER a binary directly. A
 * server that is not there is skipped with one line saying so (a user's fresh clone has none);
 * SERVER_MATRIX_REQUIRED=1 makes that a failure instead. Each pass runs jest with TEST_REDIS_SERVER
 * (global-setup.ts puts it first on the PATH as `redis-server`, for the run's servers and the specs'
 * own) and TEST_SERVER_MATRIX (jest.config.js picks the specs). The passes run side by side, and
 * each prints its output once it ends.
 */
const { spawn } = require('node:child_process');
const { existsSync } = require('node:fs');
const { join, resolve } = require('node:path');

const root = resolve(__dirname, '..', '..');
const fixtures = resolve(process.env.SERVER_FIXTURES || join(root, '..', 'shared', 'fixtures', 'servers'));
const SERVERS = [
  {
    matrix: 'redis-6.2',
    label: 'Redis 6.2.16',
    env: 'REDIS_6_2_SERVER',
    path: join(fixtures, 'redis-6.2.16', 'redis-server'),
  },
  {
    matrix: 'valkey-8',
    label: 'Valkey 8.0.1',
    env: 'VALKEY_8_SERVER',
    path: join(fixtures, 'valkey-8.0.1', 'valkey-server'),
  },
];
// Arguments: matrix names to run only those (`redis-6.2`, `valkey-8`); anything else goes to jest.
const args = process.argv.slice(2);
const named = SERVERS.filter((s) => args.includes(s.matrix));
const chosen = named.length > 0 ? named : SERVERS;
const jestArgs = ['--maxWorkers=2', ...args.filter((arg) => !SERVERS.some((s) => s.matrix === arg))];

/** One server's jest run, its output kept until it ends (the runs go side by side). */
function runOn(server, binary) {
  // Never a REDIS_URL: every server of the pass is the matrix's.
  const { REDIS_URL: _unused, ...env } = process.env;
  const child = spawn(process.execPath, [require.resolve('jest/bin/jest'), ...jestArgs], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...env, REDIS_CLIENT: 'redis', TEST_REDIS_SERVER: binary, TEST_SERVER_MATRIX: server.matrix },
  });
  const output = [];
  child.stdout.on('data', (chunk) => output.push(chunk));
  child.stderr.on('data', (chunk) => output.push(chunk));
  return new Promise((resolve) => {
    child.once('error', (error) => resolve({ code: 1, output: [...output, Buffer.from(`${error}\n`)] }));
    child.once('close', (code) => resolve({ code, output }));
  });
}

async function main() {
  let failed = false;
  const runs = [];
  for (const server of chosen) {
    const binary = process.env[server.env] || server.path;
    if (!existsSync(binary)) {
      const line =
        `server matrix: SKIPPED ${server.label}: no ${binary} ` +
        `(set SERVER_FIXTURES to the folder of the servers, or ${server.env} to the binary)`;
      console.log(line);
      if (process.env.SERVER_MATRIX_REQUIRED === '1') failed = true;
      continue;
    }
    runs.push({ server, binary, done: runOn(server, binary) });
  }
  // Side by side: their specs mostly wait on restarts, pauses and timeouts (as in test:clients).
  for (const { server, binary, done } of runs) {
    const { code, output } = await done;
    console.log(`server matrix: ${server.label} (${binary})`);
    process.stdout.write(Buffer.concat(output));
    if (code !== 0) failed = true;
  }
  process.exit(failed ? 1 : 0);
}

void main();
