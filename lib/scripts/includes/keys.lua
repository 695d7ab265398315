-- The keys a script is given, in this order (see lib/keys.ts): the first three are all a release
-- touches; OWNERS, last, only `expiration` touches (touch_expiry), so without it calls leave it out;
-- a script's own keys (an inbox) come after the ones it is given, last of all.
local K_AVAILABLE, K_GRABBED, K_LEASES, K_EXISTS, K_VERSION, K_WAITING, K_FENCE, K_CREATING, K_OWNERS =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
