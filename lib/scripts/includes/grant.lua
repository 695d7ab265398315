-- Holder records. GRABBED keeps the gem's format (token -> "sec.usec"); OWNERS maps the token to
-- "<grant id> <fence> <owner label>": the acquisition that holds it (ownership checks compare the
-- grant id), its fencing number, and who took it (the `owner` option, free text, last).

-- The next fencing number: FENCE is INCRed for every grant. Created (or re-created after the keys
-- expired, were deleted, or lost in a restart) at Redis TIME in microseconds, so numbers keep
-- growing across those resets as long as Redis' clock does and fewer than a million grants a second
-- were made since the counter was created.
local function next_fence()
  local fence = redis.call('INCR', K_FENCE)
  if fence == 1 then
    -- INCR just created it: seed it instead (3 calls, once per reset; 1 call on every other grant).
    local t = redis.call('TIME')
    redis.call('SET', K_FENCE, t[1] .. string.format('%06d', tonumber(t[2])))
    fence = redis.call('INCR', K_FENCE)
  end
  return fence
end

-- Records TOKEN as held by GRANT since STAMP; returns its fencing number.
local function record_grant(token, grant, stamp, label)
  local fence = next_fence()
  redis.call('HSET', K_GRABBED, token, stamp)
  redis.call('HSET', K_OWNERS, token, grant .. ' ' .. string.format('%d', fence) .. ' ' .. label)
  return fence
end

-- The grant id of an OWNERS value (false when there is none).
local function owner_grant(record)
  return record and string.match(record, '^%S+')
end

-- The fencing number of an OWNERS value.
local function owner_fence(record)
  return tonumber(string.match(record, '^%S+ (%d+)'))
end
