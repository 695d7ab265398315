-- Creates the semaphore: pushes the initial tokens "0".."resources-1", then sets EXISTS and VERSION.
-- In batches of at most ENSURE_BATCH tokens per script, so that a large semaphore never blocks Redis
-- for long: CREATING holds "<next token> <target> <partial>" between batches, and every script that
-- ensures (tryLock, prepareWait, claim, signal, create) pushes the next batch while EXISTS is
-- missing. Between batches the pool is consistent: every token pushed so far is in exactly one place
-- and usable, the rest are not there yet, and no token is pushed twice (CREATING advances in the
-- same script that pushes). Never deletes anything, so tokens signalled before creation survive.
-- When creation starts with AVAILABLE or GRABBED already there (a partial loss of keys, such as
-- eviction: `partial`), it skips every initial token that GRABBED records as held or that is on
-- AVAILABLE (read once per batch into a set: no per-token list scan), so it never duplicates one.
-- Returns 0 when the semaphore existed, 1 when this call completed it, 2 when batches remain.
local ENSURE_BATCH = 10000

local function ensure(resources)
  if redis.call('EXISTS', K_EXISTS) == 1 then
    return 0
  end
  local next_token, target, partial
  local cursor = redis.call('GET', K_CREATING)
  if cursor then
    next_token, target, partial = string.match(cursor, '^(%d+) (%d+) (%d)$')
    next_token, target, partial = tonumber(next_token), tonumber(target), partial == '1'
  end
  if not next_token then
    next_token, target = 0, resources
    partial = redis.call('EXISTS', K_AVAILABLE) == 1 or redis.call('EXISTS', K_GRABBED) == 1
  end
  local last = math.min(target, next_token + ENSURE_BATCH) - 1
  local free = {}
  if partial then
    for _, token in ipairs(redis.call('LRANGE', K_AVAILABLE, 0, -1)) do
      free[token] = true
    end
  end
  local batch = {}
  for i = next_token, last do
    local token = tostring(i)
    if not partial or (not free[token] and redis.call('HEXISTS', K_GRABBED, token) == 0) then
      batch[#batch + 1] = token
      if #batch == 1000 then
        redis.call('RPUSH', K_AVAILABLE, unpack(batch))
        batch = {}
      end
    end
  end
  if #batch > 0 then
    redis.call('RPUSH', K_AVAILABLE, unpack(batch))
  end
  if last + 1 < target then
    redis.call('SET', K_CREATING, string.format('%d %d %d', last + 1, target, partial and 1 or 0))
    return 2
  end
  redis.call('DEL', K_CREATING)
  redis.call('SET', K_EXISTS, '1')
  redis.call('SET', K_VERSION, '1')
  return 1
end
