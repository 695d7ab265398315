-- The current time, as seconds (a number) and as the gem's GRABBED string ("sec.usec").
-- ARGV_NOW is '' for Redis TIME, or the caller's local time in decimal seconds (useLocalTime).
-- Registration leases (WAITING scores) always use Redis TIME, whatever useLocalTime says, so that
-- they and the keys' expiry deadlines are on one clock.
local function redis_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

local function clock(argv_now)
  if argv_now ~= '' then
    return tonumber(argv_now), argv_now
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000, t[1] .. '.' .. string.format('%06d', tonumber(t[2]))
end
