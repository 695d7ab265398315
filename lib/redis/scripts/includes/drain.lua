-- Emptying an inbox. Needs includes/present.lua and give_back.lua before it. (An include of its own: claim.lua
-- defines it only when an inbox holds more than the token it claims, see lib/redis/lua-source.ts.)

-- Gives back every token left in `inbox` (onto AVAILABLE's head, or to a collector: give_back.lua),
-- marking each; returns how many.
local function drain_inbox(inbox)
  local moved = 0
  local target = give_back_target()
  local token = redis.call('RPOPLPUSH', inbox, target)
  while token do
    mark_present(token)
    moved = moved + 1
    token = redis.call('RPOPLPUSH', inbox, target)
  end
  return moved
end
