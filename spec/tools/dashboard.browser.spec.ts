import { fork, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { nanoid } from 'nanoid';
import { Semaphore } from '../../lib';
import { readStatus } from '../../lib/admin/operations';
import { semaphoreKeys } from '../../lib/redis/keys';
import { startDashboard, type RunningDashboard } from '../support/cli';
import { blockedClients, closeAll, connectClient, until, type Client } from '../support/redis';
import { startRedisServer, type RedisServer } from '../support/redis-server';

// End to end: the real CLI serves the dashboard from a private redis-server (so the page lists only
// this file's semaphores), real holders, a SIGKILLed one and blocked waiters hold it, and headless
// Chromium clicks. `UPDATE_DOCS_SCREENSHOT=1` writes docs/dashboard.png from the incident view.

jest.setTimeout(90_000);

const ARTIFACTS = join(__dirname, '..', 'artifacts');
const CHROMIUM = process.env['CHROMIUM_PATH'] ?? '/usr/bin/chromium';
const TOKEN = `spec-${nanoid(16)}`;

let server: RedisServer;
let redis: Client;
let dashboard: RunningDashboard;
let browser: Browser;
const semaphores: Semaphore[] = [];

function semaphore(name: string, resources: number, owner: string): Semaphore {
  const sem = new Semaphore(name, { redis, resources, owner });
  semaphores.push(sem);
  return sem;
}

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`No Chromium at ${CHROMIUM}: \`apt-get install chromium\` (as .ci/run does), or set CHROMIUM_PATH`);
  }
  server = await startRedisServer();
  redis = await connectClient(server.url);
  dashboard = await startDashboard(server.url, ['--token', TOKEN]);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
});

afterAll(async () => {
  await browser?.close();
  await dashboard?.stop();
  await Promise.all(semaphores.map((sem) => sem.close()));
  await closeAll();
  await server?.stop();
});

/** A page that records every dialog and script error (an XSS would show up as one of them). */
async function openPage(path: string): Promise<{ page: Page; dialogs: string[]; errors: string[] }> {
  const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
  const dialogs: string[] = [];
  const errors: string[] = [];
  page.on('dialog', (dialog) => {
    dialogs.push(dialog.message());
    void dialog.dismiss();
  });
  page.on('pageerror', (error) => errors.push(error.message));
  await page.goto(new URL(path, dashboard.url).toString());
  return { page, dialogs, errors };
}

/** `count` idle semaphores written straight to Redis (EXISTS, VERSION, two free tokens), as many names as a busy fleet has. */
async function idleNames(count: number, name: (i: number) => string): Promise<void> {
  for (let i = 0; i < count; i += 500) {
    const batch = redis.multi();
    for (let j = i; j < Math.min(count, i + 500); j++) {
      const keys = semaphoreKeys(name(j));
      batch.set(keys.exists, '1').set(keys.version, '1').rPush(keys.available, ['0', '1']);
    }
    await batch.exec();
  }
}

/** A holder in a child process (spec/support/lease-worker.js): resolves its pid and token once it holds. */
async function childHolder(
  name: string,
  options: Record<string, unknown>,
): Promise<{ child: ChildProcess; token: string }> {
  const child = fork(join(__dirname, '..', 'support', 'lease-worker.js'), [], {
    env: { ...process.env, LEASE_WORKER: JSON.stringify({ url: server.url, name, options }) },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const token = await new Promise<string>((resolve, reject) => {
    child.once('message', (message: { acquired?: string; error?: string }) =>
      message.acquired === undefined ? reject(new Error(message.error)) : resolve(message.acquired),
    );
    child.once('exit', () => reject(new Error('the holder exited')));
  });
  return { child, token };
}

test('the incident view: 1,000 names, a SIGKILLed holder first and marked, released by the button; search, sort, pages', async () => {
  // 1,000 idle names (some sort before everything by name), a busy crawler with waiters, and a
  // holder of "gpu" that is SIGKILLed while it holds: its lease (1.5 s) runs out, nobody refreshes it.
  await idleNames(1000, (i) => `tenant:${i + 1}`);
  await semaphore('abort-demo', 1, 'cron@host-c').existsOrCreate();
  await semaphore('file:/tmp/a', 1, 'cron@host-c').existsOrCreate();
  const crawler = semaphore('crawler:example.com', 2, 'crawler-1@host-a:4242');
  const held = [await crawler.lock(0), await crawler.lock(0)] as string[];
  const waiterSem = semaphore('crawler:example.com', 2, 'crawler-2@host-b:977');
  const blockedBefore = await blockedClients(redis);
  const waiters = [waiterSem.lock(60_000), waiterSem.lock(60_000)];
  await until(async () => (await blockedClients(redis)) >= blockedBefore + 2, 10_000, 'the waiters to block');
  const { child, token: deadToken } = await childHolder('gpu', {
    resources: 2,
    staleClientTimeout: 1500,
    owner: 'gpu-worker@host-d:4711',
  });
  child.kill('SIGKILL');
  await new Promise((resolve) => child.once('exit', resolve));
  const gpu = semaphore('gpu', 2, 'spec');
  await until(
    async () => (await readStatus({ redis, keyPrefix: 'SEMAPHORE:' }, 'gpu')).holders[0]?.expired === true,
    10_000,
    'the lease to end',
  );

  const { page, dialogs, errors } = await openPage(`/#token=${encodeURIComponent(TOKEN)}`);
  // The header names the Redis; the summary counts the trouble; times are said to be UTC.
  await page.locator('#summary .stat.expired.alert .value', { hasText: /^1$/ }).waitFor();
  await expect(page.locator('#server').textContent()).resolves.toMatch(
    /^redis:\/\/127\.0\.0\.1:\d+ · 127\.0\.0\.1:\d+ · master · (Redis|Valkey) \d/,
  );
  await expect(page.locator('#summary .stat.names .value').textContent()).resolves.toBe('1004');
  await expect(page.locator('#summary .stat.waiting .value').textContent()).resolves.toBe('2');
  await expect(page.locator('footer').textContent()).resolves.toContain('All times are UTC');
  await expect(page.locator('#updated').textContent()).resolves.toMatch(/^updated \d\d:\d\d:\d\d UTC$/);
  // Sorted by trouble: the dead holder first, marked; then the queue; idle names after.
  const rows = page.locator('table.overview tr.row');
  await expect(rows.first().getAttribute('data-name')).resolves.toBe('gpu');
  await expect(rows.first().getAttribute('class')).resolves.toContain('expired');
  await expect(rows.first().locator('td.state').textContent()).resolves.toBe('1 EXPIRED');
  await expect(rows.nth(1).getAttribute('data-name')).resolves.toBe('crawler:example.com');
  await expect(rows.nth(1).locator('td.state').textContent()).resolves.toBe('waiting');
  await expect(rows.count()).resolves.toBe(50); // a page of 50
  // (At most 500 names are read a refresh: the rest a second later.)
  await page.locator('#pager .range', { hasText: '1–50 of 1004' }).waitFor();
  // Colour only where action is needed: the held, busy crawler row is not marked.
  await expect(rows.nth(1).getAttribute('class')).resolves.toBe('row');

  // The detail on demand: the dead holder's lease, marked expired, with its owner.
  await rows.first().locator('button.name').click();
  const card = page.locator('tr.detail section.semaphore[data-name="gpu"]');
  const holder = card.locator('tr.holder.expired');
  await holder.waitFor();
  await expect(holder.locator('td.token').textContent()).resolves.toBe(deadToken);
  await expect(holder.locator('td.owner').textContent()).resolves.toBe('gpu-worker@host-d:4711');
  await expect(holder.locator('td.lease').textContent()).resolves.toMatch(/^EXPIRED \S+ s ago \(dead\?\)$/);
  await expect(card.locator('.count.expired').textContent()).resolves.toBe('1 expired lease');
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, 'dashboard.png') });
  if (process.env['UPDATE_DOCS_SCREENSHOT'] === '1') {
    await page.screenshot({ path: join(__dirname, '..', '..', 'docs', 'dashboard.png') });
  }

  // The button releases what is dead (expired leases), after a confirmation that says so.
  const button = card.locator('form.stale button.release-stale');
  await button.click();
  await expect(button.textContent()).resolves.toBe('confirm release expired');
  await expect(page.locator('#message').textContent()).resolves.toBe(
    `Click "confirm release expired" within 4 s to release every token of "gpu" whose holder's lease has expired.`,
  );
  await expect(gpu.isLocked(deadToken)).resolves.toBe(true); // nothing yet
  await card.locator('form.stale button.release-stale').click();
  await page.locator('#message', { hasText: 'Released 1 stale token of "gpu".' }).waitFor();
  await card.locator('.audit li.audit-entry', { hasText: `release-stale of token "${deadToken}"` }).waitFor();
  await expect(gpu.isLocked(deadToken)).resolves.toBe(false);
  await page.locator('#summary .stat.expired .value', { hasText: /^0$/ }).waitFor();
  await expect(rows.first().getAttribute('data-name')).resolves.toBe('crawler:example.com');

  // Search (plain text, or a glob), the state filter, and natural order by name.
  await page.locator('#controls input[type="search"]').fill('tenant:99?');
  await page.locator('#pager .range', { hasText: '1–10 of 10' }).waitFor();
  await page.locator('#controls select[name="sort"]').selectOption('name');
  await page.locator('#controls input[type="search"]').fill('tenant:');
  await page.locator('#pager .range', { hasText: '1–50 of 1000' }).waitFor();
  await expect(rows.evaluateAll((r) => r.slice(0, 3).map((row) => row.getAttribute('data-name')))).resolves.toEqual([
    'tenant:1',
    'tenant:2',
    'tenant:3',
  ]);
  await page.locator('#pager button.next').click();
  await page.locator('#pager .range', { hasText: '51–100 of 1000' }).waitFor();
  expect(new URL(page.url()).search).toBe('?q=tenant%3A&sort=name&page=2');
  await page.locator('#controls input[type="search"]').fill('');
  await page.locator('#controls select[name="state"]').selectOption('waiting');
  await page.locator('#pager .range', { hasText: '1–1 of 1' }).waitFor();
  await expect(rows.first().getAttribute('data-name')).resolves.toBe('crawler:example.com');

  expect(dialogs).toEqual([]);
  expect(errors).toEqual([]);
  await page.close();
  await crawler.unlock(held[0] as string);
  await crawler.unlock(held[1] as string);
  for (const token of await Promise.all(waiters)) await waiterSem.unlock(token as string);
});

test('the release button frees a token and the waiter gets it; names are escaped; one polling loop', async () => {
  // A busy crawler: 3 tokens held, 2 processes blocked waiting.
  const crawler = semaphore('crawler:busy.example', 3, 'crawler-1@host-a:4242');
  const tokens = [await crawler.lock(0), await crawler.lock(0), await crawler.lock(0)] as string[];
  const waiterSem = semaphore('crawler:busy.example', 3, 'crawler-2@host-b:977');
  const blockedBefore = await blockedClients(redis);
  const waiters = [waiterSem.lock(60_000), waiterSem.lock(60_000)];
  await until(async () => (await blockedClients(redis)) >= blockedBefore + 2, 10_000, 'the waiters to block');
  // A semaphore whose name and owner label are markup.
  const xssName = `<script>alert(1)</script><img src=x onerror="window.__xss=1">`;
  const xss = semaphore(xssName, 2, `<img src=x onerror="alert('owner')">`);
  await xss.lock(0);

  const { page, dialogs, errors } = await openPage(
    `/semaphores/${encodeURIComponent('crawler:busy.example')}#token=${encodeURIComponent(TOKEN)}`,
  );
  const card = page.locator('section.semaphore');
  await card.locator('.count.waiting', { hasText: '2 waiting' }).waitFor();
  await expect(card.locator('.count.held').textContent()).resolves.toBe('3 held');
  await expect(card.locator('.count.free').textContent()).resolves.toBe('0 free');
  await expect(card.locator('tr.holder td.owner').allTextContents()).resolves.toEqual(
    Array(3).fill('crawler-1@host-a:4242'),
  );
  await expect(card.locator('tr.holder td.token').allTextContents()).resolves.toEqual(tokens);
  await expect(card.locator('tr.holder td.lease').first().textContent()).resolves.toMatch(/^ends in \S+ s$/);
  expect(page.url()).not.toContain('#token'); // the token leaves the address bar

  // Let the dashboard see the waiters for a while, so the hand-off chart has a real wait to show.
  await page.waitForTimeout(2500);
  await expect(card.locator('svg').count()).resolves.toBe(0); // no empty chart before any hand-off
  const released = tokens[0] as string;
  const button = card
    .locator('tr.holder', { has: page.locator('td.token', { hasText: new RegExp(`^${released}$`) }) })
    .locator('button.release');
  await expect(card.locator('.audit li').count()).resolves.toBe(0);
  await button.click();
  await expect(button.textContent()).resolves.toBe('confirm release');
  // The confirmation says what would be released, from whom.
  await expect(page.locator('#message').textContent()).resolves.toMatch(
    new RegExp(
      `^Click "confirm release" within 4 s to release token "${released}" of "crawler:busy\\.example", held [^"]+ by "crawler-1@host-a:4242" \\(grant \\S+\\)\\. Its holder's unlock will find nothing\\.$`,
    ),
  );
  await button.click();
  await page.locator('#message', { hasText: `Released token "${released}" of "crawler:busy.example".` }).waitFor();
  // The audit entry that follows: what, whose, and who (the dashboard and the browser's address).
  const entry = card.locator('.audit li.audit-entry').first();
  await entry.waitFor();
  await expect(card.locator('.audit h3').textContent()).resolves.toBe('Released by operators');
  await expect(entry.textContent()).resolves.toMatch(
    new RegExp(
      `^\\d\\d:\\d\\d:\\d\\d release of token "${released}" held by "crawler-1@host-a:4242", by dashboard (::ffff:)?127\\.0\\.0\\.1$`,
    ),
  );
  // (Which of the two waiters is served first is the fifo spec's business, not this one's.)
  const first = await Promise.race(waiters.map((waiter, i) => waiter.then((token) => ({ i, token }))));
  expect(first.token).toBe(released);
  await card.locator('.count.waiting', { hasText: '1 waiting' }).waitFor();
  await card.locator('td.owner', { hasText: 'crawler-2@host-b:977' }).waitFor();
  await expect(crawler.unlock(released)).resolves.toBe(false); // the old holder puts nothing back
  await card.locator('svg rect.waited').first().waitFor();

  // After the button's extra refresh, the page still polls once a second, not in two loops.
  let polls = 0;
  const path = `/api/semaphores/${encodeURIComponent('crawler:busy.example')}`;
  page.on('request', (r) => void (new URL(r.url()).pathname === path && polls++));
  await page.waitForTimeout(3000);
  expect(polls).toBeGreaterThanOrEqual(2);
  expect(polls).toBeLessThanOrEqual(4);

  // Escaping: the names and labels are shown as text, and nothing in them ran: in the table, in the
  // detail card, and on the semaphore's own page (the markup name in the path).
  await page.goto(new URL(`/?q=${encodeURIComponent('<script>')}`, dashboard.url).toString());
  const row = page.locator('table.overview tr.row').first();
  await expect(row.locator('button.name').textContent()).resolves.toBe(xssName);
  await row.locator('button.name').click();
  await expect(page.locator('tr.detail td.owner').textContent()).resolves.toBe(`<img src=x onerror="alert('owner')">`);
  await expect(page.locator('main img, main script').count()).resolves.toBe(0);
  await expect(page.evaluate('window.__xss')).resolves.toBeUndefined();
  await row.locator('a.open').click();
  await page.locator('section.semaphore h2 a').waitFor();
  expect(new URL(page.url()).pathname).toBe(`/semaphores/${encodeURIComponent(xssName)}`);
  await expect(page.locator('header .crumb').textContent()).resolves.toBe(xssName);
  await expect(page.locator('section.semaphore').count()).resolves.toBe(1);
  await expect(page.locator('img, body script:not([src])').count()).resolves.toBe(0);

  expect(dialogs).toEqual([]);
  expect(errors).toEqual([]);
  await page.close();
  await crawler.unlock(tokens[1] as string); // the second waiter's turn
  for (const token of await Promise.all(waiters)) await waiterSem.unlock(token as string);
});

test('release stale asks for confirmation too; the tokens it frees are logged under the card', async () => {
  const name = `stale:${nanoid(6)}`;
  const lapsed = new Semaphore(name, {
    redis,
    resources: 2,
    owner: 'lapsed@host-d:5',
    staleClientTimeout: 300,
    autoRefresh: false,
  });
  semaphores.push(lapsed);
  const token = (await lapsed.lock(0)) as string;
  await new Promise((resolve) => setTimeout(resolve, 600)); // its lease is over
  const { page, errors } = await openPage(`/semaphores/${encodeURIComponent(name)}#token=${encodeURIComponent(TOKEN)}`);
  const button = page.locator('form.stale button.release-stale');
  await page.locator('tr.holder td.owner', { hasText: 'lapsed@host-d:5' }).waitFor();
  await button.click();
  await expect(button.textContent()).resolves.toBe('confirm release expired');
  await expect(page.locator('#message').textContent()).resolves.toBe(
    `Click "confirm release expired" within 4 s to release every token of "${name}" whose holder's lease has expired.`,
  );
  await expect(lapsed.isLocked(token)).resolves.toBe(true); // nothing yet
  await page.locator('form.stale button.release-stale').click();
  await page.locator('#message', { hasText: `Released 1 stale token of "${name}".` }).waitFor();
  const entry = page.locator('.audit li.audit-entry');
  await entry.waitFor();
  await expect(entry.textContent()).resolves.toMatch(
    new RegExp(
      `^\\d\\d:\\d\\d:\\d\\d release-stale of token "${token}" held by "lapsed@host-d:5", by dashboard (::ffff:)?127\\.0\\.0\\.1$`,
    ),
  );
  await expect(lapsed.isLocked(token)).resolves.toBe(false);
  expect(errors).toEqual([]);
  await page.close();
});

test('a semaphore that does not exist is a clear 404 page, with the name escaped', async () => {
  const name = '<b id="injected">gone</b>';
  const { page, dialogs, errors } = await openPage('/');
  const response = await page.goto(new URL(`/semaphores/${encodeURIComponent(name)}`, dashboard.url).toString());
  expect(response?.status()).toBe(404);
  await expect(page.locator('h2').textContent()).resolves.toBe('404: no such semaphore');
  await expect(page.locator('code.name').textContent()).resolves.toBe(name);
  await expect(page.locator('#injected').count()).resolves.toBe(0);
  const api = await page.request.get(new URL(`/api/semaphores/${encodeURIComponent(name)}`, dashboard.url).toString());
  expect(api.status()).toBe(404);
  expect(await api.json()).toEqual({
    error: { code: 'semaphore_not_found', message: `Semaphore "${name}" does not exist` },
  });
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, 'dashboard-404.png') });
  expect(dialogs).toEqual([]);
  expect(errors).toEqual([]);
  await page.close();
});

test('without the token, a release is refused (401) and changes nothing', async () => {
  const sem = semaphore(`no-token:${nanoid(6)}`, 1, 'holder');
  const token = (await sem.lock(0)) as string;
  const { page, errors } = await openPage(`/semaphores/${encodeURIComponent(sem.name)}`);
  await page.locator('form.token-form').waitFor();
  await page.locator('form.token-form input').fill('wrong-token');
  await page.locator('form.token-form button').click();
  const button = page.locator('button.release');
  await button.click();
  await button.click();
  await page.locator('#message.error', { hasText: 'A valid bearer token is needed' }).waitFor();
  await expect(sem.isLocked(token)).resolves.toBe(true);
  await page.locator('form.token-form').waitFor(); // the rejected token was forgotten
  expect(errors).toEqual([]);
  await page.close();
});

test('--read-only serves no buttons and refuses changes; on loopback only loopback Host names are answered; SIGTERM exits 0', async () => {
  const sem = semaphore(`read-only:${nanoid(6)}`, 1, 'holder');
  await sem.lock(0);
  const readOnly = await startDashboard(server.url, ['--read-only']);
  try {
    expect(readOnly.output()).toContain('Read-only: no release buttons.');
    const page = await browser.newPage();
    await page.goto(new URL(`/semaphores/${encodeURIComponent(sem.name)}`, readOnly.url).toString());
    await page.locator('tr.holder td.owner', { hasText: 'holder' }).waitFor();
    await expect(page.locator('#auth .badge').textContent()).resolves.toBe('read-only');
    await expect(page.locator('button.release, form.stale').count()).resolves.toBe(0);
    const refused = await page.request.post(
      new URL(`/api/semaphores/${encodeURIComponent(sem.name)}/release`, readOnly.url).toString(),
      {
        headers: { authorization: `Bearer ${TOKEN}` },
        data: { token: '0' },
      },
    );
    expect(refused.status()).toBe(403);
    await expect(sem.isLocked('0')).resolves.toBe(true);
    await page.close();

    const port = new URL(readOnly.url).port;
    const status = (host: string) =>
      new Promise<number | undefined>((resolve, reject) => {
        request({ host: '127.0.0.1', port, path: '/api/semaphores', headers: { host } }, (response) => {
          response.resume();
          resolve(response.statusCode);
        })
          .on('error', reject)
          .end();
      });
    await expect(status(`localhost:${port}`)).resolves.toBe(200);
    await expect(status(`rebound.example:${port}`)).resolves.toBe(421);
  } finally {
    await expect(readOnly.stop()).resolves.toBe(0);
  }
});
