-- The caller's settings: what is the same on every call of a semaphore, as one argument
-- (lib/redis/commands.ts `settings`), "<lease ms> <resources> <registration lifetime s, or -> <keep,
-- 1 or 0> <permits> <expiration ms, or -> <owner label>": the lease recorded with a grant ('0' for
-- none; also Ruby holders' stale timeout), the semaphore's size (to create it), how long a
-- registration lasts (- for none: lock(0), a wait's last slice), whether a grant keeps the
-- registration while others wait, how many tokens one grant takes (includes/weighted.lua),
-- `expiration`, and the label recorded with a grant (last: free text). One argument costs Redis
-- less than six, and the function library reads each distinct text once (LIBRARY_SETTINGS keeps at
-- most 64); a script run by EVALSHA reads it on every call.
local LIBRARY_SETTINGS
local function settings_of(text)
  local known = LIBRARY_SETTINGS
  local settings = known and known[text]
  if settings then
    return settings
  end
  local lease, resources, lifetime, keep, permits, expiration, label =
    string.match(text, '^(%d+) (%d+) (%S+) ([01]) (%d+) (%S+) (.*)$')
  if not lease then
    error('bad settings argument: ' .. text)
  end
  settings = {
    lease = lease,
    resources = tonumber(resources),
    lifetime = lifetime ~= '-' and tonumber(lifetime) or nil,
    keep = keep == '1',
    permits = tonumber(permits),
    expiration = expiration ~= '-' and expiration or '',
    label = label,
  }
  if known then
    if (known[1] or 0) >= 64 then
      for name in pairs(known) do
        known[name] = nil
      end
    end
    known[1] = (known[1] or 0) + 1
    known[text] = settings
  end
  return settings
end
