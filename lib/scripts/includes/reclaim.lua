-- Returns to AVAILABLE every held token whose GRABBED time is older than STALE_S seconds, and
-- forgets its owner, so that holder's later unlock or refresh finds nothing and pushes nothing.
-- An entry whose time cannot be read is treated as stale. Returns how many tokens it returned.
local function reclaim_stale(now, stale_s)
  local grabbed = redis.call('HGETALL', K_GRABBED)
  local reclaimed = 0
  for i = 1, #grabbed, 2 do
    local token, since = grabbed[i], tonumber(grabbed[i + 1])
    if since == nil or now - since > stale_s then
      redis.call('HDEL', K_GRABBED, token)
      redis.call('HDEL', K_OWNERS, token)
      redis.call('LPUSH', K_AVAILABLE, token)
      reclaimed = reclaimed + 1
    end
  end
  return reclaimed
end

-- Ids of waiter registrations whose lease has run out (at most 16 a call), by Redis TIME (see
-- clock.lua). Their inbox lists are not in this script's KEYS, so the caller hands them to
-- reapWaiters.lua.
local function expired_waiters()
  return redis.call('ZRANGEBYSCORE', K_WAITING, '-inf', redis_now(), 'LIMIT', 0, 16)
end
