-- Emptying an inbox. Needs includes/present.lua before it. (An include of its own: claim.lua
-- defines it only when an inbox holds more than the token it claims, see lib/redis/lua-source.ts.)

-- Moves every token left in `inbox` onto AVAILABLE's head, marking each; returns how many.
local function drain_inbox(inbox)
  local moved = 0
  local token = redis.call('RPOPLPUSH', inbox, K_AVAILABLE)
  while token do
    mark_present(token)
    moved = moved + 1
    token = redis.call('RPOPLPUSH', inbox, K_AVAILABLE)
  end
  return moved
end
