-- crs.lua: the OWASP Core Rule Set itself, run by sluice's own SecLang engine.
--
-- What it runs. Debian's modsecurity-crs (CRS 3.3.4) rule files as they are, after
-- crs-base.conf (the settings ModSecurity's recommended configuration gives the CRS: request
-- bodies parsed, JSON and XML by Content-Type, unparseable bodies refused; rules 200000-200005
-- with ModSecurity's ids), in blocking mode, with crs-setup.conf and the operator's exclusion
-- files (REQUEST-900 before, RESPONSE-999 after). Needs Debian's modsecurity-crs package
-- (`make run` installs it). Relative paths in the config are read from this file's directory. The verdicts are ModSecurity 2.9's: on sluice's differential corpus every request
-- gets the same verdict, the same rules and the same anomaly score as Apache + ModSecurity
-- (tests/e2e/test_crs_differential.py, docs/crs.md).
--
-- Knobs (below): PARANOIA (1 to 4), THRESHOLD (the inbound anomaly score that denies;
-- CRS's default is 5), the file locations, and SKIP: rules not loaded at all. 910100 and
-- 910140 need per-request lookups (GeoIP, DNS blocklists) sluice does not make; both only
-- run when crs-setup.conf enables them. Tuning false positives is done the CRS way: rule
-- exclusions in the REQUEST-900 file (SecRuleRemoveById, SecRuleUpdateTargetById, ctl:...).
--
-- What a request gets. Every logged rule that matched tags the request "crs-<id>" (the
-- access log, the per-tag counters; sluice keeps 8 tags per request). A request CRS blocks
-- is denied with CRS's status (403, or 400 for a body that does not parse). Bodies are only
-- inspected with `body:` in the listener's inspect config (ARGS_POST, JSON, multipart).

local PARANOIA = 1
local THRESHOLD = 5
local BASE = "crs-base.conf"
local SETUP = "/etc/modsecurity/crs/crs-setup.conf"
local BEFORE = "/etc/modsecurity/crs/REQUEST-900-EXCLUSION-RULES-BEFORE-CRS.conf"
local RULES = "/usr/share/modsecurity-crs/rules/*.conf"
local AFTER = "/etc/modsecurity/crs/RESPONSE-999-EXCLUSION-RULES-AFTER-CRS.conf"
local SKIP = { 910100, 910140 }

local config = table.concat({
  "Include " .. BASE,
  "Include " .. SETUP,
  -- crs-setup.conf documents these two as rules 900000 and 900110 (commented out there)
  string.format('SecAction "id:900000,phase:1,nolog,pass,t:none,setvar:tx.paranoia_level=%d"', PARANOIA),
  string.format('SecAction "id:900110,phase:1,nolog,pass,t:none,setvar:tx.inbound_anomaly_score_threshold=%d,'
    .. 'setvar:tx.outbound_anomaly_score_threshold=4"', THRESHOLD),
  "Include " .. BEFORE,
  "Include " .. RULES,
  "Include " .. AFTER,
}, "\n")

local crs = sluice.crs{ config = config, skip = SKIP }

function inspect(req)
  local r = crs:eval(req)
  local ids = r.ids
  for i = 1, #ids do
    req:tag("crs-" .. ids[i])
  end
  if r.blocked then
    req:deny(r.status)
  end
end
