--[[
  A consistent snapshot for availableCount and allTokens.
  Keys: 12.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS  KEYS[10] COLLECTING  KEYS[11] PENDING  KEYS[12] COLLECTED
    ARGV[1] '1' to include the token lists, '0' for counts only
  Output: { exists (0 or 1), available count, available tokens or {}, held tokens or {}, tokens set
            aside for weighted waiters (COLLECTED, then PENDING: includes/give_back.lua) or {} }
]]
--- @include keys
local exists = redis.call('EXISTS', K_EXISTS)
local count = redis.call('LLEN', K_AVAILABLE)
if ARGV[1] ~= '1' then
  return { exists, count, {}, {} }
end
local collected = redis.call('LRANGE', K_COLLECTED, 0, -1)
for _, token in ipairs(redis.call('LRANGE', K_PENDING, 0, -1)) do
  collected[#collected + 1] = token
end
return { exists, count, redis.call('LRANGE', K_AVAILABLE, 0, -1), redis.call('HKEYS', K_GRABBED), collected }
