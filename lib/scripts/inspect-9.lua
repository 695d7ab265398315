--[[
  A consistent snapshot for availableCount and allTokens.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] EXISTS  KEYS[4] VERSION  KEYS[5] OWNERS  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] LEASES  KEYS[9] CREATING
    ARGV[1] '1' to include the token lists, '0' for counts only
  Output: { exists (0 or 1), available count, available tokens or {}, held tokens or {} }
]]
--- @include keys
local exists = redis.call('EXISTS', K_EXISTS)
local count = redis.call('LLEN', K_AVAILABLE)
if ARGV[1] ~= '1' then
  return { exists, count, {}, {} }
end
return { exists, count, redis.call('LRANGE', K_AVAILABLE, 0, -1), redis.call('HKEYS', K_GRABBED) }
