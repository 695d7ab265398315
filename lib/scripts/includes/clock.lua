-- The current time, as seconds (a number) and as the gem's GRABBED string ("sec.usec").
-- ARGV_NOW is '' for Redis TIME, or the caller's local time in decimal seconds (useLocalTime).
-- Registration expiries (WAITING scores) always use Redis TIME, whatever useLocalTime says, so that
-- they and the keys' expiry deadlines are on one clock. TIME is called once per script: every
-- redis.call costs a few µs, and a script runs in one instant anyway.
local redis_time

local function redis_now()
  if not redis_time then
    local t = redis.call('TIME')
    redis_time = { tonumber(t[1]) + tonumber(t[2]) / 1000000, t[1] .. '.' .. string.format('%06d', tonumber(t[2])) }
  end
  return redis_time[1]
end

local function clock(argv_now)
  if argv_now ~= '' then
    return tonumber(argv_now), argv_now
  end
  redis_now()
  return redis_time[1], redis_time[2]
end
