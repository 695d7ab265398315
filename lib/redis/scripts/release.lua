--[[
  unlock, and consume: ends a grant if, and only if, this grant still holds the token (GRABBED names
  it). unlock puts the token back on AVAILABLE (Redis hands it to the longest-blocked waiter right
  after this script), and leaves its LEASES entry for the token's next grant to overwrite when it is
  the only free token (see below); consume drops it (a job taken with wait()). A grant that lost its
  token (reclaimed by its lease, by the Ruby gem or an operator, signalled back, deleted, or wiped by
  a Redis reset) changes nothing, so a late or repeated unlock can never push a token twice, nor end
  another grant of the same token.
  Keys: at most 9. Without `expiration` a call passes AVAILABLE alone on a single Redis (the
    script names the others after its prefix), the first 3 on Cluster; with it all 9.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS
    ARGV[1] token
    ARGV[2] grant id
    ARGV[3] '1' to put the token back (unlock), '0' to drop it (consume)
    ARGV[4] expiration in milliseconds, or '' (or absent: the usual case) for none
  Output: { 1 when this grant was ended here, 0 when it no longer held the token; the length of AVAILABLE;
            the grant id (ARGV[2]: names the call this reply answers, see lib/redis/commands.ts) }
]]
--- @include holder_keys
--- @include holder
local token, grant = ARGV[1], ARGV[2]
local holder, lease = holder_grant(redis.call('HGET', K_GRABBED, token))
if holder ~= grant then
  return { 0, redis.call('LLEN', K_AVAILABLE), grant }
end
redis.call('HDEL', K_GRABBED, token)
local available
if ARGV[3] == '1' then
  available = redis.call('LPUSH', K_AVAILABLE, token)
  -- A token that is now the only free one goes to the next lock at once (a blocked waiter's BLMOVE
  -- right after this script, or the next tryLock): its LEASES entry stays for that grant to
  -- overwrite, which saves a call per contended or one-client cycle. Any other free token may stay
  -- free long after its entry falls due, so its entry goes now; so does an entry at +inf (no lease,
  -- or one past grant.lua's MAX_INDEXED_LEASE_MS), which would never fall due. Tokens are pushed and
  -- taken at the head of AVAILABLE, so with only this library's clients at most one free token has
  -- an entry (besides tokens in flight to a waiter meanwhile); a Ruby client that takes the token
  -- next leaves the entry, so a mixed fleet can leave more. Reclaim drops such entries once due, and
  -- they do not count against its budget (see includes/reclaim.lua).
  -- (The lease read as digits, as this library writes it: '0' is +inf, and 13 digits reach 10^12,
  -- past which it is +inf too; at exactly 10^12 the entry goes although finite, which is harmless.)
  if available > 1 or lease == '0' or #lease > 12 then
    redis.call('ZREM', K_LEASES, token)
  end
else
  -- A consumed token (a job) is not granted again: its entry goes now.
  redis.call('ZREM', K_LEASES, token)
  available = redis.call('LLEN', K_AVAILABLE)
end
if (ARGV[4] or '') ~= '' then
--- @include expiry
  touch_expiry(ARGV[4])
end
return { 1, available, grant }
