-- Weighted grants (the `permits` option): one grant of k tokens. Each token gets its own GRABBED
-- record, all k the same (one grant id, one fence, one lease), so the Ruby gem sees k holders and
-- every reclaimer judges them alike; the holder refreshes and releases them together. Lists are
-- read and written 1,000 entries a command, within Lua's stack whatever k is. Needs give_back.lua,
-- grant.lua and holder.lua before it; collect() also clock.lua, ensure.lua, reclaim.lua, drain.lua.
-- (Included only where a call asks for more than one token: the usual call defines none of this.)

-- Writes a batch of GRABBED records (FIELDS: token, record, …) and their LEASES entries (INDEXED:
-- score, token, …).
local function write_records(fields, indexed)
  if #fields > 0 then
    redis.call('HSET', K_GRABBED, unpack(fields))
  end
  if #indexed > 0 then
    redis.call('ZADD', K_LEASES, unpack(indexed))
  end
end

-- Records TOKENS as held by one grant (see record_grant in grant.lua); returns its fence (digits).
local function record_grants(tokens, grant, stamp, lease_ms, label)
  if (lease_ms or '') == '' then
    lease_ms = '0'
  end
  local fence = record_grant(tokens[1], grant, stamp, lease_ms, label, true)
  local record = stamp .. ' ' .. grant .. ' ' .. fence .. ' ' .. lease_ms .. ' ' .. stamp .. ' ' .. (label or '')
  local score = lease_score(stamp, lease_ms)
  for first = 2, #tokens, 500 do
    local fields, indexed, small = {}, {}, {}
    for i = first, math.min(#tokens, first + 499) do
      local token = tokens[i]
      fields[#fields + 1], fields[#fields + 2] = token, record
      if is_small(token) then
        small[#small + 1] = token
      else
        indexed[#indexed + 1], indexed[#indexed + 2] = score, token
      end
    end
    write_records(fields, indexed)
    if #small > 0 then
      redis.call('ZREM', K_LEASES, unpack(small))
    end
  end
  return fence
end

-- TOKENS as a reply's last field: "<k> <length 1> … <length k> <token 1>…<token k>" (a token may
-- hold any text, spaces too).
local function encode_tokens(tokens)
  local lengths = {}
  for i, token in ipairs(tokens) do
    lengths[i] = #token
  end
  return #tokens .. ' ' .. table.concat(lengths, ' ') .. ' ' .. table.concat(tokens)
end

-- Pops up to N entries from the head of list FROM (1,000 a command); returns them.
local function pop_list(from, n)
  local popped = {}
  while #popped < n do
    local batch = redis.call('LPOP', from, math.min(1000, n - #popped))
    if not batch then
      break
    end
    for _, token in ipairs(batch) do
      popped[#popped + 1] = token
    end
  end
  return popped
end

-- Pushes TOKENS onto the head of list TO (1,000 a command).
local function push_list(to, tokens)
  for first = 1, #tokens, 1000 do
    redis.call('LPUSH', to, unpack(tokens, first, math.min(#tokens, first + 999)))
  end
end

-- Ends this grant of TOKENS where it still holds them: each goes back (give_back.lua) or, with
-- PUT_BACK false, is dropped. Returns whether it held them all (false: the grant was lost, in part
-- or whole) and the length of AVAILABLE afterwards.
local function release_grant(tokens, grant, put_back)
  local held, ended = {}, true
  for first = 1, #tokens, 1000 do
    local last = math.min(#tokens, first + 999)
    local values = redis.call('HMGET', K_GRABBED, unpack(tokens, first, last))
    for i, value in ipairs(values) do
      if holds(value, grant) then
        held[#held + 1] = tokens[first + i - 1]
      else
        ended = false
      end
    end
  end
  for first = 1, #held, 1000 do
    local batch = { unpack(held, first, math.min(#held, first + 999)) }
    redis.call('HDEL', K_GRABBED, unpack(batch))
    redis.call('ZREM', K_LEASES, unpack(batch))
  end
  if put_back then
    give_back_all(held)
  end
  return ended, redis.call('LLEN', K_AVAILABLE)
end

-- Renews the stamp of each of TOKENS this grant still holds; returns whether it held them all. (500
-- a batch, one HMGET, HSET and ZADD each; a grant's tokens share one lease, so one score.)
local function refresh_grant(tokens, grant, stamp)
  local all, score = true, nil
  for first = 1, #tokens, 500 do
    local last = math.min(#tokens, first + 499)
    local values = redis.call('HMGET', K_GRABBED, unpack(tokens, first, last))
    local fields, indexed = {}, {}
    for i, record in ipairs(values) do
      local token = tokens[first + i - 1]
      if holds(record, grant) then
        if not score then
          local _, _, _, lease = parse_grant(record)
          score = lease_score(stamp, lease)
        end
        local space = string.find(record, ' ', 1, true)
        fields[#fields + 1], fields[#fields + 2] = token, stamp .. string.sub(record, space)
        if not is_small(token) then
          indexed[#indexed + 1], indexed[#indexed + 2] = score, token
        end
      else
        all = false
      end
    end
    write_records(fields, indexed)
  end
  return all
end

-- A claim for k > 1 tokens (claim.lua): the waiter at the head of the queue (served a token, or
-- collecting) takes what is waiting for it (PENDING: give_back.lua) and what is free, and grants k
-- at once if it has them; else it becomes the collector, and gathers in COLLECTED every token freed
-- until it has k. Returns claim.lua's reply; its flags say 'C' while this registration collects (its
-- next slice blocks on PENDING, not AVAILABLE).
local function collect(registration, grant, settings, inbox, local_time, registered)
  collection_keys()
  local k = settings.permits
  known_to_exist = redis.call('EXISTS', K_EXISTS) == 1
  local owner = redis.call('HGET', K_COLLECTING, 'registration')
  if not registered then
    -- Ended or reaped meanwhile: what reached its inbox goes back, and so does its collection (or
    -- a token its BLMOVE moved into COLLECTED after the collection ended).
    if owner == registration or (not owner and redis.call('EXISTS', K_COLLECTED) == 1) then
      end_collection()
    end
    drain_inbox(inbox)
    return grant .. ' 0 EN 0'
  end
  local now = clock(local_time)
  if settings.lifetime then
    ensure(settings.resources)
  end
  -- Freed tokens go to the collector (this one, or another) or onto AVAILABLE: both seen below.
  reclaim_stale(now, ruby_stale(settings.lease), 'unindexed')
  owner = give_back_target() == K_PENDING and owner
  local mine = owner == registration
  local have = {}
  if owner and not mine then
    -- Another waiter collects: a token that reached this inbox (a Ruby client pushes onto
    -- AVAILABLE) is its.
    drain_inbox(inbox)
  else
    have = pop_list(inbox, 1000000)
  end
  -- At the head of the queue (served a token, or collecting): what waits in PENDING and what is
  -- free are this waiter's, up to k. (During a collection only a Ruby client, which knows nothing
  -- of it, frees a token onto AVAILABLE; the collector takes it here, at its next slice at the latest.)
  if #have > 0 or mine then
    local short = k - #have - redis.call('LLEN', K_COLLECTED)
    for _, from in ipairs({ K_PENDING, K_AVAILABLE }) do
      if short > 0 then
        for _, token in ipairs(pop_list(from, short)) do
          have[#have + 1] = token
        end
        short = k - #have - redis.call('LLEN', K_COLLECTED)
      end
    end
    if not known_to_exist then
      for _, token in ipairs(have) do
        mark_present(token)
      end
    end
    push_list(K_COLLECTED, have)
    if short <= 0 then
      local tokens = pop_list(K_COLLECTED, k)
      redis.call('ZREM', K_WAITING, registration)
      redis.call('HDEL', K_COLLECTING, '#' .. registration)
      -- Recorded first: handing on below may move the fence so that the next grant's claim hands on
      -- in turn (give_back.lua), which this grant must not take for itself.
      local fence = record_grants(tokens, grant, clock_stamp(local_time), settings.lease, settings.label)
      -- Ends the collection, if any; a surplus (signal, resize) or what still waits in PENDING goes
      -- on to the next waiter.
      end_collection()
      return grant .. ' ' .. fence .. ' EN 0 ' .. encode_tokens(tokens)
    end
    if not mine then
      redis.call('HSET', K_COLLECTING, 'registration', registration, 'permits', k)
      mine = true
    end
  elseif not owner and redis.call('EXISTS', K_PENDING) == 1 then
    -- An empty slice while tokens freed together wait: the chain that hands them on broke.
    hand_on()
  end
  local flags = 'EN'
  if settings.lifetime then
    redis.call('ZADD', K_WAITING, redis_now() + settings.lifetime, registration)
    redis.call('HSET', K_COLLECTING, '#' .. registration, k)
    flags = mine and 'KC' or 'KN'
  else
    -- The wait's last slice: a partial collection goes back.
    redis.call('ZREM', K_WAITING, registration)
    redis.call('HDEL', K_COLLECTING, '#' .. registration)
    if mine then
      end_collection()
    end
  end
  local ids = expired_waiters()
  if #ids > 0 then
    return grant .. ' 0 ' .. flags .. ' ' .. #ids .. ' ' .. table.concat(ids, ' ')
  end
  return grant .. ' 0 ' .. flags .. ' 0'
end
