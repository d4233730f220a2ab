-- rate_limit.lua: a token bucket per client address, instance-wide; 429 over the rate.
--
-- Each client may send BURST requests at once, then RATE requests per second on average,
-- counted over every worker of this sluice instance together. A request over the limit is
-- answered 429 (tag ratelimit) and does not consume a token, so a client that keeps
-- hammering is let through again as soon as its bucket refills.
--
-- The bucket is kept in the GCRA form (generic cell rate algorithm): instead of a token
-- count and a timestamp, one number per client, the "theoretical arrival time" (TAT) at
-- which its bucket will be full again. It behaves exactly like a token bucket of size
-- BURST refilled at RATE per second, and needs one dictionary entry per client.
--
-- The TATs live in sluice.shared, the instance's shared dictionary: every worker reads and
-- updates the same entry for a client, so the limit is the same with 1 or N workers, and it
-- survives a reload. An update is a compare-and-set: when two workers decide for the same
-- client at once, one of them finds the TAT changed under it, takes the value the other
-- stored and decides again, so two requests can never both take the last token. The clock
-- is sluice.now(), CLOCK_MONOTONIC, one clock for every worker. Across several sluice
-- instances each counts its own clients (use the native rate limits with a shared store
-- for a limit across a tier).
--
-- Knobs: RATE, BURST, KEY_PREFIX, MAX_RETRIES.
--
-- Memory bound. A client whose TAT is in the past has a full bucket, which is exactly what
-- a client we have never seen gets; its entry carries no information. So each entry is
-- stored with a time to live of TAT - now, and the dictionary drops it once its bucket is
-- full again. The dictionary itself is bounded (lua_shared_memory, 8 MiB by default, about
-- 64 bytes per client here, so ~120,000 clients within BURST/RATE seconds of each other): when
-- it is full it reclaims expired entries first, then evicts the least recently used ones,
-- and an evicted client gets a full bucket once (sluice_lua_shared_evictions_total counts
-- that). Refusing to track new clients instead would let a flood of fresh addresses through
-- unlimited for as long as it lasts.
--
-- Cost model: one client_ip() call, sluice.now(), one string concatenation, one get and one
-- cas on the dictionary (each a lock held for well under a microsecond); more only when
-- workers race for the same client.

local RATE = 100          -- requests per second per client (sustained)
local BURST = 200         -- requests a client may send at once
local KEY_PREFIX = "rl:"  -- this script's keys in sluice.shared
local MAX_RETRIES = 64    -- compare-and-set attempts before giving up (on_error applies)

local INTERVAL = 1 / RATE                 -- seconds one request "costs"
local TOLERANCE = (BURST - 1) * INTERVAL  -- how far ahead of now a TAT may run

local now = sluice.now
local shared = sluice.shared

-- Every listener and worker using this script shares the buckets (the limit is per client,
-- not per listener), through the same keys.
function inspect(req)
  local key = KEY_PREFIX .. req:client_ip()
  local cur = shared:get(key)
  for _ = 1, MAX_RETRIES do
    local t = now()
    local tat = cur
    if tat == nil or tat < t then
      tat = t
    end
    if tat - t > TOLERANCE then
      req:tag("ratelimit")
      return req:deny(429, "rate limited\n")
    end
    local new = tat + INTERVAL
    local ok, seen = shared:cas(key, cur, new, new - t)
    if ok then
      return
    end
    if ok == nil then
      error("rate_limit: sluice.shared:cas: " .. tostring(seen))
    end
    cur = seen      -- another worker moved the TAT: decide again from its value
  end
  error("rate_limit: " .. MAX_RETRIES .. " compare-and-set attempts lost for " .. key)
end
