-- Gives back (give_back.lua) held tokens whose holder's lease is over, and forgets their holders, so a
-- holder's later unlock or refresh finds nothing and pushes nothing. A grant of this library carries
-- its own lease (GRABBED, see grant.lua; 0 never goes stale), whoever reclaims; a Ruby holder's plain
-- stamp (or an unreadable entry) is judged by RUBY_STALE_S, the caller's stale timeout in seconds
-- (nil: left alone, as the gem does without stale_client_timeout). In three steps, each bounded:
--   1. the due entries of LEASES (grants of tokens other than "0".."15", see grant.lua), at most 100
--      a call (later calls take the rest; due entries of tokens that no grant of this library holds
--      are dropped on the way and do not count, up to 500);
--   2. the records of the canonical tokens "0".."15", which are never indexed, with one HMGET;
--   3. GRABBED whole, for what neither names: Ruby holders of other tokens, and grants an older
--      version left unindexed. RUBY_SCAN says when: 'always' (releaseStale: the watchdog and
--      operators, off the hot path; step 2 is then left to it), 'unindexed' (only when more tokens
--      other than "0".."15" are held than LEASES has entries for such tokens: where every holder is
--      indexed reclaim never reads them all; an entry the gem's reclaim left for a token a Ruby
--      client then took can hide a holder from this until it falls due), or 'never' (the sampled
--      reclaim of a grant, which then judges no Ruby holder either). The scan indexes the live grants
--      of this library it finds without an entry (tokens other than "0".."15"), so the next calls need
--      not read them all again.
-- Returns how many tokens it returned.
local function reclaim_stale(now, ruby_stale_s, ruby_scan)
  -- (Nested: only a reclaim defines them, not every run of every script.)
  -- Reclaims one holder's token if it is stale by its own lease (a grant of this library) or, for a
  -- Ruby holder's plain stamp (or an unreadable entry), by RUBY_STALE_S. Returns 1 if it did; else 0
  -- and, for a grant of this library, its stamp and lease (strings).
  local function reclaim_if_stale(token, value, now, ruby_stale_s)
    local stamp, _, _, lease = parse_grant(value)
    local stale
    if stamp then
      local ms = tonumber(lease)
      stale = ms > 0 and now - (tonumber(stamp) or 0) > ms / 1000
    elseif value then
      local since = tonumber(value)
      stale = ruby_stale_s ~= nil and (since == nil or now - since > ruby_stale_s)
    end
    if not stale then
      return 0, stamp, lease
    end
    forget_holder(token)
    give_back(token)
    return 1
  end
  local reclaimed, due_before = 0, '(' .. string.format('%d', math.floor(now * 1000000))
  -- 1. Pages of 100 due entries; another page only while a whole page held no grant of this library
  -- (entries of tokens nobody holds, which unlocks leave when a Ruby client takes the token next, or
  -- of Ruby holders), so such entries cannot hide a stale holder behind them: at most 5 pages a call.
  for _ = 1, 5 do
    local due = redis.call('ZRANGEBYSCORE', K_LEASES, '-inf', due_before, 'LIMIT', 0, 100)
    local held = false
    for _, token in ipairs(due) do
      local gone, stamp, lease = reclaim_if_stale(token, redis.call('HGET', K_GRABBED, token), now, nil)
      if gone == 1 then
        reclaimed = reclaimed + 1
        held = true
      elseif stamp and not is_small(token) then
        -- Live after all (stamped on another clock, with useLocalTime): index it as its record says.
        index_lease(token, stamp, lease)
        held = true
      else
        -- Nobody holds the token (an unlock left its entry), the record went behind the index's
        -- back (the gem's reclaim or delete!, or a Ruby holder now), or a token step 2 reads.
        redis.call('ZREM', K_LEASES, token)
        held = held or stamp ~= nil
      end
    end
    if #due < 100 or held then
      break
    end
  end
  local small = { '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13', '14', '15' }
  if ruby_scan ~= 'always' then
    -- 2. The canonical tokens "0".."15".
    local ruby_small = ruby_stale_s
    if ruby_scan == 'never' then
      ruby_small = nil
    end
    local values = redis.call('HMGET', K_GRABBED, unpack(small))
    local held = 0
    for i = 1, 16 do
      local value = values[i]
      if value then
        if reclaim_if_stale(small[i], value, now, ruby_small) == 1 then
          reclaimed = reclaimed + 1
        else
          held = held + 1
        end
      end
    end
    if ruby_scan == 'never' then
      return reclaimed
    end
    -- 3, when more tokens other than "0".."15" are held than LEASES may index: LEASES' entries less
    -- those of "0".."15" (counted only when it could decide: an entry older versions made).
    local others = redis.call('HLEN', K_GRABBED) - held
    if others <= 0 then
      return reclaimed
    end
    local indexed = redis.call('ZCARD', K_LEASES)
    if others <= indexed - 16 then
      return reclaimed
    end
    if others <= indexed then
      for _, score in ipairs(redis.call('ZMSCORE', K_LEASES, unpack(small))) do
        if score then
          indexed = indexed - 1
        end
      end
      if others <= indexed then
        return reclaimed
      end
    end
  end
  local grabbed = redis.call('HGETALL', K_GRABBED)
  -- This library's live grants of tokens other than "0".."15", their stamps and leases.
  local live, stamps, leases = {}, {}, {}
  for i = 1, #grabbed, 2 do
    local token = grabbed[i]
    local gone, stamp, lease = reclaim_if_stale(token, grabbed[i + 1], now, ruby_stale_s)
    if gone == 1 then
      reclaimed = reclaimed + 1
    elseif not stamp then
      redis.call('ZREM', K_LEASES, token) -- a Ruby holder has no index entry (one left would hide another)
    elseif not is_small(token) then
      local n = #live + 1
      live[n], stamps[n], leases[n] = token, stamp, lease
    end
  end
  -- Index those without an entry (ZMSCORE, 500 tokens a call, well within Lua's stack).
  for first = 1, #live, 500 do
    local scores = redis.call('ZMSCORE', K_LEASES, unpack(live, first, math.min(#live, first + 499)))
    for n, score in ipairs(scores) do
      if not score then
        local at = first + n - 1
        index_lease(live[at], stamps[at], leases[at])
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
