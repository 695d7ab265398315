/** The minimal ACL the README documents, read from the README itself so that the two cannot drift apart. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_KEY_PREFIX } from '../../lib/redis/keys';

/**
 * The rules of the README's `ACL SETUSER semaphore …` line, its password replaced by `password`. With
 * `keyPrefix`, its key rule `~SEMAPHORE:*` becomes `~<keyPrefix>*`, as the README says for the
 * `keyPrefix` option.
 */
export function documentedAcl({ password = 's3cret', keyPrefix = DEFAULT_KEY_PREFIX } = {}): string[] {
  const readme = readFileSync(join(__dirname, '..', '..', 'README.md'), 'utf8');
  const line = /^ACL SETUSER semaphore (.+)$/m.exec(readme)?.[1];
  if (!line) throw new Error('README.md has no "ACL SETUSER semaphore …" line');
  const rules = line.trim().split(/\s+/);
  const keys = `~${DEFAULT_KEY_PREFIX}*`;
  if (!rules.includes(keys)) throw new Error(`the README's ACL has no ${keys} rule`);
  return rules.map((rule) => (rule.startsWith('>') ? `>${password}` : rule === keys ? `~${keyPrefix}*` : rule));
}
