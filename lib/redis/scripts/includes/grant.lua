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

-- The next fencing number: FENCE is INCRed for every grant. Created (or re-created after the keys
-- expired, were deleted, or lost in a restart) at Redis TIME in microseconds, so numbers keep
-- growing across those resets as long as Redis' clock does and fewer than a million grants a second
-- were made since the counter was created.
local function next_fence()
  local fence = redis.call('INCR', K_FENCE)
  if fence == 1 then
    -- INCR just created it: seed it instead (3 calls, once per reset; 1 call on every other grant).
    local t = redis.call('TIME')
    redis.call('SET', K_FENCE, t[1] .. string.format('%06d', tonumber(t[2])))
    fence = redis.call('INCR', K_FENCE)
  end
  return fence
end

-- LEASES indexes the grants of this library by when their lease ends (the stamp plus the lease, in
-- whole microseconds on the stamp's clock; +inf for no lease), so reclaim finds the due ones without
-- reading every holder. A grant is indexed at once only where that matters: when GRABBED then holds
-- more than SMALL_HOLDERS entries, or when it has no lease (it would outlive any scan); any other is
-- indexed by its first refresh (refresh.lua), and until then has no entry (any the token kept
-- goes), and reclaim finds it by reading GRABBED: whole while GRABBED is that small, and past that
-- when GRABBED holds more entries than the index, which that read then indexes (see reclaim.lua).
-- Indexing costs a grant a ZADD, so only those that need it are indexed. Ruby holders are not in it (see reclaim.lua). An unlock that
-- leaves its token the only free one leaves the token's entry for its next grant to overwrite or
-- remove, so the index may also name a free token, or one a Ruby client took since.
-- (An integer score, sent as digits, spares Redis the printf a fractional one or a Lua number costs
-- to store and to receive.) A lease
-- past MAX_INDEXED_LEASE_MS (the library's are at most 2^31 - 1 ms; a longer one was written by
-- someone else) is indexed at +inf, as '%d' of a larger score would overflow into a due one.
local MAX_INDEXED_LEASE_MS = 1e12
local SMALL_HOLDERS = 16
local function index_lease(token, stamp, lease)
  local ms = tonumber(lease)
  local score = '+inf'
  if ms > 0 and ms <= MAX_INDEXED_LEASE_MS then
    score = string.format('%d', math.floor(tonumber(stamp) * 1000000 + 0.5) + ms * 1000)
  end
  redis.call('ZADD', K_LEASES, score, token)
end

-- Records TOKEN as held by GRANT since STAMP with a lease of LEASE_MS (whole milliseconds in digits,
-- as lib/redis/commands.ts sends it; '' or nil for none) for the owner LABEL; returns its fencing number.
local function record_grant(token, grant, stamp, lease_ms, label)
  if (lease_ms or '') == '' then
    lease_ms = '0'
  end
  local fence = next_fence()
  redis.call('HSET', K_GRABBED, token, stamp .. ' ' .. grant .. ' ' .. string.format('%d', fence) .. ' ' .. lease_ms .. ' ' .. stamp .. ' ' .. (label or ''))
  if lease_ms == '0' or redis.call('HLEN', K_GRABBED) > SMALL_HOLDERS then
    index_lease(token, stamp, lease_ms)
  else
    -- Not indexed means no entry: one the token kept (an unlock leaves the entry of a token it
    -- leaves as the only free one; the gem's reclaim leaves any, +inf too) would stand for this
    -- grant with another's lease end, later than its own, and hide it from reclaim's count.
    redis.call('ZREM', K_LEASES, token)
  end
  return fence
end
