-- eval.lua: e2e fixture. Runs the Lua code the request carries, so one
-- sluice can be driven through many cases:
--   X-Lua       run in inspect(req)                 (locals: req)
--   X-Lua-Resp  run in inspect_response(resp, req)  (locals: resp, req)
--   X-Lua-Log   run in log(req)                     (locals: req)
-- The code is compiled with load() (text only) in this script's own
-- environment, so what it does counts against the same guard as any script.

local function run(code, prologue, ...)
  if code == nil then return end
  local f, err = load(prologue .. code, "=eval", "t", _ENV)
  if not f then error("eval does not compile: " .. err) end
  return f(...)
end

function inspect(req)
  run(req:header("X-Lua"), "local req = ... ", req)
end

function inspect_response(resp, req)
  run(req:header("X-Lua-Resp"), "local resp, req = ... ", resp, req)
end

function log(req)
  run(req:header("X-Lua-Log"), "local req = ... ", req)
end
