--[[
  Gives back (includes/give_back.lua) the tokens left in the inboxes of waiter registrations that
  have expired (a waiter that died between BLMOVE and its claim), and removes those registrations
  (and a weighted waiter's COLLECTING entry), ending the partial collection of one among them. Checks each
  expiry again here, so a registration renewed since it was reported is left alone. An abandoned
  mark's inbox ('~<grant id>', see recover.lua) is drained whenever asked; the mark itself stays
  until it expires.
  Keys: 12, then one inbox per registration in ARGV[2..].
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS  KEYS[10] COLLECTING  KEYS[11] PENDING  KEYS[12] COLLECTED
    KEYS[13..] INBOX:<grant id> of each registration in ARGV[2..], in the same order
    ARGV[1] expiration in milliseconds, or '' for none
    ARGV[2..] registrations ('<grant id>' or '~<grant id>'); expiries are checked on Redis TIME
  Output: how many tokens of inboxes went back
]]
--- @include keys
--- @include clock
--- @include expiry
--- @include present
--- @include give_back
--- @include drain
local now = redis_now()
local returned = 0
for i = 2, #ARGV do
  local expiry = tonumber(redis.call('ZSCORE', K_WAITING, ARGV[i]))
  local over = expiry ~= nil and expiry <= now
  -- Nothing ever claims from an abandoned inbox (claim.lua bounces, recover.lua adopts by
  -- GRABBED only, prepareWait.lua refuses the id), so its tokens may go back at any time.
  if over or (expiry ~= nil and string.sub(ARGV[i], 1, 1) == '~') then
    local inbox = KEYS[11 + i]
    returned = returned + drain_inbox(inbox)
  end
  if over then
    redis.call('ZREM', K_WAITING, ARGV[i])
    redis.call('HDEL', K_COLLECTING, '#' .. ARGV[i]) -- a weighted waiter's entry (give_back.lua)
  end
end
-- A collection whose registration went here ends now (give_back.lua), and tokens freed together
-- that wait in PENDING are handed on (all of them once no weighted waiter is left).
GIVE_BACK = nil
give_back_target()
collection_keys()
if redis.call('EXISTS', K_PENDING) == 1 then
  hand_on()
end
touch_expiry(ARGV[1])
return returned
