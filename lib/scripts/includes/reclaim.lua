-- Returns to AVAILABLE held tokens whose holder's lease is over, and forgets their holders, so a
-- holder's later unlock or refresh finds nothing and pushes nothing. A grant of this library carries
-- its own lease (GRABBED, see grant.lua; 0 never goes stale), whoever reclaims: they are found
-- through the LEASES index, at most 100 a call (later calls take the rest; due entries of tokens that
-- no grant of this library holds are dropped on the way and do not count, up to 500). A Ruby
-- holder's plain stamp (or an unreadable entry) is judged by RUBY_STALE_S, the caller's stale timeout in seconds
-- (nil: left alone, as the gem does without stale_client_timeout); those are not indexed, so they
-- are looked for (reading all of GRABBED) by RUBY_SCAN: 'always' (releaseStale: the watchdog and
-- operators, off the hot path), 'unindexed' (only when GRABBED holds more entries than the index, so
-- where no Ruby holder is, reclaim never reads every holder; an index entry the gem's reclaim left
-- behind, or one an unlock left (release-9.lua), can hide a Ruby holder from this until that entry
-- falls due), or 'never'. An entry whose token nobody holds (an unlock that left its token the only
-- free one leaves it for the token's next grant to overwrite) is dropped when it falls due.
-- Returns how many tokens it returned.
local function reclaim_stale(now, ruby_stale_s, ruby_scan)
  -- (Nested: only a reclaim defines it, not every run of every script.)
  -- Reclaims one holder's token if it is stale by its own lease (a grant of this library) or, for a
  -- Ruby holder's plain stamp (or an unreadable entry), by RUBY_STALE_S; returns 1 if it did.
  local function reclaim_if_stale(token, value, now, ruby_stale_s)
    local stamp, _, _, lease = parse_grant(value)
    local stale
    if stamp then
      lease = tonumber(lease)
      stale = lease > 0 and now - (tonumber(stamp) or 0) > lease / 1000
    elseif value then
      local since = tonumber(value)
      stale = ruby_stale_s ~= nil and (since == nil or now - since > ruby_stale_s)
    end
    if not stale then
      return 0
    end
    forget_holder(token)
    redis.call('LPUSH', K_AVAILABLE, token)
    return 1
  end
  local reclaimed, due_before = 0, '(' .. string.format('%d', math.floor(now * 1000000))
  -- Pages of 100 due entries; another page only while a whole page held no grant of this library
  -- (entries of tokens nobody holds, which unlocks leave when a Ruby client takes the token next, or
  -- of Ruby holders), so such entries cannot hide a stale holder behind them: at most 5 pages a call.
  for _ = 1, 5 do
    local due = redis.call('ZRANGEBYSCORE', K_LEASES, '-inf', due_before, 'LIMIT', 0, 100)
    local held = false
    for _, token in ipairs(due) do
      local value = redis.call('HGET', K_GRABBED, token)
      local stamp, _, _, lease = parse_grant(value)
      if reclaim_if_stale(token, value, now, nil) == 1 then
        reclaimed = reclaimed + 1
        held = true
      elseif stamp then
        -- Live after all (stamped on another clock, with useLocalTime): index it as its record says.
        index_lease(token, stamp, lease)
        held = true
      else
        -- Nobody holds the token (an unlock left its entry), or the record went behind the index's
        -- back (the gem's reclaim or delete!, or a Ruby holder now).
        redis.call('ZREM', K_LEASES, token)
      end
    end
    if #due < 100 or held then
      break
    end
  end
  if ruby_stale_s == nil or ruby_scan == 'never' then
    return reclaimed
  end
  if ruby_scan == 'always' or redis.call('HLEN', K_GRABBED) > redis.call('ZCARD', K_LEASES) then
    local grabbed = redis.call('HGETALL', K_GRABBED)
    for i = 1, #grabbed, 2 do
      if not parse_grant(grabbed[i + 1]) then
        if reclaim_if_stale(grabbed[i], grabbed[i + 1], now, ruby_stale_s) == 1 then
          reclaimed = reclaimed + 1
        else
          redis.call('ZREM', K_LEASES, grabbed[i]) -- a Ruby holder has no index entry
        end
      end
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

-- Ids of waiter registrations that have expired (at most 16 a call), by Redis TIME (see
-- clock.lua). Their inbox lists are not in this script's KEYS, so the caller hands them to
-- reapWaiters.lua.
local function expired_waiters()
  return redis.call('ZRANGEBYSCORE', K_WAITING, '-inf', redis_now(), 'LIMIT', 0, 16)
end
