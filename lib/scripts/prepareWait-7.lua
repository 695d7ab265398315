--[[
  Registers a waiter with a lease, so that a token its BLMOVE AVAILABLE -> INBOX:<grant id> moves
  belongs to a known waiter from that instant, and comes back (reapWaiters.lua) if the lease runs
  out unclaimed. Sent in the same pipeline, before BLMOVE, only when the waiter's registration may
  have lapsed (tryLock-7.lua registers on a miss, and claim-8.lua renews it after an empty slice);
  always sent as EVAL, so it cannot fail with NOSCRIPT and leave BLMOVE unregistered. It does only
  that, to stay small: tryLock has created the semaphore and reclaimed stale holders, and claim does
  both again at the end of every empty slice.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] EXISTS  KEYS[4] VERSION  KEYS[5] OWNERS  KEYS[6] WAITING  KEYS[7] FENCE
    ARGV[1] grant id
    ARGV[2] expiration in milliseconds, or '' for none
    ARGV[3] waiter lease in seconds (counted on Redis TIME)
  Output: 1 when registered; 0 for a grant id recover-8.lua abandoned (a pipeline that arrives after
  its client gave up on it), which registers nothing
]]
--- @include keys
--- @include clock
--- @include expiry
local grant = ARGV[1]
if redis.call('ZSCORE', K_WAITING, '~' .. grant) ~= false then
  return 0
end
redis.call('ZADD', K_WAITING, redis_now() + tonumber(ARGV[3]), grant)
touch_expiry(ARGV[2])
return 1
