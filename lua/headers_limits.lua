-- headers_limits.lua: deny requests whose header section is abusive or ambiguous.
--
-- Denies, in this order (the first finding wins and is tagged):
--   431 more than MAX_HEADERS header fields                  tag limits-count
--   431 a header name longer than MAX_NAME_LEN bytes         tag limits-name-len
--   431 a header value longer than MAX_VALUE_LEN bytes       tag limits-value-len
--   400 an empty (or all-blank) Host                         tag limits-empty-host
--   400 a missing Host, when DENY_MISSING_HOST is set        tag limits-missing-host
--   400 a singleton field sent more than once                tag limits-dup-<name>
--
-- Singleton fields are the ones RFC 9110/9112 define as a single value, not a list, and that
-- a server and a proxy could disagree about when repeated (which copy wins decides routing,
-- framing or identity): Host, Content-Length, Content-Type, Authorization,
-- Proxy-Authorization, User-Agent, Referer, If-Modified-Since, If-Unmodified-Since, Range,
-- Origin, Max-Forwards. sluice itself already rejects a repeated Host and conflicting
-- framing; checking them here again costs one call each and keeps the script correct behind
-- a more lenient front end.
--
-- Knobs: the local constants below, and the SINGLETON list.
--
-- Cost model: one pass over the headers (two short strings per header, made by the
-- iterator) plus one header_count() call per singleton name (each a scan of the parsed
-- header list in C). No tables are built per request.

local MAX_HEADERS = 64
local MAX_NAME_LEN = 256
local MAX_VALUE_LEN = 4096
-- HTTP/1.0 requests may lack Host (sluice already rejects HTTP/1.1 without one).
local DENY_MISSING_HOST = false

local SINGLETON = {
  "Host", "Content-Length", "Content-Type", "Authorization", "Proxy-Authorization",
  "User-Agent", "Referer", "If-Modified-Since", "If-Unmodified-Since", "Range", "Origin",
  "Max-Forwards",
}

-- Tags are made once here so that a denial builds no string.
local DUP_TAG = {}
for i = 1, #SINGLETON do
  DUP_TAG[i] = "limits-dup-" .. SINGLETON[i]:lower()
end

local find = string.find

function inspect(req)
  local n = 0
  for name, value in req:headers() do
    n = n + 1
    if n > MAX_HEADERS then
      req:tag("limits-count")
      return req:deny(431, "too many header fields\n")
    end
    if #name > MAX_NAME_LEN then
      req:tag("limits-name-len")
      return req:deny(431, "header name too long\n")
    end
    if #value > MAX_VALUE_LEN then
      req:tag("limits-value-len")
      return req:deny(431, "header value too long\n")
    end
  end

  local host = req:header("Host")
  if host == nil then
    if DENY_MISSING_HOST then
      req:tag("limits-missing-host")
      return req:deny(400, "missing Host\n")
    end
  elseif not find(host, "%S") then
    req:tag("limits-empty-host")
    return req:deny(400, "empty Host\n")
  end

  for i = 1, #SINGLETON do
    if req:header_count(SINGLETON[i]) > 1 then
      req:tag(DUP_TAG[i])
      return req:deny(400, "duplicate " .. SINGLETON[i] .. " header\n")
    end
  end
end
