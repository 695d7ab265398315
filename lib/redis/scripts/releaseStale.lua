--[[
  releaseStaleLocks: returns every token whose holder's lease is over to AVAILABLE (waking blocked
  waiters), and reports waiter registrations that have expired.
  Keys: 12.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS  KEYS[10] COLLECTING  KEYS[11] PENDING  KEYS[12] COLLECTED
    ARGV[1] local time in decimal seconds, or '' for Redis TIME
    ARGV[2] stale timeout in ms for Ruby holders (plain stamps), or '0' to leave them alone;
            grants of this library go stale by their own lease
    ARGV[3] expiration in milliseconds, or '' for none
  Output: { tokens returned, expired waiter registration... }
]]
--- @include keys
--- @include clock
--- @include expiry
--- @include present
--- @include grant
--- @include give_back
--- @include holder
--- @include reclaim
local now = clock(ARGV[1])
local reply = { reclaim_stale(now, ruby_stale(ARGV[2]), 'always') }
-- Tokens freed together that wait in PENDING are handed on (give_back.lua): the watchdog's rounds
-- free them should no claim be left to (all of them once no weighted waiter is left).
collection_keys()
if redis.call('EXISTS', K_PENDING) == 1 then
  hand_on()
end
touch_expiry(ARGV[3])
for _, id in ipairs(expired_waiters()) do
  reply[#reply + 1] = id
end
return reply
