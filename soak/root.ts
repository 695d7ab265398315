/** Where the repository is, from the soak's sources (run by jest) or from their build (soak/.build), and what it has for the soak. */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** The nearest directory above this file whose package.json is this package's. */
export function repoRoot(): string {
  for (let dir = __dirname; dir !== dirname(dir); dir = dirname(dir)) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest) && JSON.parse(readFileSync(manifest, 'utf8')).name === 'redis-token-semaphore') return dir;
  }
  throw new Error(`no redis-token-semaphore package.json above ${__dirname}`);
}

/** tools/redis-server.js, loaded from the repository: it is plain JavaScript, which the soak's build does not copy. */
// eslint-disable-next-line @typescript-eslint/no-require-imports -- a path known only at run time
export const { startRedisServer } = require(
  join(repoRoot(), 'tools', 'redis-server.js'),
) as typeof import('../tools/redis-server');
