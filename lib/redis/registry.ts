// The script registry: every Lua script of lib/redis/scripts/, loaded once, with the most KEYS a call passes it.
import { loadScript, type Script } from './lua-source';

export type { Script } from './lua-source';

/** The keys of includes/holder_keys.lua (a call passes fewer: see `SemaphoreKeys.shortKeys`). */
const KEYS = 12;
/** Those and the inbox of a registration (claim, recover). */
const KEYS_AND_INBOX = KEYS + 1;

export const scripts = {
  tryLock: loadScript('tryLock.lua', KEYS),
  prepareWait: loadScript('prepareWait.lua', KEYS),
  claim: loadScript('claim.lua', KEYS_AND_INBOX),
  recover: loadScript('recover.lua', KEYS_AND_INBOX),
  reapWaiters: loadScript('reapWaiters.lua', null),
  release: loadScript('release.lua', KEYS),
  refresh: loadScript('refresh.lua', KEYS),
  signal: loadScript('signal.lua', KEYS),
  releaseStale: loadScript('releaseStale.lua', KEYS),
  create: loadScript('create.lua', KEYS),
  inspect: loadScript('inspect.lua', KEYS),
  // The operators' scripts (lib/admin/): the CLI and the dashboard.
  status: loadScript('status.lua', KEYS),
  forceRelease: loadScript('forceRelease.lua', KEYS),
  resize: loadScript('resize.lua', KEYS),
} as const;

export type ScriptName = keyof typeof scripts;

/** The scripts every lock and unlock runs: the Redis function library holds them (lib/redis/functions.ts). */
export const LIBRARY_SCRIPTS: readonly Script[] = [scripts.tryLock, scripts.claim, scripts.release, scripts.refresh];
