--[[
  Returns to AVAILABLE the tokens left in the inboxes of waiter registrations whose lease is over
  (a waiter that died between BLMOVE and its claim), and removes those registrations. Checks each
  lease again here, so a registration renewed since it was reported is left alone.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] EXISTS  KEYS[4] VERSION  KEYS[5] OWNERS  KEYS[6] WAITING
    KEYS[7..] INBOX:<grant id> of each registration in ARGV[3..], in the same order
    ARGV[1] local time in decimal seconds, or '' for Redis TIME
    ARGV[2] expiration in milliseconds, or '' for none
    ARGV[3..] registrations ('<grant id>' or '~<grant id>')
  Output: how many tokens went back to AVAILABLE
]]
--- @include keys
--- @include clock
--- @include expiry
local now = clock(ARGV[1])
local returned = 0
for i = 3, #ARGV do
  local lease = tonumber(redis.call('ZSCORE', K_WAITING, ARGV[i]))
  if lease and lease <= now then
    local inbox = KEYS[4 + i]
    while redis.call('RPOPLPUSH', inbox, K_AVAILABLE) do
      returned = returned + 1
    end
    redis.call('ZREM', K_WAITING, ARGV[i])
  end
end
touch_expiry(ARGV[2])
return returned
