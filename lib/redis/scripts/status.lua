--[[
  A snapshot of one semaphore, for holders(), waiting(), the CLI and the dashboard (lib/redis/status.ts):
  whether it exists, its free tokens, who holds what and who waits, all at one instant.
  Keys: 12.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS  KEYS[10] COLLECTING  KEYS[11] PENDING  KEYS[12] COLLECTED
    ARGV[1] most waiter grant ids to list (the count is always complete)
  Output: { exists (0 or 1), Redis TIME as "sec.usec", free tokens (LLEN AVAILABLE),
            registered waiters not yet expired (abandoned '~' marks excluded),
            { up to ARGV[1] of their grant ids, earliest expiry first },
            GRABBED whole: { token, grant record (see includes/grant.lua), token, record, ... },
            { tokens set aside for weighted waiters (LLEN COLLECTED + LLEN PENDING), the collecting
              waiter's registration or '', the permits it collects or 0 } (includes/give_back.lua) }
]]
--- @include keys
--- @include clock
local now, stamp = clock('')
local limit = tonumber(ARGV[1])
local waiters, ids = 0, {}
for _, registration in ipairs(redis.call('ZRANGEBYSCORE', K_WAITING, now, '+inf')) do
  if string.sub(registration, 1, 1) ~= '~' then
    waiters = waiters + 1
    if #ids < limit then
      ids[#ids + 1] = registration
    end
  end
end
local collector = redis.call('HMGET', K_COLLECTING, 'registration', 'permits')
local collection = {
  redis.call('LLEN', K_COLLECTED) + redis.call('LLEN', K_PENDING),
  collector[1] or '',
  tonumber(collector[2] or '0'),
}
return {
  redis.call('EXISTS', K_EXISTS),
  stamp,
  redis.call('LLEN', K_AVAILABLE),
  waiters,
  ids,
  redis.call('HGETALL', K_GRABBED),
  collection,
}
