--[[
  lock's first step: takes a free token at once and records its holder, or reports a miss.
  Creates the semaphore if needed and, with a stale timeout, first reclaims stale holders.
  Takes a token only if one was free before the reclaim: a reclaimed token goes to the
  longest-blocked waiter, so this path never jumps ahead of anyone blocked in BLMOVE.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] EXISTS  KEYS[4] VERSION  KEYS[5] OWNERS  KEYS[6] WAITING
    ARGV[1] resources
    ARGV[2] grant id: the owner recorded for the token
    ARGV[3] local time in decimal seconds, or '' for Redis TIME
    ARGV[4] stale timeout in seconds, or '' for none
    ARGV[5] expiration in milliseconds, or '' for none
  Output: { token or nil, expired waiter registration... }
]]
--- @include keys
--- @include clock
--- @include ensure
--- @include expiry
--- @include reclaim
local resources, grant, stale_s, expiration = tonumber(ARGV[1]), ARGV[2], ARGV[4], ARGV[5]
local now, stamp = clock(ARGV[3])
ensure(resources)
local had_free = redis.call('LLEN', K_AVAILABLE) > 0
if stale_s ~= '' then
  reclaim_stale(now, tonumber(stale_s))
end
local token = false
if had_free then
  token = redis.call('LPOP', K_AVAILABLE)
  redis.call('HSET', K_GRABBED, token, stamp)
  redis.call('HSET', K_OWNERS, token, grant)
end
touch_expiry(expiration)
local reply = { token }
for _, id in ipairs(expired_waiters(now)) do
  reply[#reply + 1] = id
end
return reply
