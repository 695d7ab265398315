--[[
  lock's first step: takes a free token at once and records its holder. On a miss, registers the
  caller as a waiter (with an expiry, as prepareWait.lua does) so that its BLMOVE can follow at once.
  Creates the semaphore if needed (a batch of it, see includes/ensure.lua) and, when no token is
  free, first reclaims holders whose lease is over.
  Never jumps ahead of a waiter blocked in BLMOVE: a free token means nobody is blocked (Redis
  serves them the moment a token is pushed), and a token this script reclaims is left for the
  longest-blocked waiter unless no waiter is registered.
  Keys: at most 12. A call passes AVAILABLE alone on a single Redis (the script names the
    others after its prefix: includes/holder_keys.lua); on Cluster all 12.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS  KEYS[10] COLLECTING  KEYS[11] PENDING  KEYS[12] COLLECTED
    ARGV[1] grant id: the owner recorded for the token (and the registration's id on a miss)
    ARGV[2] the caller's settings (includes/settings.lua): the lease recorded with a grant (also the
            stale timeout of Ruby holders it reclaims), resources, the registration's lifetime on a
            miss ('-' not to register: lock(0)), expiration, the owner label
    ARGV[3] local time in decimal seconds, or '' (or absent: the usual case) for Redis TIME
  Output: one string, "<grant id> <fence> <n> <expired registration>… <token>": the grant id
    (ARGV[1]) names the call this reply answers (see lib/redis/commands.ts); on a hit the token's
    fencing number, 0 and the token (last: any text; a weighted grant's tokens, includes/weighted.lua);
    on a miss fence 0, then how many waiter registrations are past their expiry (after a C when a
    weighted miss parked the tokens that were free for the caller) and their ids, and no token
]]
--- @include keys
--- @include clock
--- @include present
--- @include ensure
--- @include settings
--- @include grant
local grant, settings = ARGV[1], settings_of(ARGV[2])
local local_time, expiration = ARGV[3] or '', settings.expiration
-- Looked up before LPOP: a script's first write decides whether Redis refuses it when out of memory
-- (and LPOP counts as one even on an empty list), so a miss must reach its ZADD with no write before.
-- One call says whether the semaphore exists, whether a token is free and whether LEASES exists
-- (EXISTS counts a key once per mention: 4 * exists + 2 * available + leases).
local count = redis.call('EXISTS', K_EXISTS, K_EXISTS, K_EXISTS, K_EXISTS, K_AVAILABLE, K_AVAILABLE, K_LEASES)
known_to_exist = count >= 4
local may_take, leases = count >= 6, count % 2 == 1
if not known_to_exist then
  ensure(settings.resources)
  may_take, leases = redis.call('LLEN', K_AVAILABLE) > 0, true
end
-- k permits: k free, and no waiter collecting them (includes/give_back.lua).
local permits = settings.permits
if permits > 1 and may_take then
  may_take = not redis.call('HGET', K_COLLECTING, 'registration') and redis.call('LLEN', K_AVAILABLE) >= permits
end
local expired = nil
if not may_take then
  -- A miss. Helpers only it needs are included here, so that a hit does not define them (see
  -- lib/redis/lua-source.ts). Stale holders matter only when no token is free: a hit reclaims nothing.
--- @include give_back
--- @include holder
--- @include reclaim
  -- Tokens freed together wait in PENDING for the waiters (give_back.lua); with none left, they are free.
  collection_keys()
  local parked = redis.call('EXISTS', K_PENDING) == 1
  if parked then
    hand_on()
  end
  if reclaim_stale(clock(local_time), ruby_stale(settings.lease), 'unindexed') > 0 or parked then
    -- (Freed tokens may have gone to a collector, or wait in PENDING: only AVAILABLE's are free.)
    may_take = redis.call('ZCOUNT', K_WAITING, redis_now(), '+inf') == 0 and redis.call('LLEN', K_AVAILABLE) > 0
    if may_take and permits > 1 then
      may_take = not redis.call('HGET', K_COLLECTING, 'registration') and redis.call('LLEN', K_AVAILABLE) >= permits
    end
    leases = true
  end
  -- Only a caller that will wait needs the tokens of dead waiters back; a hit skips the lookup.
  if not may_take then
    expired = expired_waiters()
  end
end
local reply
if may_take and permits > 1 then
--- @include weighted
  local tokens = pop_list(K_AVAILABLE, permits)
  if not known_to_exist then
    for _, token in ipairs(tokens) do
      mark_present(token)
    end
  end
  local fence = record_grants(tokens, grant, clock_stamp(local_time), settings.lease, settings.label)
  reply = grant .. ' ' .. fence .. ' 0 ' .. encode_tokens(tokens)
elseif may_take then
  local token = redis.call('LPOP', K_AVAILABLE)
  if not known_to_exist then
    mark_present(token)
  end
  local fence = record_grant(token, grant, clock_stamp(local_time), settings.lease, settings.label, leases)
  reply = grant .. ' ' .. fence .. ' 0 ' .. token
else
  local parked = ''
  if settings.lifetime then
    redis.call('ZADD', K_WAITING, redis_now() + settings.lifetime, grant)
    if permits > 1 then
      redis.call('HSET', K_COLLECTING, '#' .. grant, permits) -- a weighted waiter (includes/give_back.lua)
      -- Fewer than k free: nobody is blocked, so this waiter heads Redis' queue. They wait for it in
      -- PENDING (a lock's fast path would take them before its BLMOVE arrives), and its first slice's
      -- prepareWait hands one on, right before that BLMOVE (prepareWait.lua).
      if redis.call('LLEN', K_AVAILABLE) > 0 and not redis.call('HGET', K_COLLECTING, 'registration') then
        local pending = K_PENDING or K_PREFIX .. 'PENDING'
        local token = redis.call('RPOPLPUSH', K_AVAILABLE, pending)
        while token do
          token = redis.call('RPOPLPUSH', K_AVAILABLE, pending)
        end
        parked = 'C'
      end
    end
  end
  reply = grant .. ' 0 ' .. parked .. #expired
  if #expired > 0 then
    reply = reply .. ' ' .. table.concat(expired, ' ')
  end
end
if expiration ~= '' then
--- @include expiry
  touch_expiry(expiration)
end
return reply
