--[[
  Sent right after BLMOVE AVAILABLE -> INBOX:<registration id> in the same pipeline, so Redis runs it
  the moment BLMOVE returns. With a token in the inbox: records it as this grant's and, when no token
  is left free and the caller asked, keeps the registration for the caller's next wait (an advance
  registration: see DESIGN "Contended mode"), else ends it; but a token that reaches an inbox whose
  registration is gone (reaped, or abandoned by recover.lua after a lost reply) goes back to
  AVAILABLE instead. With an empty inbox (the slice ended): creates the semaphore if it vanished and
  reclaims stale holders, then renews the registration for the next slice, or ends it on the last slice.
  Keys: at most 10. A call passes AVAILABLE alone on a single Redis (the script names the
    others, the inbox too, after its prefix); on Cluster 8 or 9 as tryLock.lua does, then the inbox.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS
    KEYS[#KEYS] INBOX:<registration id> (the 10th, or the 9th when OWNERS is left out; not given with
            AVAILABLE alone, see includes/holder_keys.lua)
    ARGV[1] registration id
    ARGV[2] resources
    ARGV[3] the caller's lease in ms ('0' for none): recorded with a grant; Ruby holders' stale timeout
    ARGV[4] the registration's expiry for the next slice, in seconds from now, or '' on the last slice
    ARGV[5] owner label recorded with the grant
    ARGV[6] the grant id to record with a token (unique per grant; names the call this reply answers),
            or '' (or absent) for the registration id
    ARGV[7] '1' to keep the registration after a grant while no token is free, '' (or absent) to end it
    ARGV[8] local time in decimal seconds, or '' (or absent) for Redis TIME
    ARGV[9] expiration in milliseconds, or '' (or absent) for none
    (The last two are left out when '', the usual case.)
  Output: { token held by this grant or nil, 1 if still registered else 0, fencing number or 0,
            after a grant, how many other registrations remain while no token is free (else 0), the grant id,
            expired waiter registration... }
]]
--- @include keys
--- @include clock
--- @include present
--- @include grant
-- Helpers that only an empty slice, a sampled reclaim or `expiration` needs are included in the
-- block that uses them, so that a grant does not define them (see lib/redis/lua-source.ts).
local registration, expiry, keep = ARGV[1], ARGV[4], ARGV[7]
local inbox = K_PREFIX and K_PREFIX .. 'INBOX:' .. registration or KEYS[#KEYS]
local local_time, expiration = ARGV[8] or '', ARGV[9] or ''
local grant = ARGV[6] or ''
if grant == '' then
  grant = registration
end
local stamp = clock_stamp(local_time)
-- ZRANK, not ZSCORE: Redis formats a score it replies with (a printf), and a rank is an integer.
local registered = redis.call('ZRANK', K_WAITING, registration) ~= false
if not registered then
  redis.call('ZREM', K_WAITING, '~' .. registration)
end
local token = redis.call('LPOP', inbox)
-- Whether a token is left free, for a grant below (read here with the existence mark_present needs).
local free = false
if token then
  local _, available, more = exists_and_available(inbox)
  free = available
  mark_present(token)
  if not registered then
    redis.call('LPUSH', K_AVAILABLE, token)
    token = false
  end
  -- The inbox holds one token, or more if a BLMOVE was sent again (a client's offline queue after a
  -- reconnect): the others go back. (LPOP with a count would do both in one call, but costs more
  -- than the two: its reply is an array.)
  if more then
--- @include drain
    drain_inbox(inbox)
    free = true
  end
end
local renewed, fence, others = 0, 0, 0
if token then
  fence = record_grant(token, grant, stamp, ARGV[3], ARGV[5])
  -- Others wait if no token is left free (a free token means nobody is blocked) and registrations
  -- other than this one remain. ZCARD also counts abandoned '~' marks and lapsed registrations:
  -- telling them apart costs a scan (ZRANGE) or float arguments (ZCOUNT).
  if not free then
    others = redis.call('ZCARD', K_WAITING) - 1
  end
  -- Then this caller's next lock would miss its tryLock: its registration stays for that next wait
  -- (an advance registration, used by it or removed by the caller when idle), which saves ending it
  -- now and making another then.
  if others > 0 and keep == '1' then
    renewed = 1
  else
    redis.call('ZREM', K_WAITING, registration)
  end
end
local reply = { token, renewed, fence, others, grant }
-- Waits that skip tryLock do not reclaim: one grant in 16 (fencing numbers count grants) does, and
-- so does every empty slice. (Ruby holders, which need a scan, are left to empty slices, misses and
-- the watchdog.) Dead waiters' tokens come back through empty slices, tryLock misses and the
-- watchdog, and on the hot path of grants through the same one claim in 16, so even a semaphore
-- whose waiters never see an empty slice gets them back.
if not token or fence % 16 == 0 then
--- @include holder
--- @include reclaim
  local now = clock(local_time)
  if token then
    reclaim_stale(now, ruby_stale(ARGV[3]), 'never')
  else
    if expiry ~= '' then
--- @include ensure
      ensure(tonumber(ARGV[2]))
      reclaim_stale(now, ruby_stale(ARGV[3]), 'unindexed')
    end
    if registered and expiry ~= '' then
      redis.call('ZADD', K_WAITING, redis_now() + tonumber(expiry), registration)
      reply[2] = 1
    else
      redis.call('ZREM', K_WAITING, registration)
    end
  end
  for _, id in ipairs(expired_waiters()) do
    reply[#reply + 1] = id
  end
end
if expiration ~= '' then
--- @include expiry
  touch_expiry(expiration)
end
return reply
