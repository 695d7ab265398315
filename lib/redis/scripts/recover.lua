--[[
  Settles a blocking wait (or a tryLock) whose reply never arrived (connection closed, reply lost,
  client-side deadline): adopts the grant if the claim ran (and ends the registration the claim may
  have kept), claims the token if it sits in the registration's inbox, and otherwise marks the
  registration abandoned ('~' .. registration id) until a long expiry: a blocked command still alive
  on the server then hands any token it moves back to AVAILABLE (claim.lua), a prepareWait of
  this id arriving late registers nothing (prepareWait.lua), and reapWaiters.lua returns whatever
  reaches the inbox.
  Keys: at most 13. A call passes AVAILABLE alone on a single Redis (the script names the
    others, the inbox too, after its prefix); on Cluster all 12, then the inbox.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS  KEYS[10] COLLECTING  KEYS[11] PENDING  KEYS[12] COLLECTED
    KEYS[#KEYS] INBOX:<registration id> (the 13th; not given with
            AVAILABLE alone, see includes/holder_keys.lua)
    ARGV[1] grant id
    ARGV[2] local time in decimal seconds, or '' for Redis TIME
    ARGV[3] expiration in milliseconds, or '' for none
    ARGV[4] how long the abandoned mark lasts, in seconds
    ARGV[5] owner label recorded with a grant made here
    ARGV[6] the caller's lease in ms ('0' for none), recorded with a grant made here
    ARGV[7] the registration id (the inbox's), or '' (or absent) for the grant id (a tryLock's)
    ARGV[8] how many tokens the grant takes (absent: 1); a weighted wait is never claimed here: its
            inbox and partial collection go back, and a weighted grant is adopted only whole
  Output: { token held by this grant, its fencing number, ms since GRABBED stamped it (its lease's start),
            the grant id, a weighted grant's other tokens… }, or { nil, the grant id } when abandoned: the grant id names the call this
            reply answers (see lib/redis/commands.ts)
]]
--- @include keys
--- @include clock
--- @include expiry
--- @include present
--- @include grant
--- @include give_back
--- @include holder
local grant = ARGV[1]
local registration = ARGV[7] or ''
if registration == '' then
  registration = grant
end
local permits = tonumber(ARGV[8] or '1')
local inbox = K_PREFIX and K_PREFIX .. 'INBOX:' .. registration or KEYS[#KEYS]
local now, stamp = clock(ARGV[2])
local grabbed = redis.call('HGETALL', K_GRABBED)
local found, since, fence = {}, nil, nil
for i = 1, #grabbed, 2 do
  local at, holder, number = parse_grant(grabbed[i + 1])
  if holder == grant then
    found[#found + 1] = grabbed[i]
    since, fence = at, number
  end
end
if #found > 0 then
  -- The claim ran (its BLMOVE was served, so none is pending for this registration); it may have
  -- kept the registration for a next wait the caller never heard of.
  redis.call('ZREM', K_WAITING, registration)
  if #found >= permits then
    since = tonumber(since) or now
    local reply = { found[1], tonumber(fence), math.max(0, math.floor((now - since) * 1000)), grant }
    for i = 2, #found do
      reply[#reply + 1] = found[i]
    end
    return reply
  end
  -- A weighted grant that has lost some of its tokens since: the rest go back, as for a lost holder.
  for _, token in ipairs(found) do
    forget_holder(token)
    give_back(token)
  end
  touch_expiry(ARGV[3])
  return { false, grant }
end
local expiry = redis.call('ZSCORE', K_WAITING, registration)
local token = redis.call('LPOP', inbox)
if token then
  mark_present(token)
end
if token and expiry and permits == 1 then
  redis.call('ZREM', K_WAITING, registration)
  local _, number = record_grant(token, grant, stamp, ARGV[6], ARGV[5], true)
  touch_expiry(ARGV[3])
  return { token, number, 0, grant }
end
redis.call('ZREM', K_WAITING, registration)
if token then
  give_back(token)
end
-- A weighted waiter's partial collection (includes/give_back.lua) ends with its registration.
if permits > 1 then
  redis.call('HDEL', K_COLLECTING, '#' .. registration)
--- @include drain
  drain_inbox(inbox)
  GIVE_BACK = nil
  give_back_target()
end
redis.call('ZADD', K_WAITING, math.max(tonumber(expiry) or 0, redis_now() + tonumber(ARGV[4])), '~' .. registration)
touch_expiry(ARGV[3])
return { false, grant }
