--[[
  Renews a held token's GRABBED stamp (the start of its lease), so a live holder is not reclaimed,
  if, and only if, this grant still holds the token. Only the stamp is rewritten: the rest of the
  grant record (grant id, fence, lease, acquisition time, owner label; see includes/grant.lua) is
  kept as it is.
  Keys: at most 12. A call passes AVAILABLE alone on a single Redis (the script names the others
    after its prefix), the first 3 on Cluster.
  Input:
    KEYS[1] AVAILABLE  KEYS[2] GRABBED  KEYS[3] LEASES  KEYS[4] EXISTS  KEYS[5] VERSION  KEYS[6] WAITING  KEYS[7] FENCE
    KEYS[8] CREATING  KEYS[9] OWNERS  KEYS[10] COLLECTING  KEYS[11] PENDING  KEYS[12] COLLECTED
    ARGV[1] token
    ARGV[2] grant id
    ARGV[3] local time in decimal seconds, or '' for Redis TIME
    ARGV[4..] a weighted grant's other tokens (all renewed that it still holds)
  Output: { 1 when renewed, 0 when the grant no longer holds the token (one of them, weighted); the grant id (ARGV[2]: names
            the call this reply answers, see lib/redis/commands.ts) }
]]
--- @include holder_keys
--- @include grant
--- @include holder
--- @include clock
if #ARGV > 3 then
  -- A weighted grant: its other tokens follow.
--- @include weighted
  local tokens = { ARGV[1] }
  for i = 4, #ARGV do
    tokens[#tokens + 1] = ARGV[i]
  end
  return { refresh_grant(tokens, ARGV[2], clock_stamp(ARGV[3])) and 1 or 0, ARGV[2] }
end
local record = redis.call('HGET', K_GRABBED, ARGV[1])
local old, grant, _, lease = parse_grant(record)
if grant ~= ARGV[2] then
  return { 0, ARGV[2] }
end
local stamp = clock_stamp(ARGV[3])
redis.call('HSET', K_GRABBED, ARGV[1], stamp .. string.sub(record, #old + 1))
-- (The canonical tokens "0".."15" are never indexed: see includes/grant.lua.)
if not is_small(ARGV[1]) then
  index_lease(ARGV[1], stamp, lease)
end
return { 1, ARGV[2] }
