-- Holder records. GRABBED[token] is the grant record
-- "<stamp> <grant id> <fence> <lease ms> <acquired stamp> <owner label>": the gem's float stamp first
-- (Ruby's `to_f` reads it and ignores the rest), the start of the holder's lease, renewed by every
-- refresh; the grant id that ownership checks compare; the fencing number; the holder's own lease
-- (its staleClientTimeout; 0 never goes stale), which every reclaimer honours; when the grant was
-- made (a refresh keeps it); and the holder's `owner` label (free text, last: it may be empty or
-- hold spaces). One HSET records a grant and one HDEL forgets it. A Ruby holder's value is a plain
-- stamp. GRABBED is the one source of truth for "is this grant still the holder".
-- OWNERS is no longer written: versions before this one kept the acquired stamp and the label
-- there, and wrote GRABBED as the first four fields only. Readers take such a record's acquired
-- stamp to be its stamp and its label to be ''; scripts that delete the semaphore still delete
-- OWNERS, and its old entries expire with the other keys.

-- LEASES indexes the grants of this library by when their lease ends (the stamp plus the lease, in
-- whole microseconds on the stamp's clock; +inf for no lease), so reclaim finds the due ones without
-- reading every holder. The canonical tokens "0".."15" (is_small) are never indexed: reclaim reads
-- their 16 records with one HMGET on every call instead (see reclaim.lua), which costs less than a
-- ZADD per grant, and a mutex or a small semaphore then never has a LEASES key at all. Every other
-- grant is indexed when it is made (and again by each refresh), with or without a lease. Ruby
-- holders are not in it (see reclaim.lua). An unlock that leaves its token the only free one leaves
-- the token's entry for its next grant to overwrite, so the index may also name a free token, or
-- one a Ruby client took since; a small token's grant removes an entry left by an older version (it
-- would stand for this grant with another's lease end), but only when LEASES exists, which the
-- grant's EXISTS call has already told it (the argument LEASES).
-- (An integer score, sent as digits, spares Redis the printf a fractional one or a Lua number costs
-- to store and to receive.) A lease past MAX_INDEXED_LEASE_MS (the library's are at most 2^31 - 1
-- ms; a longer one was written by someone else) is indexed at +inf, as '%d' of a larger score would
-- overflow into a due one.
local MAX_INDEXED_LEASE_MS = 1e12
local function lease_score(stamp, lease)
  local ms = tonumber(lease)
  if ms > 0 and ms <= MAX_INDEXED_LEASE_MS then
    return string.format('%d', math.floor(tonumber(stamp) * 1000000 + 0.5) + ms * 1000)
  end
  return '+inf'
end
local function index_lease(token, stamp, lease)
  redis.call('ZADD', K_LEASES, lease_score(stamp, lease), token)
end

-- Whether TOKEN is one of the canonical tokens "0".."15", which LEASES never indexes (string
-- comparisons: no number is made).
local function is_small(token)
  local n = #token
  if n == 1 then
    return token >= '0' and token <= '9'
  end
  return n == 2 and token >= '10' and token <= '15'
end

-- Records TOKEN as held by GRANT since STAMP with a lease of LEASE_MS (whole milliseconds in digits,
-- as lib/redis/commands.ts sends it; '' or nil for none) for the owner LABEL, and indexes it (see
-- above; LEASES: whether the LEASES key may exist). Returns its fencing number, as digits (the form
-- the record and a reply carry) and as a number.
local function record_grant(token, grant, stamp, lease_ms, label, leases)
  if (lease_ms or '') == '' then
    lease_ms = '0'
  end
  -- The next fencing number: FENCE is INCRed for every grant. Created (or re-created after the keys
  -- expired, were deleted, or lost in a restart) at Redis TIME in microseconds, so numbers keep
  -- growing across those resets as long as Redis' clock does and fewer than a million grants a
  -- second were made since the counter was created. (Inline: a Lua call costs Redis instructions.)
  local number = redis.call('INCR', K_FENCE)
  if number == 1 then
    -- INCR just created it: seed it instead (3 calls, once per reset; 1 call on every other grant).
    local t = redis.call('TIME')
    redis.call('SET', K_FENCE, t[1] .. string.format('%06d', tonumber(t[2])))
    number = redis.call('INCR', K_FENCE)
  end
  local fence = string.format('%d', number)
  redis.call('HSET', K_GRABBED, token, stamp .. ' ' .. grant .. ' ' .. fence .. ' ' .. lease_ms .. ' ' .. stamp .. ' ' .. (label or ''))
  if not is_small(token) then
    index_lease(token, stamp, lease_ms)
  elseif leases then
    redis.call('ZREM', K_LEASES, token)
  end
  return fence, number
end
