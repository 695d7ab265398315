-- Returns to AVAILABLE every held token whose holder's lease is over, and forgets its holder, so
-- that holder's later unlock or refresh finds nothing and pushes nothing. A grant of this library
-- carries its own lease (GRABBED, see grant.lua; 0 never goes stale), whoever reclaims; a Ruby
-- holder's plain stamp (or an unreadable entry) is judged by RUBY_STALE_S, the caller's stale
-- timeout in seconds (nil: left alone, as the gem does without stale_client_timeout).
-- Returns how many tokens it returned.
local function reclaim_stale(now, ruby_stale_s)
  local grabbed = redis.call('HGETALL', K_GRABBED)
  local reclaimed = 0
  for i = 1, #grabbed, 2 do
    local token, value = grabbed[i], grabbed[i + 1]
    local stamp, _, _, lease = parse_grant(value)
    local stale
    if stamp then
      lease = tonumber(lease)
      stale = lease > 0 and now - (tonumber(stamp) or 0) > lease / 1000
    else
      local since = tonumber(value)
      stale = ruby_stale_s ~= nil and (since == nil or now - since > ruby_stale_s)
    end
    if stale then
      redis.call('HDEL', K_GRABBED, token)
      redis.call('HDEL', K_OWNERS, token)
      redis.call('LPUSH', K_AVAILABLE, token)
      reclaimed = reclaimed + 1
    end
  end
  return reclaimed
end

-- The caller's stale timeout in seconds for Ruby holders, from a lease argument in ms ('' or '0': none).
local function ruby_stale(lease_ms)
  local ms = tonumber(lease_ms)
  if ms == nil or ms <= 0 then
    return nil
  end
  return ms / 1000
end

-- Ids of waiter registrations whose lease has run out (at most 16 a call), by Redis TIME (see
-- clock.lua). Their inbox lists are not in this script's KEYS, so the caller hands them to
-- reapWaiters.lua.
local function expired_waiters()
  return redis.call('ZRANGEBYSCORE', K_WAITING, '-inf', redis_now(), 'LIMIT', 0, 16)
end
