--[[
  Registers a waiter with an expiry, so that a token its BLMOVE AVAILABLE -> INBOX:<registration id> moves
  belongs to a known waiter from that instant, and comes back (reapWaiters.lua) if the registration
  expires unclaimed. Sent in the same pipeline, before BLMOVE, when the waiter has no live registration:
  a waiter that skipped tryLock (the semaphore is contended, or others of its process queue for a
  connection) or whose registration may have lapsed (tryLock.lua registers on a miss, and
  claim.lua renews after an empty slice). So that a waiter that skips tryLock loses nothing by it,
  it also does tryLock's other duties before BLMOVE: creates the semaphore if needed and reclaims
  stale holders (whose tokens go to waiters already blocked, who Redis serves first). Always sent as
  EVAL, so it cannot fail with NOSCRIPT and leave BLMOVE unregistered.
  Keys: at most 12. A call passes AVAILABLE alone on a single Redis (the script names the
    others after its prefix: includes/holder_keys.lua); on Cluster all 12.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS  KEYS[10] COLLECTING  KEYS[11] PENDING  KEYS[12] COLLECTED
    ARGV[1] registration id (a tryLock's registers under its grant id)
    ARGV[2] expiration in milliseconds, or '' for none
    ARGV[3] the registration's expiry, in seconds from now (on Redis TIME)
    ARGV[4] resources
    ARGV[5] the caller's lease in ms ('0' for none): Ruby holders' stale timeout
    ARGV[6] local time in decimal seconds, or '' for Redis TIME
    ARGV[7] how many tokens the waiter takes (absent: 1)
  Output: 1 when registered; 0 for a registration recover.lua abandoned (a pipeline that arrives after
  its client gave up on it), which registers nothing
]]
--- @include keys
--- @include clock
--- @include present
--- @include ensure
--- @include expiry
--- @include grant
--- @include give_back
--- @include holder
--- @include reclaim
local grant = ARGV[1]
if redis.call('ZSCORE', K_WAITING, '~' .. grant) ~= false then
  return 0
end
ensure(tonumber(ARGV[4]))
reclaim_stale(clock(ARGV[6]), ruby_stale(ARGV[5]), 'unindexed')
redis.call('ZADD', K_WAITING, redis_now() + tonumber(ARGV[3]), grant)
if (ARGV[7] or '1') ~= '1' then
  redis.call('HSET', K_COLLECTING, '#' .. grant, ARGV[7]) -- a weighted waiter (includes/give_back.lua)
  -- Tokens parked for it by its tryLock (or freed together): one goes onto AVAILABLE, for the BLMOVE
  -- right behind this script; its claim takes the rest.
  collection_keys()
  if redis.call('EXISTS', K_PENDING) == 1 then
    hand_on()
  end
end
touch_expiry(ARGV[2])
return 1
