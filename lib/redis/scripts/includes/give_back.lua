-- Where a token given back goes. Every script that frees a token (release, reclaim, a drained inbox,
-- signal, forceRelease, resize) pushes it onto give_back_target(): AVAILABLE, where Redis hands it
-- to the longest-blocked waiter, or PENDING while a weighted waiter collects its permits. A waiter
-- for k permits that is served its first token while fewer than k are free becomes the collector
-- (weighted.lua, collect): the hash COLLECTING names its registration and permits (read with HGET,
-- which the README's minimal ACL allows), the tokens it has so far wait in COLLECTED, and it blocks
-- on PENDING (BLMOVE PENDING COLLECTED), so every token freed from then on is its until it has k.
-- At most one partial collection exists. Without a collector, PENDING holds the tokens a script
-- freed together, handed on one at a time (give_back, hand_on). A collection whose registration is
-- gone (ended by its waiter, reaped after its process died) is ended by the next script that asks
-- here. Needs holder_keys.lua and present.lua before it.
local GIVE_BACK, FREED, PARK

-- Names, on a single Redis, what the rarer steps below touch besides COLLECTING (holder_keys.lua):
-- PENDING and COLLECTED, and in a release (which includes no keys.lua) EXISTS, WAITING, FENCE and
-- CREATING.
local function collection_keys()
  if not K_PENDING then
    K_PENDING, K_COLLECTED = K_PREFIX .. 'PENDING', K_PREFIX .. 'COLLECTED'
  end
  if not K_WAITING then
    K_EXISTS, K_WAITING, K_FENCE = K_PREFIX .. 'EXISTS', K_PREFIX .. 'WAITING', K_PREFIX .. 'FENCE'
    K_CREATING = K_PREFIX .. 'CREATING'
  end
end

-- Moves every token of list FROM onto AVAILABLE's head (1,000 a command), marking each during a
-- re-creation; returns how many.
local function move_to_available(from)
  local moved = 0
  if not known_to_exist then
    known_to_exist = redis.call('EXISTS', K_EXISTS) == 1
  end
  local batch = redis.call('LPOP', from, 1000)
  while batch do
    if not known_to_exist then
      for _, token in ipairs(batch) do
        mark_present(token)
      end
    end
    redis.call('LPUSH', K_AVAILABLE, unpack(batch))
    moved = moved + #batch
    batch = redis.call('LPOP', from, 1000)
  end
  return moved
end

-- Makes the next grant's fence a multiple of 16, so that its claim runs the step one grant in 16
-- runs (claim.lua), which hands the next parked token on (hand_on). Fences only grow.
local function sample_next_claim()
  local n = redis.call('INCR', K_FENCE)
  if n == 1 then
    redis.call('DEL', K_FENCE) -- it was gone: the next grant seeds it (grant.lua); empty slices hand on
  elseif n % 16 ~= 15 then
    redis.call('SET', K_FENCE, string.format('%d', n + 15 - n % 16))
  end
end

-- Hands the next parked token on (see give_back): onto AVAILABLE, where Redis serves the waiter at
-- the head of the queue, whose claim hands on the next; all of them when nobody waits. A collector
-- takes PENDING itself.
-- Whether a waiter for several tokens is registered: COLLECTING has a field '#<registration id>'
-- for each (tryLock.lua, prepareWait.lua, collect in weighted.lua); one whose registration is gone
-- (a wait ended by a plain ZREM) is dropped here.
local function weighted_waiting()
  local fields = redis.call('HKEYS', K_COLLECTING)
  local live = false
  for _, field in ipairs(fields) do
    if string.sub(field, 1, 1) == '#' then
      if redis.call('ZSCORE', K_WAITING, string.sub(field, 2)) then
        live = true
      else
        redis.call('HDEL', K_COLLECTING, field)
      end
    end
  end
  return live
end

-- Hands the next parked token on (see give_back): onto AVAILABLE, where Redis serves the waiter at
-- the head of the queue, whose claim hands on the next. All of them once no waiter for several
-- tokens is registered (nobody can be overtaken), or when the last one handed on is still free
-- (nobody is blocked). A collector takes PENDING itself.
local function hand_on()
  collection_keys()
  if redis.call('HGET', K_COLLECTING, 'registration') then
    return
  end
  if redis.call('LLEN', K_AVAILABLE) > 0 or not weighted_waiting() then
    move_to_available(K_PENDING)
  elseif redis.call('RPOPLPUSH', K_PENDING, K_AVAILABLE) and redis.call('EXISTS', K_PENDING) == 1 then
    sample_next_claim()
  end
end

-- Ends the partial collection, if any: its tokens wait in PENDING for the head of the queue.
local function end_collection()
  collection_keys()
  redis.call('HDEL', K_COLLECTING, 'registration', 'permits')
  GIVE_BACK = K_AVAILABLE
  local batch = redis.call('LPOP', K_COLLECTED, 1000)
  while batch do
    redis.call('LPUSH', K_PENDING, unpack(batch))
    batch = redis.call('LPOP', K_COLLECTED, 1000)
  end
  hand_on()
end

-- The list a freed token goes onto: PENDING while a live registration collects, else AVAILABLE.
local function give_back_target(owner)
  if GIVE_BACK then
    return GIVE_BACK
  end
  GIVE_BACK = K_AVAILABLE
  -- OWNER: COLLECTING's registration, when the caller has read it already.
  owner = owner or redis.call('HGET', K_COLLECTING, 'registration')
  if owner then
    collection_keys()
    if redis.call('ZSCORE', K_WAITING, owner) then
      GIVE_BACK = K_PENDING
    else
      end_collection()
    end
  end
  return GIVE_BACK
end

-- Gives TOKEN back; returns the list it went onto. A script that frees several tokens puts only the
-- first onto AVAILABLE while a waiter for several tokens is registered, and parks the others in
-- PENDING: pushed at once, Redis would serve the next waiters one each before any of their claims
-- ran, and that waiter could not take the rest first. The claim of the waiter served hands the next
-- one on (hand_on: a weighted waiter's takes what it needs first), and so on, each after the claim
-- before it.
local function give_back(token)
  local target = give_back_target()
  if target == K_AVAILABLE then
    FREED = (FREED or 0) + 1
    if FREED == 2 then
      collection_keys()
      PARK = weighted_waiting()
      if PARK then
        sample_next_claim()
      end
    end
    if PARK then
      target = K_PENDING
    end
  end
  redis.call('LPUSH', target, token)
  return target
end

-- Gives TOKENS back (as give_back does, 1,000 a command).
local function give_back_all(tokens)
  if #tokens == 0 then
    return
  end
  give_back(tokens[1])
  if #tokens == 1 then
    return
  end
  local target = give_back(tokens[2])
  for first = 3, #tokens, 1000 do
    redis.call('LPUSH', target, unpack(tokens, first, math.min(#tokens, first + 999)))
  end
end
