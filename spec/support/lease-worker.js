'use strict';
/*
 * A child process for spec/api/leases.spec.ts: a holder that can be frozen (SIGSTOP) and resumed.
 * Configured by the JSON in LEASE_WORKER: { url, name, options }. It takes a token with lock(),
 * reports `{ acquired, fence }`, reports `{ lost: reason }` when the library (onLockLost) tells it the
 * token was lost, and on the message 'unlock' reports `{ unlocked: <what unlock resolved> }` and exits.
 */
const { join } = require('node:path');
const { Semaphore } = require(join(__dirname, '../../dist'));

const { url, name, options } = JSON.parse(process.env.LEASE_WORKER || '{}');

function send(message) {
  return new Promise((resolve) => process.send(message, () => resolve()));
}

async function main() {
  const sem = new Semaphore(name, {
    url,
    ...options,
    onLockLost: (token, reason) => void send({ lost: reason, token }),
  });
  const token = await sem.lock();
  await send({ acquired: token, fence: sem.fence(token) });
  await new Promise((resolve) => process.once('message', resolve));
  await send({ unlocked: await sem.unlock(token) });
  await sem.close();
  process.disconnect();
}

main().catch(async (error) => {
  await send({ error: String(error && error.stack) });
  process.exit(1);
});
