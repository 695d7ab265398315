--[[
  Renews a held token's GRABBED time, so a long holder is not reclaimed as stale, if, and only if,
  this grant still owns the token.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] EXISTS  KEYS[4] VERSION  KEYS[5] OWNERS  KEYS[6] WAITING  KEYS[7] FENCE
    ARGV[1] token
    ARGV[2] grant id
    ARGV[3] local time in decimal seconds, or '' for Redis TIME
  Output: 1 when renewed, 0 when the grant no longer owns the token
]]
--- @include keys
--- @include grant
--- @include clock
if owner_grant(redis.call('HGET', K_OWNERS, ARGV[1])) ~= ARGV[2] then
  return 0
end
local _, stamp = clock(ARGV[3])
redis.call('HSET', K_GRABBED, ARGV[1], stamp)
return 1
