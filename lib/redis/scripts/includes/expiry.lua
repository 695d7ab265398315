-- Applies the `expiration` option. While a token is held, no key has a TTL, so a semaphore never
-- disappears under its holders. Otherwise every key gets one absolute deadline (PEXPIREAT, so they
-- all expire in the same millisecond and no script can see some gone and others not): `expiration`
-- from now, or the last waiter registration's expiry if later (both on Redis TIME), so
-- the keys never expire under a registered waiter, and a dead waiter's registration cannot keep them
-- forever. Inbox keys get no TTL: they are empty but for the instant between BLMOVE and claim.
-- OWNERS (old data: no script writes or reads it any more, see grant.lua) gets the deadline too,
-- so it goes with the rest, but is never made persistent; so do a weighted wait's keys
-- (give_back.lua), which exist only while a waiter is registered.
-- EXPIRATION_MS is '' when the option is off.
local function touch_expiry(expiration_ms)
  if expiration_ms == '' then
    return
  end
  local keys = { K_AVAILABLE, K_GRABBED, K_EXISTS, K_VERSION, K_WAITING, K_FENCE, K_LEASES, K_CREATING }
  if redis.call('HLEN', K_GRABBED) > 0 then
    for _, key in ipairs(keys) do
      redis.call('PERSIST', key)
    end
    return
  end
  keys[#keys + 1] = K_OWNERS or K_PREFIX .. 'OWNERS'
  keys[#keys + 1] = K_COLLECTING or K_PREFIX .. 'COLLECTING'
  keys[#keys + 1] = K_PENDING or K_PREFIX .. 'PENDING'
  keys[#keys + 1] = K_COLLECTED or K_PREFIX .. 'COLLECTED'
  local t = redis.call('TIME')
  local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(expiration_ms)
  local last = redis.call('ZRANGE', K_WAITING, -1, -1, 'WITHSCORES')
  if last[2] then
    deadline = math.max(deadline, math.ceil(tonumber(last[2]) * 1000) + 1000)
  end
  for _, key in ipairs(keys) do
    redis.call('PEXPIREAT', key, string.format('%d', deadline))
  end
end
