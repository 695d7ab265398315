import { existsSync, mkdirSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { nanoid } from 'nanoid';
import { Semaphore } from '../../lib';
import { startDashboard, type RunningDashboard } from '../support/cli';
import { blockedClients, closeAll, connectClient, until, type Client } from '../support/redis';
import { startRedisServer, type RedisServer } from '../support/redis-server';

// End to end: the real CLI serves the dashboard from a private redis-server (so the page lists only
// this file's semaphores), real holders and a blocked waiter hold it, and headless Chromium clicks.

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

test('shows holders and waiters; the release button frees a token and the waiter gets it; names are escaped', async () => {
  // A busy crawler: 3 tokens held, 2 processes blocked waiting.
  const crawler = semaphore('crawler:example.com', 3, 'crawler-1@host-a:4242');
  const tokens = [await crawler.lock(0), await crawler.lock(0), await crawler.lock(0)] as string[];
  const waiterSem = semaphore('crawler:example.com', 3, 'crawler-2@host-b:977');
  const blockedBefore = await blockedClients(redis);
  const waiters = [waiterSem.lock(60_000), waiterSem.lock(60_000)];
  await until(async () => (await blockedClients(redis)) >= blockedBefore + 2, 10_000, 'the waiters to block');
  // A semaphore whose name and owner label are markup.
  const xssName = `<script>alert(1)</script><img src=x onerror="window.__xss=1">`;
  const xss = semaphore(xssName, 2, `<img src=x onerror="alert('owner')">`);
  await xss.lock(0);
  // An idle one.
  await semaphore('nightly-report', 1, 'cron@host-c').existsOrCreate();

  const { page, dialogs, errors } = await openPage(`/#token=${encodeURIComponent(TOKEN)}`);
  const card = page
    .locator('section.semaphore')
    .filter({ has: page.locator('h2', { hasText: 'crawler:example.com' }) });
  await card.locator('.count.waiting', { hasText: '2 waiting' }).waitFor();
  await expect(card.locator('.count.held').textContent()).resolves.toBe('3 held');
  await expect(card.locator('.count.free').textContent()).resolves.toBe('0 free');
  await expect(card.locator('tr.holder td.owner').allTextContents()).resolves.toEqual(
    Array(3).fill('crawler-1@host-a:4242'),
  );
  await expect(card.locator('tr.holder td.token').allTextContents()).resolves.toEqual(tokens);
  expect(page.url()).not.toContain('#token'); // the token leaves the address bar

  // Let the dashboard see the waiters for a while, so the hand-off chart has a real wait to show.
  await page.waitForTimeout(2500);
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
      `^Click "confirm release" within 4 s to release token "${released}" of "crawler:example\\.com", held [^"]+ by "crawler-1@host-a:4242" \\(grant \\S+\\)\\. Its holder's unlock will find nothing\\.$`,
    ),
  );
  await button.click();
  await page.locator('#message', { hasText: `Released token "${released}" of "crawler:example.com".` }).waitFor();
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

  // More traffic for the chart: the second waiter gets a token its holder gives back, and two more
  // processes start waiting.
  await page.waitForTimeout(1200);
  await expect(crawler.unlock(tokens[1])).resolves.toBeGreaterThanOrEqual(0);
  await expect(waiters[1 - first.i]).resolves.toBe(tokens[1]);
  const lateSem = semaphore('crawler:example.com', 3, 'crawler-3@host-c:31');
  const late = [lateSem.lock(60_000), lateSem.lock(60_000)];
  await card.locator('.count.waiting', { hasText: '2 waiting' }).waitFor();
  await expect(card.locator('svg rect.waited').count()).resolves.toBe(2);

  // Escaping: the names and labels are shown as text, and nothing in them ran.
  const xssCard = page
    .locator('section.semaphore')
    .filter({ has: page.locator('h2', { hasText: '<script>alert(1)</script>' }) });
  await expect(xssCard.locator('h2 a').textContent()).resolves.toBe(xssName);
  await expect(xssCard.locator('td.owner').textContent()).resolves.toBe(`<img src=x onerror="alert('owner')">`);
  await expect(page.locator('main img, main script').count()).resolves.toBe(0);
  await expect(page.evaluate('window.__xss')).resolves.toBeUndefined();

  // After the button's extra refresh, the page still polls once a second, not in two loops.
  let polls = 0;
  page.on('request', (r) => void (new URL(r.url()).pathname === '/api/semaphores' && polls++));
  await page.waitForTimeout(3000);
  expect(polls).toBeGreaterThanOrEqual(2);
  expect(polls).toBeLessThanOrEqual(4);

  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, 'dashboard.png'), fullPage: true });
  if (process.env['UPDATE_DOCS_SCREENSHOT'] === '1') {
    await page.screenshot({ path: join(__dirname, '..', '..', 'docs', 'dashboard.png'), fullPage: true });
  }

  // The page of one semaphore, reached by its link, with the markup name in the path.
  await xssCard.locator('h2 a').click();
  await page.locator('section.semaphore h2 a').waitFor();
  expect(new URL(page.url()).pathname).toBe(`/semaphores/${encodeURIComponent(xssName)}`);
  await expect(page.locator('header .crumb').textContent()).resolves.toBe(xssName);
  await expect(page.locator('section.semaphore').count()).resolves.toBe(1);
  await expect(page.locator('img, body script:not([src$="app.js"])').count()).resolves.toBe(0);

  expect(dialogs).toEqual([]);
  expect(errors).toEqual([]);
  await page.close();
  for (const token of await Promise.all(waiters)) await waiterSem.unlock(token as string);
  for (const token of await Promise.all(late)) await lateSem.unlock(token as string);
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
  await expect(button.textContent()).resolves.toBe('confirm release stale');
  await expect(page.locator('#message').textContent()).resolves.toBe(
    `Click "confirm release stale" within 4 s to release every token of "${name}" whose holder's lease is over, and Ruby gem holders' held longer than 30 s.`,
  );
  await expect(lapsed.isLocked(token)).resolves.toBe(true); // nothing yet
  await button.click();
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
