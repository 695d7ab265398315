-- Every key of the semaphore (see includes/holder_keys.lua for how a script gets them).
--- @include holder_keys
if K_PREFIX then
  K_EXISTS, K_VERSION, K_WAITING, K_FENCE, K_CREATING =
    K_PREFIX .. 'EXISTS', K_PREFIX .. 'VERSION', K_PREFIX .. 'WAITING', K_PREFIX .. 'FENCE', K_PREFIX .. 'CREATING'
end
