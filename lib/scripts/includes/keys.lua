-- The nine keys every script is given, in this order (see lib/keys.ts).
local K_AVAILABLE, K_GRABBED, K_EXISTS, K_VERSION, K_OWNERS, K_WAITING, K_FENCE, K_LEASES, K_CREATING =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
