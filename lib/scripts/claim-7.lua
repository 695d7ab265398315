--[[
  Sent right after BLMOVE AVAILABLE -> INBOX:<grant id> in the same pipeline, so Redis runs it the
  moment BLMOVE returns: turns the token in the inbox into a recorded grant, and ends the waiter's
  registration. A token that reaches an inbox whose registration is gone (reaped, or abandoned by
  recover.lua after a lost reply) goes back to AVAILABLE instead.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] EXISTS  KEYS[4] VERSION  KEYS[5] OWNERS  KEYS[6] WAITING
    KEYS[7] INBOX:<grant id>
    ARGV[1] grant id
    ARGV[2] local time in decimal seconds, or '' for Redis TIME
    ARGV[3] expiration in milliseconds, or '' for none
  Output: the token now held by this grant, or nil
]]
--- @include keys
--- @include clock
--- @include expiry
local inbox, grant = KEYS[7], ARGV[1]
local registered = redis.call('ZREM', K_WAITING, grant) == 1
redis.call('ZREM', K_WAITING, '~' .. grant)
local token = redis.call('LPOP', inbox)
if token and registered then
  local _, stamp = clock(ARGV[2])
  redis.call('HSET', K_GRABBED, token, stamp)
  redis.call('HSET', K_OWNERS, token, grant)
elseif token then
  redis.call('LPUSH', K_AVAILABLE, token)
  token = false
end
while redis.call('RPOPLPUSH', inbox, K_AVAILABLE) do end
touch_expiry(ARGV[3])
return token
