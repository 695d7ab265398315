-- Reading and ending this library's grant records in GRABBED (their format: see grant.lua).

-- Forgets TOKEN's holder: its record and lease (the caller pushes or drops the token).
local function forget_holder(token)
  redis.call('HDEL', K_GRABBED, token)
  redis.call('ZREM', K_LEASES, token)
end

-- A GRABBED value's parts: stamp, grant id, fence, lease ms, acquired stamp, owner label (strings;
-- a four-field record from an earlier version gives its stamp and ''); nil for a Ruby holder's
-- plain stamp (or anything else this library did not write).
local function parse_grant(value)
  if not value then
    return nil
  end
  local stamp, grant, fence, lease, acquired, label = string.match(value, '^(%S+) (%S+) (%d+) (%d+) (%S+) (.*)$')
  if stamp then
    return stamp, grant, fence, lease, acquired, label
  end
  stamp, grant, fence, lease = string.match(value, '^(%S+) (%S+) (%d+) (%d+)$')
  if stamp then
    return stamp, grant, fence, lease, stamp, ''
  end
  return nil
end

-- The grant id a GRABBED value names (its second field, in every record this library wrote: both
-- formats above), or nil.
local function holder_grant(value)
  if not value then
    return nil
  end
  return string.match(value, '^%S+ (%S+) ')
end

-- Whether GRABBED value VALUE (or false) names GRANT as its holder: its second field is GRANT.
-- Release's hot path: a plain find and a compare, where a pattern match makes a capture (a string
-- Redis makes and collects) of each field it returns.
local function holds(value, grant)
  if not value then
    return false
  end
  local space = string.find(value, ' ', 1, true)
  return space ~= nil and string.sub(value, space + 1, space + #grant + 1) == grant .. ' '
end
