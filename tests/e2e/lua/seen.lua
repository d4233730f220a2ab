-- seen.lua: e2e fixture. Reports what the req API returns as one JSON
-- object in the request header X-Seen (every byte outside printable ASCII,
-- and " and \, as \u00XX, so the test gets the exact bytes back).
-- The test names what to probe in request headers:
--   X-Probe-Arg, X-Probe-Header, X-Probe-Cookie: comma-separated names.

local function jstr(s)
  return '"' .. s:gsub('[%c"\\\128-\255]', function(c)
    return string.format("\\u%04x", c:byte())
  end) .. '"'
end

local enc

local function enc_list(t)
  local out = {}
  for i = 1, #t do out[i] = enc(t[i]) end
  return "[" .. table.concat(out, ",") .. "]"
end

enc = function(v)
  local ty = type(v)
  if v == nil then return "null"
  elseif ty == "boolean" then return v and "true" or "false"
  elseif ty == "number" then return tostring(v)
  elseif ty == "string" then return jstr(v)
  elseif ty == "table" then
    if v.__list then return enc_list(v) end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys)
    local out = {}
    for _, k in ipairs(keys) do out[#out + 1] = jstr(k) .. ":" .. enc(v[k]) end
    return "{" .. table.concat(out, ",") .. "}"
  end
  return jstr(tostring(v))
end

local function names(req, h)
  local v = req:header(h)
  local out = {}
  if v then
    for n in v:gmatch("[^,]+") do out[#out + 1] = n end
  end
  return out
end

local NULL = {}  -- placeholder for nil in maps

local function probe(req, h, fn)
  local m = {}
  for _, n in ipairs(names(req, h)) do
    local v = fn(n)
    if v == nil then m[n] = NULL else m[n] = v end
  end
  return m
end

local function fix(m)
  for k, v in pairs(m) do if v == NULL then m[k] = "\0nil" end end
  return m
end

local function pairs_list(iter, state, init)
  local out = { __list = true }
  for k, v in iter, state, init do out[#out + 1] = { __list = true, k, v } end
  return out
end

function inspect(req)
  local body = req:body()
  local t = {
    method = req:method(), uri = req:uri(), path = req:path(), query = req:query(),
    args = pairs_list(req:args()),
    headers = pairs_list(req:headers()),
    cookies = pairs_list(req:cookies()),
    arg = fix(probe(req, "X-Probe-Arg", function(n) return req:arg(n) end)),
    header = fix(probe(req, "X-Probe-Header", function(n) return req:header(n) end)),
    header_count = probe(req, "X-Probe-Header", function(n) return req:header_count(n) end),
    cookie = fix(probe(req, "X-Probe-Cookie", function(n) return req:cookie(n) end)),
    client_ip = req:client_ip(), client_port = req:client_port(),
    listener = req:listener(), backend = req:backend(),
    tls = req:tls(), tls_version = req:tls_version() or "\0nil",
    tls_cipher = req:tls_cipher() or "\0nil", sni = req:sni() or "\0nil",
    client_cert_subject = req:client_cert_subject() or "\0nil",
    id = req:id(),
    body_is_nil = body == nil,
    body_len = body and #body or -1,
    body_truncated = req:body_truncated(),
    worker = sluice.worker,
  }
  req:set_header("X-Seen", enc(t))
  if body then
    req:set_header("X-Seen-Body", (body:gsub(".", function(c) return string.format("%02x", c:byte()) end)))
  end
end
