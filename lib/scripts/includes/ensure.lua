-- Creates the semaphore: pushes the initial tokens "0".."resources-1", then sets EXISTS and VERSION.
-- In batches of at most ENSURE_BATCH tokens per script, so that a large semaphore never blocks Redis
-- for long: CREATING holds what remains between batches, and every script that ensures (tryLock,
-- prepareWait, claim, signal, create) pushes the next batch while EXISTS is missing. Between batches
-- the pool is consistent: every token pushed so far is in exactly one place and usable, the rest are
-- not there yet, and none is pushed twice (CREATING advances in the script that pushes). Never
-- deletes anything, so tokens signalled before creation survive.
-- A fresh creation keeps a cursor: CREATING = "N <next token> <target>".
-- When creation starts with AVAILABLE or GRABBED already there (a partial loss of keys, such as
-- eviction), the first script reads the surviving tokens once (one O(N) pass, no per-token list
-- scan) and keeps the missing ones as ranges: CREATING = "R <target> <from>-<to>,…"; the batches push
-- from those, so a token still on AVAILABLE or held is never duplicated.
-- Returns 0 when the semaphore existed, 1 when this call completed it, 2 when batches remain.
local ENSURE_BATCH = 10000

local function push_tokens(from, to)
  local batch = {}
  for i = from, to do
    batch[#batch + 1] = tostring(i)
    if #batch == 1000 then
      redis.call('RPUSH', K_AVAILABLE, unpack(batch))
      batch = {}
    end
  end
  if #batch > 0 then
    redis.call('RPUSH', K_AVAILABLE, unpack(batch))
  end
end

-- The initial tokens 0..target-1 found neither on AVAILABLE nor in GRABBED, as "from-to" ranges.
local function missing_ranges(target)
  local present = {}
  local function mark(tokens)
    for _, token in ipairs(tokens) do
      local n = tonumber(token)
      -- Only canonical names ("0", "17") are initial tokens: "007" or "1e3" are jobs.
      if n and n >= 0 and n < target and n % 1 == 0 and tostring(n) == token then
        present[n] = true
      end
    end
  end
  mark(redis.call('LRANGE', K_AVAILABLE, 0, -1))
  mark(redis.call('HKEYS', K_GRABBED))
  local ranges, from = {}, nil
  for i = 0, target - 1 do
    if present[i] then
      if from then
        ranges[#ranges + 1] = from .. '-' .. (i - 1)
        from = nil
      end
    elseif not from then
      from = i
    end
  end
  if from then
    ranges[#ranges + 1] = from .. '-' .. (target - 1)
  end
  return ranges
end

local function finish_creation()
  redis.call('DEL', K_CREATING)
  redis.call('SET', K_EXISTS, '1')
  redis.call('SET', K_VERSION, '1')
  return 1
end

local function ensure(resources)
  if redis.call('EXISTS', K_EXISTS) == 1 then
    return 0
  end
  local cursor = redis.call('GET', K_CREATING)
  local mode, a, b = nil, nil, nil
  if cursor then
    mode, a, b = string.match(cursor, '^(%u) (%d+) ?(.*)$')
  end
  if not mode then
    if redis.call('EXISTS', K_AVAILABLE) == 1 or redis.call('EXISTS', K_GRABBED) == 1 then
      -- Partial: this script reads the survivors; the next ones push.
      local ranges = missing_ranges(resources)
      if #ranges == 0 then
        return finish_creation()
      end
      redis.call('SET', K_CREATING, 'R ' .. resources .. ' ' .. table.concat(ranges, ','))
      return 2
    end
    mode, a = 'N', '0'
    b = tostring(resources)
  end
  if mode == 'N' then
    local next_token, target = tonumber(a), tonumber(b)
    local last = math.min(target, next_token + ENSURE_BATCH) - 1
    push_tokens(next_token, last)
    if last + 1 < target then
      redis.call('SET', K_CREATING, 'N ' .. (last + 1) .. ' ' .. target)
      return 2
    end
    return finish_creation()
  end
  -- mode 'R': b lists the missing ranges; push up to ENSURE_BATCH tokens from them.
  local budget, rest = ENSURE_BATCH, {}
  for range in string.gmatch(b, '[^,]+') do
    local from, to = string.match(range, '^(%d+)-(%d+)$')
    from, to = tonumber(from), tonumber(to)
    if budget > 0 then
      local last = math.min(to, from + budget - 1)
      push_tokens(from, last)
      budget = budget - (last - from + 1)
      if last < to then
        rest[#rest + 1] = (last + 1) .. '-' .. to
      end
    else
      rest[#rest + 1] = range
    end
  end
  if #rest > 0 then
    redis.call('SET', K_CREATING, 'R ' .. a .. ' ' .. table.concat(rest, ','))
    return 2
  end
  return finish_creation()
end
