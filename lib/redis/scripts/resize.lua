--[[
  An operator changes how many tokens a semaphore has (CLI `resize`). Growing pushes new tokens named
  after the smallest non-negative integers not in use ("3", "4", … after "0".."2"), which Redis hands
  to blocked waiters at once. Shrinking retires free tokens only, never a held one: first those that
  are not "0".."target-1" (signalled or unusual names), then the highest-numbered. A target below
  the number of held tokens changes nothing. The tokens a weighted waiter has collected so far
  (includes/give_back.lua) count as held, and new tokens go to it first. A token in flight to a
  waiter (between its BLMOVE and its claim, an instant) is not counted.
  Clients create tokens only when EXISTS is missing, so a resized semaphore keeps its new size until
  its keys are deleted, expire or are lost; it is then re-created with the clients' `resources`.
  Keys: 12.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS  KEYS[10] COLLECTING  KEYS[11] PENDING  KEYS[12] COLLECTED
    ARGV[1] the number of tokens wanted (an integer ≥ 1)
  Output: { status, tokens before, held tokens, tokens after }
    status 1: done (or nothing to do); 0: the semaphore does not exist; -1: the target is below the
    held tokens, or below the permits a collecting waiter asks for (nothing changed)
]]
--- @include keys
--- @include present
--- @include give_back
local target = tonumber(ARGV[1])
if redis.call('EXISTS', K_EXISTS) == 0 then
  return { 0, 0, 0, 0 }
end
local free = redis.call('LRANGE', K_AVAILABLE, 0, -1)
local held = redis.call('HKEYS', K_GRABBED)
collection_keys()
for _, list in ipairs({ K_COLLECTED, K_PENDING }) do
  for _, token in ipairs(redis.call('LRANGE', list, 0, -1)) do
    held[#held + 1] = token
  end
end
local before = #free + #held
-- Nor below what a collecting waiter asks for: it could never be granted, and blocks the queue.
if target < #held or target < tonumber(redis.call('HGET', K_COLLECTING, 'permits') or '0') then
  return { -1, before, #held, before }
end
if target > before then
  local used = {}
  for _, token in ipairs(free) do used[token] = true end
  for _, token in ipairs(held) do used[token] = true end
  local added, i = {}, 0
  while #added < target - before do
    local token = tostring(i)
    if not used[token] then
      added[#added + 1] = token
    end
    i = i + 1
  end
  -- (Handed to waiters one at a time while any are registered: includes/give_back.lua.)
  give_back_all(added)
elseif target < before then
  -- Retire first what would not be a token of a fresh semaphore of this size, highest number first.
  local function rank(token)
    if string.match(token, '^0$') or string.match(token, '^[1-9]%d*$') then
      local n = tonumber(token)
      if n < target then
        return n
      end
      return target + n
    end
    return math.huge
  end
  local candidates = {}
  for i, token in ipairs(free) do
    candidates[i] = { token, rank(token) }
  end
  table.sort(candidates, function(a, b) return a[2] > b[2] end)
  for i = 1, before - target do
    redis.call('LREM', K_AVAILABLE, 1, candidates[i][1])
    -- The index entry an unlock may have left for the token's next grant (see release.lua).
    redis.call('ZREM', K_LEASES, candidates[i][1])
  end
end
return { 1, before, #held, target }
