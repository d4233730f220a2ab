-- rate_limit.lua: a token bucket per client address, per worker; 429 over the rate.
--
-- Each client may send BURST requests at once, then RATE requests per second on average.
-- A request over the limit is answered 429 (tag ratelimit) and does not consume a token, so
-- a client that keeps hammering is let through again as soon as its bucket refills.
--
-- The bucket is kept in the GCRA form (generic cell rate algorithm): instead of a token
-- count and a timestamp, one number per client, the "theoretical arrival time" (TAT) at
-- which its bucket will be full again. It behaves exactly like a token bucket of size
-- BURST refilled at RATE per second, and needs one table slot per client instead of two.
--
-- The state lives in sluice.shared, which is per worker: with N workers and connections
-- spread over them, a client can get up to N x RATE in total. Size RATE and BURST for one
-- worker, or run one worker where the limit must be exact.
--
-- Knobs: RATE, BURST, MAX_CLIENTS, SWEEP.
--
-- Memory bound. A client whose TAT is in the past has a full bucket, which is exactly what
-- a client we have never seen gets; its entry carries no information and can be dropped
-- without changing any decision. So:
--   * each call looks at SWEEP more entries (a cursor walks the table with next()) and
--     drops those that are full again. Idle clients go away within a few requests of any
--     client, and the table holds roughly the clients seen in the last BURST/RATE seconds;
--   * if more than MAX_CLIENTS are tracked anyway (a flood from many addresses), the table
--     is thrown away and started afresh: O(1), memory stays bounded, and the only cost is
--     that every client gets a full bucket once. Refusing to track new clients instead
--     would let a flood of fresh addresses through unlimited for as long as it lasts.
-- At 100,000 clients the table takes about 10 MB of the worker's Lua memory (lua_memory_max).
--
-- Cost model: one client_ip() call, sluice.now(), two table lookups and SWEEP next() steps.
-- No allocation per request except a new client's table slot.

local RATE = 100          -- requests per second per client (sustained)
local BURST = 200         -- requests a client may send at once
local MAX_CLIENTS = 100000
local SWEEP = 2           -- table entries examined per call for expired clients

local INTERVAL = 1 / RATE                 -- seconds one request "costs"
local TOLERANCE = (BURST - 1) * INTERVAL  -- how far ahead of now a TAT may run

local now = sluice.now
local next = next

-- Kept in sluice.shared so that a second copy of this script on another listener of the
-- same worker shares the buckets (the limit is per client, not per listener).
local state = sluice.shared.rate_limit
if state == nil then
  state = { tat = {}, n = 0, cursor = nil }
  sluice.shared.rate_limit = state
end

-- The cursor is always nil or a key whose value is non-nil: only the entry after it is ever
-- deleted, so next(tat, cursor) stays valid even when inserts rehash the table.
local function sweep(tat, t)
  local cursor = state.cursor
  for _ = 1, SWEEP do
    local k, v = next(tat, cursor)
    if k == nil then
      cursor = nil
      break
    end
    if v <= t then
      tat[k] = nil
      state.n = state.n - 1
    else
      cursor = k
    end
  end
  state.cursor = cursor
end

function inspect(req)
  local ip = req:client_ip()
  local t = now()
  local tat = state.tat

  sweep(tat, t)

  local cur = tat[ip]
  if cur == nil then
    if state.n >= MAX_CLIENTS then
      tat = {}
      state.tat, state.n, state.cursor = tat, 0, nil
    end
    state.n = state.n + 1
    cur = t
  elseif cur < t then
    cur = t
  end

  if cur - t > TOLERANCE then
    req:tag("ratelimit")
    return req:deny(429, "rate limited\n")
  end
  tat[ip] = cur + INTERVAL
end
