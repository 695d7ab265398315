-- Every key of the semaphore (see includes/holder_keys.lua for how a script gets them).
--- @include holder_keys
if K_PREFIX then
  local named = LIBRARY_NAMES
  if named and named[5] then
    K_EXISTS, K_VERSION, K_WAITING, K_FENCE, K_CREATING = named[5], named[6], named[7], named[8], named[9]
  else
    K_EXISTS, K_VERSION, K_WAITING, K_FENCE, K_CREATING =
      K_PREFIX .. 'EXISTS', K_PREFIX .. 'VERSION', K_PREFIX .. 'WAITING', K_PREFIX .. 'FENCE', K_PREFIX .. 'CREATING'
    if named then
      named[5], named[6], named[7], named[8], named[9] = K_EXISTS, K_VERSION, K_WAITING, K_FENCE, K_CREATING
    end
  end
end
