-- The tokens a re-creation has found ("present"; see includes/ensure.lua): while EXISTS is missing
-- and CREATING is a scan's header (HEADER bytes) and bitmap, bit HEADER * 8 + n marks token n.
local HEADER = 64

-- Returns mark(tokens, target, step), which sets the bits of the initial tokens among tokens[1],
-- tokens[1 + step], … (only canonical names below target, "0" or "17", are initial tokens; "007" or
-- "1e3" are jobs). Made on demand: only a re-creation marks, and defining functions on every run
-- costs Redis instructions (npm run bench:instructions).
local function marker()
  local function token_number(token, target)
    local n = tonumber(token)
    if n and n >= 0 and n < target and n % 1 == 0 and tostring(n) == token then
      return n
    end
    return nil
  end
  return function(tokens, target, step)
    for i = 1, #tokens, step do
      local n = token_number(tokens[i], target)
      if n then
        redis.call('SETBIT', K_CREATING, HEADER * 8 + n, 1)
      end
    end
  end
end

-- Whether this script already knows EXISTS is set (ensure() returned 0, or an EXISTS call of the
-- script said so: tryLock.lua, claim.lua): mark_present then skips its lookup.
local known_to_exist = false

-- Called by every script that moves `token` into GRABBED or from an inbox onto AVAILABLE: during a
-- re-creation, marks it present (see above). Costs one EXISTS when the semaphore exists.
local function mark_present(token)
  if known_to_exist or redis.call('EXISTS', K_EXISTS) == 1 then
    return
  end
  local target = string.match(redis.call('GETRANGE', K_CREATING, 0, HEADER - 1), '^[GAP] (%d+) ')
  if target then
    marker()({ token }, tonumber(target), 1)
  end
end
