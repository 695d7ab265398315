-- Creates the semaphore: pushes the initial tokens "0".."resources-1", then sets EXISTS and VERSION.
-- In batches of at most ENSURE_BATCH entries read or pushed per script, so that a large semaphore
-- never blocks Redis for long: CREATING holds the state between batches ("<step> <target>
-- <position>"), and every script that ensures (tryLock, prepareWait, claim, signal, create) does the
-- next batch while EXISTS is missing. Never deletes anything, so tokens signalled before creation
-- survive.
--
-- A fresh creation (no AVAILABLE, GRABBED or WAITING) has one step, N: push tokens from <position>.
-- Between batches every token pushed so far is usable and none is pushed twice (CREATING advances
-- in the script that pushes).
--
-- A re-creation (EXISTS lost, other keys kept: eviction, a partial restore) must not push a token
-- that still exists: on AVAILABLE, in GRABBED, in a waiter's inbox between its BLMOVE and its
-- claim, or in a weighted waiter's PENDING and COLLECTED lists (read with the inboxes). It finds them while clients go on using them, then pushes the others. CREATING is then a
-- header of HEADER bytes followed by a bitmap of the tokens found ("present"): bit HEADER * 8 + n
-- for token n. Steps: G, HSCAN of GRABBED from cursor <position>; A, AVAILABLE read in windows from
-- its tail, <position> entries in; the script that reaches its head also reads every registered
-- waiter's inbox; P, push the tokens from <position> on that are not present. Why no token is
-- missed although tokens move between batches (DESIGN "Creation and re-creation"):
--   * every push onto AVAILABLE at run time is at its head (LPUSH, RPOPLPUSH) or, by signal, at its
--     tail (which moves every other entry away from it), and every pop is from its head, so an
--     entry's distance from the tail never shrinks: windows read from the tail inwards meet every
--     entry that stays on AVAILABLE;
--   * an entry in GRABBED through the whole HSCAN is returned by it;
--   * every script that moves a token into GRABBED or from an inbox onto AVAILABLE calls
--     mark_present, so a token that moves behind the scan is marked by the move; a token released
--     from GRABBED onto AVAILABLE's head after the HSCAN was in GRABBED through the HSCAN (or
--     entered it through a marked grant);
--   * inboxes are read in the script that ends the scan.
-- A small semaphore goes through all steps in one script. Needs includes/present.lua before it.
-- The batched creation is defined only when a script needs it (inside ensure): most runs find EXISTS
-- set, and would define these functions for nothing.
local function ensure(resources)
  if redis.call('EXISTS', K_EXISTS) == 1 then
    known_to_exist = true
    return 0
  end
  local function create_batch(resources)
    local ENSURE_BATCH = 10000
    local mark = marker()

    -- RPUSHes the tokens "from".."to", 1,000 per command, leaving out those `present(n)` says exist.
    local function push_tokens(from, to, present)
      local batch = {}
      for i = from, to do
        if not (present and present(i)) then
          batch[#batch + 1] = tostring(i)
          if #batch == 1000 then
            redis.call('RPUSH', K_AVAILABLE, unpack(batch))
            batch = {}
          end
        end
      end
      if #batch > 0 then
        redis.call('RPUSH', K_AVAILABLE, unpack(batch))
      end
    end

    local function set_header(header)
      redis.call('SETRANGE', K_CREATING, 0, header .. string.rep(' ', HEADER - #header))
    end

    local function finish_creation()
      redis.call('DEL', K_CREATING)
      redis.call('SET', K_EXISTS, '1')
      redis.call('SET', K_VERSION, '1')
      return 1
    end

    -- The tokens in the inboxes of all registered waiters (a waiter's inbox holds at most one).
    local function mark_inboxes(target)
      local prefix = string.sub(K_AVAILABLE, 1, -#'AVAILABLE' - 1)
      for _, registration in ipairs(redis.call('ZRANGE', K_WAITING, 0, -1)) do
        local inbox = prefix .. 'INBOX:' .. string.gsub(registration, '^~', '')
        mark(redis.call('LRANGE', inbox, 0, -1), target, 1)
      end
      -- And a weighted waiter's partial collection (give_back.lua).
      for _, list in ipairs({ K_PENDING or prefix .. 'PENDING', K_COLLECTED or prefix .. 'COLLECTED' }) do
        mark(redis.call('LRANGE', list, 0, -1), target, 1)
      end
    end

    -- The steps of a creation. Each takes the state { mode, target, position } and a budget of entries
    -- to read or push, advances the state and returns how much of the budget it used.

    -- "G": HSCAN GRABBED from cursor position.
    local function scan_grabbed(state, budget)
      local reply = redis.call('HSCAN', K_GRABBED, state.position, 'COUNT', budget)
      mark(reply[2], state.target, 2)
      if reply[1] == '0' then
        state.mode, state.position = 'A', 0
      else
        state.position = reply[1]
      end
      return math.max(1, #reply[2] / 2)
    end

    -- "A": read AVAILABLE from its tail, position entries in; at its head, the inboxes too.
    local function scan_available(state, budget)
      local offset = state.position
      mark(redis.call('LRANGE', K_AVAILABLE, -(offset + budget), -(offset + 1)), state.target, 1)
      if redis.call('LLEN', K_AVAILABLE) > offset + budget then
        state.position = offset + budget
        return budget
      end
      mark_inboxes(state.target)
      state.mode, state.position = 'P', 0
      return math.max(1, redis.call('LLEN', K_AVAILABLE) - offset)
    end

    -- "N" and "P": push tokens from position on; in "P", only those the scan did not find.
    local function push_step(state, budget)
      local from = state.position
      local last = math.min(state.target, from + budget) - 1
      local present = nil
      if state.mode == 'P' then
        local first_byte = math.floor(from / 8)
        local bytes = redis.call('GETRANGE', K_CREATING, HEADER + first_byte, HEADER + math.floor(last / 8))
        present = function(n)
          local byte = string.byte(bytes, math.floor(n / 8) - first_byte + 1) or 0
          return bit.band(byte, bit.rshift(128, n % 8)) ~= 0
        end
      end
      push_tokens(from, last, present)
      state.position = last + 1
      if state.position >= state.target then
        state.mode = 'done'
      end
      return last + 1 - from
    end

    local STEPS = { N = push_step, G = scan_grabbed, A = scan_available, P = push_step }

    local mode, target, position = string.match(redis.call('GETRANGE', K_CREATING, 0, HEADER - 1), '^(%u) (%d+) (%d+)')
    local state
    if mode then
      state = { mode = mode, target = tonumber(target), position = mode == 'G' and position or tonumber(position) }
    elseif redis.call('EXISTS', K_AVAILABLE, K_GRABBED, K_WAITING) > 0 then
      redis.call('DEL', K_CREATING)
      state = { mode = 'G', target = resources, position = '0' }
    else
      state = { mode = 'N', target = resources, position = 0 }
    end
    local budget = ENSURE_BATCH
    while budget > 0 and state.mode ~= 'done' do
      budget = budget - STEPS[state.mode](state, budget)
    end
    if state.mode == 'done' then
      return finish_creation()
    end
    local header = state.mode .. ' ' .. state.target .. ' ' .. state.position
    if state.mode == 'N' then
      redis.call('SET', K_CREATING, header)
    else
      set_header(header)
    end
    return 2
  end
  return create_batch(resources)
end
