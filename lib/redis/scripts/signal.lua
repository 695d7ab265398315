--[[
  signal: puts a token, or any string (a job), at the tail of AVAILABLE (RPUSH), behind every free
  token and earlier job: waiters take from the head, so jobs are served in the order they were
  signalled (a token an unlock pushes goes to the head). Redis hands the head to the longest-blocked
  waiter right after this script. Creates the semaphore first if needed, so a later creation can
  never wipe it. If the token was held, its holder record goes, and that
  holder's unlock then changes nothing (no token is ever pushed twice by one grant).
  Keys: 12.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS  KEYS[10] COLLECTING  KEYS[11] PENDING  KEYS[12] COLLECTED
    ARGV[1] token
    ARGV[2] resources
    ARGV[3] expiration in milliseconds, or '' for none
  Output: the new length of AVAILABLE
]]
--- @include keys
--- @include present
--- @include ensure
--- @include grant
--- @include give_back
--- @include holder
--- @include expiry
local token = ARGV[1]
ensure(tonumber(ARGV[2]))
forget_holder(token)
mark_present(token)
local target = give_back_target()
local available = redis.call('RPUSH', target, token)
if target ~= K_AVAILABLE then
  available = redis.call('LLEN', K_AVAILABLE)
end
touch_expiry(ARGV[3])
return available
