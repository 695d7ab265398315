--[[
  An operator frees a held token (CLI `release`, the dashboard's release button): forgets its holder
  and puts it back on AVAILABLE, where Redis hands it to the longest-blocked waiter right after this
  script. The old holder's unlock and refresh then find their grant gone and change nothing (as
  after a stale reclaim, see release.lua), so the token is never pushed twice. A token that is not
  held is refused: pushing it would add a token. No expiry is touched (the operator does not know
  the clients' `expiration`); the next client call sets it.
  Keys: 12.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS  KEYS[10] COLLECTING  KEYS[11] PENDING  KEYS[12] COLLECTED
    ARGV[1] token
    ARGV[2] the grant id the operator saw holding it, or '' for whoever holds it now
  Output: the new length of AVAILABLE; -1 when the token is not held; -2 when another grant than
  ARGV[2] holds it now (released and taken again since the operator looked)
]]
--- @include keys
--- @include present
--- @include grant
--- @include give_back
--- @include holder
local token, expected = ARGV[1], ARGV[2]
if redis.call('HEXISTS', K_GRABBED, token) == 0 then
  return -1
end
if expected ~= '' and holder_grant(redis.call('HGET', K_GRABBED, token)) ~= expected then
  return -2
end
forget_holder(token)
local target = give_back_target()
local length = redis.call('LPUSH', target, token)
if target ~= K_AVAILABLE then
  return redis.call('LLEN', K_AVAILABLE)
end
return length
