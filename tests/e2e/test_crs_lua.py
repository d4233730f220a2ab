"""The CRS engine from the inspection hook (issue 22): sluice.crs and the
shipped lua/crs.lua, end to end through the proxy.

lua/crs.lua runs Debian's CRS 3.3.4 with ModSecurity's recommended settings
in blocking mode. Through a real sluice in front of a recording backend:
what CRS blocks is answered by sluice (403, or 400 for a body that does not
parse) and never reaches the backend; what it lets through arrives intact;
every logged rule that matched tags the request "crs-<id>" in the access log
and the per-tag counters; a sample of the differential corpus gets, through
the proxy, the status ModSecurity gave it; `sluice -t` names a SecLang error
by file and line.
"""

import json
import os

import pytest

import harness as H
import modsec as M
from test_inspect import access, config, run_check, wait_metric

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
CRS_LUA = os.path.join(REPO, "lua", "crs.lua")
CORPUS = os.path.join(HERE, "crs_corpus")
# Evaluating CRS takes well under a millisecond; the roomy budget is for
# the sanitizer and valgrind builds.
INSPECT = {"body": "128k", "budget": {"instructions": "0", "time": "500ms", "wall_time": "5s"}}
BROWSER = [("User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0"),
           ("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
           ("Accept-Language", "en-US,en;q=0.5"), ("Accept-Encoding", "gzip, deflate")]


def _need_crs():
    for p in (M.CRS_SETUP, M.RECOMMENDED, M.CRS_BEFORE, M.CRS_AFTER):
        if not os.path.exists(p):
            pytest.skip("%s missing (apt-get install modsecurity-crs libapache2-mod-security2)" % p)


@pytest.fixture(scope="module")
def crs_sluice(sluice_bin, tmp_path_factory):
    _need_crs()
    d = tmp_path_factory.mktemp("crs")
    be = H.RecordingBackend()
    s = H.Sluice(sluice_bin, d, config(be, CRS_LUA, inspect=INSPECT), name="crs")
    try:
        s.start(timeout=60)
        yield s, be
    finally:
        s.kill()
        be.stop()


def send(s, method, target, headers=(), body=None):
    hs = list(BROWSER) + list(headers)
    n0 = len(s.access_entries())
    with H.Client(s.port) as c:
        cport = c.sock.getsockname()[1]
        r = c.request(method, target, headers=hs, body=body)
    ent = H.wait_for(lambda: next((x for x in s.access_entries()[n0:] if x["cport"] == str(cport)), None),
                     3.0, what="the access log line of client port %d" % cport)
    return r, ent


def tags(ent):
    return (ent["tags"] or "").split(",") if ent["tags"] else []


def test_benign_request_passes_untouched(crs_sluice):
    s, be = crs_sluice
    r, e = send(s, "GET", "/shop/list?page=2&sort=price", [("Cookie", "sid=abc123; theme=dark")])
    assert (r.status, e["inspect"], e["tags"]) == (200, "allow", None), e
    q = [q for q in be.all_requests() if q.target == "/shop/list?page=2&sort=price"]
    assert len(q) == 1 and q[0].header("cookie") == "sid=abc123; theme=dark"


def test_sqli_in_query_is_denied_with_crs_tags(crs_sluice):
    s, be = crs_sluice
    target = "/search?q=1%27%20OR%20%271%27%3D%271"
    r, e = send(s, "GET", target)
    assert (r.status, e["inspect"]) == (403, "deny"), e
    assert tags(e) == ["crs-942100", "crs-949110"], e
    assert not [q for q in be.all_requests() if q.target == target]


def test_json_body_is_parsed_and_unescaped(crs_sluice):
    """The JSON body processor (Debian's rule 200001 turns it on): a payload
    hidden in \\u escapes inside a JSON string is seen decoded."""
    s, be = crs_sluice
    body = b'{"user": {"name": "x\\u0027 union select password from users--"}}'
    r, e = send(s, "POST", "/api/v1/profile", [("Content-Type", "application/json")], body)
    assert (r.status, e["inspect"]) == (403, "deny"), e
    assert "crs-942100" in tags(e) and "crs-949110" in tags(e), e
    ok = b'{"user": {"name": "O\'Brien", "tags": ["a", "b"], "age": 42}}'
    r, e = send(s, "POST", "/api/v1/profile2", [("Content-Type", "application/json")], ok)
    assert (r.status, e["inspect"]) == (200, "allow"), e
    q = [q for q in be.all_requests() if q.target == "/api/v1/profile2"]
    assert len(q) == 1 and q[0].body == ok


def test_bad_json_body_gets_400(crs_sluice):
    s, be = crs_sluice
    r, e = send(s, "POST", "/api/v1/broken", [("Content-Type", "application/json")], b'{"a": ')
    assert (r.status, e["inspect"]) == (400, "deny"), e
    assert tags(e) == ["crs-200002"], e


def test_multipart_upload_of_php_file_is_denied(crs_sluice):
    s, be = crs_sluice
    b = b"----sluiceB"
    body = (b"--" + b + b"\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\nholiday\r\n"
            b"--" + b + b"\r\nContent-Disposition: form-data; name=\"f\"; filename=\"shell.php\"\r\n"
            b"Content-Type: application/octet-stream\r\n\r\n<?php system($_GET['c']); ?>\r\n--" + b + b"--\r\n")
    ct = [("Content-Type", "multipart/form-data; boundary=" + b.decode())]
    r, e = send(s, "POST", "/upload", ct, body)
    assert (r.status, e["inspect"]) == (403, "deny"), e
    assert "crs-933110" in tags(e), e
    ok = body.replace(b"shell.php", b"holiday.jpg").replace(b"<?php system($_GET['c']); ?>", b"\xff\xd8JPEGDATA")
    r, e = send(s, "POST", "/upload2", ct, ok)
    assert (r.status, e["inspect"]) == (200, "allow"), e


def test_tag_counters_and_inspection_histogram(crs_sluice):
    s, be = crs_sluice
    send(s, "GET", "/counted?x=%3Cscript%3Ealert(1)%3C/script%3E")

    def ok(m):
        return (m.get("sluice_inspect_tag_total", {"tag": "crs-949110", "outcome": "deny"}) or 0) >= 1 and \
            (m.get("sluice_inspect_tag_total", {"tag": "crs-941100", "outcome": "deny"}) or 0) >= 1
    m = wait_metric(s, ok, what="crs tag counters")
    # its time lands in the inspection histogram, as any script's
    assert m.n("sluice_inspect_seconds_count", {"listener": "http"}) >= 1


def _corpus_sample():
    reqs = [json.loads(l) for l in open(os.path.join(CORPUS, "requests.jsonl"))]
    oracle = {}
    for line in open(os.path.join(CORPUS, "modsec_pl1.jsonl")):
        v = json.loads(line)
        oracle[v["id"]] = v
    keep = ("query", "form", "json", "cookie", "ua", "referer", "header", "multipart", "filename")
    picked = [r for r in reqs if r["where"] in keep and oracle[r["id"]]["phase2"]]
    return [(r, oracle[r["id"]]) for r in picked[::23]]


def test_corpus_sample_through_the_proxy(crs_sluice):
    """Every 23rd request of the differential corpus whose payload sits where
    a proxy passes it unchanged gets, through sluice, the status
    ModSecurity answered."""
    s, be = crs_sluice
    sample = _corpus_sample()
    assert len(sample) > 100
    bad = []
    for r, v in sample:
        with H.Client(s.port) as c:
            c.send(r["raw"].encode("utf-8"))
            resp = c.read_response(r["raw"].split(" ", 1)[0])
        want = v["status"] if v["blocked"] else 200
        if resp.status != want:
            bad.append("%s: modsecurity %s, sluice %s" % (r["id"], want, resp.status))
    assert not bad, "%d of %d differ:\n%s" % (len(bad), len(sample), "\n".join(bad))


def test_config_check_names_seclang_errors(sluice_bin, tmp_path):
    _need_crs()
    rules = tmp_path / "bad.conf"
    rules.write_text('SecRule ARGS "@rx ok" "id:1,phase:1,pass"\nSecRule ARGS "@rbl x.example" "id:2,phase:1,deny"\n')
    script = tmp_path / "crs_bad.lua"
    script.write_text('local crs = sluice.crs{config = "Include %s"}\nfunction inspect(req) crs:eval(req) end\n'
                      % rules)
    be_port = H.free_port()
    c = config(type("B", (), {"port": be_port})(), str(script))
    path = tmp_path / "c.yaml"
    path.write_text(H.to_yaml(c))
    r = run_check(sluice_bin, tmp_path, str(path))
    assert r.returncode != 0
    assert "bad.conf:2: rule 2: @rbl is not supported" in r.stderr + r.stdout, r.stderr
    # the skip list makes it load
    script.write_text('local crs = sluice.crs{config = "Include %s", skip = {2}}\n'
                      'function inspect(req) crs:eval(req) end\n' % rules)
    r = run_check(sluice_bin, tmp_path, str(path))
    assert r.returncode == 0, r.stderr
    # the shipped script checks
    c = config(type("B", (), {"port": be_port})(), CRS_LUA)
    path.write_text(H.to_yaml(c))
    r = run_check(sluice_bin, tmp_path, str(path))
    assert r.returncode == 0, r.stderr
