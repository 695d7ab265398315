-- The current time, as seconds (a number) and as the gem's GRABBED string ("sec.usec").
-- ARGV_NOW is '' for Redis TIME, or the caller's local time in decimal seconds (useLocalTime).
-- Registration expiries (WAITING scores) always use Redis TIME, whatever useLocalTime says, so that
-- they and the keys' expiry deadlines are on one clock. TIME is called once per script, and each
-- form is computed only when asked for: every redis.call and string operation costs Redis
-- instructions on every run, and a script runs in one instant anyway.
local redis_time

local function redis_clock()
  if not redis_time then
    redis_time = redis.call('TIME')
  end
  return redis_time
end

local function redis_now()
  local t = redis_clock()
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

-- The GRABBED stamp. (The microseconds are padded to six digits only when shorter, nine times in
-- ten they are not, and then by string.sub, at half the cost of a string.format.)
local function clock_stamp(argv_now)
  if argv_now ~= '' then
    return argv_now
  end
  local t = redis_clock()
  local usec = t[2]
  if #usec < 6 then
    usec = string.sub('00000' .. usec, -6)
  end
  return t[1] .. '.' .. usec
end

local function clock(argv_now)
  if argv_now ~= '' then
    return tonumber(argv_now), argv_now
  end
  return redis_now(), clock_stamp(argv_now)
end
