--[[
  lock's first step: takes a free token at once and records its holder. On a miss, registers the
  caller as a waiter (with an expiry, as prepareWait.lua does) so that its BLMOVE can follow at once.
  Creates the semaphore if needed (a batch of it, see includes/ensure.lua) and, when no token is
  free, first reclaims holders whose lease is over.
  Never jumps ahead of a waiter blocked in BLMOVE: a free token means nobody is blocked (Redis
  serves them the moment a token is pushed), and a token this script reclaims is left for the
  longest-blocked waiter unless no waiter is registered.
  Keys: at most 9. A call passes AVAILABLE alone on a single Redis (the script names the
    others after its prefix: includes/holder_keys.lua); on Cluster the first 8, all 9 with `expiration`.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS
    ARGV[1] resources
    ARGV[2] grant id: the owner recorded for the token
    ARGV[3] the caller's lease in ms (its staleClientTimeout; '0' for none): recorded with a grant,
            and the stale timeout of Ruby holders it reclaims
    ARGV[4] the registration's expiry in seconds from now, to register on a miss, or '' not to register (lock(0))
    ARGV[5] owner label recorded with the grant
    ARGV[6] local time in decimal seconds, or '' (or absent) for Redis TIME
    ARGV[7] expiration in milliseconds, or '' (or absent) for none
    (The last two are left out when '', the usual case.)
  Output: { token or nil, its fencing number or 0, the grant id (ARGV[2]), expired waiter registration...
            (on a miss only) }: the grant id names the call this reply answers (see lib/redis/commands.ts)
]]
--- @include keys
--- @include clock
--- @include present
--- @include ensure
--- @include grant
local grant, lease_ms = ARGV[2], ARGV[3]
local local_time, expiration = ARGV[6] or '', ARGV[7] or ''
local stamp = clock_stamp(local_time)
-- Looked up before LPOP: a script's first write decides whether Redis refuses it when out of memory
-- (and LPOP counts as one even on an empty list), so a miss must reach its ZADD with no write before.
-- A semaphore that exists with a token free (a hit) needs no more than this one call.
local exists, may_take = exists_and_available()
if not exists then
  -- (tonumber here, not above: a hit does not need it.)
  ensure(tonumber(ARGV[1]))
  may_take = redis.call('LLEN', K_AVAILABLE) > 0
end
local token, fence, expired = false, 0, nil
if not may_take then
  -- A miss. Helpers only it needs are included here, so that a hit does not define them (see
  -- lib/redis/lua-source.ts). Stale holders matter only when no token is free: a hit reclaims nothing.
--- @include holder
--- @include reclaim
  if reclaim_stale(clock(local_time), ruby_stale(lease_ms), 'unindexed') > 0 then
    may_take = redis.call('ZCOUNT', K_WAITING, redis_now(), '+inf') == 0
  end
  -- Only a caller that will wait needs the tokens of dead waiters back; a hit skips the lookup.
  if not may_take then
    expired = expired_waiters()
  end
end
if may_take then
  token = redis.call('LPOP', K_AVAILABLE)
  mark_present(token)
  fence = record_grant(token, grant, stamp, lease_ms, ARGV[5])
elseif ARGV[4] ~= '' then
  redis.call('ZADD', K_WAITING, redis_now() + tonumber(ARGV[4]), grant)
end
if expiration ~= '' then
--- @include expiry
  touch_expiry(expiration)
end
local reply = { token, fence, grant }
if expired then
  for _, id in ipairs(expired) do
    reply[#reply + 1] = id
  end
end
return reply
