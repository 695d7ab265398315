-- The keys a script is given, in this order (lib/redis/keys.ts `scriptKeys`): AVAILABLE, GRABBED and
-- LEASES, all a refresh touches; then EXISTS, VERSION, WAITING, FENCE, CREATING, OWNERS (only
-- `expiration` touches it: touch_expiry), and the three keys of a weighted wait, COLLECTING, PENDING
-- and COLLECTED (see includes/give_back.lua); a script's own keys (an inbox) come after them, last of all.
-- On a single Redis (not Cluster) the hot-path scripts are given AVAILABLE alone, and name the
-- others after its prefix (K_PREFIX: `<key prefix><name>:`), inboxes included: a name made here
-- costs less than a key passed. On Cluster every key is passed, as Redis requires there (a slot
-- migration moves keys one by one, and only the keys a call declares are checked before it runs).
-- This include names the keys a holder's scripts (release, refresh) touch; keys.lua the rest.
local K_AVAILABLE, K_GRABBED, K_LEASES, K_EXISTS, K_VERSION, K_WAITING, K_FENCE, K_CREATING, K_OWNERS =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
-- A weighted wait's keys (see includes/give_back.lua), after OWNERS; on a single Redis COLLECTING is
-- named below (every give-back reads it), the other two by give_back.lua when a script needs them.
local K_COLLECTING, K_PENDING, K_COLLECTED
-- The names made from a prefix are kept for the next call by the function library, which makes
-- LIBRARY_NAMES a table that lives as long as the library (lib/redis/functions.ts): [1] the AVAILABLE they
-- were made from, [2] its prefix, [3] GRABBED, [4] LEASES, [5..9] keys.lua's, [10] COLLECTING. A script run by
-- EVALSHA has none and makes its names on every call.
local LIBRARY_NAMES
local K_PREFIX
if not K_GRABBED then
  local named = LIBRARY_NAMES
  if named and named[1] == K_AVAILABLE then
    K_PREFIX, K_GRABBED, K_LEASES, K_COLLECTING = named[2], named[3], named[4], named[10]
  else
    K_PREFIX = string.sub(K_AVAILABLE, 1, -10) -- less 'AVAILABLE'
    K_GRABBED, K_LEASES, K_COLLECTING = K_PREFIX .. 'GRABBED', K_PREFIX .. 'LEASES', K_PREFIX .. 'COLLECTING'
    if named then
      named[1], named[2], named[3], named[4], named[5] = K_AVAILABLE, K_PREFIX, K_GRABBED, K_LEASES, nil
      named[10] = K_COLLECTING
    end
  end
else
  K_COLLECTING, K_PENDING, K_COLLECTED = KEYS[10], KEYS[11], KEYS[12]
end
