-- allow_all.lua: the bare cost of calling into Lua.
--
-- inspect() does nothing, so every request is allowed. Run a listener with this script to
-- measure what the hook itself costs sluice (entering the Lua state, making the req object,
-- the guard's budget bookkeeping, timing) before any script logic is added. Compare its
-- sluice_inspect_seconds with another script's to see what that script's rules cost.
--
-- Knobs: none. Cost model: one Lua call per request, no allocation.

function inspect(req) end
