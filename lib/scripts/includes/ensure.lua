-- Creates the semaphore once: pushes the initial tokens "0".."resources-1" and sets EXISTS and VERSION.
-- Never deletes anything, so tokens signalled before creation survive, and skips initial tokens
-- that GRABBED records as held (a holder whose keys outlived EXISTS will push its own back).
-- Returns 1 when it created the semaphore.
local function ensure(resources)
  if redis.call('EXISTS', K_EXISTS) == 1 then
    return 0
  end
  local batch = {}
  for i = 0, resources - 1 do
    local token = tostring(i)
    if redis.call('HEXISTS', K_GRABBED, token) == 0 then
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
