-- waf.lua: a CRS-inspired web application firewall with anomaly scoring.
--
-- What it does. Over 360 rules, numbered like the OWASP Core Rule Set (913 scanners,
-- 920/921 protocol, 930 LFI, 931 RFI, 932 command injection and server-side includes,
-- 933 PHP, 934 generic/SSTI/SSRF, 941 XSS, 942 SQLi and NoSQL, 943 session fixation,
-- 944 Java), look at the request. Each rule that matches adds its
-- severity (critical 5, error 4, warning 3, notice 2) to the request's anomaly score and
-- tags the request "<tag>-<id>" (sluice keeps 8 tags; the most severe go first). At
-- THRESHOLD the request is denied with 403. The patterns are written for this file, after
-- the CRS's ideas; none is copied from its regex sources.
--
-- Knobs (below): THRESHOLD, PARANOIA, INSPECT (which parts of the request are scanned),
-- argument limits, allowed methods / content types / charsets, restricted headers, and
-- SKIP_HEADERS (header values never scanned).
--
-- Cost model. At load, every pattern rule is compiled into ONE Hyperscan database
-- (sluice.multi); no per-rule regex runs per request. This compilation is the expensive
-- part of loading: about 2 to 3 seconds of CPU per worker on a current x86 core, at start
-- and at each reload. Per request:
--   * one pass over the headers, which also collects what the protocol checks need;
--   * for each part present (path, query, body, cookies, header values, User-Agent): one
--     sluice.transform (decode + lowercase, in C) and one m:scan over the result, so the
--     cost grows with the bytes of the request, not with the number of rules; a match
--     then counts only if its rule looks at that part (a table lookup per match);
--   * a few protocol checks (plain Lua comparisons on what the header pass collected; the
--     ones about arguments or bodies run only when there is a query or a body);
--   * a second scan of an argument text only when it contains "/*" or a line break (SQL
--     comment obfuscation, see scan_args), and per-argument length checks only on long
--     queries and form bodies.
-- Tables are preallocated; a clean request allocates only the transformed strings.
--
-- Decoding. Arguments (query, form bodies, cookies) are URL-decoded twice (urldecode_uni,
-- then urldecode, which keeps "+"), so double-encoded payloads are seen decoded, then
-- HTML-entity decoded and lowercased. JSON bodies have their string escapes (\u0073,
-- \n, ...) decoded first, as the backend's JSON parser will. Every pattern is written in
-- lower case and compiled without the caseless flag. Header values are decoded once. Whitespace is not compressed:
-- the header-injection rules need to see CR and LF; patterns use \s+ instead.

---------------------------------------------------------------------------------------------
-- Knobs

local THRESHOLD = 5        -- inbound anomaly score that denies (CRS default: 5)
local PARANOIA = 1         -- 1: few false positives; 2: adds stricter rules (pl = 2 below)

-- Parts of the request that are scanned. "body" needs `body:` in the listener's inspect
-- config; without it req:body() is nil and nothing is scanned.
local INSPECT = {
  path = true, args = true, body = true, cookies = true, headers = true, ua = true,
}

local MAX_NUM_ARGS = 255        -- arguments in the query or a form body
local MAX_ARG_NAME_LEN = 100    -- bytes of one argument name (raw)
local MAX_ARG_LEN = 8000        -- bytes of one argument value (raw)
local MAX_ARGS_TOTAL = 64000    -- bytes of a query or form body
local MAX_ACCEPT_ENCODING = 100 -- bytes of Accept-Encoding
local MAX_RANGES = 5            -- byte ranges in one Range header (paranoia 2)

local ALLOWED_METHODS = "GET HEAD POST OPTIONS PUT PATCH DELETE"

-- Request bodies of other types are refused (920420). "+json" and "+xml" suffixes pass.
local ALLOWED_CONTENT_TYPES =
  "application/x-www-form-urlencoded multipart/form-data multipart/related text/xml " ..
  "application/xml application/soap+xml application/json application/csp-report " ..
  "application/x-ndjson application/graphql text/plain application/octet-stream"

local ALLOWED_CHARSETS = "utf-8 utf8 iso-8859-1 iso-8859-15 windows-1252 us-ascii"

-- Bodies of these types are scanned; others (octet-stream, images, ...) are not.
local SCANNED_BODY_TYPES =
  "application/x-www-form-urlencoded multipart/form-data multipart/related text/xml " ..
  "application/xml application/soap+xml application/json application/x-ndjson " ..
  "application/graphql text/plain application/csp-report"

-- Request header names that must not be sent (920450). Content-Encoding is here because
-- sluice inspects bodies as sent: a compressed body would slip past the body rules.
local RESTRICTED_HEADERS =
  "proxy lock-token content-range if x-http-method-override x-http-method " ..
  "x-method-override x-middleware-subrequest content-encoding"

-- Header values that are not scanned: structured values (quality lists, client hints,
-- tokens, dates, ETags) that carry no user data and would only make false positives.
-- Those in SKIP_HEADERS_PROBED are still scanned when they contain a '{': lookup payloads
-- (${jndi:...}) are sprayed into tokens and dates too.
local SKIP_HEADERS_PROBED =
  "accept-language accept-charset authorization proxy-authorization if-none-match " ..
  "if-match if-modified-since if-unmodified-since if-range cache-control pragma"
local SKIP_HEADERS =
  "connection keep-alive te upgrade " ..
  "dnt upgrade-insecure-requests priority sec-ch-ua sec-ch-ua-mobile " ..
  "sec-ch-ua-platform sec-ch-ua-platform-version sec-ch-ua-full-version " ..
  "sec-ch-ua-full-version-list sec-ch-ua-arch sec-ch-ua-model sec-ch-ua-bitness " ..
  "sec-ch-ua-wow64 sec-ch-prefers-color-scheme sec-fetch-site sec-fetch-mode " ..
  "sec-fetch-user sec-fetch-dest sec-gpc sec-websocket-key sec-websocket-version " ..
  "sec-websocket-extensions sec-websocket-protocol sec-purpose purpose x-request-id " ..
  "traceparent tracestate baggage"

---------------------------------------------------------------------------------------------
-- Locals used everywhere

local sluice = sluice
local transform = sluice.transform
local find, sub, lower, match, gsub, byte =
  string.find, string.sub, string.lower, string.match, string.gsub, string.byte
local utf8len = utf8.len

local CRITICAL, ERROR, WARNING, NOTICE = 5, 4, 3, 2

-- True when s is empty or all blanks; the pattern runs only if s starts with a blank.
local function blank(s)
  return s == "" or (byte(s, 1) <= 32 and find(s, "^%s*$") ~= nil)
end

local function set_of(words)
  local s = {}
  for w in words:gmatch("%S+") do s[w] = true end
  return s
end

local METHOD_OK = set_of(ALLOWED_METHODS)
local CTYPE_OK = set_of(ALLOWED_CONTENT_TYPES)
local CHARSET_OK = set_of(ALLOWED_CHARSETS)
local CTYPE_SCAN = set_of(SCANNED_BODY_TYPES)
local JSON_TYPES = set_of("application/json application/x-ndjson application/csp-report")

-- The transform chains. ARGS_T decodes twice; see "Decoding" above.
local ARGS_T = "urldecode_uni,urldecode,htmldecode,lower"
local PATH_T = "urldecode_uni,urldecode,htmldecode,lower"
local BODY_T = "urldecode,htmldecode,lower"     -- XML, multipart: "+" is literal
-- JSON: string escapes first (\u0073ystem is "system" to the backend's parser)
local JSON_T = "jsondecode,urldecode,htmldecode,lower"
local HDR_T = "urldecode_uni,htmldecode,lower"

---------------------------------------------------------------------------------------------
-- Pattern building blocks, substituted into patterns as {{NAME}} at load.

local MACROS = {
  -- SQL whitespace: blanks, '+', and MySQL comment delimiters (/*! runs what it encloses).
  -- Comments used as blanks (union/**/select, union#x\nselect) are also removed by
  -- scan_args before a second scan.
  SQS = [=[(?:\s|\+|/\*!?\d*|\*/)]=],
  -- a shell command position: after a separator or inside a command substitution,
  -- optionally with the command's directory.
  -- A backtick counts only when it is not next to another one: ``` opens a Markdown fence.
  SEP = [=[(?:[;\n\r|]|(?:^|[^`])`|&&|\$\()\s*(?:(?:/usr)?(?:/local)?/s?bin/)?]=],
  -- The same, also after "& ": a query's own '&' is never followed by a blank. Only for
  -- commands too distinctive to appear after "Tom & " in prose.
  SEPA = [=[(?:[;\n\r|]|(?:^|[^`])`|&&|&\s+|\$\()\s*(?:(?:/usr)?(?:/local)?/s?bin/)?]=],
  -- The same for commands that are also common short words (id, ls, w, ps): a bare '|' only
  -- counts after a blank, a digit or ')', so "name|id" and "rock|pop|ps" (pipe-separated
  -- lists) are not taken for "127.0.0.1|id".
  SEPR = [=[(?:[;\n\r]|(?:^|[^`])`|&&|\|\||\$\(|[\d\s)]\|)\s*(?:(?:/usr)?(?:/local)?/s?bin/)?]=],
  -- a Windows command position.
  WSEP = [=[(?:[;\n\r|`'"]|&&|&\s+|^|=)\s*]=],
  -- shell blanks, including $IFS and the <, {, tab tricks.
  SSP = [=[(?:\s+|\$\{?ifs\}?|\s*<\s*|\s*\{\s*)]=],
}

local function expand(p)
  return (gsub(p, "{{(%u+)}}", function(name)
    local m = MACROS[name]
    if m == nil then error("waf.lua: unknown macro {{" .. name .. "}}") end
    return m
  end))
end

-- A word with shell quoting noise allowed between its letters: c'a't, c\at, w"h"o"am"i.
local function evasive(word)
  local out = {}
  for i = 1, #word do
    local c = sub(word, i, i)
    if find(c, "%w") == nil then c = "\\" .. c end
    out[#out + 1] = c
  end
  return table.concat(out, [=[['"\\^]*]=])
end

-- The same, but with at least one noise character: the plain word is left to the rules
-- that know its context.
local function evasive_strict(word)
  local alts = {}
  for k = 1, #word - 1 do
    alts[#alts + 1] = evasive(sub(word, 1, k)) .. [=[['"\\^]+]=] .. evasive(sub(word, k + 1))
  end
  return "(?:" .. table.concat(alts, "|") .. ")"
end

-- A word with blanks allowed between its letters (browsers drop tabs and newlines inside
-- a URL scheme: java&#9;script:).
local function spaced(word)
  local out = {}
  for i = 1, #word do out[i] = sub(word, i, i) end
  return table.concat(out, [=[\s*]=])
end

---------------------------------------------------------------------------------------------
-- Helpers of the session fixation and upload checks

-- Argument names that carry a server's session id (Java, PHP, ASP, ColdFusion, WebLogic).
-- Generic names (sid, session, session_id) are left out: ad and analytics links use them.
local SESSION_ARGS = { "jsessionid", "phpsessid", "aspsessionid", "asp.net_sessionid",
  "phpsession", "weblogicsession", "jservsession", "jwsession", "cfid", "cftoken", "cfsid" }

-- Does this decoded, lowercased text name a session id argument (name=, or ;name= in a path)?
local function names_session(t)
  if t == nil or t == "" then return false end
  for i = 1, #SESSION_ARGS do
    local name = SESSION_ARGS[i]
    local init = 1
    while true do
      local a, e = find(t, name, init, true)
      if a == nil then break end
      local before = a == 1 and "" or sub(t, a - 1, a - 1)
      -- aspsessionid has a per-server suffix: ASPSESSIONIDQCRBSDAT=
      local after = match(t, "^[%w]*%s*=", e + 1)
      if (before == "" or find(before, "[&;?%s]")) and after then return true end
      init = e + 1
    end
  end
  return false
end

local function session_id_sent(c)
  return names_session(c.args_text) or names_session(c.form_text)
    or (find(c.path, ";", 1, true) ~= nil and names_session(lower(c.path)))
end

-- The host of a Referer ("https://user@Shop.example:8443/x" -> "shop.example"), or nil.
local function url_host(u)
  local h = match(u, "^%a[%w+.-]*://([^/?#]+)")
  if h == nil then return nil end
  h = gsub(h, "^.*@", "")
  h = gsub(h, ":%d*$", "")
  return lower(h)
end

-- A Referer from another site than Host (a subdomain of either counts as the same site).
local function offsite(referer, host)
  local r = url_host(referer)
  if r == nil then return false end
  local h = host and lower(gsub(host, ":%d*$", "")) or ""
  if r == h then return false end
  local function under(a, b) return #a > #b and sub(a, -#b - 1) == "." .. b end
  return not (under(r, h) or under(h, r))
end

-- Extensions a server may run: scripts, executables, server-side includes, archives
-- deployed as applications.
local EXEC_EXT = set_of("jsp jspx jspf asp aspx asa asmx ashx axd cer cgi pl pm py pyc rb " ..
  "sh bash exe com scr bat cmd ps1 psm1 vbs vbe wsf hta msi dll war jar shtml stm htaccess")
local PHP_EXT = set_of("php php2 php3 php4 php5 php7 php8 phtml phar pht phps pgif inc")

-- Does a file name end in an extension of SET (after quotes and blanks), or carry a PHP
-- one inside (shell.php.jpg runs under a handler that matches any ".php")?
local function upload_ext(name, set)
  local n = lower(name)
  local ext = match(n, "%.([%w]+)[%s\"';]*$")
  if ext and set[ext] then return true end
  if set == PHP_EXT then
    for e in n:gmatch("%.(%w+)%.") do
      if PHP_EXT[e] then return true end
    end
  end
  return false
end

---------------------------------------------------------------------------------------------
-- The rules.
--
-- Each entry ends up with: id, tag, severity, targets (a set of request parts), paranoia,
-- and either a Hyperscan pattern or a check function. Targets:
--   path     the path, decoded
--   args     the query string and form/JSON/XML/multipart bodies, decoded
--   cookies  the Cookie header(s), decoded
--   headers  every header value not in SKIP_HEADERS (User-Agent, Referer, Host, ...)
--   ua       the User-Agent only
-- A check rule's `on` says when it runs, so that a clean request runs only a few checks:
--   request     always
--   query       there is a query string (or a form body broke an argument limit)
--   body        a body is announced (Content-Length > 0 or Transfer-Encoding)
--   pct         the request target contains a '%'
--   framing     a Content-Length or Transfer-Encoding header is present
--   connection  a Connection header is present
--   flagged     the header pass saw a restricted or scanner header name
--   acceptenc   an Accept-Encoding header is present
--   ctype       a Content-Type header is present
--   range       a Range header is present

local RULES = {}

local function section(s)
  for i = 1, #s do
    local r = s[i]
    r.id = r.id or r[1]
    if type(r[2]) == "string" then r.pattern = r[2] end
    r[1], r[2] = nil, nil
    r.tag = r.tag or s.tag
    r.severity = r.severity or s.severity
    r.targets = r.targets or s.targets
    r.paranoia = r.paranoia or s.paranoia or 1
    RULES[#RULES + 1] = r
  end
end

-- 913: scanners, recognised by their User-Agent, headers or probe URLs ---------------------
section { tag = "scanner", severity = CRITICAL, targets = "ua",
  { 913100, [=[\bsqlmap/]=] },
  { 913101, [=[\bnikto\b]=] },
  { 913102, [=[nmap (?:scripting engine|nse)|\bnmap\b.*\bnse\b]=] },
  { 913103, [=[\bmasscan\b]=] },
  { 913104, [=[\bzgrab\b]=] },
  { 913105, [=[\bacunetix\b]=] },
  { 913106, [=[\b(?:netsparker|invicti)\b]=] },
  { 913107, [=[\bwpscan\b]=] },
  { 913108, [=[\bdirbuster\b]=] },
  { 913109, [=[\bgobuster\b]=] },
  { 913110, [=[\bnuclei\b|projectdiscovery]=] },
  { 913111, [=[fuzz faster u fool|\bffuf\b]=] },
  { 913112, [=[\bwfuzz\b]=] },
  { 913113, [=[\bferoxbuster\b]=] },
  { 913114, [=[\bw3af\b]=] },
  { 913115, [=[\barachni\b]=] },
  { 913116, [=[\bskipfish\b]=] },
  { 913117, [=[\bopenvas\b|\bgreenbone\b]=] },
  { 913118, [=[\bnessus\b]=] },
  { 913119, [=[\bhavij\b]=] },
  { 913120, [=[\bcommix\b]=] },
  { 913121, [=[\bxsser\b]=] },
  { 913122, [=[\bwhatweb\b]=] },
  { 913123, [=[\(hydra\)|\bthc-hydra\b]=] },
  { 913124, [=[\bjaeles\b]=] },
  { 913125, [=[\bfimap\b|\bdotdotpwn\b]=] },
  { 913126, [=[\b(?:bsqlbf|absinthe|pangolin|sqlninja|bbqsql|sql power injector|marathon tool)\b]=] },
  { 913127, [=[\b(?:webinspect|appscan|n-stealth|nstalker|paros|webshag|grabber)\b]=] },
  { 913128, [=[\b(?:morfeus|zmeu|muieblackcat)\b]=] },
  { 913129, [=[\b(?:joomscan|droopescan|cmsmap|jexboss|wpxf)\b]=] },
  { 913130, [=[\b(?:l9explore|l9tcpid|leakix)\b]=] },
  { 913131, [=[\b(?:owasp[ -]zap|zaproxy)\b]=] },
  { 913132, [=[\b(?:brutus|metis|syhunt|nsauditor|webvulnscan|cgichk|vega/)\b]=] },
  { 913133, [=[\b(?:burp(?:suite| collaborator)|qualys(?:guard)?|detectify)\b]=] },
  { 913134, [=[\b(?:httprint|wapiti|skipfish|uniscan|golismero|vooki)\b]=] },
  { 913135, [=[\b(?:dirb|dirsearch|gospider|hakrawler|katana)/]=] },
}

section { tag = "scanner", severity = CRITICAL, targets = "path",
  { 913140, [=[nessus_is_probing_you|/nessustest|/nessus_|acunetix-wvs-test|/w00tw00t|appscan_fingerprint|/nikto-test|/ffuf-|/sqlmap|/xsser|/wpscan]=] },
}

section { tag = "scanner", severity = CRITICAL,
  -- Scanner-specific header names are spotted by the header pass (HEADER_CLASS "scanner").
  { 913150, on = "flagged", check = function(req, c) return c.scanner_header end },
}

-- 943: session fixation ------------------------------------------------------------------
-- A fixation plants a session id the attacker knows: a cookie written from a parameter
-- (document.cookie=..., a Set-Cookie meta tag or header text), or a link from another site
-- that carries the id in the URL (?PHPSESSID=x, /cart;jsessionid=x).
section { tag = "fixation", severity = CRITICAL, targets = "args",
  { 943100, [=[\.cookie\s*=\s*['"`]?[\w.-]+\s*=[^;&]*;\s*(?:path|domain|expires|max-age)\s*=|\bhttp-equiv\s*=\s*['"]?\s*set-cookie\b|\bset-cookie\s*:\s*[\w.-]*(?:sess|sid|token|auth)[\w.-]*\s*=]=] },
  { 943101, [=[\.cookie\s*=\s*['"`]?\s*(?:jsessionid|phpsessid|aspsessionid\w*|asp\.net_sessionid|cfid|cftoken|sid|sessionid|session_id|connect\.sid)\s*=]=] },
}

section { tag = "fixation", severity = CRITICAL,
  -- a session id name among the arguments or path parameters, linked from another site
  { 943110, on = "request", check = function(req, c)
      return c.referer ~= nil and session_id_sent(c) and offsite(c.referer, c.host) end },
  -- the same without any Referer (a bookmarked or typed URL may carry one too: paranoia 2)
  { 943120, severity = WARNING, paranoia = 2, on = "request", check = function(req, c)
      return c.referer == nil and session_id_sent(c) end },
}

-- 932180/933111: file names announced in upload headers (X-Filename, X_Filename, X-File-Name)
section { tag = "rce", severity = CRITICAL,
  { 932180, on = "flagged", check = function(req, c)
      return c.upload_name ~= nil and upload_ext(c.upload_name, EXEC_EXT) end },
}
section { tag = "php", severity = CRITICAL,
  { 933111, on = "flagged", check = function(req, c)
      return c.upload_name ~= nil and upload_ext(c.upload_name, PHP_EXT) end },
}

-- 920/911/921: protocol enforcement and protocol attacks ------------------------------------
section { tag = "protocol", severity = CRITICAL,
  { 911100, on = "request", check = function(req, c) return not METHOD_OK[c.method] end },
  -- sluice answers 400 itself for most of these; the checks stay so that the score is
  -- right if it ever becomes more lenient.
  { 920160, on = "framing", check = function(req, c)
      return c.clen ~= nil and find(c.clen, "^%d+$") == nil end },
  { 920170, on = "framing", check = function(req, c)
      return (c.method == "GET" or c.method == "HEAD") and c.clen ~= nil
        and find(c.clen, "^0*$") == nil end },
  { 920171, on = "framing", check = function(req, c)
      return (c.method == "GET" or c.method == "HEAD") and c.te ~= nil end },
  { 920180, severity = WARNING, on = "request", check = function(req, c)
      return c.method == "POST" and c.clen == nil and c.te == nil end },
  { 920181, on = "framing", check = function(req, c) return c.clen ~= nil and c.te ~= nil end },
  { 920190, severity = WARNING, on = "range", check = function(req, c)
      -- a byte range whose last byte comes before its first
      for a, b in c.range:gmatch("(%d+)%s*%-%s*(%d+)") do
        if #a > #b or (#a == #b and a > b) then return true end
      end
      return false
    end },
  { 920200, severity = WARNING, paranoia = 2, on = "range", check = function(req, c)
      local _, commas = gsub(c.range, ",", ",")
      return commas >= MAX_RANGES
    end },
  { 920210, severity = WARNING, on = "connection", check = function(req, c)
      -- "close" and "keep-alive" together take more than 15 bytes
      local v = c.connection
      return #v > 15 and find(v, "[Cc][Ll][Oo][Ss][Ee]") ~= nil
        and find(v, "[Kk][Ee][Ee][Pp]%-[Aa][Ll][Ii][Vv][Ee]") ~= nil
    end },
  -- '%' not followed by two hex digits (a %uXXXX escape is 920260's business)
  { 920220, severity = WARNING, on = "pct", check = function(req, c)
      return (find(c.path, "%%[^%x]") or find(c.path, "%%%x[^%x]")
        or find(c.path, "%%%x?$") or find(c.query, "%%[^%xuU]")
        or find(c.query, "%%%x[^%x]") or find(c.query, "%%%x?$")) ~= nil
    end },
  { 920230, severity = WARNING, paranoia = 2, on = "query", check = function(req, c)
      return c.pct and find(c.query, "%%25%x%x") ~= nil end },
  { 920240, severity = WARNING, on = "body", check = function(req, c)
      local b = c.form
      return b ~= nil and (find(b, "%%[^%x]") or find(b, "%%%x[^%x]")
        or find(b, "%%%x?$")) ~= nil
    end },
  { 920250, severity = WARNING, paranoia = 2, on = "query", check = function(req, c)
      return c.args_text ~= nil and utf8len(c.args_text) == nil end },
  { 920260, severity = WARNING, on = "pct", check = function(req, c)
      return (find(c.query, "%%[uU][fF][fF]%x%x") or find(c.path, "%%[uU][fF][fF]%x%x")) ~= nil
    end },
  { 920280, severity = WARNING, on = "request", check = function(req, c) return c.host == nil end },
  { 920290, severity = WARNING, on = "request", check = function(req, c)
      return c.host ~= nil and blank(c.host) end },
  { 920300, severity = NOTICE, paranoia = 2, on = "request", check = function(req, c)
      return c.accept == nil and c.method ~= "OPTIONS" end },
  { 920310, severity = NOTICE, on = "request", check = function(req, c)
      return c.accept ~= nil and blank(c.accept) end },
  { 920320, severity = NOTICE, paranoia = 2, on = "request", check = function(req, c)
      return c.ua == nil end },
  { 920330, severity = NOTICE, on = "request", check = function(req, c)
      return c.ua ~= nil and blank(c.ua) end },
  { 920340, severity = NOTICE, on = "body", check = function(req, c)
      return c.ctype == nil and c.clen ~= nil and find(c.clen, "^0*$") == nil end },
  { 920350, severity = WARNING, paranoia = 2, on = "request", check = function(req, c)
      local h = c.host
      return h ~= nil and (find(h, "^%d+%.%d+%.%d+%.%d+") or find(h, "^%[")) ~= nil
    end },
  { 920360, on = "query", check = function(req, c) return c.arg_name_long end },
  { 920370, on = "query", check = function(req, c) return c.arg_long end },
  { 920380, on = "query", check = function(req, c) return c.arg_many end },
  { 920390, on = "query", check = function(req, c) return c.args_total > MAX_ARGS_TOTAL end },
  { 920420, on = "body", check = function(req, c)
      local mt = c.mtype
      return mt ~= nil and not CTYPE_OK[mt] and find(mt, "%+json$") == nil
        and find(mt, "%+xml$") == nil
    end },
  -- Content-Type made of token characters and ;-separated parameters only: this is where
  -- the Struts OGNL payloads (CVE-2017-5638) travel.
  { 920470, on = "ctype", check = function(req, c)
      return find(c.ctype, "[^%w%s!#&%%'%*%+%-%.%^_|~/;=\",:()]") ~= nil
        or find(c.ctype, "%%{") ~= nil
    end },
  { 920480, on = "ctype", check = function(req, c)
      local cs = match(c.ctype, "[Cc][Hh][Aa][Rr][Ss][Ee][Tt]%s*=%s*[\"']?([%w%-_:.]+)")
      return cs ~= nil and not CHARSET_OK[lower(cs)]
    end },
  { 920450, on = "flagged", check = function(req, c) return c.restricted_header end },
  { 920520, on = "acceptenc", check = function(req, c)
      return #c.accept_encoding > MAX_ACCEPT_ENCODING end },
  -- A raw '#' never reaches a server from a browser: the fragment stays client side.
  { 920610, on = "request", check = function(req, c) return find(c.uri, "#", 1, true) ~= nil end },
  { 920620, on = "ctype", check = function(req, c) return c.nctype > 1 end },
  { 921151, severity = WARNING, paranoia = 2, on = "query", check = function(req, c)
      return c.pct and find(c.query, "%%0[aAdD]") ~= nil end },
}

section { tag = "protocol", severity = CRITICAL, targets = "path args cookies headers",
  { 920270, [=[\x00]=] },
  { 920271, [=[[\x01-\x08\x0b\x0c\x0e-\x1f\x7f]]=], paranoia = 2, targets = "path args" },
}

section { tag = "protocol", severity = CRITICAL, targets = "path",
  -- restricted file extensions: sources, backups, configuration, databases, keys
  { 920440, [=[\.(?:asax?|ascx|backup|bak|bat|cdx|cfg|cmd|config|conf|cs|csproj|dbf|dll|dos|htr|htw|ida|idc|idq|inc|ini|key|licx|lnk|log|mdb|old|pass|pdb|pol|printer|pwd|rdb|resources|resx|sql|swp|swo|sys|vb|vbs|vbproj|vsdisco|webinfo|xsd|xsx|sqlite3?|pem|pfx|p12|jks|keystore|kdbx|orig|save|tmp)$]=] },
  -- editor and backup leftovers: index.php~, config.php.bak, .#file, #file#
  { 920500, [=[(?:~|\.php\d?\.(?:bak|old|orig|save|txt|swp|dist)|/\.#[^/]*|/#[^/]*#)$]=] },
  -- CR or LF in the path: response splitting or log forging
  { 921190, [=[[\n\r]]=] },
  -- mod_proxy SSRF through a unix: socket path (CVE-2021-40438)
  { 921240, [=[unix:[^|]*\|]=] },
}

section { tag = "protocol", severity = CRITICAL, targets = "args cookies",
  -- an HTTP request smuggled inside an argument
  { 921110, [=[[\n\r]\s*(?:get|post|head|options|connect|put|delete|trace|track|patch|propfind|proppatch|mkcol|copy|move|lock|unlock)\s+[^\s]+\s+http/\d]=] },
  -- response splitting: a response header after a line break
  { 921120, [=[[\n\r]\s*(?:set-cookie\s*:\s*[^\s=]+=|location\s*:\s*(?:https?:|//|/)|refresh\s*:\s*\d+\s*;\s*url\s*=|content-length\s*:\s*\d+\s*[\r\n])]=] },
  -- response splitting: a status line after a line break
  { 921130, [=[[\n\r]\s*http/\d(?:\.\d)?\s+\d{3}\b]=] },
  -- request header injection through an argument
  { 921160, [=[[\n\r]\s*(?:x-forwarded-(?:for|host|proto|server)|x-real-ip|x-originating-ip|remote-addr|true-client-ip)\s*:\s*[^\s]|[\n\r]\s*(?:set-)?cookie\s*:\s*[^\s=;]+=]=] },
  -- a multipart or Content-Disposition file name with a script or executable extension
  -- (X-Filename style headers are checked by 932180)
  { 932181, [=[filename\*?\s*=\s*(?:utf-8'')?['"]?[^'";\n\r]*\.(?:jspx?|jspf|aspx?|asa|asmx|ashx|axd|cer|cgi|pl|pm|py|pyc|rb|sh|bash|exe|com|scr|bat|cmd|ps1|psm1|vbs|vbe|wsf|hta|msi|dll|war|jar|shtml|stm|htaccess|php\d?|phtml|phar|pht)['"]?\s*(?:;|$|\r|\n)]=], tag = "rce" },
  -- multipart file name with a traversal or shell characters
  { 920121, [=[filename\s*=\s*"[^"\n]*(?:\.\.[/\\]|[<>|;`$])]=] },
}

section { tag = "ldap", severity = CRITICAL, targets = "args cookies",
  { 921200, [=[\*\)+\s*\(\s*[|&!]|\)\s*\)\s*\(\s*[|&]|\(\s*[|&]\s*\(\s*(?:uid|cn|objectclass|mail|sn|userpassword|samaccountname|memberof)\s*=|\*\)\s*\(\s*(?:uid|cn|objectclass|mail|userpassword|samaccountname)\s*=\s*\*|\)\s*\(\s*&\s*\)]=] },
}

-- 930: local file inclusion and path traversal ----------------------------------------------
section { tag = "lfi", severity = CRITICAL, targets = "path args cookies headers",
  -- overlong UTF-8 or %u forms of '.', '/', '\' (left after decoding, or triple-encoded)
  { 930100, [=[\.\.(?:\xe2\x88[\x95\x96]|\xe2\x81\x84|\xef\xbc[\x8f\xbc])|(?:\xef\xbc\x8e){2}|\xc0[\xae\xaf\x2e\x2f]|\xc1[\x9c\x1c\x81]|\xe0\x80[\xae\xaf]|%(?:u002e|u2215|u2216|uff0e|uff0f|c0%ae|c0%af|c1%9c|e0%80%ae)]=] },
  { 930110, [=[(?:^|[\\/;=\s'":])\.\.[\\/]|[\\/]\.\.(?:[\\/;]|$)|\.{4}[\\/]{1,2}]=] },
  -- ..%00, ..;/ (Tomcat path parameter trick)
  { 930111, [=[\.\.;/|/;[^/]*/\.\.]=] },
}

section { tag = "lfi", severity = CRITICAL, targets = "args cookies headers path",
  { 930120, [=[(?:^|[\\/=\s'"(])etc[\\/]+(?:passwd|shadow|gshadow|group|master\.passwd|sudoers|security/opasswd)\b]=] },
  { 930121, [=[(?:^|[\\/=\s'"(])etc[\\/]+(?:hosts|hostname|issue|motd|crontab|fstab|resolv\.conf|os-release|lsb-release|inittab|profile|bashrc|environment|ld\.so\.preload|mysql/my\.cnf|ssh/sshd_config|pam\.d/)]=] },
  { 930122, [=[(?:^|[\\/=\s'"(])etc[\\/]+(?:apache2?|httpd|nginx|php\d?(?:\.\d)?|lighttpd|tomcat\d*|ssl/private|kubernetes|docker)[\\/]]=] },
  { 930123, [=[/proc/(?:self|thread-self|\d+)/(?:environ|cmdline|fd/|maps|mem|status|cwd|exe|root|mounts|stat)\b|/proc/(?:version|cpuinfo|meminfo|mounts|net/(?:tcp|udp|arp|route|fib_trie))\b]=] },
  { 930124, [=[(?:^|[\\/~=])\.(?:ssh/(?:id_[a-z0-9]+|authorized_keys|known_hosts|config)|bash_history|zsh_history|sh_history|mysql_history|psql_history|bash_profile|viminfo|netrc|pgpass|my\.cnf|aws/(?:credentials|config)|docker/config\.json|kube/config|git-credentials|gnupg/|npmrc|pypirc)\b]=] },
  { 930125, [=[/var/log/(?:apache2?|httpd|nginx|auth\.log|syslog|messages|secure|mail\.log|vsftpd)|/var/(?:lib/mysql/|spool/cron/|mail/root|run/secrets/)|/usr/local/(?:apache2?|etc/(?:php|nginx|httpd))/]=] },
  { 930126, [=[\b(?:boot\.ini|win\.ini|system\.ini)\b]=] },
  { 930127, [=[\b(?:c:)?[\\/]+(?:windows|winnt)[\\/]+(?:system32|syswow64|repair|panther|debug|win\.ini|system\.ini|temp)\b|\bsystem32[\\/]+(?:drivers[\\/]+etc|config[\\/]+sam|cmd\.exe|inetsrv)|\binetpub[\\/]+wwwroot]=] },
  { 930128, [=[\b(?:ntds\.dit|sam\.(?:bak|old|save)|unattend(?:ed)?\.xml|sysprep\.(?:inf|xml)|web\.config\.bak|applicationhost\.config)\b]=] },
  { 930129, [=[%(?:systemroot|windir|comspec|userprofile|appdata|localappdata|programfiles|allusersprofile|homedrive|systemdrive)%]=] },
  { 930132, [=[(?:^|[\\/=])(?:web-inf|meta-inf)(?:[\\/]|$)]=] },
}

section { tag = "lfi", severity = CRITICAL, targets = "path args",
  -- version control, editor, CI and secret files that must never be served
  { 930130, [=[(?:^|[\\/=])\.(?:git|svn|hg|bzr|cvs|idea|vscode|env|htaccess|htpasswd|ds_store|aws|ssh|docker|dockerenv|npmrc|git-credentials|travis\.yml|gitlab-ci\.yml|circleci)(?:$|[\\/.?;])]=] },
  { 930131, [=[/(?:wp-config\.php[~.]|web\.config$|phpinfo\.php|server-(?:status|info)\b|id_[rd]sa(?:\.pub)?$|(?:dump|backup|database|db)\.sql\b|database\.yml$|credentials\.json$|secrets\.ya?ml$|docker-compose\.ya?ml$)]=] },
}

-- 931: remote file inclusion ----------------------------------------------------------------
section { tag = "rfi", severity = CRITICAL, targets = "args cookies",
  -- a URL with an IP address as an argument value
  { 931100, [=[=\s*(?:https?|ftps?|file)://(?:\d{1,3}\.){3}\d{1,3}\b]=] },
  -- a URL in an argument known from RFI-vulnerable PHP applications
  { 931110, [=[(?:^|[&?\s])(?:include|inc|require|mosconfig_absolute_path|_conf\[path\]|_server\[document_root\]|globals\[rootpath\]|phpbb_root_path|appserv_root|base_path|path_to_root|includedir|lang_path|template_path|config\[root_dir\]|abspath)\s*=\s*(?:https?|ftps?)://]=] },
  -- the trailing '?' that turns the rest of the include path into a query
  { 931120, [=[=\s*(?:https?|ftps?)://[^&\s]+\?+\s*(?:&|$)]=] },
  { 931121, [=[://[^&\s]*/[^&\s/]*(?:shell|c99|r57|wso|b374k|webshell|backdoor|cmd)[^&\s/]*\.(?:txt|php\d?|gif|jpg|png)\b]=] },
  -- stream wrappers that read local files or run code
  { 931200, [=[\b(?:php|data|expect|zip|phar|glob|zlib|compress\.zlib|compress\.bzip2|rar|ogg|ssh2(?:\.(?:shell|exec|tunnel|sftp|scp))?)://]=] },
  { 931201, [=[\bphp://(?:input|filter|fd|memory|temp|stdin)\b]=] },
  { 931202, [=[\bfile:/{2,}]=] },
  { 931203, [=[=\s*(?:ftp|ftps|tftp|smb|sftp|webdav)://]=], severity = WARNING },
  -- a UNC path to another host (\\attacker\share\x.php)
  { 931204, [=[(?:^|[=\s'"])\\\\[a-z0-9.-]+(?:@\d+)?\\[a-z0-9$._-]+]=] },
  { 931205, [=[\b(?:include|require)(?:_once)?\s*\(?\s*['"]?\s*(?:https?|ftps?|php|data|expect)://]=] },
  -- a data: URI carrying base64 PHP ("<?ph" is "pd9wah")
  { 931206, [=[data:[a-z0-9/+.-]*;base64,\s*pd9wah]=] },
}

-- 932: remote command execution -------------------------------------------------------------
section { tag = "rce", severity = CRITICAL, targets = "args cookies headers",
  -- file readers with a path-like argument: ;cat /etc/passwd, |tail -n 5 x.log
  { 932230, [=[{{SEPA}}(?:cat|tac|more|less|head|tail|nl|od|xxd|strings|hexdump|base64|base32|zcat|bzcat|xzcat|sort|uniq|rev|cut|grep|egrep|fgrep|awk|gawk|sed|vi|vim|nano|diff|file|stat|find|locate|ls|dir)(?:{{SSP}}(?:-{1,2}[a-z0-9-]+\s+)*|\s*<\s*)[^\s;|&]*[/.~*$]]=] },
  -- recon commands, which take no argument: ;id; `whoami` $(uname -a) |ls
  { 932231, [=[{{SEPR}}(?:id|whoami|uname|ifconfig|hostname|pwd|ls|ps|env|printenv|netstat|ss|w|who|last|lastlog|groups|lsb_release|lscpu|lsblk|mount|df|uptime|history|arp|route|ip\s+a(?:ddr)?)\b(?:\s+-{0,2}[a-z]+){0,2}\s*(?:[;|`)#\n\r]|&&|\$|$)]=] },
  { 932232, [=[{{SEPA}}(?:whoami|ifconfig|uname\s+-[a-z]+|netstat\s+-[a-z]+|lsb_release|printenv|cat\s+/etc/)]=] },
  -- network tools with a host argument
  { 932233, [=[{{SEPA}}(?:curl|wget|fetch|lwp-download|lwp-request|aria2c)(?:{{SSP}}(?:-{1,2}[a-z-]+(?:\s+[^\s-][^\s]*)?\s+)*)(?:[a-z]+://|[\w.-]+\.[a-z]{2,}|\d{1,3}\.\d{1,3}|\$)]=] },
  { 932234, [=[{{SEPA}}(?:nc|ncat|netcat|socat|telnet|ssh|scp|sftp|ftp|tftp|nslookup|dig|host|traceroute|tracert|nmap|openssl\s+s_client)(?:{{SSP}}(?:-{1,2}[a-z]+\s*(?:\d+\s+)?)*)(?:[\w.-]+\s+\d+|[\w-]+\.[\w.-]+|\d{1,3}\.\d|-e\b|tcp:|exec:)]=] },
  { 932235, [=[{{SEPA}}ping(?:{{SSP}}-[a-z]+\s*\d*)*{{SSP}}(?:\d{1,3}\.\d|[a-z0-9-]+\.[a-z]{2,}|-[cnwt]\s*\d)]=] },
  -- interpreters started with an option or a script: ;bash -i, |python -c, ;perl -e
  { 932236, [=[{{SEPA}}(?:sh|bash|dash|zsh|ksh|csh|tcsh|ash|busybox|python[23]?(?:\.\d+)?|perl|ruby|php\d?|node|nodejs|lua|tclsh|irb|pwsh|java|jrunscript)(?:\s+-[a-z]+|\s*<|\s+/|\s+\./|\s*$)]=] },
  -- file manipulation
  { 932237, [=[{{SEPA}}(?:rm{{SSP}}-[rf]+|chmod{{SSP}}(?:[+0-7]|[ugoa]+[+=-])|chown{{SSP}}\w|chattr\s|mkfifo|mknod|ln{{SSP}}-s|dd{{SSP}}(?:if|of)=|tee{{SSP}}[/~.\w]|touch{{SSP}}[/~.]|mkdir{{SSP}}(?:-p\s+)?[/~.]|(?:mv|cp){{SSP}}[^\s]+\s+[/~.]|shred\s|truncate\s+-s|(?:echo|printf)\s+[^\n]*>\s*[/~.\w])]=] },
  -- system and account manipulation
  { 932238, [=[{{SEP}}(?:kill(?:all)?\s+-?\d|pkill\s|shutdown\s|reboot\b|halt\b|poweroff\b|init\s+[06]|crontab\s+-|at\s+now|nohup\s|sudo\s|su\s+-|passwd\b|useradd\s|usermod\s|userdel\s|chpasswd|visudo|systemctl\s|service\s+\w+\s+(?:start|stop|restart)|iptables\s|insmod\s|modprobe\s|setenforce\s)]=] },
  -- blind injection by timing: ;sleep 10 and friends
  { 932239, [=[{{SEPA}}(?:sleep{{SSP}}\d+|timeout{{SSP}}\d+|usleep\s+\d+)]=] },
  -- reverse shells
  { 932240, [=[/dev/(?:tcp|udp)/[\w.-]+/\d+|\bbash\s+-i\s*[>&]|\b(?:nc|ncat|netcat)\b[^\n;|]*\s-[a-z]*[ec]\s|\bmkfifo\s+/tmp/|\bexec\s+\d+<>\s*/dev/|\b0<&\d+\s*-|>&\s*/dev/tcp/]=] },
  { 932241, [=[\bsocket\.socket\s*\(|\bpty\.spawn\s*\(|\bos\.dup2\s*\(|\bsubprocess\.(?:call|popen|run|check_output)\s*\(\s*\[?\s*['"]/bin/]=] },
  { 932242, [=[\buse\s+socket\s*;|\bsocket\s*\(\s*s\s*,\s*pf_inet|\btcpsocket\.(?:new|open)\s*\(|\bfsockopen\s*\(\s*['"]|\bproc_open\s*\(\s*['"]/bin/]=] },
  -- download and run
  { 932243, [=[\b(?:curl|wget)\s[^|;\n]*\|\s*(?:ba|da|z|k)?sh\b|\b(?:curl|wget)\s[^;\n]*\s(?:-o|-O|>)\s*/(?:tmp|dev/shm|var/tmp)/|\bchmod\s+(?:\+x|[0-7]*7[0-7]*)\s+/(?:tmp|dev/shm|var/tmp)/|/(?:tmp|dev/shm)/[\w.-]+\s*(?:;|&&)\s*(?:sh|bash|\./)]=] },
  -- shell binaries by absolute path
  { 932244, [=[/(?:usr/(?:local/)?)?s?bin/(?:ba|da|z|k|c|tc|a)?sh\b|/bin/(?:busybox|nc|ncat|cat|echo|id|python\d?|perl|ruby|php|wget|curl)\b]=] },
  -- $IFS, brace expansion {cat,/etc/passwd}, $'\x2f' quoting, ${PATH:0:1}
  { 932245, [=[\$\{?ifs\}?|\$\{[a-z_]+:\d+:\d+\}|\{\s*[a-z]+\s*,\s*[-/.~$][^}]*\}|\$'\\x[0-9a-f]{2}|\$'\\[0-7]{3}]=] },
  -- command substitution of a known command: $(id) `whoami`
  { 932246, [=[(?:\$\(|(?:^|[^`])`)\s*(?:(?:/usr)?/s?bin/)?(?:id|whoami|uname|hostname|cat|ls|pwd|curl|wget|nc|ping|sleep|echo|env|ps|head|tail|base64|sh|bash|python\d?|perl|ruby|php|nslookup|dig|ifconfig|netstat|find|grep|awk|sed|printf|dd|xxd|rev|tr|cut|id)\b[^`)]*[`)]]=] },
  -- wildcard paths: /???/c?t /e??/p?ss??
  { 932247, [=[/(?:[a-z]*\?)+[a-z]*/(?:[a-z]*\?)+]=] },
  -- quoting noise inside command names: c'a't, w\h\o\a\m\i, /e"t"c/pa""sswd
  { 932248, "{{SEP}}(?:" .. table.concat({
      evasive("cat") .. [=[(?:\s|\$)]=], evasive("whoami"), evasive("uname"), evasive("wget"),
      evasive("curl") .. [=[\s]=], evasive("bash"), evasive("python"), evasive("nc") .. [=[\s+-]=],
      evasive("ifconfig"), evasive("passwd") }, "|") .. ")" },
  { 932249, [=[/]=] .. evasive("etc") .. [=[['"\\^]*/]=] .. [=[['"\\^]*(?:]=] .. evasive("passwd") .. "|" .. evasive("shadow") .. ")" },
  -- run a local file: ;./exploit, |sh ./x.sh
  { 932250, [=[{{SEP}}\./[\w.-]+]=] },
  -- output redirected to a web or temp directory, or stderr merged for exfiltration
  { 932251, [=[>\s*/(?:tmp|var/www|dev/shm|var/tmp)/|\b2>&1\b]=] },
  -- Shellshock (CVE-2014-6271): a function definition at the start of a value
  { 932170, [=[\(\s*\)\s*\{\s*(?::|_)\s*;]=], targets = "args cookies headers ua" },
  -- SMTP, IMAP and POP3 commands smuggled after a line break
  { 932300, [=[[\r\n]\s*(?:mail\s+from|rcpt\s+to)\s*:|[\r\n]\s*(?:ehlo|helo)\s+[\w.-]+\s*[\r\n]]=] },
  { 932310, [=[[\r\n]\s*(?:a\d+|\w+)\s+(?:login|select|fetch|uid\s+fetch|append|store|copy|delete)\s+["\w]+[^\r\n]*[\r\n]]=], targets = "args", severity = WARNING },
  { 932320, [=[[\r\n]\s*(?:user\s+\w+[\r\n]+\s*pass\s|retr\s+\d+|dele\s+\d+|top\s+\d+\s+\d+)]=] },
}

-- Command substitution and expansion tricks beyond 932245/932246
section { tag = "rce", severity = CRITICAL, targets = "args cookies headers",
  -- $(</etc/passwd), $(/bin/x ...), `/usr/bin/x`: a substitution that reads a file or runs a path
  -- (in backticks only the read: Markdown writes `./configure` and `/usr/bin/env`)
  { 932260, [=[\$\(\s*(?:<\s*[/~.$]|(?:/usr)?(?:/local)?/s?bin/[a-z]|/tmp/|\./[\w.-]+)|(?:^|[^`])`\s*<\s*[/~.$]]=] },
  -- empty expansions splitting a word: c$@at, w$()hoami, who${}ami, l$*s
  { 932261, [=[[a-z]\$(?:@|\(\)|\{\}|\*)[a-z]]=] },
  -- characters cut out of well-known variables: ${PATH:0:1}, ${HOME%%h*}, ${SHELL#*/}, ${PS4/x/}
  { 932262, [=[\$\{\s*(?:path|home|shell|pwd|oldpwd|user|ps[124]|lang|hostname|bash|ifs)\s*(?::\s*-?\d|%|#|/|\^|,|:[-+=?])|\$\{!?[a-z_]+\[[@*]\][^}]*\}]=] },
  -- a substitution of a command that fetches, resolves or prints: $(nslookup x.evil), `dig ..`
  -- (backticks only for names that are not also words of Markdown prose: `host`, `set`)
  { 932263, [=[\$\(\s*(?:nslookup|dig|host|getent|telnet|socat|ncat|busybox|ifconfig|ip\s+a|who|tac|od|xxd|printenv|set|node|lua|expr|seq|timeout|xargs|python3?|perl|ruby)\b[^)]*\)|(?:^|[^`])`\s*(?:nslookup|getent|telnet|socat|ncat|busybox|ifconfig|printenv|xxd)\b[^`]*`]=] },
  -- ${cmd} used as a command in a shell position: ;${whoami}  |${SHELL} -c
  { 932264, [=[{{SEPA}}\$\{\s*(?:shell|bash|sh|whoami|id|uname|ifs)\s*\}]=] },
}

-- Server-side includes: <!--#exec cmd="..."-->, <!--#include virtual="..."-->, <!--#echo var=...-->
section { tag = "ssi", severity = CRITICAL, targets = "path args cookies headers",
  { 932270, [=[<!--\s*#\s*(?:exec|include|echo|config|set|fsize|flastmod|if|elif)\s+(?:cmd|cgi|virtual|file|var|value|errmsg|timefmt|sizefmt|echomsg|encoding|expr)\s*=]=] },
  { 932271, [=[<!--\s*#\s*(?:printenv|exec|include)\s*-->|<!--\s*#\s*exec\b]=] },
}

-- Windows commands
section { tag = "rce", severity = CRITICAL, targets = "args cookies headers",
  { 932110, [=[{{WSEP}}(?:cmd(?:\.exe)?|command(?:\.com)?)\s*/[ckr]\b]=] },
  { 932111, [=[\bpowershell(?:\.exe)?\s+(?:-|/)[a-z]|\bpwsh(?:\.exe)?\s+-[a-z]|\bpowershell(?:\.exe)?\s+(?:iex|invoke-|\$|\(|["'&])]=] },
  { 932112, [=[\bcertutil(?:\.exe)?\s+[-/](?:urlcache|decode|encode|split|f\b)|\bbitsadmin(?:\.exe)?\s+/(?:transfer|create|addfile)]=] },
  { 932113, [=[\bwmic(?:\.exe)?\s+(?:process|os|useraccount|/node|shadowcopy|service|startup|qfe|computersystem|nicconfig)\b]=] },
  { 932114, [=[\breg(?:\.exe)?\s+(?:add|query|delete|save|export)\s+(?:hk(?:lm|cu|cr|u|cc)|hkey_)]=] },
  { 932115, [=[{{WSEP}}net1?(?:\.exe)?\s+(?:user|localgroup|group|share|use|view|start|stop|session|accounts)\b]=] },
  { 932116, [=[{{WSEP}}(?:tasklist|systeminfo|ipconfig\s*/all|whoami\s*/(?:all|priv|groups|user)|nltest|qwinsta|quser|driverquery|vssadmin|wevtutil|fsutil|bcdedit|icacls|cacls|taskkill\s*/|schtasks\s*/|netsh\s+(?:firewall|advfirewall|interface|wlan)|sc(?:\.exe)?\s+(?:create|config|start|stop|query)\s)]=] },
  { 932117, [=[\b(?:type|dir|copy|more)\s+[a-z]:\\|\b(?:type|dir)\s+%[a-z]+%]=] },
  { 932118, [=[\b(?:rundll32|regsvr32|mshta|cscript|wscript|msiexec|installutil|msbuild|regasm|regsvcs|odbcconf|forfiles|cmstp|hh)(?:\.exe)?\s+(?:[-/][a-z]|[a-z]:\\|\\\\|https?:|javascript:|vbscript:|["'])]=] },
  { 932119, [=[\b(?:start|call)\s+/b\s|%comspec%|\bcmd(?:\.exe)?\s*/[ck]\s*(?:start|echo|type|dir|del|copy|net|powershell)]=] },
  -- FOR /F and IF batch constructs
  { 932140, [=[\bfor\s+/[dflr]\b[^\n]*\bin\s*\([^)]*\)\s*do\b|\bif\s+(?:not\s+)?(?:exist|errorlevel|defined|cmdextversion)\s+[^\n]+\s(?:call|start|cmd|echo|del|goto)\b]=] },
  -- FOR over a set without a switch: for %v in (...) do, for %%i in (*.txt) do
  { 932141, [=[\bfor\s+(?:/[dflr]\s+(?:["'][^"']*["']\s+)?)?%{1,2}[a-z]\s+in\s*\([^)]*\)\s*do\b]=] },
  -- cmd.exe named with its extension anywhere, with a switch: cmd.exe /k, "cmd.exe" /c
  { 932142, [=[\bcmd\.exe["']?\s*/[ckr]\b]=] },
  -- Windows recon commands chained without blanks: &whoami, |ipconfig /all, ;net user
  { 932143, [=[(?:[;|]|&&?)\s*(?:whoami|ipconfig|systeminfo|tasklist|net1?\s+(?:user|localgroup|view|share|session|use)|quser|qwinsta|nltest|wmic)(?:\.exe)?(?:\s|$|[&|;/"'`])]=] },
  -- caret and quote noise inside command names: p^o^w^e^r^s^h^e^l^l, w^h^o^a^m^i
  { 932120, "(?:" .. evasive_strict("powershell") .. "|" .. evasive_strict("whoami") .. "|" .. evasive_strict("cmd.exe") .. "|" .. evasive_strict("certutil") .. ")" },
}

-- PowerShell
section { tag = "rce", severity = CRITICAL, targets = "args cookies headers",
  { 932121, [=[\b(?:invoke-(?:expression|webrequest|restmethod|command|mimikatz|shellcode|wmimethod|item|reflectivepeinjection)|iex\s*[(\[$'"])]=] },
  { 932122, [=[\bnew-object\s+(?:-typename\s+)?(?:system\.)?net\.(?:webclient|sockets\.tcpclient)|\.download(?:string|file|data)\s*\(]=] },
  { 932123, [=[\bstart-process\s+|\bget-(?:wmiobject|ciminstance)\s+|\bset-mppreference\b|\badd-mppreference\b|\bset-executionpolicy\b]=] },
  { 932124, [=[\s-(?:encodedcommand|enc|ec|e)\s+[a-z0-9+/]{40,}={0,2}|\s-(?:executionpolicy|exec|ep)\s+bypass\b|\s-(?:windowstyle|w)\s+hidden\b|\s-(?:noprofile|nop)\s+-]=] },
  { 932125, [=[\[(?:system\.)?convert\]::frombase64string\s*\(|\[(?:system\.)?text\.encoding\]::|\[(?:system\.)?reflection\.assembly\]::load|\[(?:system\.)?runtime\.interopservices]=] },
  { 932126, [=[\$env:(?:comspec|temp|appdata|userprofile|windir|systemroot)\b|\bgci\s+env:|\bget-childitem\s+env:]=] },
}

-- 933: PHP injection ------------------------------------------------------------------------
section { tag = "php", severity = CRITICAL, targets = "args cookies",
  { 933100, [=[<\?(?:php\b|=|\s)|\[\?php\b]=], targets = "args cookies headers" },
  -- a PHP script uploaded through a multipart form or a file-name header
  { 933110, [=[filename\s*=\s*['"]?[^'";\n]*\.(?:php\d?|phtml|phar|pht|phps|pgif|inc|htaccess|user\.ini)\b]=], targets = "args headers" },
  { 933120, [=[\b(?:allow_url_include|allow_url_fopen|auto_prepend_file|auto_append_file|disable_functions|open_basedir|safe_mode|register_globals|enable_dl|suhosin\.[a-z.]+|cgi\.force_redirect|mbstring\.func_overload)\s*=]=] },
  { 933130, [=[\$_(?:get|post|cookie|request|server|files|env|session)\b|\$globals\b|\$http_(?:raw_post_data|get_vars|post_vars|cookie_vars|server_vars)\b]=] },
  { 933140, [=[\bpreg_replace\s*\(\s*['"][^'"]*/[a-z]*e[a-z]*['"]\s*,]=] },
  { 933150, [=[\b(?:system|exec|shell_exec|passthru|popen|proc_open|pcntl_exec|pcntl_fork|posix_kill|posix_setuid|apache_setenv|expect_popen)(?:\(|\s*\(\s*['"$@\[])]=] },
  { 933151, [=[\b(?:eval|assert|create_function|call_user_func(?:_array)?|array_map|array_filter|usort|uasort|uksort|register_shutdown_function|register_tick_function|forward_static_call(?:_array)?|ob_start|iterator_apply)\s*\(\s*(?:['"$@]|base64_decode|gzinflate|gzuncompress|str_rot13|\$_|chr\s*\()]=] },
  { 933152, [=[\b(?:file_get_contents|file_put_contents|show_source|highlight_file|readfile|move_uploaded_file|fpassthru|parse_ini_file)\s*\(]=] },
  { 933153, [=[\b(?:fopen|fwrite|fputs|unlink|symlink|tempnam|scandir|opendir|glob|include|include_once|require|require_once)\s*\(\s*['"$]]=], severity = WARNING },
  { 933160, [=[\b(?:base64_decode|gzinflate|gzuncompress|gzdecode|str_rot13|convert_uudecode|hex2bin|strrev)\s*\(]=], severity = WARNING },
  { 933170, [=[\b[oc]:\d+:"[a-z0-9_\\]+":\d+:\{]=] },
  { 933171, [=[\ba:\d+:\{(?:[is]:\d+[;:])]=], severity = WARNING, paranoia = 2 },
  { 933180, [=[\$\{?\s*[a-z_][\w]*\s*\}?\s*\(\s*\$_(?:get|post|request|cookie|server)|\$\{\s*['"][a-z_]+['"]\s*\}]=] },
  { 933190, [=[\bphpinfo\s*\(\s*\)]=] },
  { 933210, [=[\(\s*['"][a-z_]+['"]\s*\.\s*['"][a-z_]+['"]\s*\)\s*\(]=] },
  { 933211, [=[\bchr\s*\(\s*\d+\s*\)\s*\.\s*chr\s*\(]=] },
  { 933212, [=[`[^`]*\$_(?:get|post|request|cookie)]=] },
  { 933220, [=[\b(?:ini_set|ini_get_all|ini_alter|ini_restore|set_include_path|get_cfg_var|php_uname|posix_getpwuid|posix_uname|getmypid|getmyuid|dl)\s*\(\s*['"]?\w]=], severity = WARNING },
  -- decoders and dangerous functions called with code-like arguments
  { 933161, [=[\b(?:base64_decode|gzinflate|gzuncompress|gzdecode|str_rot13|convert_uudecode|hex2bin|assert|create_function|call_user_func(?:_array)?|passthru|shell_exec|system|popen|proc_open|pcntl_exec)\s*\(\s*(?:['"$]|chr\s*\(|base64_decode|str_rot13|gzinflate)]=] },
  -- chr() glued to code: chr(115).'ystem', $c.chr(47) (a sentence ending in "chr(10)." is not)
  { 933162, [=[\bchr\s*\(\s*\d+\s*\)\s*\.\s*(?:['"$]|[a-z_]+\s*\()|(?:['"]|\$[a-z_]\w*)\s*\.\s*chr\s*\(\s*\d+\s*\)]=] },
  -- variable functions: $f($_GET[x]), ${"_GET"}(, ${x}(, $a = "system"; and then $a(...)
  { 933181, [=[\$\{[^}]{1,64}\}\s*\(|\$[a-z_]\w*\s*\(\s*\$[a-z_]\w*\s*\[|\$[a-z_]\w*\s*=\s*['"]?(?:system|exec|passthru|shell_exec|assert|eval|base64_decode|create_function|call_user_func|popen|proc_open|str_rot13)['"]?\s*;|(?:^|[;{}]|<\?php)\s*\$[a-z_]\w*\s*\(\s*['"][^'"]*['"]\s*\)\s*;]=] },
  -- stream wrappers that read the request or local archives
  { 933200, [=[\bphp://(?:input|filter|fd|memory|temp|stdin|stdout|output)\b|\bphar://|\bexpect://|\bglob://|\bcompress\.zlib://]=] },
  -- a php.ini directive set through a parameter (also as -d on a CGI command line)
  -- (933120 knows the names; this is the CGI form, ?-d+name=value, of CVE-2012-1823, and the
  -- .htaccess spelling, php_value auto_prepend_file x; curl -d name=value in a forum post is
  -- not one: only directives count)
  { 933121, [=[(?:^|[\s&?])-d\s*(?:allow_url_include|allow_url_fopen|auto_prepend_file|auto_append_file|disable_functions|open_basedir|safe_mode|cgi\.force_redirect|register_globals|enable_dl|display_errors|short_open_tag|include_path|extension|error_log)\s*=|\bphp_(?:value|flag|admin_value|admin_flag)\s+(?:auto_prepend_file|auto_append_file|allow_url_include|disable_functions|open_basedir|include_path)\b|\b(?:sendmail_path|extension_dir|upload_tmp_dir|error_log|include_path)\s*=\s*['"]?(?:/|php://|data:|\\\\)]=] },
  -- well-known webshells and admin tools probed by scanners
  { 933230, [=[/(?:c99|r57|wso\d*|b374k|indoxploit|alfa(?:shell|team)?|webshell|phpspy|shell\d*|cmd|up(?:load(?:er)?)?)[\w-]*\.php\d?\b]=], targets = "path", severity = WARNING },
}

-- 934: generic injection: Node.js, Python, Ruby, prototype pollution, SSTI, SSRF, XXE --------
section { tag = "rce", severity = CRITICAL, targets = "args cookies headers",
  { 934100, [=[\brequire\s*\(\s*['"`]child_process['"`]\s*\)|\bchild_process\b|\bprocess\.(?:mainmodule|binding|dlopen)\b|\bglobal\.process\b|\.constructor\s*\(\s*['"`]return\s+process|\bprocess\.env\b]=] },
  { 934101, [=[\.(?:execsync|spawnsync|execfilesync)\s*\(|\bthis\.constructor\.constructor\s*\(|\bnew\s+function\s*\(\s*['"`]return\s+this]=] },
  { 934102, [=[\beval\s*\(\s*(?:require|process|buffer\.from|atob)\b]=] },
  { 934103, [=[_\$\$nd_func\$\$_]=] },
  { 934150, [=[\bkernel\.(?:exec|system|spawn|open)\b|\bio\.popen\s*\(|%x\s*[({\[]\s*\w+|\bsyscall\s*\(\s*\d|\bopen3\.(?:popen3|capture2)\b]=] },
  { 934170, [=[__import__\s*\(\s*['"](?:os|subprocess|pty|socket|commands|importlib)['"]|\bimportlib\.import_module\s*\(]=] },
  { 934171, [=[\bos\.(?:system|popen|spawn[lv]p?e?|exec[lv]p?e?)\s*\(\s*['"\[]|\bsubprocess\.(?:popen|call|run|check_output|getoutput)\s*\(\s*['"\[]|\bcommands\.getoutput\s*\(|\bpickle\.loads\s*\(|\b__builtins__\b|\b__globals__\b]=] },
}

section { tag = "generic", severity = CRITICAL, targets = "args cookies",
  -- prototype pollution: __proto__[x]=, constructor[prototype]
  { 934130, [=[__proto__|\bconstructor\s*(?:\[\s*['"]?\s*prototype|\.\s*prototype)\b]=] },
}

section { tag = "ssti", severity = CRITICAL, targets = "args cookies headers",
  { 934200, [=[\{\{[^}]*(?:__class__|__mro__|__subclasses__|__globals__|__builtins__|__init__|__import__|config\.items|self\._templatereference|request\.application|lipsum\.|cycler\.|joiner\.|namespace\.__|url_for\.__|get_flashed_messages\.)]=] },
  -- arithmetic probes: {{7*7}} ${7*7} <%= 7*7 %> #{7*7} @(7*7)
  { 934201, [=[\{\{\s*\d+\s*\*\s*['"]?\d+['"]?\s*\}\}|\$\{\s*\d+\s*\*\s*\d+\s*\}|<%=\s*\d+\s*\*\s*\d+\s*%>|#\{\s*\d+\s*\*\s*\d+\s*\}|@\(\s*\d+\s*\*\s*\d+\s*\)|\{\{=\s*\d+\s*\*\s*\d+]=] },
  { 934202, [=[<#assign\b|freemarker\.template\.utility\.(?:execute|objectconstructor|jythonruntime)|\?new\s*\(\s*\)\s*\(]=] },
  { 934203, [=[#set\s*\(\s*\$[a-z_]+\s*=|\$class\.inspect\b|#foreach\s*\(\s*\$\w+\s+in\s+\$]=] },
  { 934204, [=[\{\{\s*_self\.env\b|\|\s*(?:filter|map|reduce|sort)\s*\(\s*['"](?:system|exec|passthru|shell_exec)['"]|\{php\}|\{\s*system\s*\(|\{\s*\$smarty\.(?:version|template_object)]=] },
  { 934205, [=[<%=?\s*(?:system|`|%x|exec|io\.popen|file\.read|eval|require)\b|#\{\s*(?:system|`|%x|exec|file\.read|io\.popen)]=] },
  { 934206, [=[__\$\{[^}]*\}__|\bt\s*\(\s*java\.lang\.|\*\{\s*t\s*\(]=] },
  { 934207, [=[\{\{#with\s+['"][^'"]*['"]\s+as\s*\||\{\{[^}]*(?:constructor\.constructor|process\.mainmodule|require\s*\()]=] },
  { 934208, [=[\{%[^%]*(?:os\.popen|subprocess|__import__|\.system\s*\()]=] },
}

section { tag = "ssrf", severity = CRITICAL, targets = "args cookies",
  -- cloud metadata endpoints
  { 934110, [=[169\.254\.169\.254|metadata\.google\.internal|169\.254\.170\.2\b|\[?fd00:ec2::254\]?|100\.100\.100\.200|/latest/(?:meta-data|user-data|api/token)|/computemetadata/v1|/metadata/(?:instance|identity)\b]=] },
  -- loopback in disguise: hex, octal, decimal, IPv6-mapped
  { 934111, [=[(?:https?|gopher|dict|ftp)://(?:0x7f[0-9a-f.x]*|0177(?:\.0+)*\.0*1|2130706433|017700000001|0\.0\.0\.0|\[::(?:ffff:)?(?:7f00:1|127\.0\.0\.1|1)?\]|\[0:0:0:0:0:ffff:127\.0\.0\.1\])(?:[:/?#]|$)]=] },
  { 934112, [=[\b(?:gopher|dict|ldaps?|jar|netdoc|tftp)://]=] },
  -- credentials confusing the host: http://expected.com@127.0.0.1/
  { 934113, [=[(?:https?|ftp)://[^/?#@\s]*@(?:\d{1,3}\.\d|localhost\b|\[|0x)]=] },
  -- loopback in its short forms: 127.1, 127.0.1
  { 934115, [=[(?:https?|gopher|dict|ftp)://127\.\d+(?:\.\d+)?(?:[:/?#]|$)]=] },
  -- loopback with the port of an internal service (Redis, memcached, Elasticsearch, Docker,
  -- Consul, CouchDB, MongoDB, MySQL, PostgreSQL, SMTP, kubelet, etcd)
  { 934116, [=[(?:https?|gopher|dict|ftp)://(?:localhost|127\.[\d.]+|\[::1\]|0\.0\.0\.0):(?:6379|11211|9200|9300|2375|2376|8500|5984|27017|3306|5432|25|10250|2379)\b]=] },
  { 934114, [=[=\s*(?:https?://)?(?:localhost|127\.\d+\.\d+\.\d+)(?::\d+)?(?:/|$)]=], severity = WARNING },
}

section { tag = "xxe", severity = CRITICAL, targets = "args",
  { 934180, [=[<!entity\s+(?:%\s*)?[\w.-]+\s+(?:system|public)\s+['"]|<!doctype[^>]*\[\s*<!entity|<!entity\s+%]=] },
  { 934181, [=[xmlns:xi\s*=\s*['"]http://www\.w3\.org/2001/xinclude|<xi:include\b]=] },
}

-- 941: cross-site scripting -----------------------------------------------------------------
section { tag = "xss", severity = CRITICAL, targets = "path args cookies headers",
  { 941100, [=[<\s*script\b]=] },
  { 941101, [=[<\s*/\s*script\s*>]=] },
  -- an event handler attribute, common names
  { 941120, [=[[\s"'`/]on(?:error|load|mouse(?:over|out|down|up|move|enter|leave|wheel)|focus(?:in|out)?|blur|click|dblclick|key(?:up|down|press)|change|submit|reset|select|input|invalid|toggle|animation(?:start|end|iteration)|transition(?:end|start|run)|pointer(?:over|enter|down|up|move|out|leave|rawupdate)|touch(?:start|end|move)|drag(?:start|end|enter|leave|over)?|drop|wheel|scroll(?:end)?|resize|unload|beforeunload|hashchange|popstate|message|pageshow|pagehide|begin|repeat|finish|bounce|copy|cut|paste|contextmenu|auxclick|play|playing|pause|canplay(?:through)?|ended|loadeddata|loadstart|progress|seeked|seeking|timeupdate|volumechange|afterprint|beforeprint|beforetoggle|search|storage|readystatechange|securitypolicyviolation|formdata|content(?:visibilityautostatechange)?|filterchange|propertychange|activate|beforeactivate|beforescriptexecute|afterscriptexecute)\s*=]=] },
  -- any on* attribute inside a tag
  { 941121, [=[<[a-z][^>]*[\s/"'`]on[a-z]{3,30}\s*=]=] },
  -- an on* attribute that runs script
  { 941122, [=[\bon[a-z]{3,30}\s*=\s*['"`]?\s*(?:alert|prompt|confirm|eval|fetch|javascript:|document\.|window\.|top\.|self\.|this\.|location|import\s*\(|settimeout|setinterval|atob|string\.fromcharcode|\[|\()]=] },
  { 941130, [=[\b(?:formaction|xlink:href|srcdoc|dynsrc|lowsrc|datasrc|background|poster|action|href|src|data|from|to|values)\s*=\s*['"]?\s*(?:java|vb|live|ecma)script\s*:]=] },
  { 941140, [=[\bexpression\s*\(|-moz-binding\s*:|\bbehavior\s*:\s*url|@import\s*(?:url|['"]|//)|url\s*\(\s*['"]?\s*(?:java|vb)script:]=] },
  { 941150, [=[<\s*(?:iframe|frame|frameset)\b]=] },
  { 941151, [=[<\s*(?:object|embed|applet)\b]=] },
  { 941152, [=[<\s*(?:svg|math)\b]=], severity = WARNING },
  { 941153, [=[<\s*(?:form|isindex|button|keygen|textarea)\b]=], severity = WARNING },
  { 941154, [=[<\s*(?:img|image|video|audio|source|track|bgsound|input|picture)\b[^>]*\b(?:src|dynsrc|lowsrc|srcset)\s*=]=], severity = WARNING },
  { 941155, [=[<\s*(?:body|html|style|marquee|details|template|xmp|plaintext|noscript|noembed|layer|ilayer|blink|xss|listing|dialog|portal|animate|set|handler|x)\b]=], severity = WARNING },
  -- javascript:, vbscript: URIs, with the blanks a browser ignores
  { 941170, "(?:" .. spaced("javascript") .. "|" .. spaced("vbscript") .. "|" .. spaced("livescript") .. [=[)\s*:\s*(?:[a-z_$][\w$.]*\s*[(`=]|/|\(|\[|\\|['"]|\d|%|&|void\b|\{|!|-|\+|~)]=] },
  { 941171, [=[data:\s*(?:text/html|text/javascript|application/(?:x-)?javascript|application/xhtml|application/ecmascript|image/svg[\s+]xml|text/xml)]=] },
  { 941180, [=[\bdocument\s*\.\s*(?:cookie|domain)\b|\bdocument\s*\.\s*write(?:ln)?\s*\(]=] },
  { 941181, [=[\b(?:alert|prompt|confirm)\s*(?:\(|`)\s*(?:[\d'"`/)]|document|window|self|top|this|string\.fromcharcode|atob|location)|\b(?:alert|prompt|confirm|eval)\s*\.\s*(?:call|apply|bind)\s*\(]=] },
  { 941182, [=[\beval\s*\(\s*(?:atob|unescape|decodeuri(?:component)?|string\.fromcharcode|location|name|['"`])|\bset(?:timeout|interval)\s*\(\s*['"`]|\bstring\.fromcharcode\s*\(\s*\d|\bimport\s*\(\s*['"`](?:https?:|data:|//)]=] },
  { 941183, [=[\b(?:window|document|top|self|parent)\s*\.\s*location\s*(?:\.\s*(?:href|hash|replace|assign))?\s*[=(]\s*['"`]?\s*(?:https?:|//|javascript:|data:)|\.(?:inner|outer)html\s*=|\bdocument\s*\.\s*location\b]=], severity = WARNING },
  { 941200, [=[\bvmlframe\b|<\s*v\s*:\s*(?:image|vmlframe|rect|fill)\b|<\s*\?\s*import\b]=] },
  -- escaped angle brackets and quotes that survive our decoding (JS and HTML escapes)
  { 941210, [=[&#0*(?:60|62|34|39|40|41)\b;?|&#x0*(?:3c|3e|22|27|28|29)\b;?|\\u00(?:3c|3e)|\\x3c|\\074]=], severity = WARNING },
  { 941220, [=[(?:\\u003c|\\x3c|\\074|%3c)\s*/?\s*(?:script|iframe|svg|img|body|object|embed)\b]=] },
  { 941250, [=[<\s*meta\b[^>]*\bhttp-equiv\b]=] },
  { 941260, [=[<\s*meta\b[^>]*\bcharset\b]=], severity = WARNING },
  { 941270, [=[<\s*link\b[^>]*\bhref\b]=], severity = WARNING },
  { 941271, [=[<\s*link\b[^>]*\brel\s*=\s*['"]?\s*import\b]=] },
  { 941280, [=[<\s*base\b[^>]*\bhref\b]=] },
  { 941300, [=[<\s*object\b[^>]*\b(?:type|codetype|classid|code|data)\s*=]=] },
  -- US-ASCII malformed encoding: 0xBC and 0xBE read as < and > by old parsers
  { 941310, [=[\xbc\s*/?\s*(?:script|iframe|img|svg|body)]=] },
  { 941320, [=[<\s*/?\s*[a-z][a-z0-9]*(?:\s[^<>]*)?>]=], severity = WARNING, paranoia = 2 },
  { 941330, [=[["'][^"'\n]*(?:\b(?:location|document\.cookie|valueof|onerror)|\.name)\s*=]=], paranoia = 2 },
  -- UTF-7: +ADw-script+AD4-
  { 941350, [=[ad[wz]-[a-z0-9/ ]+(?:\+|\s)ad4-]=] },
  -- JSFuck and friends
  { 941360, [=[\(\s*!\s*\[\]\s*\+?\s*\[\]\s*\)|!!\s*\[\]\s*\+?\s*\[\]|\[\]\s*\[\s*\(\s*!\s*\[\]]=] },
  -- global objects reached by computed names: top['al'+'ert'], self[atob('...')]
  { 941370, [=[\b(?:self|top|window|parent|frames|globalthis|content)\s*\[\s*(?:['"`/]|[a-z_$]+\s*\+|atob|string\.fromcharcode)]=] },
  -- AngularJS sandbox escapes
  { 941380, [=[\{\{[^}]*(?:constructor|\$on\b|\$eval\b|\$parse\b|\$watch\b|tostring\.constructor|orderby\s*:|\['constructor'\])]=] },
  { 941400, [=[\bonerror\s*=\s*(?:eval|alert|prompt|confirm)\s*[;,]?\s*throw\b|\bthrow\s*onerror\s*=|\[\s*\]\s*\.\s*(?:constructor|map|filter|some|every|find|reduce|sort)\s*\.\s*(?:call|apply)\b]=] },
  { 941420, [=[\bsrcdoc\s*=]=] },
  { 941430, [=[<\s*(?:a|area)\b[^>]*\bhref\s*=\s*['"]?\s*(?:javascript|data|vbscript)\s*:]=] },
}

-- 942: SQL injection ------------------------------------------------------------------------
section { tag = "sqli", severity = CRITICAL, targets = "args cookies headers",
  -- tautologies after a quote: ' or 1=1, ' or 'a'='a, ') or ('1'='1, " or ""="
  { 942100, [=[['"`)]{{SQS}}*(?:or|xor|\|\||and|&&){{SQS}}*[('"`]*{{SQS}}*[\w.@$]+{{SQS}}*[)'"`]*{{SQS}}*(?:=|<=>|!=|<>|<|>|\blike\b|\bis\b|\brlike\b|\bregexp\b|\bbetween\b|\bin\s*\()]=] },
  { 942101, [=[['"`)]{{SQS}}*(?:or|\|\||and|&&|xor){{SQS}}+(?:not\s+)?(?:true|false|null\b|\d+{{SQS}}*(?:--|#|;|/\*|\)|&|$))]=] },
  -- numeric tautology: 1 or 1=1, and 2>1
  { 942102, [=[(?:\b(?:or|and|xor)|\|\||&&)\s+\(?\s*(?:(?:\d+|0x[0-9a-f]+)\s*\)?\s*(?:=|<>|!=|<=>|>=|<=|>|<)\s*\(?\s*(?:\d+|0x[0-9a-f]+)|['"]\w*['"]\s*=\s*['"]\w*)]=] },
  -- a quote, then a comment: admin'--  admin'#  '/*
  -- (a dash after a quoted word in prose, 'like this' -- here, is not a comment: the value
  -- must end there)
  { 942110, [=['\s*(?:--(?:\s*(?:$|&|\n)|\s+-|-|\+)|#\s*(?:$|&|\n)|/\*|;\s*(?:--|#|$|&))|"\s*--\s*(?:$|&)]=] },
  -- a quote, a semicolon and a statement: '; drop ...
  { 942120, [=[['"]\s*;\s*(?:select|insert|update|delete|drop|create|alter|exec|execute|declare|shutdown|truncate|union|waitfor|grant|revoke|set|if)\b]=] },
  -- quoted literal compared with a quoted literal: '1'='1
  { 942130, [=[['"`]\s*[\w.]+\s*['"`]\s*(?:=|<>|!=|<=>|like)\s*['"`]\s*[\w.]+]=] },
  { 942140, [=[\binformation_schema\b|\bmysql\s*\.\s*(?:user|db|tables_priv|columns_priv|proc|innodb_table_stats)\b|\bperformance_schema\b|\bsys\s*\.\s*(?:schema_|x\$|user_summary|processlist)\b]=] },
  { 942141, [=[\b(?:sysobjects|syscolumns)\b|\bfrom\s+(?:master\s*\.\.\s*|dbo\s*\.\s*)?(?:sysusers|syslogins|sysdatabases|sysprocesses|sysxlogins)\b|\bsys\s*\.\s*(?:objects|tables|columns|databases|sql_logins|server_principals|all_columns|sysprocesses)\b|\bmaster\s*\.\.\s*sys|\b(?:master|msdb)\s*\.\s*dbo\s*\.]=] },
  { 942142, [=[\bpg_(?:catalog|shadow|user|roles|authid|database|tables|namespace|proc|class|attribute|stat_activity|read_file|ls_dir|read_binary_file|largeobject)\b|\bcurrent_setting\s*\(]=] },
  { 942143, [=[\b(?:all_tables|all_tab_columns|all_users|user_tables|user_tab_columns|dba_users|dba_tables|user_objects)\b|\bv\$(?:version|instance|database)\b|\bsys\s*\.\s*(?:dba_|user\$)|\bfrom\s+dual\b]=] },
  { 942144, [=[\bsqlite_(?:master|schema|temp_master)\b|\bsqlite_version\s*\(|\bmsys(?:objects|accessobjects|queries)\b]=] },
  -- string functions right after a quote and an operator: ' and ascii(substr(...
  { 942150, [=[['"`]\s*(?:and|or|xor|&&|\|\||\+|-|\*|,)\s*\(?\s*(?:ascii|ord|char|chr|substr(?:ing)?|mid|length|hex|bin|conv|if|ifnull|sleep|benchmark|extractvalue|updatexml|load_file|concat|version|user|database|md5|elt|make_set|cast|convert)\s*\(]=] },
  { 942151, [=[\b(?:and|or|xor)\s+\(?\s*(?:ascii|ord|substr(?:ing)?|hex|unhex|sleep|benchmark|extractvalue|updatexml|elt|make_set)\s*\(]=] },
  -- char() chains and long char() lists: char(97)+char(98), char(97,100,109)
  { 942152, [=[\bn?cha?r\s*\(\s*\d+\s*\)\s*(?:\+|\|\||,|&)?\s*n?cha?r\s*\(|\bn?cha?r\s*\(\s*\d+\s*(?:,\s*\d+\s*){2,}\)]=] },
  { 942153, [=[\b(?:concat(?:_ws)?|unhex|char|cast|convert|lower|upper)\s*\(\s*0x[0-9a-f]+]=] },
  -- time-based blind
  { 942160, [=[\bsleep\s*\(\s*\d+(?:\.\d+)?\s*\)]=] },
  { 942161, [=[\bbenchmark\s*\(\s*\d+\s*,]=] },
  { 942162, [=[\bpg_sleep(?:_for|_until)?\s*\(]=] },
  { 942163, [=[\bwaitfor\s+(?:delay|time)\s+['"]]=] },
  { 942164, [=[\bdbms_(?:lock\.sleep|pipe\.receive_message|session\.sleep)\s*\(]=] },
  { 942165, [=[\brandomblob\s*\(\s*\d{5,}|\blike\s*\(\s*['"]abcdefg['"]\s*,\s*upper\s*\(\s*hex\s*\(]=] },
  { 942170, [=[\bif\s*\(\s*[^,()]+,\s*(?:sleep|benchmark|pg_sleep)\s*\(|\bselect\s+(?:sleep|benchmark|pg_sleep)\s*\(]=] },
  { 942180, [=[['"]\s*(?:or|and|\|\||&&)\s*['"]['"]\s*=|['"]=['"]\s*(?:--|#|&|$|or\b)]=] },
  { 942190, [=[\bexec(?:ute)?\s+(?:master\s*\.\s*\.?\s*)?(?:dbo\s*\.\s*)?(?:xp|sp)_\w+|\bxp_cmdshell\b|\bsp_(?:executesql|oacreate|oamethod|configure|makewebtask|addextendedproc|password|addlogin|addsrvrolemember|adduser|start_job)\b]=] },
  { 942191, [=[\bopenrowset\s*\(|\bopendatasource\s*\(|\bopenquery\s*\(|\bbulk\s+insert\s+[\w.\[\]]+\s+from\b]=] },
  -- UNION SELECT followed by something that is a column list, not prose
  { 942200, [=[\bunion{{SQS}}+(?:(?:all|distinct){{SQS}}+)?\(?{{SQS}}*select\b{{SQS}}*(?:[\d'"(@*`]|null\b|-\d|0x|[a-z_]+\s*\(|[a-z_.]+{{SQS}}*,|[a-z_.]+{{SQS}}+from\b|from\b|distinct\b|all\b|top\b|case\b|char|table_name|column_name|schema_name|version|user|database|password|username)]=] },
  { 942201, [=[\bunion\b[^&]*\bselect\b[^&]*\bfrom\b]=], severity = WARNING, paranoia = 2 },
  { 942210, [=[\b(?:or|and)\s+(?:not\s+)?exists\s*\(\s*select\b]=] },
  { 942211, [=[\b(?:and|or|xor|&&|\|\|)\s*\(\s*select\b]=] },
  { 942212, [=[=\s*\(\s*select\s+(?:[^)]*?\s+from\s+[\w.`"\[\]]+\s*(?:\)|where\b|limit\b|order\b|group\b)|(?:sleep|benchmark|pg_sleep|if|case|char|concat|ascii|substr(?:ing)?)\s*\(|\d|@@|null\b)]=] },
  { 942220, [=[(?:^|=)\s*(?:-?2147483648|4294967295|2147483647|-?9223372036854775808|18446744073709551615|2\.2250738585072011e-308|1e309)\s*(?:&|$)]=], severity = WARNING },
  { 942230, [=[\bcase\s+when\s+[^&]+?\bthen\s+[^&]+?\belse\b]=] },
  { 942240, [=[\balter\s+(?:database|table|schema)\s+[\w`".\[\]]+\s+(?:character\s+set|charset|convert\s+to)\b]=] },
  { 942250, [=[\bmatch\s*\([^)]+\)\s*against\s*\(|\bmerge\s+into\s+[\w.\[\]`"]+\s+(?:using|as)\b|\bexecute\s+immediate\s+['"]]=] },
  { 942260, [=[['"]\s*(?:and|or|xor)\s*['"]?\s*\d+\s*['"]?\s*(?:--|#|;|/\*)|['"]\s*(?:and|or)\s+[a-z_]+\s*(?:--|#)\s*(?:&|$)]=] },
  { 942270, [=[\bselect\s+[\w*\s,()@.`"]+?\bfrom\s+[\w.`"\[\]]+\s*(?:where|limit|order\s+by|group\s+by|having|union|procedure|into|--|#|;|/\*|\))]=], severity = WARNING },
  { 942280, [=[;\s*shutdown\b|\bshutdown\s+with\s+nowait\b]=] },
  -- NoSQL (MongoDB) operators: user[$ne]=x, {"$gt": ""}, $where
  { 942290, [=[\[\s*\$(?:ne|eq|gt|gte|lt|lte|in|nin|regex|where|exists|or|and|nor|not|expr|elemmatch|type|mod|size|all|text|function)\s*\]]=] },
  -- (in JSON bodies the quotes are blanked, see json_values)
  { 942291, [=[(?:['"]|[{,]\s*)\$(?:ne|gt|gte|lt|lte|in|nin|regex|where|exists|or|nor|not|expr|function|accumulator)\b['"\s]*:]=] },
  -- JavaScript injected into a MongoDB $where: ';return true;var a='  ' && this.x.match(
  { 942293, [=[['"]\s*(?:;|&&|\|\|)\s*(?:return\s+(?:true|false|1)\b|this\.[a-z_]+|sleep\s*\(|while\s*\(\s*(?:true|1)\s*\))]=] },
  { 942292, [=[\$where\b[^&]*(?:sleep|this\.|function|return)]=] },
  -- operators as a query parameter's name or key, with or without brackets: user.$ne=, filter[name][$regex]=
  { 942294, [=[(?:^|[&?\[.])\$(?:ne|eq|gt|gte|lt|lte|in|nin|regex|where|exists|or|and|nor|not|expr|elemmatch|type|mod|size|all|function|accumulator|lookup|jsonschema)\]?=]=] },
  -- aggregation stages and server-side JavaScript operators in JSON
  { 942295, [=[[{,\[]\s*['"]?\$(?:lookup|unionwith|out|merge|function|accumulator|graphlookup|where)\b['"\s]*:]=] },
  { 942300, [=[['"]\s*\)+\s*(?:--(?:\s|$|&)|#\s*(?:$|&|\n)|/\*|;\s*(?:--|#|$|&|select\b|insert\b|update\b|delete\b|drop\b|exec\b|declare\b|shutdown\b))]=] },
  { 942310, [=[\(\s*select\s+(?:\*|[\w.]+(?:\s*,\s*[\w.]+)*|(?:count|concat|group_concat|char|ascii|substr(?:ing)?|min|max|top\s+\d+)\s*\()[^)]*?\s+from\s+[\w.`"\[\]]+\s*(?:\)|where|limit|order|group)]=] },
  { 942320, [=[\bcreate\s+(?:or\s+replace\s+)?(?:function|procedure|trigger)\s+[\w.`"\[\]]+\s*(?:\(|returns\b|as\b|before\b|after\b)]=] },
  { 942321, [=[\bprocedure\s+analyse\s*\(]=] },
  { 942322, [=[\bdeclare\s+@\w+\s+(?:n?varchar|int|sysname|table|cursor|varbinary)\b|\bexec\s*\(\s*@\w+\s*\)]=] },
  -- probes: id=5' or a lone quote
  { 942330, [=[=\s*-?\d+\s*['"`]+\s*(?:&|$|\)|;)]=], severity = WARNING },
  { 942331, [=[=\s*['"`]+\s*(?:&|$)]=], severity = WARNING },
  { 942340, [=[\bin\s*\(\s*select\b]=] },
  { 942341, [=[['"]\s*\)\s*(?:or|and)\s*\(\s*['"]]=] },
  -- stacked queries
  { 942350, [=[;\s*(?:drop|truncate|alter)\s+(?:table|database|schema|view|index|user|procedure|function|trigger)\b]=] },
  { 942351, [=[;\s*(?:insert\s+into|delete\s+from|update\s+[\w.`"\[\]]+\s+set)\b]=] },
  { 942352, [=[;\s*(?:declare\s+@|exec(?:ute)?\s+(?:master|xp_|sp_|\(|@)|grant\s+\w+\s+on\b|revoke\s+\w+\s+on\b|create\s+(?:table|user|login|function)\b)]=] },
  { 942353, [=[;\s*select\s+(?:\*|[\w@]+\s*(?:,|from\b)|@@|\d|null\b|pg_sleep|sleep|benchmark|load_file|user\s*\(|version\s*\(|database\s*\()]=] },
  { 942360, [=[\bload_file\s*\(|\binto\s+(?:out|dump)file\b|\bload\s+data\s+(?:local\s+)?infile\b]=] },
  { 942361, [=[\bdrop\s+(?:table|database|schema|procedure|function|view|user|index|trigger)\s+(?:if\s+exists\s+)?[\w`"\[.]+\s*(?:;|--|#|/\*|$|&)]=], severity = WARNING },
  { 942362, [=[\btruncate\s+table\s+[\w`"\[.]+]=] },
  { 942363, [=[\balter\s+table\s+[\w`"\[.]+\s+(?:add|drop|modify|change|rename|alter)\b]=] },
  { 942370, [=[@@(?:version|hostname|datadir|basedir|tmpdir|servername|spid|language|identity|rowcount|version_comment|secure_file_priv|global\.|session\.)]=] },
  { 942371, [=[\b(?:version|user|database|schema|current_user|system_user|session_user|connection_id|last_insert_id|current_database|db_name|user_name|suser_name|host_name)\s*\(\s*\)]=], severity = WARNING },
  { 942380, [=[\border\s+by\s+\d+\s*(?:--|#|/\*|;|,\s*\d+\s*(?:--|#))]=] },
  { 942381, [=[['"`)]\s*(?:order|group)\s+by\s+\d+\b]=] },
  { 942382, [=[\bhaving\s+\d+\s*=\s*\d+]=] },
  { 942383, [=[\bgroup\s+by\s+[\w.]+(?:\s*,\s*[\w.]+)*\s+having\b]=], severity = WARNING },
  { 942390, [=[['"`]\s*(?:or|and|xor)\s+(?:not\s+)?(?:true|false|null)\b]=] },
  { 942391, [=[\b(?:or|and)\s+(?:not\s+)?(?:\d+|true|false)\s*(?:is\s+(?:not\s+)?(?:null|true|false)|between\s+\d|like\s+['"]|rlike\s|regexp\s|sounds\s+like)]=] },
  { 942410, [=[\b(?:abs|acos|ascii|asin|atan|avg|bin|bit_length|ceil|char_length|coalesce|concat|conv|cos|count|crc32|degrees|elt|exp|field|floor|format|from_base64|greatest|hex|ifnull|insert|instr|isnull|least|left|length|ln|locate|log|lpad|ltrim|make_set|md5|mid|nullif|oct|ord|position|pow|quote|radians|rand|repeat|replace|reverse|right|round|rpad|rtrim|sha1|sha2|sign|sin|soundex|space|sqrt|strcmp|substr|substring|sum|tan|to_base64|trim|ucase|uncompress|unhex|upper)\s*\(]=], severity = WARNING, paranoia = 2 },
  { 942440, [=[/\*!?|\*/|--(?:\s|$)]=], severity = WARNING, paranoia = 2 },
  { 942450, [=[\b0x[0-9a-f]{3,}]=], severity = WARNING, paranoia = 2 },
  { 942470, [=[\bxp_(?:regread|regwrite|fileexist|dirtree|availablemedia|makecab|ntsec|terminate|servicecontrol|loginconfig|enumdsn|subdirs|cmdshell)\b|\bsp_oa\w+]=] },
  { 942471, [=[\butl_(?:http|inaddr|file|tcp|smtp)\s*\.|\bdbms_(?:java|xmlquery|xmlgen|ldap|scheduler|export_extension|aw_xml|aq)\b|\bhttpuritype\s*\(|\bctxsys\s*\.|\bsys\s*\.\s*dbms_]=] },
  { 942472, [=[\bmaster\s*\.\.?\s*(?:dbo\s*\.)?xp_dirtree|\bfn_xe_file_target_read_file\b|\bfn_get_audit_file\b|\bfn_trace_gettable\b]=] },
  { 942473, [=[\bcopy\s+\(?[^;]*?\)?\s*(?:to|from)\s+program\b|\blo_(?:import|export|from_bytea)\s*\(]=] },
  -- error-based
  { 942480, [=[\b(?:extractvalue|updatexml)\s*\(]=] },
  { 942481, [=[\bexp\s*\(\s*~\s*\(|\bfloor\s*\(\s*rand\s*\(\s*0?\s*\)\s*\*\s*2|\bgtid_subset\s*\(|\bname_const\s*\(|\b(?:json_keys|polygon|multipoint|linestring|geometrycollection)\s*\(\s*\(\s*select\b]=] },
  { 942482, [=[\bconvert\s*\(\s*int\s*,|\bcast\s*\(\s*\(?\s*select\b|\bcast\s*\([^)]+\bas\s+(?:int|numeric|integer|signed)\s*\)\s*(?:--|#|,|\)|=)]=] },
  { 942490, [=[\bdb_name\s*\(\s*\d*\s*\)|\bhas_dbaccess\s*\(|\bis_srvrolemember\s*\(|\bfile_name\s*\(\s*\d|\bserverproperty\s*\(]=] },
  -- MySQL executable comments: /*!50000union*/
  { 942500, [=[/\*!\d*\s*[a-z(]]=] },
  { 942510, [=[`\s*(?:or|and|union|select|from|where)\b]=], severity = WARNING },
  { 942520, [=[['"]\s*(?:is\s+(?:not\s+)?null|not\s+like|like\s+['"]|rlike\s|regexp\s|between\s+\d|sounds\s+like)]=] },
  { 942521, [=[['"]\s*(?:and|or|xor)\s+['"]?[\w.]+['"]?\s*(?:not\s+like|like|rlike|regexp)\s*['"]]=] },
  { 942530, [=[\blimit\s+\d+\s*,\s*\d+\s*(?:--|#|/\*|into\b|procedure\b)|\blimit\s+\d+\s+into\s+@]=] },
  -- a quote, an operator, and a subquery: '||(select  '+(select
  { 942540, [=[['"]\s*(?:\|\||&&|\+|-|\*|/|%|\^|\||&)\s*\(?\s*select\b]=] },
  { 942550, [=[::\s*(?:text|int|integer|varchar|bytea|regclass|jsonb?|numeric)\b]=], severity = WARNING },
  -- MySQL scientific-notation bypass: 1.e(, 1.e)
  { 942560, [=[\b\d\.e[(),]]=], severity = WARNING },
  { 942580, [=[\bselect\s+\*\s+from\b]=], severity = WARNING },
  { 942590, [=[\binsert\s+into\s+[\w.`"\[\]]+\s*(?:\(|values\b|select\b)]=] },
  { 942591, [=[\bupdate\s+[\w.`"\[\]]+\s+set\s+[\w.`"]+\s*=]=] },
  { 942592, [=[\bdelete\s+from\s+[\w.`"\[\]]+\s+where\b]=] },
  -- a comment inside a word: un/**/ion (the comment-free text is scanned as well)
  { 942600, [=[[a-z]/\*[^*]*\*/[a-z]]=], severity = WARNING },
}

-- 944: Java ---------------------------------------------------------------------------------
section { tag = "java", severity = CRITICAL, targets = "path args cookies headers",
  { 944100, [=[\bjava\.lang\.(?:runtime|processbuilder|process|system|reflect|classloader)\b|\bruntime\s*\.\s*getruntime\s*\(]=] },
  { 944110, [=[\bprocessbuilder\s*\(|\.getruntime\s*\(\s*\)\s*\.\s*exec\s*\(|\bnew\s+java\.io\.(?:file|fileinputstream|bufferedreader)\b]=] },
  { 944120, [=[org\.apache\.commons\.collections\d?\.functors|\b(?:invokertransformer|chainedtransformer|constanttransformer|instantiatetransformer|templatesimpl|jdbcrowsetimpl|badattributevalueexpexception|convertedclosure|ysoserial)\b|com\.sun\.org\.apache\.xalan|org\.springframework\.beans\.factory\.objectfactory|bsh\.interpreter]=] },
  -- serialized Java objects: the raw magic, its base64 ("rO0AB") and hex forms
  { 944130, [=[\xac\xed\x00\x05|\bro0ab[a-z0-9+/]|\baced0005]=] },
  -- Log4Shell (CVE-2021-44228) and its nested-lookup obfuscations
  { 944140, [=[\$\{\s*jndi\s*:]=], targets = "path args cookies headers ua" },
  { 944141, [=[\$\{[^}]*\$\{]=], targets = "path args cookies headers ua" },
  { 944142, [=[\$\{\s*(?:lower|upper|env|sys|java|date|main|ctx|sd|map|bundle|spring|k8s|docker|base64|web|log4j|marker|event|jvmrunargs)\s*:[^}]*\}|\$\{::-]=], targets = "path args cookies headers ua" },
  { 944143, [=[\bjndi\s*:\s*(?:ldaps?|rmi|dns|iiop|corba|nds|nis|https?)\s*:]=], targets = "path args cookies headers ua" },
  -- Spring4Shell (CVE-2022-22965)
  { 944150, [=[\bclass\.(?:module\.)?classloader\b|\bclass\.module\.|\bclass\[['"]?module]=] },
  -- Struts OGNL
  { 944151, [=[#_memberaccess|@ognl\.ognlcontext|ognlcontext@default_member_access|#context\[\s*['"]com\.opensymphony|xwork2?\.(?:dispatcher|methodaccessor)|\(#[a-z_]+\s*=\s*@|%\{\s*\(?#]=] },
  -- Spring expression language and EL
  { 944152, [=[\bt\s*\(\s*java\.lang\.(?:runtime|system|processbuilder|class|thread)\s*\)|#\{\s*t\s*\(]=] },
  { 944153, [=[\$\{\s*(?:applicationscope|sessionscope|requestscope|pagecontext|facescontext|request\.getclass|''\.getclass|""\.getclass|\[\]\.getclass)]=] },
  { 944154, [=[\b(?:rmi|iiop|corbaname)://]=] },
  -- java.beans.XMLDecoder gadgets
  { 944155, [=[<java\s[^>]*class\s*=\s*['"]java\.beans\.xmldecoder|<object\s+class\s*=\s*['"]java\.lang\.(?:runtime|processbuilder)|<void\s+method\s*=\s*['"](?:exec|start)['"]]=] },
  -- class names used by gadget chains and expression-language RCE
  -- (stack traces name java.lang.Class.forName(Class.java:375), URLClassLoader, InitialContext
  -- and sun.misc.Unsafe too: these need a call with a literal, or a constructor)
  { 944160, [=[\bjava\.lang\.class\s*\.\s*(?:forname|getmethod|getdeclared\w+|getconstructor|newinstance)\s*\(\s*['"$#@]|['"]java\.lang\.class['"]|\bclass\s*\.\s*forname\s*\(\s*['"](?:java\.lang\.|javax\.script\.|javax\.naming\.|sun\.|com\.sun\.|org\.apache\.(?:commons|xalan))|\bjavax\.script\.(?:scriptenginemanager|scriptengine)\b|\bscriptenginemanager\s*\(|\bnew\s+java\.net\.urlclassloader\b|\bnew\s+javax\.naming\.initialcontext\b|['"]theunsafe['"]]=] },
  -- OGNL: static access to Java classes and the xwork2 internals
  -- (@java.lang.Override, an annotation, has no second '@')
  { 944161, [=[@java\.(?:lang|io|util|net|nio)\.[\w.]+@|\bcom\.opensymphony\.xwork2\b|#_memberaccess|#context\s*\[|@ognl\.|#application\s*\[|#request\s*\[\s*['"]struts]=] },
  -- Java serialization magic in base64 (rO0AB) and hex (aced0005), anywhere in a value
  { 944131, [=[(?:^|[^a-z0-9+/])ro0ab[a-z0-9+/]{4}|aced0005(?:7[0-9a-e]|73|77)]=] },
  -- Groovy "cmd".execute()
  { 944156, [=[['"][\w ./-]+['"]\s*\.\s*execute\s*\(\s*\)]=] },
}

---------------------------------------------------------------------------------------------
-- Load-time compilation

-- All pattern rules go into ONE Hyperscan database: compiling it is the expensive part of
-- loading this file (every worker compiles it at start and at each reload), and one
-- database with every rule compiles in the time of any one per-part subset. What each part
-- of the request may match is decided afterwards, per matched id (APPLIES), which costs
-- nothing on a clean request.

local TARGETS = set_of("path args cookies headers ua")
local SEV, TAGNAME, APPLIES = {}, {}, {}
-- trigger -> { fn = {check functions}, id = {their rule ids} }
local CHECKS = {}
for _, on in ipairs { "request", "query", "body", "pct", "framing", "connection", "flagged",
                      "acceptenc", "ctype", "range" } do
  CHECKS[on] = { fn = {}, id = {} }
end
local DB

do
  local entries = {}
  for _, r in ipairs(RULES) do
    assert(type(r.id) == "number", "waf.lua: a rule has no numeric id")
    assert(r.tag and r.severity, "waf.lua: rule " .. r.id .. " lacks tag or severity")
    SEV[r.id] = r.severity
    TAGNAME[r.id] = r.tag .. "-" .. r.id
    if r.paranoia <= PARANOIA then
      if r.check then
        local list = CHECKS[r.on]
        assert(list, "waf.lua: rule " .. r.id .. " has an unknown `on`")
        list.fn[#list.fn + 1] = r.check
        list.id[#list.id + 1] = r.id
      else
        assert(r.pattern and r.targets, "waf.lua: rule " .. r.id .. " has no pattern or targets")
        local set = set_of(r.targets)
        for t in pairs(set) do
          assert(TARGETS[t], "waf.lua: rule " .. r.id .. " has an unknown target " .. t)
        end
        -- the User-Agent is a header value too; it is scanned on its own so that the
        -- scanner rules (target "ua") see it alone
        if set.headers then set.ua = true end
        r.targets = set
        APPLIES[r.id] = set
        entries[#entries + 1] = { id = r.id, pattern = expand(r.pattern) }
      end
    end
  end
  DB = sluice.multi(entries)

  -- The transform chains are part of the contract this file relies on: fail at load, not
  -- on the first request, if they do not behave as documented.
  assert(transform("%2527+%2B&lt;", ARGS_T) == "' +<", "waf.lua: sluice.transform chain misbehaves")
end

-- Header names -> what the header pass does with the value.
local HEADER_CLASS = {}
do
  local function add(names, class)
    for n in names:gmatch("%S+") do
      local canon = gsub(n, "%f[%w]%l", string.upper)  -- user-agent -> User-Agent
      HEADER_CLASS[n] = class
      HEADER_CLASS[canon] = class
      HEADER_CLASS[n:upper()] = class
    end
  end
  add(SKIP_HEADERS, "skip")
  add(SKIP_HEADERS_PROBED, "probe")
  add(RESTRICTED_HEADERS, "restricted")
  add("acunetix-product acunetix-scanning-agreement acunetix-user-agreement x-scanner " ..
      "x-wipp x-request-memo x-request-manager-memo x-scan-memo x-wvs-id", "scanner")
  -- common names that are scanned: listed so that no lower() is needed to classify them
  add("origin x-forwarded-for x-forwarded-host x-forwarded-proto x-real-ip " ..
      "x-requested-with via forwarded x-csrf-token x-xsrf-token", "scan")
  add("host", "host")
  add("referer", "referer")   -- scanned, and kept for the session fixation checks
  add("x-filename x_filename x-file-name", "upname")
  add("user-agent", "ua")
  add("cookie", "cookie")
  add("content-type", "ctype")
  add("content-length", "clen")
  add("transfer-encoding", "te")
  add("accept", "accept")
  add("accept-encoding", "acceptenc")
  add("range", "range")
  add("connection", "connection")
end

---------------------------------------------------------------------------------------------
-- Per-request state, reused

local out = {}          -- m:scan output
local seen = {}         -- rule id -> generation of the last request it matched in
local hits = {}         -- matched rule ids, in order
local gen, score, nhit = 0, 0, 0
local hbuf, cbuf = {}, {}
local ctx = {}

local function hit(id)
  if seen[id] ~= gen then
    seen[id] = gen
    score = score + SEV[id]
    nhit = nhit + 1
    hits[nhit] = id
  end
end

-- Scan the text of request part t; a match counts only for the rules that look at t.
local function scan(t, s)
  local n = DB:scan(s, out)
  for i = 1, n do
    local id = out[i]
    if APPLIES[id][t] then hit(id) end
  end
end

-- Argument text: scan it, and if it holds SQL comments, scan it again without them, so
-- that un/**/ion sel/**/ect reads union select and union#x\nselect reads union select.
-- Only texts with "/*" or a line break pay for the second scan.
local function scan_args(t, s)
  scan(t, s)
  local block, line = find(s, "/*", 1, true), find(s, "\n", 1, true)
  if block or line then
    if block then s = gsub(s, "/%*.-%*/", "") end
    if line then s = gsub(gsub(s, "#[^\n]*\n", " "), "%-%-[^\n]*\n", " ") end
    scan(t, s)
  end
end

local function run_checks(list, req)
  local fn, id = list.fn, list.id
  for i = 1, #fn do
    if fn[i](req, ctx) then hit(id[i]) end
  end
end

-- JSON wraps every string in quotes, which the SQL rules would read as quotes closing a
-- literal. A quote an attacker sends inside a value is always escaped (\" or \u0022), so
-- blank the bare quotes and unescape the escaped ones: the text then reads like the values.
-- An escaped backslash (\\) is set aside first, so that in "C:\\" the quote stays a bare
-- one; the jsondecode step (JSON_T) then decodes what is left, \u0022 included.
local function json_values(b)
  if not find(b, '"', 1, true) then return b end
  local bs = find(b, "\\\\", 1, true)
  if bs then b = gsub(b, "\\\\", "\30") end
  b = gsub(b, '\\"', "\31")
  b = gsub(b, '"', " ")
  b = gsub(b, "\31", '"')
  if bs then b = gsub(b, "\30", "\\\\") end
  return b
end

-- A multipart body's part headers (with the file names) and its non-file field values,
-- joined: file contents are binary (NUL bytes, random text) and are not scanned, as in the
-- CRS. The parts are found with plain find() calls, so no Lua work is done per byte.
local mbuf = {}
local function multipart_fields(body, ctype)
  local boundary = match(ctype, '[Bb][Oo][Uu][Nn][Dd][Aa][Rr][Yy]%s*=%s*"?([^";%s]+)')
  if boundary == nil then return body end
  local delim = "--" .. boundary
  local n, pos = 0, find(body, delim, 1, true)
  while pos do
    local hstart = pos + #delim
    if sub(body, hstart, hstart + 1) == "--" then break end   -- the closing delimiter
    local hend = find(body, "\r\n\r\n", hstart, true)
    if hend == nil then
      n = n + 1; mbuf[n] = sub(body, hstart)                     -- truncated in the headers
      break
    end
    local nextp = find(body, delim, hend + 4, true)
    local headers = sub(body, hstart, hend)
    n = n + 1; mbuf[n] = headers
    -- a file part has a filename parameter (quoted strings blanked first, so that a text
    -- field named "filename" or "x;filename=y" is still scanned)
    if not find(gsub(lower(headers), '"[^"]*"', '""'), ";%s*filename%*?%s*=") then
      n = n + 1; mbuf[n] = sub(body, hend + 4, (nextp or #body + 1) - 1)
    end
    pos = nextp
  end
  if n == 0 then return body end
  return table.concat(mbuf, "\n", 1, n)
end

-- Counts and lengths of &-separated arguments; only called on long raw texts.
local function measure_args(s)
  local n, pos, len = 0, 1, #s
  while pos <= len do
    local amp = find(s, "&", pos, true) or (len + 1)
    n = n + 1
    local eq = find(s, "=", pos, true)
    local name_end = (eq and eq < amp) and eq - 1 or amp - 1
    if name_end - pos + 1 > MAX_ARG_NAME_LEN then ctx.arg_name_long = true end
    if amp - name_end - 2 > MAX_ARG_LEN then ctx.arg_long = true end
    pos = amp + 1
  end
  if n > MAX_NUM_ARGS then ctx.arg_many = true end
end

local function check_args_shape(s)
  -- an argument needs at least 2 bytes ("a&"), so a short text cannot break the limits
  if #s > MAX_ARG_NAME_LEN or #s > MAX_ARG_LEN or #s > 2 * MAX_NUM_ARGS then
    measure_args(s)
  end
  if #s > ctx.args_total then ctx.args_total = #s end
end

---------------------------------------------------------------------------------------------

function inspect(req)
  gen = gen + 1
  score, nhit = 0, 0

  local c = ctx
  local method, path, query = req:method(), req:path(), req:query()
  c.method, c.path, c.query, c.uri = method, path, query, req:uri()
  c.pct = find(c.uri, "%", 1, true) ~= nil
  c.host, c.ua, c.accept, c.ctype, c.mtype, c.clen, c.te = nil, nil, nil, nil, nil, nil, nil
  c.range, c.connection, c.accept_encoding = nil, nil, nil
  c.restricted_header, c.scanner_header, c.flagged = false, false, false
  c.nctype = 0
  c.arg_name_long, c.arg_long, c.arg_many, c.args_total = false, false, false, 0
  c.args_text, c.form, c.form_text = nil, nil, nil
  c.referer, c.upload_name = nil, nil

  -- One pass over the headers: collect values to scan and what the checks need.
  local nh, nc = 0, 0
  for name, value in req:headers() do
    local class = HEADER_CLASS[name]
    if class == nil then class = HEADER_CLASS[lower(name)] or "scan" end
    if class == "skip" then
      -- nothing
    elseif class == "probe" then
      -- Lookup payloads (${jndi:...}, %{ognl}, #{spel}) are sprayed into every header,
      -- tokens included; none of these values has a brace otherwise.
      if find(value, "{", 1, true) then nh = nh + 1; hbuf[nh] = value end
    elseif class == "scan" then
      nh = nh + 1; hbuf[nh] = value
    else
      if class == "ua" then
        c.ua = c.ua or value
      elseif class == "cookie" then
        nc = nc + 1; cbuf[nc] = value
      elseif class == "referer" then
        c.referer = c.referer or value
        nh = nh + 1; hbuf[nh] = value
      elseif class == "upname" then
        c.upload_name, c.flagged = value, true
        nh = nh + 1; hbuf[nh] = value
      elseif class == "host" then
        c.host = c.host or value
        nh = nh + 1; hbuf[nh] = value
      elseif class == "ctype" then
        c.nctype = c.nctype + 1
        if c.ctype == nil then c.ctype = value end
        nh = nh + 1; hbuf[nh] = value
      elseif class == "clen" then
        c.clen = value
      elseif class == "te" then
        c.te = value
      elseif class == "accept" then
        c.accept = value
        if find(value, "{", 1, true) then nh = nh + 1; hbuf[nh] = value end
      elseif class == "acceptenc" then
        c.accept_encoding = value
        if find(value, "{", 1, true) then nh = nh + 1; hbuf[nh] = value end
      elseif class == "range" then
        c.range = value
        nh = nh + 1; hbuf[nh] = value
      elseif class == "connection" then
        c.connection = value
      elseif class == "restricted" then
        c.restricted_header, c.flagged = true, true
      elseif class == "scanner" then
        c.scanner_header, c.flagged = true, true
      end
    end
  end

  if c.ctype then c.mtype = lower(match(c.ctype, "^%s*([^;%s]+)") or "") end
  local has_body = (c.clen ~= nil and find(c.clen, "^0*$") == nil) or c.te ~= nil

  -- Path and query.
  if INSPECT.path and #path > 1 then scan("path", transform(path, PATH_T)) end
  if query ~= "" then
    check_args_shape(query)
    if INSPECT.args then
      local a = transform(query, ARGS_T)
      c.args_text = a
      scan_args("args", a)
    end
    run_checks(CHECKS.query, req)
  end

  -- Body, when sluice held it for us.
  if has_body then
    -- A body without a Content-Type is scanned like a form: some backends read it anyway.
    if INSPECT.body and (c.mtype == nil or CTYPE_SCAN[c.mtype]) then
      local body = req:body()
      if body ~= nil and body ~= "" then
        local mt = c.mtype
        if mt == "application/x-www-form-urlencoded" or mt == nil then
          c.form = body
          check_args_shape(body)
          local f = transform(body, ARGS_T)
          c.form_text = f
          scan_args("args", f)
          if c.arg_name_long or c.arg_long or c.arg_many or c.args_total > MAX_ARGS_TOTAL then
            run_checks(CHECKS.query, req)
          end
        elseif JSON_TYPES[mt] or find(mt, "+json", 1, true) then
          scan_args("args", transform(json_values(body), JSON_T))
        elseif mt == "multipart/form-data" or mt == "multipart/related" then
          scan_args("args", transform(multipart_fields(body, c.ctype), BODY_T))
        else
          scan_args("args", transform(body, BODY_T))
        end
      end
    end
    run_checks(CHECKS.body, req)
  end

  -- Header values, cookies, User-Agent.
  if INSPECT.headers and nh > 0 then
    -- a tab between values: a newline would read as a shell command separator
    scan("headers", transform(table.concat(hbuf, "\t", 1, nh), HDR_T))
  end
  if INSPECT.cookies and nc > 0 then
    local ck = nc == 1 and cbuf[1] or table.concat(cbuf, "; ", 1, nc)
    scan_args("cookies", transform(ck, ARGS_T))
  end
  if INSPECT.ua and c.ua then scan("ua", transform(c.ua, HDR_T)) end

  run_checks(CHECKS.request, req)
  if c.pct then run_checks(CHECKS.pct, req) end
  if c.clen or c.te then run_checks(CHECKS.framing, req) end
  if c.connection then run_checks(CHECKS.connection, req) end
  if c.flagged then run_checks(CHECKS.flagged, req) end
  if c.accept_encoding then run_checks(CHECKS.acceptenc, req) end
  if c.ctype then run_checks(CHECKS.ctype, req) end
  if c.range then run_checks(CHECKS.range, req) end

  if nhit == 0 then return end

  -- Tags: sluice keeps 8 per request, so when there are more, the most severe go first.
  if nhit <= 8 then
    for i = 1, nhit do req:tag(TAGNAME[hits[i]]) end
  else
    local tagged = 0
    for sev = CRITICAL, NOTICE, -1 do
      for i = 1, nhit do
        local id = hits[i]
        if SEV[id] == sev then
          req:tag(TAGNAME[id])
          tagged = tagged + 1
          if tagged == 8 then break end
        end
      end
      if tagged == 8 then break end
    end
  end

  if score >= THRESHOLD then req:deny(403) end
end

---------------------------------------------------------------------------------------------
-- Sanity: the ruleset is complete and no two rules share an id (SEV, TAGNAME and APPLIES
-- are keyed by id, so a duplicate would silently replace a rule).

do
  local ids = {}
  for _, r in ipairs(RULES) do
    assert(not ids[r.id], "waf.lua: duplicate rule id " .. r.id)
    ids[r.id] = true
  end
  assert(#RULES >= 300, "waf.lua: only " .. #RULES .. " rules; the ruleset must have 300 or more")
end
