--[[
  Registers a waiter with a lease, so that a token its BLMOVE AVAILABLE -> INBOX:<grant id> moves
  belongs to a known waiter from that instant, and comes back (reapWaiters.lua) if the lease runs
  out unclaimed. Sent in the same pipeline, before BLMOVE, only when the waiter's registration may
  have lapsed (tryLock-6.lua registers on a miss, and claim-7.lua renews it after an empty slice);
  always sent as EVAL, so it cannot fail with NOSCRIPT and leave BLMOVE unregistered.
  Creates the semaphore if needed and, with a stale timeout, reclaims stale holders; a reclaimed
  token goes to the longest-blocked waiter.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] EXISTS  KEYS[4] VERSION  KEYS[5] OWNERS  KEYS[6] WAITING
    ARGV[1] resources
    ARGV[2] grant id
    ARGV[3] local time in decimal seconds, or '' for Redis TIME
    ARGV[4] stale timeout in seconds, or '' for none
    ARGV[5] expiration in milliseconds, or '' for none
    ARGV[6] waiter lease in seconds (longer than the BLMOVE that follows)
  Output: { expired waiter registration... }; registers nothing for a grant id recover-7.lua abandoned
  (a pipeline that arrives after its client gave up on it)
]]
--- @include keys
--- @include clock
--- @include ensure
--- @include expiry
--- @include reclaim
local resources, grant, stale_s, expiration = tonumber(ARGV[1]), ARGV[2], ARGV[4], ARGV[5]
local now = clock(ARGV[3])
ensure(resources)
if stale_s ~= '' then
  reclaim_stale(now, tonumber(stale_s))
end
if redis.call('ZSCORE', K_WAITING, '~' .. grant) == false then
  redis.call('ZADD', K_WAITING, now + tonumber(ARGV[6]), grant)
end
touch_expiry(expiration)
return expired_waiters(now)
