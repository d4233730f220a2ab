"""The ModSecurity + CRS 3.3.4 verdict oracle itself (tests/e2e/modsec.py),
so that it cannot silently rot before sluice's own CRS engine (issue 22) is
compared against it; and the stored corpus verdicts
(tests/e2e/crs_corpus/modsec_pl*.jsonl), replayed on a sample.

Rule ids asserted here were checked against real runs of Debian's
apache2 2.4.71 / libapache2-mod-security2 2.9.7 / modsecurity-crs 3.3.4.
"""

import json
import os
import random
import sys

import pytest

import modsec as M
from modsec import BROWSER_HEADERS, request

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "crs_corpus")
sys.path.insert(0, CORPUS)

def _installed():
    why = M.ensure_installed()
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module")
def pl1(tmp_path_factory):
    """One blocking PL1 instance shared by the module's single-request tests."""
    _installed()
    m = M.ModSecurity(tmp_path_factory.mktemp("modsec-pl1"), name="pl1", paranoia=1).start()
    yield m
    m.stop()


def test_plain_browser_get_passes(pl1):
    v = pl1.verdict(request("GET", "/index.html", BROWSER_HEADERS))
    assert v["status"] == 200, v
    assert v["seen"] and v["phases"] == [1, 2, 3, 4, 5], v
    assert not v["blocked"] and not v["would_block"] and v["disruptive"] is None
    assert v["score"] == 0 and v["pl_scores"] == [0, 0, 0, 0] and v["threshold"] == 5
    assert v["rules"] == [] and v["logged"] == []
    # apart from flow control, only two nolog "feature not configured" skips
    # match: 912100 (DoS protection) and 910130 (IP reputation RBL)
    assert [r for r in v["matched"] if not M.flow_control(r)] == [912100, 910130], v["matched"]
    # the flow-control rules ran: paranoia gates of every family, the score sum
    assert 942013 in v["matched"] and 949060 in v["matched"]
    assert 900000 in v["secactions"]       # our tx.paranoia_level SecAction


def test_sqli_in_query_is_blocked(pl1):
    v = pl1.verdict(request("GET", "/?id=1%27%20OR%20%271%27%3D%271", BROWSER_HEADERS))
    assert v["status"] == 403 and v["blocked"] and v["would_block"], v
    assert v["disruptive"] == 949110
    assert v["rules"] == [942100, 949110], v["rules"]        # libinjection
    assert v["score"] >= 5 and v["score"] == 5
    assert v["phases"] == [1, 2, 5]                          # denied in phase 2
    assert v["logged"] == [942100, 949110, 980130]


def test_xss_in_query_arg(pl1):
    v = pl1.verdict(request("GET", "/search?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E", BROWSER_HEADERS))
    assert v["blocked"] and v["status"] == 403
    assert {941100, 941110, 941160} <= set(v["rules"]), v["rules"]
    assert all(r // 1000 in (941, 949) for r in v["rules"]), v["rules"]
    assert v["score"] == 15


def test_form_body_command_injection(pl1):
    raw = request("POST", "/login", BROWSER_HEADERS + [("Content-Type", "application/x-www-form-urlencoded")],
                  "cmd=%3Bcat+%2Fetc%2Fpasswd")
    v = pl1.verdict(raw)
    assert v["blocked"] and v["status"] == 403, v
    assert [r for r in v["rules"] if r // 1000 in (930, 932)] == [930120, 932100, 932160], v["rules"]
    assert v["score"] >= 15


def test_json_body_is_parsed(pl1):
    """Debian's recommended config enables the JSON body processor for
    application/json (its rule 200001, nolog: only the debug log shows it),
    so CRS sees JSON values as ARGS; a body that does not parse is denied
    400 by its rule 200002 before any CRS phase-2 rule runs."""
    hdrs = BROWSER_HEADERS + [("Content-Type", "application/json")]
    v = pl1.verdict(request("POST", "/api/items", hdrs, '{"filter": {"name": "1\' union select 1,2--"}}'))
    assert v["matched"][0] == 200001, v["matched"]
    assert 200001 not in v["rules"]
    assert v["blocked"] and 942100 in v["rules"], v["rules"]
    ok = pl1.verdict(request("POST", "/api/items", hdrs, '{"filter": {"name": "blue teapot", "max": 30}}'))
    assert ok["status"] == 200 and not ok["blocked"] and ok["rules"] == [], ok
    bad = pl1.verdict(request("POST", "/api/items", hdrs, '{"filter": {bad'))
    assert bad["status"] == 400 and bad["blocked"] and bad["disruptive"] == 200002, bad
    assert bad["rules"] == [200002] and not bad["would_block"]
    assert 942013 in bad["matched"] and 949060 not in bad["matched"]   # phase 2 stopped at 200002


def test_put_is_method_enforcement(pl1):
    v = pl1.verdict(request("PUT", "/api/items/1", BROWSER_HEADERS + [("Content-Type", "application/json")],
                            '{"name": "teapot"}'))
    assert v["blocked"] and v["rules"] == [911100, 949110] and v["score"] == 5, v


def test_audit_log_lists_the_logged_rules(pl1):
    """The audit log (JSON, part H) holds exactly the logged subset of what
    the debug log shows: a cross-check of the two sources."""
    pl1.audit_entries()
    v = pl1.verdict(request("GET", "/?id=1%27%20OR%20%271%27%3D%271&q=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
                            BROWSER_HEADERS))
    entries = [e for e in pl1.audit_entries() if e["txid"] == v["txid"]]
    assert len(entries) == 1, entries
    assert entries[0]["ids"] == v["logged"], (entries[0]["ids"], v["logged"])
    assert set(v["logged"]) < set(v["matched"] + v["late"])


def test_requests_apache_rejects_first(pl1):
    """Apache answers some requests before ModSecurity's phase 2, or before
    ModSecurity sees them at all: such verdicts carry no CRS decision."""
    v = pl1.verdict(b"GET /x HTTP/1.1\r\nHost: a.example\r\nbad header line\r\n\r\n")
    assert v["status"] == 400 and not v["seen"] and v["matched"] == [], v
    v = pl1.verdict(request("GET", "/../../etc/passwd", BROWSER_HEADERS))
    assert v["status"] == 400 and v["seen"] and v["phases"] == [1, 3, 4, 5] and not v["blocked"], v
    # the same traversal encoded does reach phase 2 (AllowEncodedSlashes NoDecode)
    v = pl1.verdict(request("GET", "/static/..%2f..%2f..%2fetc%2fpasswd", BROWSER_HEADERS))
    assert 2 in v["phases"] and v["blocked"] and 930100 in v["rules"], v


def test_paranoia_level_2_adds_rules(tmp_path):
    """A request without an Accept header: 920300 is a PL2 rule, so it fires
    at PL2 (score 2, under the threshold) and not at PL1, where the gate
    920013 skips the PL2 part of REQUEST-920."""
    _installed()
    raw = request("GET", "/news/", [("User-Agent", BROWSER_HEADERS[0][1])])
    m1 = M.ModSecurity(tmp_path, name="pl1b", paranoia=1).start()
    try:
        v1 = m1.verdict(raw)
    finally:
        m1.stop()
    m2 = M.ModSecurity(tmp_path, name="pl2", paranoia=2).start()
    try:
        v2 = m2.verdict(raw)
        sqli = m2.verdict(request("GET", "/?id=1%27%20OR%20%271%27%3D%271", BROWSER_HEADERS))
    finally:
        m2.stop()
    assert 920300 not in v1["matched"] and v1["score"] == 0 and not v1["blocked"], v1
    assert v2["rules"] == [920300] and v2["pl_scores"] == [0, 2, 0, 0] and v2["score"] == 2, v2
    assert not v2["blocked"] and v2["status"] == 200
    assert 920013 not in v2["matched"] and 920015 in v2["matched"]     # PL2 runs, PL3 gate skips
    # PL2 adds SQLi rules of its own to the same request
    assert set(sqli["rules"]) - {942100, 949110}, sqli["rules"]
    assert sqli["score"] > 5 and sqli["paranoia"] == 2


def test_detection_only_does_not_block(tmp_path):
    _installed()
    m = M.ModSecurity(tmp_path, name="detect", paranoia=1, blocking=False).start()
    try:
        v = m.verdict(request("GET", "/?id=1%27%20OR%20%271%27%3D%271", BROWSER_HEADERS))
    finally:
        m.stop()
    assert v["status"] == 200 and not v["blocked"] and v["disruptive"] is None, v
    assert v["would_block"] and v["rules"] == [942100, 949110] and v["score"] == 5


# --------------------------------------------------------------------------
# the stored corpus verdicts

def _sample(reqs, n, seed):
    idx = sorted(random.Random(seed).sample(range(len(reqs)), n))
    return [reqs[i] for i in idx]


@pytest.mark.parametrize("paranoia,n", [(1, 100), (2, 60)])
def test_stored_corpus_verdicts_reproduce(tmp_path, paranoia, n):
    """A fixed sample of crs_corpus/requests.jsonl through a fresh instance
    gives exactly the verdicts stored in modsec_pl<N>.jsonl."""
    _installed()
    import make_corpus as C
    reqs = C.load_requests()
    with open(os.path.join(CORPUS, "modsec_pl%d.jsonl" % paranoia)) as f:
        stored = {d["id"]: d for d in (json.loads(l) for l in f if l.strip())}
    assert len(stored) == len(reqs)
    sample = _sample(reqs, n, 22 + paranoia)
    m = M.ModSecurity(tmp_path, name="replay-pl%d" % paranoia, paranoia=paranoia).start()
    try:
        got = [C.stored_verdict(q, m.verdict(q["raw"])) for q in sample]
    finally:
        m.stop()
    diffs = [(q["id"], stored[q["id"]], g) for q, g in zip(sample, got) if stored[q["id"]] != g]
    assert not diffs, "verdicts differ from the stored ones:\n" + "\n".join(
        "%s\n  stored %s\n  now    %s" % d for d in diffs[:5])
    assert any(g["blocked"] for g in got) and any(not g["blocked"] for g in got)
