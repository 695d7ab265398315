/** The dashboard's two HTML pages. Every piece of user data in them goes through `escapeHtml`. */
import { semaphoreKeys } from '../redis/keys';

export interface PageConfig {
  readonly basePath: string;
  readonly readOnly: boolean;
  readonly refreshMs: number;
  /** The semaphores' key prefix (the `keyPrefix` option). */
  readonly keyPrefix: string;
  /** Whether the client is a cluster client: names without a hash tag get one (lib/redis/keys.ts). */
  readonly cluster: boolean;
}

/** Escapes text for HTML element content and quoted attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function layout(config: PageConfig, title: string, body: string, data: Record<string, string>): string {
  const base = escapeHtml(config.basePath);
  const attributes = Object.entries(data)
    .map(([key, value]) => ` data-${key}="${escapeHtml(value)}"`)
    .join('');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<link rel="stylesheet" href="${base}/app.css">
</head>
<body${attributes}>
${body}
</body>
</html>
`;
}

/** The live page: every semaphore, or the one named. It is filled in by app.js from the JSON API. */
export function page(config: PageConfig, name?: string): string {
  const base = escapeHtml(config.basePath);
  const data: Record<string, string> = {
    base: config.basePath,
    'read-only': String(config.readOnly),
    'refresh-ms': String(config.refreshMs),
  };
  if (name !== undefined) data['semaphore'] = name;
  const crumb = name === undefined ? '' : ` <span class="sep">/</span> <span class="crumb">${escapeHtml(name)}</span>`;
  return layout(
    config,
    name === undefined ? 'Semaphores' : `Semaphore ${name}`,
    `<header>
<h1><a href="${base}/">Semaphores</a>${crumb}</h1>
<span id="server" title="the Redis this dashboard reads: address, role, version"></span>
<div id="auth"></div>
<span id="updated" aria-live="off"></span>
</header>
<p id="message" role="status"></p>
${name === undefined ? '<section id="summary" aria-label="summary"></section>\n<div id="controls"></div>\n' : ''}<main id="semaphores"><p class="empty">Loading…</p></main>
${name === undefined ? '<nav id="pager" aria-label="pages"></nav>\n' : ''}<footer>All times are UTC; ages and leases are on Redis' clock.</footer>
<noscript>This page needs JavaScript. The same data is at <a href="${base}/api/semaphores">${base}/api/semaphores</a>.</noscript>
<script src="${base}/common.js"></script>
<script src="${base}/card.js"></script>
<script src="${base}/app.js"></script>`,
    data,
  );
}

/** The 404 page for a semaphore that does not exist. */
export function notFoundPage(config: PageConfig, name: string): string {
  const base = escapeHtml(config.basePath);
  return layout(
    config,
    'Semaphore not found',
    `<header><h1><a href="${base}/">Semaphores</a></h1></header>
<main class="not-found">
<h2>404: no such semaphore</h2>
<p>Semaphore <code class="name">${escapeHtml(name)}</code> does not exist: Redis has no
<code>${escapeHtml(semaphoreKeys(name, { keyPrefix: config.keyPrefix, cluster: config.cluster }).exists)}</code> key. It was never created, or it was deleted, or its
keys expired (the <code>expiration</code> option).</p>
<p><a href="${base}/">All semaphores</a></p>
</main>`,
    {},
  );
}
