--[[
  unlock, and consume: ends a grant if, and only if, this grant still holds the token (GRABBED names
  it). unlock gives the token back (onto AVAILABLE, where Redis hands it to the longest-blocked waiter right
  after this script, or to a weighted waiter collecting its permits: includes/give_back.lua); consume drops it (a job taken with wait()). A grant that lost its token
  (reclaimed by its lease, by the Ruby gem or an operator, signalled back, deleted, or wiped by a
  Redis reset) changes nothing, so a late or repeated unlock can never push a token twice, nor end
  another grant of the same token.
  The token's LEASES entry (includes/grant.lua): a canonical token "0".."15" has none. Another one's
  goes, except when unlock leaves the token the only free one: that token goes to the next lock at
  once (a blocked waiter's BLMOVE right after this script, or the next tryLock), whose grant
  overwrites the entry, which saves a call per cycle; a free token among others may stay free long
  after its entry falls due, and an entry at +inf (no lease, or one past grant.lua's
  MAX_INDEXED_LEASE_MS) would never fall due, so those go now. Tokens are pushed and taken at the
  head of AVAILABLE, so with only this library's clients at most one free token has an entry
  (besides tokens in flight to a waiter meanwhile); a Ruby client that takes the token next leaves
  the entry, so a mixed fleet can leave more. Reclaim drops such entries once due, and they do not
  count against its budget (see includes/reclaim.lua).
  Keys: at most 12. Without `expiration` a call passes AVAILABLE alone on a single Redis (the
    script names the others after its prefix), all 12 on Cluster.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS  KEYS[10] COLLECTING  KEYS[11] PENDING  KEYS[12] COLLECTED
    ARGV[1] token
    ARGV[2] grant id
    ARGV[3] '0' to drop the token (consume); '1' (or absent: the usual case) to put it back (unlock)
    ARGV[4] expiration in milliseconds, or '' (or absent: the usual case) for none
    ARGV[5..] a weighted grant's other tokens (ARGV[3] and ARGV[4] then present)
  Output: one string, "<grant id> +<available>" when this grant was ended here, "<grant id>
    -<available>" when it no longer held the token: the grant id (ARGV[2]) names the call this reply
    answers, the sign tells this reply from another script's (see lib/redis/commands.ts), and
    <available> is the length of AVAILABLE afterwards (0 when the token went to a collector); a
    weighted grant's reply is "-" when it no longer held one of its tokens (those it held are given back)
]]
--- @include holder_keys
--- @include grant
--- @include holder
local token, grant = ARGV[1], ARGV[2]
if #ARGV > 4 then
  -- A weighted grant: its other tokens follow.
--- @include present
--- @include give_back
--- @include weighted
--- @include expiry
  local tokens = { token }
  for i = 5, #ARGV do
    tokens[#tokens + 1] = ARGV[i]
  end
  local ended, free = release_grant(tokens, grant, ARGV[3] ~= '0')
  touch_expiry(ARGV[4])
  return grant .. (ended and ' +' or ' -') .. free
end
local value = redis.call('HGET', K_GRABBED, token)
if not holds(value, grant) then
  return grant .. ' -' .. redis.call('LLEN', K_AVAILABLE)
end
redis.call('HDEL', K_GRABBED, token)
local available
if ARGV[3] ~= '0' then
  -- To a weighted waiter collecting its permits (includes/give_back.lua), if one is.
  local target = K_AVAILABLE
  local collector = redis.call('HGET', K_COLLECTING, 'registration')
  if collector then
--- @include present
--- @include give_back
    target = give_back_target(collector)
  end
  available = redis.call('LPUSH', target, token)
  if target ~= K_AVAILABLE then
    available = 0 -- the collector's: not free, and its entry goes
  end
  -- (The lease read as digits, as this library writes it: '0' is +inf, and 13 digits reach 10^12,
  -- past which it is +inf too; at exactly 10^12 the entry goes although finite, which is harmless.)
  if not is_small(token) then
    local lease = available == 1 and string.match(value, '^%S+ %S+ %d+ (%d+)')
    if not lease or lease == '0' or #lease > 12 then
      redis.call('ZREM', K_LEASES, token)
    end
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
-- (A count below 10 as a character: a Lua number made text costs Redis a printf.)
if available < 10 then
  return grant .. ' +' .. string.char(48 + available)
end
return grant .. ' +' .. available
