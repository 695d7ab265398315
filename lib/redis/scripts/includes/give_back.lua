-- Where a token given back goes. Every script that frees a token (release, reclaim, a drained inbox,
-- signal, forceRelease, resize) pushes it onto give_back_target(): AVAILABLE, where Redis hands it
-- to the longest-blocked waiter, or PENDING while a weighted waiter collects its permits. A waiter
-- for k permits that is served its first token while fewer than k are free becomes the collector
-- (weighted.lua, collect): the hash COLLECTING names its registration and permits (read with HGET,
-- which the README's minimal ACL allows), the tokens it has so far wait in COLLECTED, and
-- it blocks on PENDING (BLMOVE PENDING COLLECTED), so every token freed from then on is its until it
-- has k. Nobody behind it in the queue overtakes it, and at most one partial collection exists. A
-- collection whose registration is gone (ended by its waiter, reaped after its process died) is
-- ended by the next script that asks here: its tokens go onto AVAILABLE. Needs holder_keys.lua
-- and present.lua before it.
local GIVE_BACK

-- Names, on a single Redis, what the rarer steps below touch besides COLLECTING (holder_keys.lua):
-- PENDING and COLLECTED, and in a release (which includes no keys.lua) EXISTS, WAITING, CREATING.
local function collection_keys()
  if not K_PENDING then
    K_PENDING, K_COLLECTED = K_PREFIX .. 'PENDING', K_PREFIX .. 'COLLECTED'
  end
  if not K_WAITING then
    K_EXISTS, K_WAITING, K_CREATING = K_PREFIX .. 'EXISTS', K_PREFIX .. 'WAITING', K_PREFIX .. 'CREATING'
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

-- Ends the partial collection, if any: its tokens (COLLECTED, PENDING) go onto AVAILABLE.
local function end_collection()
  collection_keys()
  redis.call('DEL', K_COLLECTING)
  move_to_available(K_COLLECTED)
  move_to_available(K_PENDING)
  GIVE_BACK = K_AVAILABLE
end

-- The list a freed token goes onto: PENDING while a live registration collects, else AVAILABLE.
local function give_back_target()
  if GIVE_BACK then
    return GIVE_BACK
  end
  GIVE_BACK = K_AVAILABLE
  local owner = redis.call('HGET', K_COLLECTING, 'registration')
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
