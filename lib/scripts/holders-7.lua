--[[
  A consistent snapshot of who holds the semaphore and how many wait, for holders() and waiting().
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] EXISTS  KEYS[4] VERSION  KEYS[5] OWNERS  KEYS[6] WAITING  KEYS[7] FENCE
  Output: { Redis TIME as "sec.usec", registered waiters whose lease runs,
            then for each held token: token, GRABBED stamp, OWNERS value or nil }
]]
--- @include keys
--- @include clock
local now, stamp = clock('')
local waiters = 0
for _, registration in ipairs(redis.call('ZRANGEBYSCORE', K_WAITING, now, '+inf')) do
  if string.sub(registration, 1, 1) ~= '~' then
    waiters = waiters + 1
  end
end
local reply = { stamp, waiters }
local grabbed = redis.call('HGETALL', K_GRABBED)
for i = 1, #grabbed, 2 do
  reply[#reply + 1] = grabbed[i]
  reply[#reply + 1] = grabbed[i + 1]
  reply[#reply + 1] = redis.call('HGET', K_OWNERS, grabbed[i])
end
return reply
