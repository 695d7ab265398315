-- Creates the semaphore once: pushes the initial tokens "0".."resources-1" and sets EXISTS and VERSION.
-- Never deletes anything, so tokens signalled before creation survive. It runs when EXISTS is missing,
-- which after a partial loss of keys (eviction) may leave tokens behind: it skips every initial token
-- that GRABBED records as held or that is still on AVAILABLE, so it never duplicates one.
-- Returns 1 when it created the semaphore.
local function ensure(resources)
  if redis.call('EXISTS', K_EXISTS) == 1 then
    return 0
  end
  local partial = redis.call('EXISTS', K_AVAILABLE) == 1 or redis.call('EXISTS', K_GRABBED) == 1
  local batch = {}
  for i = 0, resources - 1 do
    local token = tostring(i)
    if not partial or (redis.call('HEXISTS', K_GRABBED, token) == 0
        and redis.call('LPOS', K_AVAILABLE, token) == false) then
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
  redis.call('SET', K_EXISTS, '1')
  redis.call('SET', K_VERSION, '1')
  return 1
end
