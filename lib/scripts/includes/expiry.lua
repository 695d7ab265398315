-- Applies the `expiration` option: every key of the semaphore gets the TTL while nothing is held
-- and nobody is registered as waiting, and none has a TTL otherwise, so a semaphore never
-- disappears under its holders. EXPIRATION_MS is '' when the option is off.
local function touch_expiry(expiration_ms)
  if expiration_ms == '' then
    return
  end
  local idle = redis.call('HLEN', K_GRABBED) == 0 and redis.call('ZCARD', K_WAITING) == 0
  for _, key in ipairs({ K_AVAILABLE, K_GRABBED, K_EXISTS, K_VERSION, K_OWNERS, K_WAITING }) do
    if idle then
      redis.call('PEXPIRE', key, expiration_ms)
    else
      redis.call('PERSIST', key)
    end
  end
end
