--[[
  Sent right after BLMOVE AVAILABLE -> INBOX:<registration id> in the same pipeline, so Redis runs it
  the moment BLMOVE returns. With a token in the inbox: records it as this grant's and, when no token
  is left free and the caller asked, keeps the registration for the caller's next wait (an advance
  registration: see DESIGN "Contended mode"), else ends it; but a token that reaches an inbox whose
  registration is gone (reaped, or abandoned by recover.lua after a lost reply) goes back to
  AVAILABLE instead. With an empty inbox (the slice ended): creates the semaphore if it vanished and
  reclaims stale holders, then renews the registration for the next slice, or ends it on the last slice.
  Keys: at most 13. A call passes AVAILABLE alone on a single Redis (the script names the
    others, the inbox too, after its prefix); on Cluster all 12, then the inbox.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS  KEYS[10] COLLECTING  KEYS[11] PENDING  KEYS[12] COLLECTED
    KEYS[#KEYS] INBOX:<registration id> (the 13th; not given with
            AVAILABLE alone, see includes/holder_keys.lua)
    ARGV[1] registration id
    ARGV[2] the grant id to record with a token (unique per grant; names the call this reply answers)
    ARGV[3] the caller's settings (includes/settings.lua): the lease recorded with a grant (also Ruby
            holders' stale timeout), resources, the registration's lifetime for the next slice ('-'
            on the last slice), whether to keep the registration after a grant while no token is
            free, expiration, the owner label
    ARGV[4] local time in decimal seconds, or '' (or absent: the usual case) for Redis TIME
  Output: one string, "<grant id> <fence> <flags> <n> <expired registration>… <token>": the grant id
    (ARGV[2]); the fencing number of the token this grant now holds, or 0 (none: the slice ended
    empty, or the token went back); two letters, K if the registration is still there (kept or
    renewed) else E (ended), and after a grant W if other registrations remain while no token is
    free (others wait) else N; how many waiter registrations are past their expiry, and their ids;
    then the token (last: any text), after a grant only. (Letters, so no other script's reply reads
    as this one's.)
]]
--- @include keys
--- @include clock
--- @include present
--- @include settings
--- @include grant
-- Helpers that only an empty slice, a sampled reclaim or `expiration` needs are included in the
-- block that uses them, so that a grant does not define them (see lib/redis/lua-source.ts).
local registration, grant, settings = ARGV[1], ARGV[2], settings_of(ARGV[3])
local inbox = K_PREFIX and K_PREFIX .. 'INBOX:' .. registration or KEYS[#KEYS]
local local_time, expiration = ARGV[4] or '', settings.expiration
-- ZRANK, not ZSCORE: Redis formats a score it replies with (a printf), and a rank is an integer; a
-- rank above 0 also says others are registered (the ZCARD below runs only at rank 0; ZREVRANK would
-- spare that too, but it is not in the minimal ACL the README documents).
local rank = redis.call('ZRANK', K_WAITING, registration)
local registered = rank ~= false
if not registered then
  redis.call('ZREM', K_WAITING, '~' .. registration)
end
if settings.permits > 1 then
--- @include give_back
--- @include drain
--- @include ensure
--- @include holder
--- @include reclaim
--- @include weighted
--- @include expiry
  local reply = collect(registration, grant, settings, inbox, local_time, registered)
  touch_expiry(expiration)
  return reply
end
local token = redis.call('LPOP', inbox)
-- Whether a token is left free, for a grant below, and whether LEASES exists (read here with the
-- existence mark_present needs).
local free, leases = false, true
if token then
  -- One call: EXISTS counts a key once per mention, 8 * exists + 4 * available + 2 * (the inbox
  -- still holds a token) + leases.
  local count = redis.call('EXISTS', K_EXISTS, K_EXISTS, K_EXISTS, K_EXISTS, K_EXISTS, K_EXISTS, K_EXISTS, K_EXISTS,
    K_AVAILABLE, K_AVAILABLE, K_AVAILABLE, K_AVAILABLE, inbox, inbox, K_LEASES)
  known_to_exist = count >= 8
  free, leases = count % 8 >= 4, count % 2 == 1
  if not known_to_exist then
    mark_present(token)
  end
  if not registered then
--- @include give_back
    give_back(token)
    token = false
  end
  -- The inbox holds one token, or more if a BLMOVE was sent again (a client's offline queue after a
  -- reconnect): the others go back. (LPOP with a count would do both in one call, but costs more
  -- than the two: its reply is an array.)
  if count % 4 >= 2 then
--- @include give_back
--- @include drain
    drain_inbox(inbox)
    free = true
  end
end
local renewed, others, fence, number = 'E', 'N', '0', 0
if token then
  fence, number = record_grant(token, grant, clock_stamp(local_time), settings.lease, settings.label, leases)
  -- Others wait if no token is left free (a free token means nobody is blocked) and registrations
  -- other than this one remain: a rank above 0 says so already, else ZCARD counts them. Both count
  -- abandoned '~' marks and lapsed registrations too: telling them apart costs a scan (ZRANGE) or
  -- float arguments (ZCOUNT).
  if not free and (rank > 0 or redis.call('ZCARD', K_WAITING) > 1) then
    others = 'W'
  end
  -- Then this caller's next lock would miss its tryLock: its registration stays for that next wait
  -- (an advance registration, used by it or removed by the caller when idle), which saves ending it
  -- now and making another then.
  if others == 'W' and settings.keep then
    renewed = 'K'
  else
    redis.call('ZREM', K_WAITING, registration)
  end
end
local expired = ' 0'
-- Waits that skip tryLock do not reclaim: one grant in 16 (fencing numbers count grants) does, and
-- so does every empty slice. (Ruby holders, which need a scan, are left to empty slices, misses and
-- the watchdog.) Dead waiters' tokens come back through empty slices, tryLock misses and the
-- watchdog, and on the hot path of grants through the same one claim in 16, so even a semaphore
-- whose waiters never see an empty slice gets them back.
if not token or number % 16 == 0 then
--- @include give_back
--- @include holder
--- @include reclaim
  local now = clock(local_time)
  if token then
    reclaim_stale(now, ruby_stale(settings.lease), 'never')
  else
    -- An empty slice also ends a weighted waiter's collection whose registration is gone (its
    -- waiter aborted, or died and was reaped): give_back.lua returns its tokens.
    give_back_target()
    if settings.lifetime then
--- @include ensure
      ensure(settings.resources)
      reclaim_stale(now, ruby_stale(settings.lease), 'unindexed')
    end
    if registered and settings.lifetime then
      redis.call('ZADD', K_WAITING, redis_now() + settings.lifetime, registration)
      renewed = 'K'
    else
      redis.call('ZREM', K_WAITING, registration)
    end
  end
  -- Tokens freed together wait in PENDING, handed on one at a time: a claim whose grant was made
  -- a sample (give_back.lua) hands on the next, as does an empty slice should that chain break.
  collection_keys()
  if redis.call('EXISTS', K_PENDING) == 1 then
    hand_on()
  end
  local ids = expired_waiters()
  if #ids > 0 then
    expired = ' ' .. #ids .. ' ' .. table.concat(ids, ' ')
  end
end
if expiration ~= '' then
--- @include expiry
  touch_expiry(expiration)
end
if token then
  return grant .. ' ' .. fence .. ' ' .. renewed .. others .. expired .. ' ' .. token
end
return grant .. ' 0 ' .. renewed .. 'N' .. expired
