"""sluice's CRS engine against ModSecurity (issue 22): the differential test.

`crs_replay` (tests/crs/crs_replay.c, built next to sluice) runs sluice's own
SecLang engine (src/crseval.c) on every request of the corpus in
tests/e2e/crs_corpus/ with the configuration the oracle ran: Debian's
modsecurity.conf-recommended with SecRuleEngine On, crs-setup.conf, the
paranoia level as rule 900000, then the CRS 3.3.4 rule files. Its verdicts
are compared with what Apache + ModSecurity 2.9.7 decided for the same
requests (modsec_pl1.jsonl, modsec_pl2.jsonl; test_modsec_oracle.py keeps
those files honest against a fresh ModSecurity).

For each request that reached ModSecurity's phase 2 (the others never got a
CRS verdict, see the corpus README):
  verdict  blocked or not, by the same rule (949110 or Debian's 2000xx);
  rule ids the set of logged rule ids (what an audit log lists);
  alerts   every matched rule or chain in order, repeats included (a rule
           that matched three values scored three times), flow-control
           rules left out as the oracle leaves them out;
  score    the inbound anomaly score 949110 compared.
The issue asks for >= 99% equal verdicts and >= 95% equal rule ids; the
alerts and scores are held to the same 99%. Every difference is printed.
"""

import json
import os
import shutil
import subprocess

import pytest

import modsec as M

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "crs_corpus")
# CRS 3.3.4's rules that need per-request lookups sluice does not make:
# 910100 (@geoLookup) and 910140 (@rbl). Both sit behind settings Debian's
# crs-setup.conf leaves unset, so ModSecurity never runs them either.
CRS_SKIP = (910100, 910140)


def _replay_bin(sluice_bin):
    p = os.path.join(os.path.dirname(sluice_bin), "crs_replay")
    if not os.access(p, os.X_OK):
        pytest.fail("crs_replay not built next to %s (make all builds it)" % sluice_bin)
    return p


def _config(tmp_path, paranoia):
    """The oracle's configuration (modsec.ModSecurity._write_config), as
    one SecLang file for crs_replay."""
    if not os.path.exists(M.CRS_SETUP) or not os.path.isdir(M.CRS_RULES):
        pytest.skip("modsecurity-crs is not installed (apt-get install modsecurity-crs)")
    if not os.path.exists(M.RECOMMENDED):
        pytest.skip("%s missing (apt-get install libapache2-mod-security2)" % M.RECOMMENDED)
    rec = tmp_path / "modsecurity.conf"
    text = open(M.RECOMMENDED).read()
    assert "SecRuleEngine DetectionOnly" in text
    rec.write_text(text.replace("SecRuleEngine DetectionOnly", "SecRuleEngine On"))
    lines = ["Include %s" % rec, "Include %s" % M.CRS_SETUP,
             'SecAction "id:900000,phase:1,nolog,pass,t:none,setvar:tx.paranoia_level=%d"' % paranoia]
    if os.path.exists(M.CRS_BEFORE):
        lines.append("Include %s" % M.CRS_BEFORE)
    lines.append("Include %s/*.conf" % M.CRS_RULES)
    if os.path.exists(M.CRS_AFTER):
        lines.append("Include %s" % M.CRS_AFTER)
    top = tmp_path / ("crs-pl%d.conf" % paranoia)
    top.write_text("\n".join(lines) + "\n")
    return str(top)


def replay(binary, conf, requests, skip=CRS_SKIP):
    """{id: verdict} from crs_replay for REQUESTS ([(id, raw bytes)])."""
    data = bytearray()
    for rid, raw in requests:
        data += b"%s\t%d\n" % (rid.encode(), len(raw)) + raw
    args = [binary]
    for s in skip:
        args += ["-s", str(s)]
    r = subprocess.run(args + [conf], input=bytes(data), capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    out = {}
    for line in r.stdout.decode().splitlines():
        d = json.loads(line)
        out[d["id"]] = d
    assert len(out) == len(requests), "crs_replay answered %d of %d" % (len(out), len(requests))
    return out


def summarize(s, paranoia):
    """crs_replay's verdict in the oracle's terms."""
    alerts = [a for a in s["alerts"] if a[3] <= 2 and not a[2] and not M.flow_control(a[0])]
    tx = s["tx"]
    return dict(blocked=s["intercepted"], disruptive=s["disruptive"] or None,
                matched=[a[0] for a in alerts], rules=[a[0] for a in alerts if a[1]],
                score=sum(tx["anomaly_score_pl%d" % i] for i in range(1, paranoia + 1)))


def compare(binary, conf, oracle_file, paranoia, skip=CRS_SKIP):
    """The corpus through crs_replay and CONF against ORACLE_FILE's verdicts
    (requests that reached ModSecurity's phase 2): counts of equal verdicts,
    logged rule ids, ordered alerts and scores, and the differing requests
    (verdict or ids or alerts) with a line each."""
    reqs = [json.loads(l) for l in open(os.path.join(CORPUS, "requests.jsonl"))]
    oracle = {}
    for line in open(os.path.join(CORPUS, oracle_file)):
        v = json.loads(line)
        oracle[v["id"]] = v
    ours = replay(binary, conf, [(r["id"], r["raw"].encode("utf-8")) for r in reqs], skip=skip)
    c = dict(n=0, verdicts=0, ids=0, alerts=0, scores=0, diffs=[], lines=[])
    for r in reqs:
        v = oracle[r["id"]]
        if not v["phase2"]:
            continue
        c["n"] += 1
        s = summarize(ours[r["id"]], paranoia)
        same_verdict = s["blocked"] == v["blocked"] and s["disruptive"] == v["disruptive"]
        same_ids = set(s["rules"]) == set(v["rules"])
        c["verdicts"] += same_verdict
        c["ids"] += same_ids
        # the CRS 4 oracle recorded verdicts and rule ids only
        same_alerts = s["matched"] == v["matched"] if "matched" in v else True
        c["alerts"] += same_alerts
        c["scores"] += s["score"] == v["score"] if "score" in v else True
        if not (same_verdict and same_ids and same_alerts):
            c["diffs"].append(r["id"])
            c["lines"].append("%s: modsecurity %s %s score %s; sluice %s %s score %d" % (
                r["id"], "blocked" if v["blocked"] else "passed", v.get("matched"), v.get("score"),
                "blocked" if s["blocked"] else "passed", s["matched"], s["score"]))
    return c


@pytest.mark.parametrize("paranoia", [1, 2])
def test_crs_engine_agrees_with_modsecurity(sluice_bin, tmp_path, paranoia):
    c = compare(_replay_bin(sluice_bin), _config(tmp_path, paranoia), "modsec_pl%d.jsonl" % paranoia, paranoia)
    n = c["n"]
    report = "PL%d over %d requests: verdicts %d, rule ids %d, alerts %d, scores %d equal" % (
        paranoia, n, c["verdicts"], c["ids"], c["alerts"], c["scores"])
    print(report)
    for d in c["lines"][:50]:
        print("  " + d)
    assert n > 3000
    assert c["verdicts"] >= 0.99 * n, report
    assert c["ids"] >= 0.95 * n, report
    assert c["alerts"] >= 0.99 * n and c["scores"] >= 0.99 * n, report


# CRS 4: Debian 12 packages only 3.3.4; the Go module proxy serves the CRS 4
# rule files as github.com/corazawaf/coraza-coreruleset (rules/@owasp_crs,
# @crs-setup.conf.example). modsec_crs4_pl1.jsonl holds what Apache +
# ModSecurity 2.9.7 decided with those files (the same oracle, CRS_SETUP and
# CRS_RULES pointed at them) at paranoia 1.
CRS4_MODULE = "github.com/corazawaf/coraza-coreruleset/v4@v4.25.0"
# ModSecurity 2.9's phrase matcher misses some phrases of large lists: with
# CRS 4's restricted-files.data it does not find "/.DS_Store" (checked with a
# one-rule configuration: @pm "/.DS_Store" finds it, @pmFromFile with the
# list does not). sluice finds it, so this request gets 930130 and a block.
CRS4_KNOWN = {"lfi-0165"}


def _crs4_rules(tmp_path):
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if go is None:
        pytest.skip("the go command is needed to fetch %s from the Go module proxy" % CRS4_MODULE)
    d = tmp_path / "gomod"
    d.mkdir()
    r = subprocess.run([go, "mod", "download", "-json", CRS4_MODULE], cwd=str(d), capture_output=True,
                       text=True, timeout=300, env=dict(os.environ, GOFLAGS="-mod=mod"))
    assert r.returncode == 0, r.stderr[-2000:]
    return os.path.join(json.loads(r.stdout)["Dir"], "rules")


def test_crs4_engine_agrees_with_modsecurity(sluice_bin, tmp_path):
    binary = _replay_bin(sluice_bin)
    if not os.path.exists(M.RECOMMENDED):
        pytest.skip("%s missing (apt-get install libapache2-mod-security2)" % M.RECOMMENDED)
    rules = _crs4_rules(tmp_path)
    rec = tmp_path / "modsecurity.conf"
    rec.write_text(open(M.RECOMMENDED).read().replace("SecRuleEngine DetectionOnly", "SecRuleEngine On"))
    conf = tmp_path / "crs4.conf"
    conf.write_text("Include %s\nInclude %s/@crs-setup.conf.example\nInclude %s/@owasp_crs/*.conf\n"
                    % (rec, rules, rules))
    # CRS 4 needs no skip list: it has no GeoIP or DNS-blocklist rule
    c = compare(binary, str(conf), "modsec_crs4_pl1.jsonl", 1, skip=())
    n, diffs = c["n"], c["diffs"]
    report = "CRS 4 PL1 over %d requests: verdicts %d, rule ids %d equal; differing: %s" % (
        n, c["verdicts"], c["ids"], diffs[:20])
    print(report)
    assert n > 3000
    assert c["verdicts"] >= 0.99 * n and c["ids"] >= 0.95 * n, report
    assert set(diffs) <= CRS4_KNOWN, report


def test_skip_list_drops_rules_and_is_reported(sluice_bin, tmp_path):
    """A rule on the skip list is not run: with 942100 (libinjection's SQL
    check) skipped, a request only it catches passes."""
    binary = _replay_bin(sluice_bin)
    conf = _config(tmp_path, 1)
    raw = (b"GET /?q=1%27%20OR%20%271%27%3D%271 HTTP/1.1\r\nHost: www.example.com\r\n"
           b"User-Agent: Mozilla/5.0\r\nAccept: text/html\r\n\r\n")
    full = summarize(replay(binary, conf, [("a", raw)])["a"], 1)
    assert full["blocked"] and full["rules"] == [942100, 949110], full
    cut = summarize(replay(binary, conf, [("a", raw)], skip=CRS_SKIP + (942100,))["a"], 1)
    assert not cut["blocked"] and cut["rules"] == [], cut


def test_unknown_rule_language_is_an_error(sluice_bin, tmp_path):
    binary = _replay_bin(sluice_bin)
    bad = tmp_path / "bad.conf"
    bad.write_text('SecRule ARGS "@rbl sbl.example" "id:1,phase:1,deny"\n')
    r = subprocess.run([binary, str(bad)], input=b"", capture_output=True, timeout=60)
    assert r.returncode == 1
    assert b"bad.conf:1: rule 1: @rbl is not supported" in r.stderr, r.stderr
    bad.write_text('SecRule RESPONSE_BODY|FULL_REQUEST "x" "id:2,phase:2,deny"\n')
    r = subprocess.run([binary, str(bad)], input=b"", capture_output=True, timeout=60)
    assert r.returncode == 1
    assert b"bad.conf:1: rule 2: variable RESPONSE_BODY is not supported" in r.stderr, r.stderr
