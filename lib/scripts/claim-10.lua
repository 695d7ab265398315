--[[
  Sent right after BLMOVE AVAILABLE -> INBOX:<grant id> in the same pipeline, so Redis runs it the
  moment BLMOVE returns. With a token in the inbox: records it as this grant's and ends the
  registration, and when others are registered too, registers the advance registration id it was given (see
  DESIGN "Contended mode"); but a token that reaches an inbox whose registration is gone (reaped, or abandoned
  by recover-10.lua after a lost reply) goes back to AVAILABLE instead. With an empty inbox (the
  slice ended): creates the semaphore if it vanished and reclaims stale holders, then renews the
  registration for the next slice, or ends it on the last slice.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] EXISTS  KEYS[4] VERSION  KEYS[5] OWNERS  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] LEASES  KEYS[9] CREATING
    KEYS[10] INBOX:<grant id>
    ARGV[1] grant id
    ARGV[2] local time in decimal seconds, or '' for Redis TIME
    ARGV[3] expiration in milliseconds, or '' for none
    ARGV[4] resources
    ARGV[5] the caller's lease in ms ('0' for none): recorded with a grant; Ruby holders' stale timeout
    ARGV[6] the registration's expiry for the next slice, in seconds from now, or '' on the last slice
    ARGV[7] owner label recorded with the grant
    ARGV[8] a fresh id to register for the caller's next wait if others wait too, or '' for none
    ARGV[9] that registration's expiry, in seconds from now
  Output: { token held by this grant or nil, 1 if still registered else 0, fencing number or 0,
            after a grant, how many registrations remain while no token is free (else 0), the grant
            id (ARGV[1]: names the call this reply answers), expired waiter registration... }
]]
--- @include keys
--- @include clock
--- @include present
--- @include ensure
--- @include expiry
--- @include grant
--- @include reclaim
local inbox, grant, expiry, advance, advance_expiry = KEYS[10], ARGV[1], ARGV[6], ARGV[8] or '', ARGV[9] or ''
local now, stamp = clock(ARGV[2])
local registered = redis.call('ZSCORE', K_WAITING, grant) ~= false
if not registered then
  redis.call('ZREM', K_WAITING, '~' .. grant)
end
local token = redis.call('LPOP', inbox)
if token then
  mark_present(token)
  if not registered then
    redis.call('LPUSH', K_AVAILABLE, token)
    token = false
  end
  drain_inbox(inbox)
end
local renewed, fence, others = 0, 0, 0
if token then
  redis.call('ZREM', K_WAITING, grant)
  fence = record_grant(token, grant, stamp, ARGV[5], ARGV[7])
  -- Others wait if no token is left free (a free token means nobody is blocked) and registrations
  -- remain. ZCARD also counts abandoned '~' marks and lapsed registrations: telling them apart costs
  -- a scan (ZRANGE) or float arguments (ZCOUNT), 7-20% more Redis work per contended cycle.
  if redis.call('LLEN', K_AVAILABLE) == 0 then
    others = redis.call('ZCARD', K_WAITING)
  end
  if others > 0 and advance ~= '' then
    -- Others wait, so this caller's next lock would miss its tryLock: it is registered now instead
    -- (an advance registration, used by its next wait or removed), and stale holders are reclaimed as tryLock would.
    -- (Ruby holders, which need a scan, are left to empty slices, misses and the watchdog.)
    reclaim_stale(now, ruby_stale(ARGV[5]), 'never')
    redis.call('ZADD', K_WAITING, redis_now() + tonumber(advance_expiry), advance)
  end
else
  if expiry ~= '' then
    ensure(tonumber(ARGV[4]))
    reclaim_stale(now, ruby_stale(ARGV[5]), 'unindexed')
  end
  if registered and expiry ~= '' then
    redis.call('ZADD', K_WAITING, redis_now() + tonumber(expiry), grant)
    renewed = 1
  else
    redis.call('ZREM', K_WAITING, grant)
  end
end
touch_expiry(ARGV[3])
local reply = { token, renewed, fence, others, grant }
-- Dead waiters' tokens come back through empty slices, tryLock misses and the watchdog; on the hot
-- path of grants, one claim in 16 looks too (fencing numbers count grants), so even a semaphore
-- whose waiters never see an empty slice gets them back.
if not token or fence % 16 == 0 then
  for _, id in ipairs(expired_waiters()) do
    reply[#reply + 1] = id
  end
end
return reply
