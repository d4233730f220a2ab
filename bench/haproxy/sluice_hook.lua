-- sluice_hook.lua: sluice's inspection scripts (lua/allow_all.lua, lua/waf.lua) run unchanged
-- inside HAProxy 2.6's Lua, for bench/inspection.py's side-by-side. Load it with
--
--   global
--       lua-load /path/to/bench/haproxy/sluice_hook.lua
--       tune.lua.forced-yield 100000000
--   frontend ...
--       http-request lua.sluice_allow_all            # allow_all.lua
--       http-request lua.sluice_waf                  # waf.lua
--       http-request deny deny_status 403 if { var(txn.sluice_deny) -m found }
--
-- It loads each script with loadfile() into its own environment that holds what sluice gives
-- a script and HAProxy does not:
--
--   sluice.multi(list)   sluice compiles the list into ONE Hyperscan database and scans a
--                        text once for all patterns. HAProxy has no multi-pattern matcher, so
--                        here every pattern becomes its own PCRE2 regex (HAProxy's Regex class,
--                        JIT-compiled, case-sensitive as the patterns are lower case) and
--                        :scan() runs them one after the other: same patterns, same answers,
--                        cost per rule instead of per byte.
--   sluice.transform     the steps waf.lua uses (urldecode, urldecode_uni, htmldecode, lower),
--                        in Lua, after src/transform.c byte for byte (the other steps raise an
--                        error here).
--   req                  an adapter over HAProxy's txn: method, path, query, uri, headers (the
--                        request's header block as HAProxy holds it: names lower case, in
--                        order), header, body (nil: body inspection is off, as in the sluice
--                        config of the bench), tag, deny.
--
-- Decisions. req:deny(status) sets the transaction variable txn.sluice_deny to the status
-- (the first deny wins); the frontend denies on it. Tags are joined with "," into
-- txn.sluice_tags. A script error is logged and the request allowed (sluice's default
-- on_error: allow), and counted in txn.sluice_error.
--
-- Why tune.lua.forced-yield must be high: waf.lua keeps its per-request state in upvalues
-- (one request at a time, as in a sluice worker). HAProxy may otherwise suspend an action
-- after 10,000 Lua instructions and run another request's action in between, which would
-- clobber that state. sluice's own guard (1,000,000 instructions, 5 ms) has no equivalent
-- here; HAProxy's tune.lua.session-timeout (4 s) is the only bound.

local HERE = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./")
local ROOT = os.getenv("SLUICE_ROOT") or (HERE .. "../../")
local find, sub, byte, char, lower, gsub, gmatch, concat =
  string.find, string.sub, string.byte, string.char, string.lower, string.gsub, string.gmatch,
  table.concat

---------------------------------------------------------------------------------------------
-- sluice.transform, after src/transform.c

local function utf8_put(cp)
  if cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF) then cp = 0xFFFD end
  return utf8.char(cp)
end

local function hex2(h) return char(tonumber(h, 16)) end

-- %XX only; '+' stays (transform "urldecode").
local function urldecode(s)
  if not find(s, "%", 1, true) then return s end
  return (gsub(s, "%%(%x%x)", hex2))
end

-- %XX, %uXXXX (full-width ASCII folded to ASCII) and '+' as a space ("urldecode_uni").
-- One left-to-right pass like the C code: an escape is tried at every '%', %XX first.
local function uni_escape(e)
  local c1 = sub(e, 1, 1)
  if c1 == "u" or c1 == "U" then
    if #e == 5 then
      local cp = tonumber(sub(e, 2), 16)
      if cp >= 0xFF01 and cp <= 0xFF5E then cp = cp - 0xFEE0 end
      return utf8_put(cp)
    end
    return nil
  end
  return hex2(sub(e, 1, 2)) .. sub(e, 3)
end

local function urldecode_uni(s)
  if find(s, "+", 1, true) then s = gsub(s, "%+", " ") end
  if not find(s, "%", 1, true) then return s end
  -- "[uU]%x%x%x%x" or "%x%x" followed by up to two more hex digits (left as they are)
  return (gsub(s, "%%([uU]?%x%x%x?%x?)", function(e)
    local c1 = sub(e, 1, 1)
    if (c1 == "u" or c1 == "U") and #e < 5 then
      -- "%u12" + non-hex: the C code leaves the '%' and tries again one byte later, where
      -- no escape can start ('u' is not '%'); the text stays as it is.
      return nil
    end
    return uni_escape(e)
  end))
end

local NAMED = { ["&lt;"] = "<", ["&gt;"] = ">", ["&amp;"] = "&", ["&quot;"] = '"',
                ["&apos;"] = "'", ["&nbsp;"] = " " }
local NAMED_LEN = { 4, 5, 6 }

local function htmldecode(s)
  local amp = find(s, "&", 1, true)
  if not amp then return s end
  local out, n, r, len = {}, 0, 1, #s
  while amp do
    n = n + 1; out[n] = sub(s, r, amp - 1)
    r = amp
    local done = false
    for _, l in ipairs(NAMED_LEN) do
      local v = NAMED[lower(sub(s, r, r + l - 1))]
      if v and r + l - 1 <= len then
        n = n + 1; out[n] = v
        r = r + l
        done = true
        break
      end
    end
    if not done and r + 2 <= len and byte(s, r + 1) == 35 then   -- '#'
      local q = r + 2
      local hex = byte(s, q) == 120 or byte(s, q) == 88            -- 'x' 'X'
      if hex then q = q + 1 end
      local digits_pat = hex and "^%x+" or "^%d+"
      local a, b = find(s, digits_pat, q)
      if a then
        local digits = sub(s, a, b)
        local cp
        if #digits > 8 then
          cp = 0x110000                 -- absurdly long: the rest is swallowed
        else
          cp = tonumber(digits, hex and 16 or 10)
        end
        q = b + 1
        if byte(s, q) == 59 then q = q + 1 end                      -- ';'
        n = n + 1; out[n] = utf8_put(cp)
        r = q
        done = true
      end
    end
    if not done then
      n = n + 1; out[n] = "&"
      r = r + 1
    end
    amp = find(s, "&", r, true)
  end
  n = n + 1; out[n] = sub(s, r)
  return concat(out, "", 1, n)
end

local STEPS = {
  urldecode = urldecode, urldecode_uni = urldecode_uni, htmldecode = htmldecode,
  lower = lower,   -- string.lower in the C locale: A-Z only, as the C step
}

local chains = {}
local function transform(s, spec)
  local chain = chains[spec]
  if chain == nil then
    chain = {}
    for step in gmatch(spec, "[^,]+") do
      step = step:match("^%s*(.-)%s*$")
      chain[#chain + 1] = STEPS[step] or error("sluice.transform: step " .. step .. " is not ported")
    end
    chains[spec] = chain
  end
  for i = 1, #chain do s = chain[i](s) end
  return s
end

---------------------------------------------------------------------------------------------
-- sluice.multi: one PCRE2 regex per entry

local MULTI = {}
MULTI.__index = MULTI

local function multi(list, flags)
  assert(flags == nil or flags == "", "sluice.multi: flags are not ported")
  local m = { re = {}, id = {}, n = 0 }
  for i, e in ipairs(list) do
    local pat, id = e, i
    if type(e) == "table" then
      pat, id = e.pattern, e.id or i
      assert(not e.flags and not e.literal, "sluice.multi: entry flags are not ported")
    end
    local ok, re = Regex.new(pat, true)
    if not ok then error("sluice.multi: entry " .. i .. " (id " .. id .. "): " .. tostring(re)) end
    m.n = m.n + 1
    m.re[m.n], m.id[m.n] = re, id
  end
  return setmetatable(m, MULTI)
end

-- Every matching id, in rule order, into out[1..n]; returns n (as sluice's m:scan).
function MULTI:scan(s, out)
  local re, id, k = self.re, self.id, 0
  for i = 1, self.n do
    if re[i]:exec(s) then k = k + 1; out[k] = id[i] end
  end
  for i = k + 1, #out do out[i] = nil end
  return k
end

function MULTI:test(s)
  for i = 1, self.n do
    if self.re[i]:exec(s) then return true end
  end
  return false
end

function MULTI:first(s)
  for i = 1, self.n do
    if self.re[i]:exec(s) then return self.id[i] end
  end
  return nil
end

---------------------------------------------------------------------------------------------
-- req: one adapter, refilled per request (actions run one at a time, see forced-yield)

local HDR_LINE = "([^\r\n:]+):[ \t]*([^\r\n]*)\r\n"

local REQ = {}
REQ.__index = REQ
local req = setmetatable({}, REQ)

function REQ:method() return self.txn.sf:method() end
function REQ:path() return self.txn.sf:path() or "" end
function REQ:query() return self.txn.sf:query() or "" end
function REQ:uri() return self.txn.sf:url() or "" end
function REQ:version() return self.txn.sf:req_ver() end
function REQ:headers() return gmatch(self.txn.f:req_hdrs() or "", HDR_LINE) end
function REQ:header(name)
  local v = self.txn.http:req_get_headers()[lower(name)]
  return v and v[0]
end
function REQ:body() return nil end
function REQ:client_ip() return self.txn.f:src() end
function REQ:tag(t)
  if #self.tags < 8 then self.tags[#self.tags + 1] = t end
end
function REQ:deny(status)
  if not self.denied then
    self.denied = true
    self.txn:set_var("txn.sluice_deny", status or 403)
  end
end

---------------------------------------------------------------------------------------------
-- Loading the scripts and registering the actions

local function load_script(rel)
  local path = ROOT .. rel
  local env = setmetatable({ sluice = { multi = multi, transform = transform } }, { __index = _G })
  local chunk, err = loadfile(path, "t", env)
  if not chunk then error("sluice_hook: " .. err) end
  chunk()
  assert(type(env.inspect) == "function", "sluice_hook: " .. path .. " defines no inspect()")
  return env.inspect
end

local function register(name, rel)
  local inspect = load_script(rel)
  core.register_action(name, { "http-req" }, function(txn)
    req.txn, req.denied = txn, false
    if #req.tags > 0 then req.tags = {} end
    local ok, err = pcall(inspect, req)
    if not ok then
      core.Warning("sluice_hook: " .. name .. ": " .. tostring(err))
      txn:set_var("txn.sluice_error", 1)
    end
    if #req.tags > 0 then txn:set_var("txn.sluice_tags", concat(req.tags, ",")) end
    req.txn = nil
  end)
end

req.tags = {}
register("sluice_allow_all", "lua/allow_all.lua")
register("sluice_waf", "lua/waf.lua")
