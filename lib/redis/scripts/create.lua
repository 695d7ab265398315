--[[
  existsOrCreate: creates the semaphore if it does not exist (see includes/ensure.lua), and sets a
  missing VERSION on one that does (as the gem does).
  Keys: 12.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS  KEYS[10] COLLECTING  KEYS[11] PENDING  KEYS[12] COLLECTED
    ARGV[1] resources
    ARGV[2] expiration in milliseconds, or '' for none
  Output: 1 when it created the semaphore, 0 when it existed, 2 when batches of a large creation
    remain (see includes/ensure.lua: the caller calls again)
]]
--- @include keys
--- @include present
--- @include ensure
--- @include expiry
local created = ensure(tonumber(ARGV[1]))
-- As the gem's exists_or_create! does: an existing semaphore whose VERSION was lost gets it back.
if created == 0 then
  redis.call('SET', K_VERSION, '1', 'NX')
end
touch_expiry(ARGV[2])
return created
