"""The Lua inspection hook end to end (docs/lua-api.md), against the real
binary: what the req API reads (checked byte for byte at a recording
backend, where a fixture script reports it in a request header), the
actions (deny, redirect, header edits, backend choice, tags) and their
checks, keepalive after a local answer, the response and log phases, the
guard (instruction, time and memory budgets, errors, catastrophic regexes;
the worker survives and on_error decides), the sandbox, shadow mode, body
inspection, configuration errors, the live switch, metrics and /status,
reload, and the scripts shipped in lua/.

Two fixture scripts in tests/e2e/lua/ do most of the work:
  seen.lua  reports every read as JSON in the request header X-Seen;
  eval.lua  runs the Lua code a request carries (X-Lua in inspect(),
            X-Lua-Resp in inspect_response(), X-Lua-Log in log()), so one
            sluice serves many cases and the code runs under the same guard
            as any script.
Scripts whose error messages are checked are written into the test's
directory and named relative to it (sluice runs there), so the messages
name them briefly.
"""

import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest

import harness as H
import peers as P

parser = pytest.importorskip(
    "prometheus_client.parser",
    reason="needs prometheus_client (Debian python3-prometheus-client or pip; `make test-deps`)")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
FIX = os.path.join(HERE, "lua")
EVAL = os.path.join(FIX, "eval.lua")
SEEN = os.path.join(FIX, "seen.lua")
SHIPPED = os.path.join(REPO, "lua")
CORPUS = os.path.join(HERE, "waf_corpus")
LI = {"listener": "http"}
CLIENT_IP = "127.0.0.2"

# A budget generous enough that a fixture's own bookkeeping never trips it.
ROOMY = {"instructions": "0", "time": "2s"}


# --------------------------------------------------------------------------
# helpers

def write_script(tmp_path, name, text):
    """Write a script into the test directory; returns its name relative to
    sluice's working directory (the test directory)."""
    with open(os.path.join(str(tmp_path), name), "w") as f:
        f.write(text)
    return name


def config(be, script, *, inspect=None, top=None, workers=1, alt=None, listener=None,
           admin=True, extra_listeners=(), **kw):
    """A config whose listener "http" (backend "app" -> BE) runs SCRIPT.
    INSPECT: more keys for the inspect mapping; TOP: more top-level keys;
    ALT: a second recording backend, configured as backend "alt";
    EXTRA_LISTENERS: (name, inspect mapping) for more listeners on "app"."""
    ins = {"script": script}
    ins.update(inspect or {})
    li = {"inspect": ins}
    li.update(listener or {})
    c = H.make_config(H.free_port(), [H.server(be.port)], workers=workers, listener=li,
                      admin=H.admin_config() if admin else None, **kw)
    if alt is not None:
        b2 = dict(c["backends"][0])
        b2["name"] = "alt"
        b2["servers"] = [H.server(alt.port, "a1")]
        c["backends"].append(b2)
    for name, ins2 in extra_listeners:
        c["listeners"].append({"name": name, "address": "%s:%d" % (H.HOST, H.free_port()),
                               "backend": "app", "inspect": ins2})
    c.update(top or {})
    return c


def start(sluice, recorder, script=EVAL, **kw):
    be = recorder()
    s = sluice(config(be, script, **kw))
    return s, be


def port_of(s, name):
    for l in s.config["listeners"]:
        if l["name"] == name:
            return int(l["address"].rsplit(":", 1)[1])
    raise KeyError(name)


def ev(s, code=None, path="/", resp=None, log=None, headers=None, method="GET", body=None,
       port=None, client=None, timeout=H.DEFAULT_TIMEOUT):
    """One request carrying Lua CODE for inspect() (RESP for
    inspect_response(), LOG for log()); on CLIENT or a new connection."""
    hs = []
    if code is not None:
        hs.append(("X-Lua", code))
    if resp is not None:
        hs.append(("X-Lua-Resp", resp))
    if log is not None:
        hs.append(("X-Lua-Log", log))
    hs += list(headers or [])
    if client is not None:
        return client.request(method, path, headers=hs, body=body)
    return H.http_request(port or s.port, method, path, headers=hs, body=body, timeout=timeout)


def reqs_to(be, path):
    return [q for q in be.all_requests() if q.target == path]


def one_req(be, path):
    qs = reqs_to(be, path)
    assert len(qs) == 1, "expected one request for %s at the backend, got %r" % (path, qs)
    return qs[0]


def access(s, path, timeout=3.0):
    return s.wait_access_entry(lambda e: e["target"] == path, timeout)


def errlog_since(s, start):
    return H.read_text(s.error_log)[start:]


def err_offset(s):
    return len(H.read_text(s.error_log))


def head_without_lua(q):
    """The head the backend received minus the X-Lua* lines (which carry
    the test's code, so they may hold any text)."""
    return b"\r\n".join(l for l in q.head.split(b"\r\n") if not l.lower().startswith(b"x-lua"))


def seen(q):
    """The X-Seen report of seen.lua, with strings as the exact bytes
    (latin-1) and "\\0nil" as None."""
    vals = q.header_all("x-seen")
    assert len(vals) == 1, q
    raw = json.loads(vals[0])

    def fix(v):
        if isinstance(v, str):
            return None if v == "\x00nil" else v
        if isinstance(v, list):
            return [fix(x) for x in v]
        if isinstance(v, dict):
            return {k: fix(x) for k, x in v.items()}
        return v
    return fix(raw)


def seen_body(q):
    h = q.header("x-seen-body")
    return None if h is None else bytes.fromhex(h)


def run_check(sluice_bin, workdir, path, timeout=30):
    """`sluice -t -c PATH` run in WORKDIR (scripts are named relative to it)."""
    return subprocess.run([sluice_bin, "-t", "-c", path], cwd=str(workdir), capture_output=True,
                          text=True, timeout=timeout)


class Metrics:
    """One /metrics scrape through prometheus_client's parser."""

    def __init__(self, text):
        self.text = text
        self.samples = {}
        for fam in parser.text_string_to_metric_families(text):
            for smp in fam.samples:
                self.samples[(smp.name, frozenset(smp.labels.items()))] = smp.value

    def get(self, name, labels, default=None):
        return self.samples.get((name, frozenset(labels.items())), default)

    def n(self, name, labels, default=None):
        v = self.get(name, labels, default)
        assert v is not None, "no sample %s%s in /metrics" % (name, labels)
        assert v == int(v)
        return int(v)


def scrape(s):
    return Metrics(s.metrics_text())


def wait_metric(s, pred, timeout=5.0, what="metrics"):
    box = {}

    def ok():
        box["m"] = scrape(s)
        return pred(box["m"])
    try:
        H.wait_for(ok, timeout, interval=0.05, what=what)
    except TimeoutError:
        raise AssertionError("timed out waiting for %s; last scrape:\n%s"
                             % (what, "\n".join(l for l in box["m"].text.splitlines()
                                                if "inspect" in l and "_bucket" not in l)))
    return box["m"]


def outcome_counts(m, labels=LI):
    return tuple(m.n("sluice_inspect_%s_total" % k, labels) for k in ("allow", "deny", "error"))


# ==========================================================================
# 1. reads

QUERY = "x=1&y=a+b%41&x=2&empty=&flag&%6e=v&pct=%25%2B%00z&&utf=%C3%A9"


def test_reads_request_head(sluice, recorder):
    """method, uri, path, query, arg (first value, + and %XX decoded, names
    decoded too, missing -> nil), args in order, header (any case, first
    value), header_count, headers in order with names as sent, cookie and
    cookies over two Cookie headers with odd spacing, client address and
    port, listener, backend, tls facts on plain, body nil without body
    inspection."""
    s, be = start(sluice, recorder, SEEN, inspect={"budget": ROOMY})
    path = "/a%20b/c.php;p=1?" + QUERY
    sent = [("Host", "test.local"),
            ("X-Probe-Arg", "x,y,empty,flag,missing,n,pct,utf,X"),
            ("X-Test", "one"), ("x-test", "two"), ("Cookie", "a=1; b = 2 ;c=3"),
            ("X-Probe-Header", "x-test,X-TEST,missing,cookie,HOST"),
            ("Cookie", "d=4;e="), ("X-Probe-Cookie", "a,b,c,d,e,missing,A"),
            ("X-Empty", "")]
    with H.Client(s.port, source=(CLIENT_IP, 0)) as c:
        cport = c.sock.getsockname()[1]
        r = c.request("GET", path, headers=sent, host=None)
        assert r.status == 200, r
    q = one_req(be, path)
    t = seen(q)
    assert t["method"] == "GET"
    assert t["uri"] == path
    assert t["path"] == "/a%20b/c.php;p=1"
    assert t["query"] == QUERY
    assert t["args"] == [["x", "1"], ["y", "a bA"], ["x", "2"], ["empty", ""], ["flag", ""],
                         ["n", "v"], ["pct", "%+\x00z"], ["utf", "\xc3\xa9"]]
    assert t["arg"] == {"x": "1", "y": "a bA", "empty": "", "flag": "", "missing": None, "n": "v",
                        "pct": "%+\x00z", "utf": "\xc3\xa9", "X": None}
    assert t["headers"] == [list(h) for h in sent]
    assert t["header"] == {"x-test": "one", "X-TEST": "one", "missing": None,
                           "cookie": "a=1; b = 2 ;c=3", "HOST": "test.local"}
    assert t["header_count"] == {"x-test": 2, "X-TEST": 2, "missing": 0, "cookie": 2, "HOST": 1}
    assert t["cookies"] == [["a", "1"], ["b", "2"], ["c", "3"], ["d", "4"], ["e", ""]]
    assert t["cookie"] == {"a": "1", "b": "2", "c": "3", "d": "4", "e": "", "missing": None,
                           "A": None}
    assert (t["client_ip"], t["client_port"]) == (CLIENT_IP, cport)
    assert (t["listener"], t["backend"]) == ("http", "app")
    assert t["tls"] is False
    assert (t["tls_version"], t["tls_cipher"], t["sni"], t["client_cert_subject"]) == (None,) * 4
    assert t["body_is_nil"] is True and t["body_len"] == -1
    assert t["body_truncated"] is False
    assert re.fullmatch(r"w0-c\d+-r1", t["id"]), t["id"]


def test_reads_post_method_and_header_iteration_with_body_off(sluice, recorder):
    """A POST with a body and body inspection off: method POST, body() nil,
    and the backend still gets the body."""
    s, be = start(sluice, recorder, SEEN, inspect={"budget": ROOMY})
    r = H.http_request(s.port, "POST", "/post", headers=[("Content-Type", "text/plain")],
                       body=b"hello body")
    assert r.status == 200
    q = one_req(be, "/post")
    t = seen(q)
    assert t["method"] == "POST" and t["query"] == "" and t["args"] == []
    assert t["body_is_nil"] is True
    assert q.body == b"hello body"
    assert t["headers"] == [["Host", "test.local"], ["Content-Type", "text/plain"],
                            ["Content-Length", "10"]]


def test_id_numbers_requests_and_connections(sluice, recorder):
    """req:id() is w<worker>-c<connection>-r<request>: r counts requests on
    one connection from 1, a new connection has a new c."""
    s, be = start(sluice, recorder, SEEN, inspect={"budget": ROOMY})
    ids = []
    with H.Client(s.port) as c:
        for i in range(3):
            assert c.request("GET", "/id%d" % i).status == 200
    with H.Client(s.port) as c:
        assert c.request("GET", "/id3").status == 200
    for i in range(4):
        ids.append(seen(one_req(be, "/id%d" % i))["id"])
    m = [re.fullmatch(r"w0-c(\d+)-r(\d+)", x) for x in ids]
    assert all(m), ids
    conns = [int(x.group(1)) for x in m]
    nums = [int(x.group(2)) for x in m]
    assert nums == [1, 2, 3, 1], ids
    assert conns[0] == conns[1] == conns[2] != conns[3], ids


def test_kept_req_from_earlier_call_raises(sluice, recorder):
    """docs: a req kept from an earlier call raises when used. The first
    request stores its req in sluice.worker_state; the second calls a method on
    it inside pcall and reports whether that raised."""
    s, be = start(sluice, recorder)
    assert ev(s, "sluice.worker_state.kept = req", path="/keep").status == 200
    code = ("local ok, err = pcall(function() return sluice.worker_state.kept:path() end) "
            "req:set_header('X-Kept', ok and ('no error: ' .. tostring(err)) or 'raised')")
    assert ev(s, code, path="/use").status == 200
    assert one_req(be, "/use").header_all("x-kept") == ["raised"]


def test_req_and_resp_outside_their_phase(sluice, recorder):
    """log-only methods raise in inspect(); a resp kept from
    inspect_response() raises in a later inspect()."""
    s, be = start(sluice, recorder)
    code = ("local a = pcall(req.status, req) local b = pcall(req.decision, req) "
            "local c = pcall(req.inspect_us, req) "
            "req:set_header('X-R', tostring(a) .. tostring(b) .. tostring(c))")
    assert ev(s, code, path="/logonly").status == 200
    assert one_req(be, "/logonly").header_all("x-r") == ["falsefalsefalse"]
    assert ev(s, None, resp="sluice.worker_state.kresp = resp", path="/kr").status == 200
    code = ("local ok = pcall(function() return sluice.worker_state.kresp:status() end) "
            "req:set_header('X-R', tostring(ok))")
    assert ev(s, code, path="/kr2").status == 200
    assert one_req(be, "/kr2").header_all("x-r") == ["false"]


TLS_SCRIPT = """\
function inspect(req)
  local function s(v) return v == nil and "<nil>" or tostring(v) end
  req:set_header("X-Tls", table.concat({s(req:tls()), s(req:tls_version()), s(req:tls_cipher()),
    s(req:sni()), s(req:client_cert_subject())}, "|"))
end
"""


@pytest.mark.parametrize("version", ["TLSv1.3", "TLSv1.2"])
def test_reads_tls_facts(sluice, recorder, tmp_path, id_pki, version):
    """tls(), tls_version(), tls_cipher() (the standard name), sni(),
    client_cert_subject() for a verified client certificate, nil for an
    unverified one and without one."""
    import ssl
    name = write_script(tmp_path, "tls.lua", TLS_SCRIPT)
    tls = {"certificates": [id_pki.ecdsa.entry()], "client_auth": "optional",
           "client_ca": id_pki.client_ca.cert}
    s, be = start(sluice, recorder, name, listener={"tls": tls})
    tv = ssl.TLSVersion.TLSv1_3 if version == "TLSv1.3" else ssl.TLSVersion.TLSv1_2
    cases = [("/verified", id_pki.client, "CN=client1,O=Sluice Test"),
             ("/rogue", id_pki.rogue, "<nil>"), ("/nocert", None, "<nil>")]
    for path, cert, subject in cases:
        ctx = P.cctx(cert=cert, min_v=tv, max_v=tv)
        if version == "TLSv1.2":
            ctx.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")
        with P.TlsClient(s.port, ctx, sni="a.test") as c:
            assert c.request("GET", path).status == 200
            cipher = c.sock.cipher()[0]
        got = one_req(be, path).header("x-tls").split("|")
        assert got[:2] + got[3:] == ["true", version, "a.test", subject], (path, got)
        if version == "TLSv1.3":
            assert got[2] == cipher, got     # TLS 1.3 names are the standard ones
        else:
            assert got[2] in ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"), got
    # no SNI
    with P.TlsClient(s.port, P.cctx(min_v=tv, max_v=tv), sni=None) as c:
        assert c.request("GET", "/nosni").status == 200
    assert one_req(be, "/nosni").header("x-tls").split("|")[3] == "<nil>"


def test_tls_cipher_is_the_standard_name(sluice, recorder, tmp_path, id_pki):
    """docs: req:tls_cipher() is the cipher's standard (RFC/IANA) name; on
    TLS 1.2 that differs from OpenSSL's: TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    not ECDHE-ECDSA-AES128-GCM-SHA256."""
    import ssl
    name = write_script(tmp_path, "tls.lua", TLS_SCRIPT)
    s, be = start(sluice, recorder, name, listener={"tls": {"certificates": [id_pki.ecdsa.entry()]}})
    ctx = P.cctx(min_v=ssl.TLSVersion.TLSv1_2, max_v=ssl.TLSVersion.TLSv1_2)
    ctx.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")
    with P.TlsClient(s.port, ctx, sni="a.test") as c:
        assert c.request("GET", "/c12").status == 200
    assert one_req(be, "/c12").header("x-tls").split("|")[2] == "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"


def test_sluice_primitives(sluice, recorder):
    """The sluice module's primitives as documented (regex flags, find,
    match, multi first/scan/literal, cidrs with merging and IPv4-mapped
    addresses, transform steps, shorthands, clocks)."""
    s, be = start(sluice, recorder, os.path.join(FIX, "primitives.lua"), inspect={"budget": ROOMY})
    assert H.http_request(s.port, "GET", "/prim").status == 200
    got = dict(kv.split("=", 1) for kv in one_req(be, "/prim").header("x-prim").split(";"))
    want = {"test": "true", "find": "3,5", "find_init": "4", "match": "ABBc,BB,c",
            "match2": "ab,b,nil", "nomatch": "nil", "multiline": "true", "dotall": "true",
            "nodotall": "false", "badre": "true", "m_test": "true", "m_none": "false",
            "m_first": "42", "m_first_nil": "nil", "m_scan": "3:1,7,42", "m_scan_empty": "0:0",
            "m_lit": "false", "m_bad": "true", "c_count": "3", "c_in": "true", "c_mapped": "true",
            "c_out": "false", "c_v6": "true", "c_v6out": "false", "tr": "<script>+a b",
            "tr_uni": "< x", "html": '<a> AB &"', "b64": "hello", "path": "/a/b/d", "rmws": "abc",
            "trim": "a b", "nulls": "ab", "lower": "mixed", "urld": "a b+c", "tr_bad": "true",
            "now": "true", "time": "true", "worker": "0"}
    diff = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
    assert not diff, "primitive results (got, want): %r" % diff


def test_json_access_log_fields(sluice, recorder):
    s, be = start(sluice, recorder, access_log_format="json")
    assert ev(s, "req:tag('j1') req:tag('j2') req:deny(403)", path="/j").status == 403
    assert ev(s, None, path="/k").status == 200
    H.wait_for(lambda: len(s.access_json()) >= 2, 3, what="2 JSON access log lines")
    ents = {e["target"] if "target" in e else e.get("uri"): e for e in s.access_json()}
    j, k = ents["/j"], ents["/k"]
    assert (j["inspect"], j["tags"], j["status"]) == ("deny", "j1,j2", 403), j
    assert isinstance(j["inspect_us"], int) and j["inspect_us"] >= 0, j
    assert k["inspect"] == "allow" and "tags" not in k, k
    assert s.admin_post("/inspect/off").status == 200
    assert ev(s, None, path="/l").status == 200
    H.wait_for(lambda: len(s.access_json()) >= 3, 3, what="3 JSON access log lines")
    l = [e for e in s.access_json() if e.get("target", e.get("uri")) == "/l"][0]
    assert (l["inspect"], l["inspect_us"]) == ("off", None), l


# ==========================================================================
# 2. actions

def test_deny_default_and_custom(sluice, recorder):
    s, be = start(sluice, recorder)
    r = ev(s, "req:deny()", path="/d1")
    assert r.status == 403, r
    assert r.header("content-type") == "text/plain"
    assert r.body and b"403" in r.body, r
    r = ev(s, "req:deny(451, 'custom \\0 body')", path="/d2")
    assert (r.status, r.body) == (451, b"custom \x00 body"), r
    assert r.header("content-length") == str(len(r.body))
    r = ev(s, "req:deny(599)", path="/d3")
    assert r.status == 599 and b"599" in r.body, r
    r = ev(s, "req:deny(400, 'x')", path="/d4", method="HEAD")
    assert (r.status, r.body) == (400, b""), r
    assert r.header("content-length") == "1"
    assert be.all_requests() == []
    e = access(s, "/d2")
    assert (e["status"], e["inspect"], e["server"], e["reason"]) == ("451", "deny", "-", "inspect_denied"), e
    assert re.fullmatch(r"\d+", e["inspect_us"]), e


def test_deny_explicit_empty_body(sluice, recorder):
    """deny(status, "") gives an empty body: the default text page is for
    when no body is given (docs: "with body (default: a short text page)")."""
    s, be = start(sluice, recorder)
    r = ev(s, "req:deny(403, '')", path="/empty")
    assert (r.status, r.body, r.header("content-length")) == (403, b"", "0"), r


@pytest.mark.parametrize("on_error", ["allow", "deny"])
@pytest.mark.parametrize("code", ["req:deny(399)", "req:deny(600)", "req:deny(200, 'x')",
                                  "req:deny('nope')"])
def test_deny_bad_status_is_a_script_error(sluice, recorder, code, on_error):
    s, be = start(sluice, recorder, inspect={"on_error": on_error})
    off = err_offset(s)
    r = ev(s, code, path="/bad")
    if on_error == "allow":
        assert r.status == 200, r
        assert len(reqs_to(be, "/bad")) == 1
    else:
        assert r.status == 500, r
        assert reqs_to(be, "/bad") == []
    e = access(s, "/bad")
    assert e["inspect"] == "error", e
    s.wait_error_log(r"inspect\(\) failed for 127\.0\.0\.1:\d+ GET /bad: eval:1: ", start=off)


def test_redirect(sluice, recorder):
    s, be = start(sluice, recorder)
    r = ev(s, "req:redirect('https://example.com/x?y=1')", path="/r0")
    assert (r.status, r.header("location")) == (302, "https://example.com/x?y=1"), r
    for st in (301, 302, 303, 307, 308):
        r = ev(s, "req:redirect('/to%d', %d)" % (st, st), path="/r%d" % st)
        assert (r.status, r.header_all("location")) == (st, ["/to%d" % st]), r
    assert be.all_requests() == []
    e = access(s, "/r301")
    assert (e["status"], e["inspect"]) == ("301", "redirect"), e
    # bad ones are script errors (on_error allow: forwarded)
    bad = ["req:redirect('/x', 300)", "req:redirect('/x', 200)", "req:redirect('/x', 304)",
           "req:redirect('/x', 404)", "req:redirect('/x\\r\\nSet-Cookie: a=1')",
           "req:redirect('/x\\nY: z')", "req:redirect('')", "req:redirect()"]
    for i, code in enumerate(bad):
        r = ev(s, code, path="/bad%d" % i)
        assert r.status == 200 and r.header("location") is None, (code, r)
        assert access(s, "/bad%d" % i)["inspect"] == "error", code
    assert len(be.all_requests()) == len(bad)


def test_first_deny_or_redirect_wins(sluice, recorder):
    s, be = start(sluice, recorder)
    r = ev(s, "req:deny(451, 'first') req:deny(403, 'second') req:redirect('/x')", path="/w1")
    assert (r.status, r.body) == (451, b"first"), r
    r = ev(s, "req:redirect('/first', 307) req:deny(403) req:redirect('/second')", path="/w2")
    assert (r.status, r.header("location")) == (307, "/first"), r
    assert be.all_requests() == []


def test_header_edits_reach_backend_exactly(sluice, recorder):
    """set_header replaces every copy by one, add_header appends after the
    others, remove_header removes every copy (names any case); later edits
    of the same name build on earlier ones; the hook's headers come after
    the client's and before sluice's identity headers."""
    s, be = start(sluice, recorder)
    client = [("X-Dup", "1"), ("x-dup", "2"), ("X-Keep", "k"), ("X-Gone", "g1"), ("x-GONE", "g2")]
    code = ("req:set_header('X-DUP', 'three') req:add_header('X-Add', 'a1') req:add_header('x-add', 'a2') "
            "req:remove_header('x-gone') req:add_header('X-Keep', 'k2') "
            "req:add_header('X-Tmp', 't') req:remove_header('x-tmp') "
            "req:set_header('X-Set', 's1') req:set_header('x-set', 's2')")
    assert ev(s, code, path="/edit", headers=client).status == 200
    q = one_req(be, "/edit")
    assert q.header_all("x-dup") == ["three"]
    assert q.header_all("x-add") == ["a1", "a2"]
    assert q.header_all("x-gone") == []
    assert q.header_all("x-keep") == ["k", "k2"]
    assert q.header_all("x-tmp") == []
    assert q.header_all("x-set") == ["s2"]
    names = q.names()
    # the hook's lines are written as given, after the client's, before identity
    assert b"\r\nX-Add: a1\r\nx-add: a2\r\n" in q.head, q.head
    assert names.index("x-keep") < names.index("x-dup") < names.index("x-forwarded-for"), names
    assert names.index("x-add") < names.index("x-forwarded-for"), names
    # add to a name the client did not send; set of a name the client did not send
    assert ev(s, "req:add_header('X-New', 'n') req:set_header('X-Other', 'o')", path="/edit2").status == 200
    q = one_req(be, "/edit2")
    assert (q.header_all("x-new"), q.header_all("x-other")) == (["n"], ["o"])
    # a value may hold anything but CR, LF, NUL (tabs, UTF-8, quotes)
    assert ev(s, "req:set_header('X-V', 'a\\tb \\195\\169 \"q\"')", path="/edit3").status == 200
    assert one_req(be, "/edit3").header_all("x-v") == ["a\tb \xc3\xa9 \"q\""]


FORBIDDEN = ["Host", "host", "Content-Length", "CONTENT-LENGTH", "Transfer-Encoding", "Connection",
             "Upgrade", "X-Forwarded-For", "x-forwarded-proto", "X-Forwarded-Host", "Forwarded",
             "WL-Proxy-Client-IP", "wl-proxy-ssl", "X_Forwarded_For", "WL_Proxy_Client_IP"]


@pytest.mark.parametrize("op", ["set", "add", "remove"])
def test_forbidden_header_edits_raise(sluice, recorder, op):
    """Every edit of a header sluice owns raises; the request gets on_error
    (allow here), and no edit of that call is applied (X-Before made just
    before is not at the backend)."""
    s, be = start(sluice, recorder)
    for i, name in enumerate(FORBIDDEN):
        call = ("req:remove_header('%s')" % name if op == "remove"
                else "req:%s_header('%s', 'forged')" % (op, name))
        off = err_offset(s)
        r = ev(s, "req:set_header('X-Before', 'b') " + call, path="/f%d" % i,
               headers=[("X-Forwarded-For", "6.6.6.6")])
        assert r.status == 200, (name, r)
        q = one_req(be, "/f%d" % i)
        assert q.header_all("x-before") == [], (name, q)
        assert q.header_all("host") == ["test.local"], (name, q)
        assert q.header_all("x-forwarded-for") == ["127.0.0.1"], (name, q)
        assert b"forged" not in head_without_lua(q), (name, q.head)
        assert access(s, "/f%d" % i)["inspect"] == "error"
        if i < 8:   # the error log takes 10 script errors a second per worker
            s.wait_error_log(r"GET /f%d: eval:1: header %s cannot be edited" % (i, re.escape(name)), start=off)
    m = wait_metric(s, lambda m: m.n("sluice_inspect_error_total", LI) == len(FORBIDDEN))
    assert outcome_counts(m) == (0, 0, len(FORBIDDEN))


INJECTIONS = [
    "req:set_header('X-A', 'v\\r\\nX-Evil: 1')",
    "req:add_header('X-A', 'v\\nX-Evil: 1')",
    "req:set_header('X-A', 'v\\rX-Evil: 1')",
    "req:set_header('X-A', 'v\\0w')",
    "req:set_header('X-A\\r\\nX-Evil', 'v')",
    "req:set_header('Bad Name', 'v')",
    "req:add_header('X:Y', 'v')",
    "req:set_header('', 'v')",
    "req:remove_header('X A')",
    "req:set_header('X-\\195\\169', 'v')",
    "req:set_header('X-A', string.rep('v', 20000))",
    "req:set_header('X-A')",
]


def test_header_injection_attempts_raise(sluice, recorder):
    s, be = start(sluice, recorder)
    for i, code in enumerate(INJECTIONS):
        r = ev(s, code, path="/inj%d" % i)
        assert r.status == 200, (code, r)
        q = one_req(be, "/inj%d" % i)
        assert b"Evil" not in head_without_lua(q) and q.header_all("x-a") == [], (code, q.head)
        assert access(s, "/inj%d" % i)["inspect"] == "error", code


def test_set_backend(sluice, recorder):
    """set_backend sends the request to the other backend (req:backend()
    says so); an unknown backend name is a script error."""
    alt = recorder()
    s, be = start(sluice, recorder, alt=alt)
    code = ("local before = req:backend() req:set_backend('alt') "
            "req:set_header('X-B', before .. '>' .. req:backend())")
    assert ev(s, code, path="/to-alt").status == 200
    q = one_req(alt, "/to-alt")
    assert q.header_all("x-b") == ["app>alt"]
    assert reqs_to(be, "/to-alt") == []
    assert access(s, "/to-alt")["server"] == "alt/a1"
    assert ev(s, "req:set_backend('alt') req:set_backend('app')", path="/back").status == 200
    assert len(reqs_to(be, "/back")) == 1 and reqs_to(alt, "/back") == []
    off = err_offset(s)
    assert ev(s, "req:set_backend('nope')", path="/nope").status == 200
    assert len(reqs_to(be, "/nope")) == 1
    assert access(s, "/nope")["inspect"] == "error"
    s.wait_error_log(r"GET /nope: eval:1: .*nope", start=off)
    # an error after set_backend: the listener's backend, not the chosen one
    assert ev(s, "req:set_backend('alt') error('late')", path="/late").status == 200
    assert len(reqs_to(be, "/late")) == 1 and reqs_to(alt, "/late") == []


def test_tags_in_access_log_and_metrics(sluice, recorder):
    s, be = start(sluice, recorder)
    assert ev(s, "req:tag('rule-a') req:tag('sqli-942100')", path="/t1").status == 200
    assert ev(s, "req:tag('rule-a') req:deny()", path="/t2").status == 403
    assert ev(s, "req:tag('rule-b') error('x')", path="/t3").status == 200
    assert ev(s, "for i = 1, 10 do req:tag('m' .. i) end", path="/t4").status == 200
    assert ev(s, "req:tag('rule-c') req:redirect('/x')", path="/t5").status == 302
    assert access(s, "/t1")["tags"] == "rule-a,sqli-942100"
    assert access(s, "/t2")["tags"] == "rule-a"
    assert access(s, "/t3")["tags"] == "rule-b"
    assert access(s, "/t4")["tags"] == ",".join("m%d" % i for i in range(1, 9))
    assert access(s, "/t5")["tags"] == "rule-c"
    ev(s, "req:deny()", path="/t6")
    assert access(s, "/t6")["tags"] is None
    want = {("rule-a", "allow"): 1, ("rule-a", "deny"): 1, ("sqli-942100", "allow"): 1,
            ("rule-b", "error"): 1, ("rule-c", "deny"): 1}
    for i in range(1, 9):
        want[("m%d" % i, "allow")] = 1

    def tags(m):
        out = {}
        for (name, lbls), v in m.samples.items():
            if name == "sluice_inspect_tag_total":
                d = dict(lbls)
                out[(d["tag"], d["outcome"])] = int(v)
        return out
    m = wait_metric(s, lambda m: tags(m) == want, what="tag counters %r" % want)
    assert m.get("sluice_inspect_tag_total", {"tag": "m9", "outcome": "allow"}) is None
    # bad tags raise
    for i, code in enumerate(["req:tag('a,b')", "req:tag('')", "req:tag('a b')",
                              "req:tag(string.rep('t', 65))", "req:tag('a\"b')"]):
        assert ev(s, code + " req:deny()", path="/bt%d" % i).status == 200, code
        assert access(s, "/bt%d" % i)["inspect"] == "error", code
    assert ev(s, "req:tag(string.rep('t', 64)) req:tag('a-b_c.d')", path="/gt").status == 200
    assert access(s, "/gt")["tags"] == "t" * 64 + ",a-b_c.d"


def test_tag_with_colon(sluice, recorder):
    """A tag may use letters, digits and -_.: (the message of the error for
    a bad tag says so); "rule:942100" is a valid tag."""
    s, be = start(sluice, recorder)
    assert ev(s, "req:tag('crs:942100') req:tag('a-b_c.d:e')", path="/colon").status == 200
    e = access(s, "/colon")
    assert (e["inspect"], e["tags"]) == ("allow", "crs:942100,a-b_c.d:e"), e


# ==========================================================================
# 3. keepalive after a local answer

def test_deny_without_body_keeps_connection(sluice, recorder):
    s, be = start(sluice, recorder)
    with H.Client(s.port) as c:
        r = ev(s, "req:deny(403, 'no')", path="/k1", client=c)
        assert (r.status, r.body) == (403, b"no"), r
        assert not r.has_token("connection", "close"), r
        r = ev(s, "req:redirect('/elsewhere')", path="/k2", client=c)
        assert r.status == 302 and not r.has_token("connection", "close"), r
        r = ev(s, None, path="/k3", client=c)
        assert r.status == 200, r
        r = ev(s, "req:deny(404)", path="/k4", client=c, method="HEAD")
        assert r.status == 404 and not r.has_token("connection", "close"), r
        r = ev(s, None, path="/k5", client=c)
        assert r.status == 200, r
    assert [q.target for q in be.all_requests()] == ["/k3", "/k5"]
    e = access(s, "/k1")
    assert (e["status"], e["inspect"], e["reason"], e["server"]) == ("403", "deny", "inspect_denied", "-"), e


def test_deny_http10_keepalive(sluice, recorder):
    """An HTTP/1.0 client that asked for keep-alive keeps its connection
    after a deny (the answer says Connection: keep-alive)."""
    s, be = start(sluice, recorder)
    with H.Client(s.port) as c:
        c.send(H.build_request("GET", "/h10", [("Connection", "keep-alive"), ("X-Lua", "req:deny(403, 'x')")],
                               version="HTTP/1.0"))
        r = c.read_response()
        assert (r.status, r.body) == (403, b"x"), r
        assert r.has_token("connection", "keep-alive"), r
        c.send(H.build_request("GET", "/h10b", [("Connection", "keep-alive")], version="HTTP/1.0"))
        assert c.read_response().status == 200
    assert [q.target for q in be.all_requests()] == ["/h10b"]


def test_deny_with_unread_body_closes_connection(sluice, recorder):
    """The hook answers at the head; a body not yet read makes the
    connection unusable: Connection: close, then EOF, nothing forwarded."""
    s, be = start(sluice, recorder)
    with H.Client(s.port) as c:
        c.send(H.build_request("POST", "/ub", [("X-Lua", "req:deny(403, 'go away')"),
                                              ("Content-Length", "100000")]) + b"y" * 1000)
        r = c.read_response()
        assert (r.status, r.body) == (403, b"go away"), r
        assert r.has_token("connection", "close"), r
        assert c.is_closed(3.0)
    assert ev(s, None, path="/after").status == 200
    assert [q.target for q in be.all_requests()] == ["/after"]


def test_pipelined_middle_request_denied(sluice, recorder):
    """Pipelined: allowed, denied, allowed (with a body), then one denied
    at its head with a body behind it (which closes the connection, so the
    last request is never answered). Responses come in order; the backend
    sees only the allowed ones."""
    s, be = start(sluice, recorder)
    with H.Client(s.port) as c:
        c.send(H.build_request("GET", "/p1") +
               H.build_request("GET", "/p2", [("X-Lua", "req:deny(429, 'slow down')")]) +
               H.build_request("POST", "/p3", body=b"three") +
               H.build_request("POST", "/p4", [("X-Lua", "req:deny(403, 'bodied')")], body=b"abc") +
               H.build_request("GET", "/p5"))
        got = [c.read_response() for _ in range(4)]
        assert c.is_closed(3.0)
    assert [(r.status, r.body[:9]) for r in got] == [(200, b"conn=0 re"), (429, b"slow down"),
                                                    (200, b"conn=0 re"), (403, b"bodied")], got
    assert [r.has_token("connection", "close") for r in got] == [False, False, False, True], got
    assert [q.target for q in be.all_requests()] == ["/p1", "/p3"]
    assert one_req(be, "/p3").body == b"three"


# ==========================================================================
# 4. response and log phases

def test_inspect_response_edits_headers_client_sees(sluice, recorder):
    s, be = start(sluice, recorder)
    code = ("resp:set_header('X-Status', tostring(resp:status())) "
            "resp:set_header('X-Seen-Conn', resp:header('x-conn') .. '/' .. resp:header_count('X-CONN')) "
            "resp:remove_header('X-Conn') resp:add_header('X-Added', '1') resp:add_header('X-Added', '2') "
            "resp:set_header('X-Path', req:path()) "
            "local n = 0 for k, v in resp:headers() do n = n + 1 end resp:set_header('X-N', tostring(n))")
    r = ev(s, None, resp=code, path="/resp")
    assert r.status == 200, r
    assert r.header("x-conn") is None, r
    assert r.header_all("x-status") == ["200"]
    assert r.header_all("x-seen-conn") == ["0/1"]
    assert r.header_all("x-added") == ["1", "2"]
    assert r.header_all("x-path") == ["/resp"]
    assert r.header_all("x-n") == ["2"]   # X-Conn and Content-Length
    assert r.body == b"conn=0 req=0"
    # inspect_response does not run for a request the hook answered
    r = ev(s, "req:deny()", resp="resp:set_header('X-Resp', 'ran')", path="/denied")
    assert r.status == 403 and r.header("x-resp") is None, r


def chunked_handler(conn):
    """Answer every request with a chunked 200 carrying X-Backend headers."""
    while True:
        q = conn.read_request()
        body = b"chunked body for " + q.target.encode()
        conn.send(b"HTTP/1.1 200 OK\r\nX-Backend: a\r\nX-Backend: b\r\nTransfer-Encoding: chunked\r\n\r\n"
                  + H.chunk_encode(body, chunk=5))


def test_inspect_response_on_chunked_response(sluice, recorder):
    """Edits of a chunked response's head keep its framing: the client gets
    the same de-chunked body, and the connection goes on."""
    be = recorder(chunked_handler)
    s = sluice(config(be, EVAL))
    code = ("resp:set_header('X-Backend', resp:header('x-backend') .. resp:header_count('X-Backend')) "
            "resp:add_header('X-Te', resp:header('transfer-encoding'))")
    with H.Client(s.port) as c:
        for i in range(2):
            r = ev(s, None, resp=code, path="/ch%d" % i, client=c)
            assert r.status == 200 and r.chunked, r
            assert r.body == b"chunked body for /ch%d" % i, r
            assert r.header_all("x-backend") == ["a2"] and r.header_all("x-te") == ["chunked"], r


@pytest.mark.parametrize("code", [
    "resp:set_header('Content-Length', '1')",
    "resp:remove_header('content-length')",
    "resp:set_header('Transfer-Encoding', 'chunked')",
    "resp:set_header('Connection', 'close')",
    "resp:set_header('Upgrade', 'x')",
    "resp:set_header('X-A', 'a\\r\\nb')",
    "error('in response')",
    "while true do end",
    "req:deny(403)",
    "req:set_header('X-Q', 'q')",
])
def test_inspect_response_errors_do_not_break_the_response(sluice, recorder, code):
    """An error in inspect_response(): the response goes out unchanged (edits
    made before the error are dropped), counted as an inspection error, and
    the connection keeps working."""
    s, be = start(sluice, recorder)
    off = err_offset(s)
    with H.Client(s.port) as c:
        r = ev(s, None, resp="resp:set_header('X-Early', '1') " + code, path="/re", client=c)
        assert (r.status, r.body) == (200, b"conn=0 req=0"), r
        assert r.header("x-early") is None and r.header_all("x-conn") == ["0"], r
        assert r.header_all("content-length") == ["12"], r
        assert ev(s, None, path="/next", client=c).status == 200
    s.wait_error_log(r"inspect_response\(\) failed for 127\.0\.0\.1:\d+ GET /re: ", start=off)
    assert access(s, "/re")["inspect"] == "allow"
    m = wait_metric(s, lambda m: m.n("sluice_inspect_error_total", LI) == 1)
    assert outcome_counts(m) == (2, 0, 1)


LOG_SCRIPT = """\
function inspect(req)
  if req:arg("deny") then req:tag("t1") req:tag("t2") req:deny(451) end
  if req:arg("boom") then error("boom") end
end

local function try(req, name, ...)
  local ok = pcall(req[name], req, ...)
  return name .. "=" .. (ok and "ok" or "raised")
end

function log(req)
  sluice.log(string.format("LOG path=%s status=%s decision=%s tags=[%s] inspect_us=%s total_us=%s id=%s",
    req:path(), tostring(req:status()), req:decision(), req:tags(), tostring(req:inspect_us()),
    tostring(req:total_us()), req:id()))
  sluice.log("ACTIONS " .. table.concat({
    try(req, "deny", 403), try(req, "redirect", "/x"), try(req, "set_header", "X-A", "1"),
    try(req, "add_header", "X-A", "1"), try(req, "remove_header", "X-A"),
    try(req, "set_backend", "app"), try(req, "tag", "late")}, " "))
end
"""


def test_log_phase_sees_outcome_and_cannot_act(sluice, recorder, tmp_path):
    name = write_script(tmp_path, "logphase.lua", LOG_SCRIPT)
    s, be = start(sluice, recorder, name)
    with H.Client(s.port) as c:
        assert c.request("GET", "/ok").status == 200
        assert c.request("GET", "/no?deny=1").status == 451
        assert c.request("GET", "/err?boom=1").status == 200
    rx = (r"\[warn\] worker 0: logphase\.lua: LOG path=%s status=(\S+) decision=(\S+) tags=\[(.*)\] "
          r"inspect_us=(\d+) total_us=(\d+) id=(\S+)$")
    for path, target, status, decision, tags in (("/ok", "/ok", "200", "allow", ""),
                                                 ("/no", "/no?deny=1", "451", "deny", "t1,t2"),
                                                 ("/err", "/err?boom=1", "200", "error", "")):
        m = s.wait_error_log(rx % re.escape(path))
        assert (m.group(1), m.group(2), m.group(3)) == (status, decision, tags), m.group(0)
        e = access(s, target)
        assert m.group(4) == e["inspect_us"], (m.group(0), e)
        assert int(m.group(5)) >= int(e["total_us"]) > 0, (m.group(0), e)
    acts = re.findall(r"ACTIONS (.*)$", H.read_text(s.error_log), re.M)
    assert acts == ["deny=raised redirect=raised set_header=raised add_header=raised "
                    "remove_header=raised set_backend=raised tag=raised"] * 3, acts
    # the deny in log() changed nothing: the access log is written first, status stays
    assert access(s, "/ok")["status"] == "200"


def test_log_phase_error_counted_response_unaffected(sluice, recorder):
    s, be = start(sluice, recorder)
    off = err_offset(s)
    assert ev(s, None, log="error('in log')", path="/le").status == 200
    s.wait_error_log(r"log\(\) failed for 127\.0\.0\.1:\d+ GET /le: eval:1: in log", start=off)
    m = wait_metric(s, lambda m: m.n("sluice_inspect_error_total", LI) == 1)
    assert outcome_counts(m) == (1, 0, 1)
    assert ev(s, None, path="/after").status == 200


# ==========================================================================
# 5. the guard

GUARD_BUDGET = {"instructions": "100000", "time": "0"}


def guard_config(be, mem=None):
    top = {"lua_memory_max": mem} if mem else None
    return config(be, EVAL, inspect={"on_error": "allow", "budget": GUARD_BUDGET}, top=top,
                  extra_listeners=[("strict", {"script": EVAL, "on_error": "deny",
                                               "budget": GUARD_BUDGET}),
                                   ("timed", {"script": EVAL, "on_error": "allow",
                                              "budget": {"instructions": "0", "time": "20ms"}})])


GUARD_CASES = {
    "loop": ("while true do end", r"instruction budget exceeded"),
    "pcall-loop": ("while true do pcall(function() while true do end end) end",
                   r"instruction budget exceeded"),
    "pcall-catch-then-act": ("local ok = pcall(function() while true do end end) req:deny(403)",
                             r"instruction budget exceeded"),
    "xpcall-loop": ("xpcall(function() while true do end end, function() while true do end end) req:deny(403)",
                    r"instruction budget exceeded"),
    "xpcall-handler-loops": ("xpcall(error, function() while true do end end) req:deny(403)",
                             r"instruction budget exceeded"),
    "xpcall-handler-returns": ("xpcall(function() while true do end end, function(m) return m end) req:deny(403)",
                               r"instruction budget exceeded"),
    "recursion": ("local function f(n) return f(n + 1) + 1 end f(1)",
                  r"instruction budget exceeded|stack overflow|memory"),
    "error-string": ("error('kaput ' .. req:path())", r"eval:1: kaput /guard$"),
    "error-table": ("error({code = 1})", r"\S"),
    "error-nil": ("error()", r"\S"),
    "string-rep-huge": ("local s = string.rep('x', 1 << 40)", r"memory|too large|overflow"),
}


@pytest.mark.parametrize("case", sorted(GUARD_CASES))
def test_guard_stops_call_worker_survives(sluice, recorder, case):
    """The call is stopped (pcall cannot catch it), logged with its reason,
    counted; on_error allow forwards, on_error deny answers 500 and forwards
    nothing; the same worker serves the next request."""
    code, why = GUARD_CASES[case]
    be = recorder()
    s = sluice(guard_config(be))
    pids = s.worker_pids()
    for listener, want in (("http", 200), ("strict", 500)):
        off = err_offset(s)
        port = port_of(s, listener)
        t0 = time.monotonic()
        try:
            r = ev(s, code, path="/guard", port=port, timeout=3.0)
        except socket.timeout:
            pytest.fail("listener %s: no answer within 3 s: the call was not stopped (worker stuck)" % listener)
        assert r.status == want, (listener, r)
        assert time.monotonic() - t0 < 3
        m = s.wait_error_log(r"inspection: listener %s: inspect\(\) failed for 127\.0\.0\.1:\d+ GET /guard: (.*)$"
                             % listener, start=off)
        assert re.search(why, m.group(1)), m.group(0)
        # the next request on the same listener is served normally, by the same worker
        r = ev(s, None, path="/next-" + listener, port=port)
        assert r.status == 200, r
    assert len(reqs_to(be, "/guard")) == 1      # only the on_error: allow one
    assert s.worker_pids() == pids
    H.wait_for(lambda: len([e for e in s.access_entries() if e["target"] == "/guard"]) >= 2, 3,
               what="2 access log lines for /guard")
    ent = [e for e in s.access_entries() if e["target"] == "/guard"]
    assert sorted((e["status"], e["inspect"], e["reason"]) for e in ent) == \
        [("200", "error", "ok"), ("500", "error", "inspect_error")], ent
    m = wait_metric(s, lambda m: m.n("sluice_inspect_error_total", {"listener": "strict"}) == 1)
    assert outcome_counts(m) == (1, 0, 1)
    assert outcome_counts(m, {"listener": "strict"}) == (1, 0, 1)


def test_guard_time_budget(sluice, recorder):
    be = recorder()
    s = sluice(guard_config(be))
    port = port_of(s, "timed")
    off = err_offset(s)
    t0 = time.monotonic()
    r = ev(s, "while true do end", path="/slow", port=port)
    took = time.monotonic() - t0
    assert r.status == 200, r
    assert took < 2.0, took
    m = s.wait_error_log(r"listener timed: inspect\(\) failed for .* GET /slow: (.*)$", start=off)
    assert "time budget exceeded" in m.group(1), m.group(0)
    e = access(s, "/slow")
    assert e["inspect"] == "error" and 20000 <= int(e["inspect_us"]) < 1000000, e
    # a pcall loop is stopped by the time budget as well
    r = ev(s, "while true do pcall(function() while true do end end) end req:deny()", path="/slow2",
           port=port)
    assert r.status == 200
    m = s.wait_error_log(r"listener timed: inspect\(\) failed for .* GET /slow2: (.*)$", start=off)
    assert "time budget exceeded" in m.group(1), m.group(0)
    # the instruction listener says instructions
    r = ev(s, "while true do end", path="/count")
    m = s.wait_error_log(r"listener http: inspect\(\) failed for .* GET /count: (.*)$", start=off)
    assert "instruction budget exceeded" in m.group(1)
    assert ev(s, None, path="/fine", port=port).status == 200


def test_guard_memory_cap(sluice, recorder):
    """lua_memory_max 8m: an allocation loop fails with a memory error (also
    inside pcall), the state's garbage is collected, and the next calls
    (which allocate a little) work."""
    be = recorder()
    s = sluice(guard_config(be, mem="8m"))
    pids = s.worker_pids()
    grow = "local t = {} local i = 0 while true do i = i + 1 t[i] = string.rep('x', 65536) .. i end"
    for k in range(3):
        off = err_offset(s)
        r = ev(s, grow, path="/mem%d" % k)
        assert r.status == 200, r
        m = s.wait_error_log(r"inspect\(\) failed for .* GET /mem%d: (.*)$" % k, start=off)
        assert "memory" in m.group(1), m.group(0)
        r = ev(s, "local t = {} for i = 1, 16 do t[i] = string.rep('y', 65536) .. i end "
                  "req:set_header('X-Ok', tostring(#t))", path="/small%d" % k)
        assert r.status == 200
        assert one_req(be, "/small%d" % k).header_all("x-ok") == ["16"]
    off = err_offset(s)
    r = ev(s, "pcall(function() " + grow + " end) req:deny(403)", path="/mem-pcall", port=port_of(s, "strict"))
    assert r.status == 500, r
    m = s.wait_error_log(r"inspect\(\) failed for .* GET /mem-pcall: (.*)$", start=off)
    assert "memory" in m.group(1)
    assert s.worker_pids() == pids
    assert ev(s, None, path="/end").status == 200


REGEX_SCRIPT = """\
local re = sluice.regex("(a+)+$")
function inspect(req)
  if re:test(req:header("X-Subject") or "") then
    req:set_header("X-Matched", "yes")
  end
end
"""


@pytest.mark.parametrize("on_error", ["allow", "deny"])
def test_guard_catastrophic_regex(sluice, recorder, tmp_path, on_error):
    name = write_script(tmp_path, "regex.lua", REGEX_SCRIPT)
    s, be = start(sluice, recorder, name, inspect={"on_error": on_error})
    pids = s.worker_pids()
    r = H.http_request(s.port, "GET", "/ok", headers=[("X-Subject", "aaaa")])
    assert r.status == 200 and one_req(be, "/ok").header_all("x-matched") == ["yes"]
    off = err_offset(s)
    t0 = time.monotonic()
    r = H.http_request(s.port, "GET", "/evil", headers=[("X-Subject", "a" * 40 + "b")])
    assert time.monotonic() - t0 < 3
    assert r.status == (200 if on_error == "allow" else 500), r
    assert len(reqs_to(be, "/evil")) == (1 if on_error == "allow" else 0)
    if on_error == "allow":
        assert one_req(be, "/evil").header_all("x-matched") == []
    m = s.wait_error_log(r"inspect\(\) failed for .* GET /evil: (.*)$", start=off)
    assert re.search(r"limit", m.group(1)), m.group(0)
    assert H.http_request(s.port, "GET", "/after").status == 200
    assert s.worker_pids() == pids


ERR_SCRIPT = """\
-- an error raised two lines into a helper
local function helper(req)
  local kind = req:arg("kind")
  if kind == "str" then error("boom " .. req:path()) end
  if kind == "obj" then error({ "not", "a", "string" }) end
  if kind == "nil" then local t = nil; return t.field end
  if kind == "loop" then while true do end end
end
function inspect(req) helper(req) end
"""


def test_error_log_names_script_reason_and_line(sluice, recorder, tmp_path):
    """docs: the error log names the script, the reason and the Lua message
    with its line (script:line: message)."""
    name = write_script(tmp_path, "errs.lua", ERR_SCRIPT)
    s, be = start(sluice, recorder, name, inspect={"budget": {"instructions": "50000", "time": "0"}})
    off = err_offset(s)
    assert H.http_request(s.port, "GET", "/e?kind=str").status == 200
    m = s.wait_error_log(r"\[warn\] worker 0: inspection: listener http: inspect\(\) failed for "
                         r"127\.0\.0\.1:\d+ GET /e\?kind=str: (.*)$", start=off)
    assert m.group(1) == "errs.lua:4: boom /e", m.group(0)
    assert H.http_request(s.port, "GET", "/e?kind=nil").status == 200
    m = s.wait_error_log(r"GET /e\?kind=nil: (.*)$", start=off)
    assert m.group(1).startswith("errs.lua:6: attempt to index"), m.group(0)
    assert H.http_request(s.port, "GET", "/e?kind=obj").status == 200
    m = s.wait_error_log(r"GET /e\?kind=obj: (.*)$", start=off)
    assert m.group(1), m.group(0)
    assert H.http_request(s.port, "GET", "/e?kind=loop").status == 200
    m = s.wait_error_log(r"GET /e\?kind=loop: (.*)$", start=off)
    assert "instruction budget exceeded" in m.group(1)


def test_error_log_names_script_for_every_error_kind(sluice, recorder, tmp_path):
    """docs ("Errors"): the error log names the script, the reason and the
    Lua message with its line, for budget, time, memory and error alike."""
    name = write_script(tmp_path, "errs.lua", ERR_SCRIPT)
    s, be = start(sluice, recorder, name, inspect={"budget": {"instructions": "50000", "time": "0"}})
    off = err_offset(s)
    for kind in ("str", "obj", "loop"):
        assert H.http_request(s.port, "GET", "/e?kind=" + kind).status == 200
        s.wait_error_log(r"GET /e\?kind=%s: " % kind, start=off)
    lines = [l for l in errlog_since(s, off).splitlines() if "inspect() failed" in l]
    assert len(lines) == 3
    missing = [l for l in lines if "errs.lua" not in l]
    assert not missing, "error log lines that do not name the script: %r" % missing


# ==========================================================================
# 6. sandbox

def test_sandbox(sluice, recorder):
    s, be = start(sluice, recorder)
    names = ["io", "os", "debug", "package", "require", "dofile", "loadfile", "collectgarbage",
             "coroutine", "string.dump"]
    code = ("local out = {} for _, n in ipairs({%s}) do "
            "local v = _ENV for p in n:gmatch('[^.]+') do v = v and v[p] end "
            "out[#out + 1] = n .. '=' .. type(v) end "
            "req:set_header('X-Types', table.concat(out, ' '))") % ",".join("'%s'" % n for n in names)
    assert ev(s, code, path="/types").status == 200
    got = one_req(be, "/types").header("x-types")
    assert got == " ".join("%s=nil" % n for n in names), got
    # what is there
    present = ["string.format", "table.concat", "math.floor", "utf8.char", "pcall", "load",
               "setmetatable", "sluice.regex", "sluice.multi", "sluice.cidrs", "sluice.transform",
               "sluice.now", "sluice.time", "sluice.log", "sluice.shared", "sluice.worker_state",
               "sluice.worker"]
    code = ("local out = {} for _, n in ipairs({%s}) do "
            "local v = _ENV for p in n:gmatch('[^.]+') do v = v and v[p] end "
            "out[#out + 1] = type(v) end "
            "req:set_header('X-Types', table.concat(out, ' '))") % ",".join("'%s'" % n for n in present)
    assert ev(s, code, path="/present").status == 200
    assert "nil" not in one_req(be, "/present").header("x-types").split(), \
        list(zip(present, one_req(be, "/present").header("x-types").split()))
    # load: text works, binary refused
    code = ("local f = load('return 6 * 7') local g, err = load('\\27Lua\\84\\0\\25\\147\\13\\10\\26\\10') "
            "local h, err2 = load('\\27Lua', 'x', 'b') "
            "req:set_header('X-Load', tostring(f()) .. '|' .. tostring(g) .. '|' .. tostring(err) .. '|' .. tostring(h))")
    assert ev(s, code, path="/load").status == 200
    v = one_req(be, "/load").header("x-load")
    parts = v.split("|")
    assert parts[0] == "42" and parts[1] == "nil" and "binary" in parts[2] and parts[3] == "nil", v
    # the req metatable is out of reach
    code = ("local mt = getmetatable(req) local ok = pcall(setmetatable, req, {}) "
            "req:set_header('X-Mt', tostring(mt) .. ' ' .. tostring(ok) .. ' ' .. tostring(req))")
    assert ev(s, code, path="/mt").status == 200
    assert one_req(be, "/mt").header("x-mt") == "false false sluice.req"


def test_scripts_have_their_own_environments(sluice, recorder, tmp_path):
    """Two listeners, two scripts that both define inspect and the same
    global: each listener runs its own."""
    a = write_script(tmp_path, "a.lua", "who = 'a'\nfunction inspect(req) req:set_header('X-Who', who) end\n")
    b = write_script(tmp_path, "b.lua", "who = 'b'\nfunction inspect(req) req:set_header('X-Who', who) end\n")
    be = recorder()
    s = sluice(config(be, a, extra_listeners=[("second", {"script": b})]))
    assert H.http_request(s.port, "GET", "/a").status == 200
    assert H.http_request(port_of(s, "second"), "GET", "/b").status == 200
    assert one_req(be, "/a").header_all("x-who") == ["a"]
    assert one_req(be, "/b").header_all("x-who") == ["b"]


# ==========================================================================
# 7. shadow mode

def test_shadow_mode(sluice, recorder):
    alt = recorder()
    s, be = start(sluice, recorder, inspect={"mode": "shadow"}, alt=alt)
    off = err_offset(s)
    code = ("req:tag('sh-1') req:set_header('X-Added', '1') req:remove_header('X-Client') "
            "req:set_backend('alt') req:deny(451, 'no')")
    r = ev(s, code, path="/sh", headers=[("X-Client", "c")],
           resp="resp:set_header('X-Resp', '1') resp:remove_header('X-Conn')")
    assert r.status == 200 and r.body.startswith(b"conn="), r
    # response edits are not applied either
    assert r.header("x-resp") is None and r.header_all("x-conn") == ["0"], r
    q = one_req(be, "/sh")
    assert q.header_all("x-added") == [] and q.header_all("x-client") == ["c"], q
    assert reqs_to(alt, "/sh") == []
    e = access(s, "/sh")
    assert (e["status"], e["inspect"], e["tags"], e["server"]) == ("200", "would_deny", "sh-1", "app/s1"), e
    m = s.wait_error_log(r"\[info\] worker 0: inspection: listener http \(shadow\): would deny "
                         r"127\.0\.0\.1:\d+ GET /sh with 451, tags sh-1$", start=off)
    r = ev(s, "req:redirect('/x', 301)", path="/shr")
    assert r.status == 200 and r.header("location") is None, r
    assert access(s, "/shr")["inspect"] == "would_redirect"
    s.wait_error_log(r"\(shadow\): would redirect 127\.0\.0\.1:\d+ GET /shr with 301$", start=off)
    assert ev(s, None, path="/sha").status == 200
    assert access(s, "/sha")["inspect"] == "allow"
    # checks still apply in shadow mode: a forbidden edit is an error
    assert ev(s, "req:set_header('Host', 'x')", path="/she").status == 200
    assert access(s, "/she")["inspect"] == "error"
    m = wait_metric(s, lambda m: sum(outcome_counts(m)) == 4)
    assert outcome_counts(m) == (1, 2, 1)
    assert m.n("sluice_inspect_tag_total", {"tag": "sh-1", "outcome": "deny"}) == 1
    st = s.status()["listeners"][0]["inspect"]
    assert (st["mode"], st["allow"], st["deny"], st["error"]) == ("shadow", 1, 2, 1), st


# ==========================================================================
# 8. body inspection

def body_start(sluice, recorder, body, overflow=None, script=SEEN, **kw):
    ins = {"body": body, "budget": ROOMY}
    if overflow:
        ins["body_overflow"] = overflow
    return start(sluice, recorder, script, inspect=ins, **kw)


def test_body_content_length_exact_bytes(sluice, recorder):
    s, be = body_start(sluice, recorder, "16k")
    payload = bytes(range(256)) * 20   # 5120 bytes, every byte value
    r = H.http_request(s.port, "POST", "/cl", body=payload)
    assert r.status == 200, r
    q = one_req(be, "/cl")
    assert seen_body(q) == payload
    t = seen(q)
    assert (t["body_len"], t["body_truncated"], t["body_is_nil"]) == (len(payload), False, False)
    assert q.body == payload and q.header_all("content-length") == [str(len(payload))]
    # bodyless requests are not held and see an empty body
    r = H.http_request(s.port, "GET", "/nobody")
    assert r.status == 200
    t = seen(one_req(be, "/nobody"))
    assert t["body_truncated"] is False and t["body_len"] in (0, -1), t


def test_body_chunked_is_dechunked_and_forwarded_chunked(sluice, recorder):
    s, be = body_start(sluice, recorder, "16k")
    payload = H.pattern_bytes(6000, seed=3)
    wire = H.chunk_encode(payload, chunk=700, ext=b"name=val")
    with H.Client(s.port) as c:
        c.send(H.build_request("POST", "/chunked", [("Transfer-Encoding", "chunked")]) + wire)
        r = c.read_response()
        assert r.status == 200, r
        assert c.request("GET", "/after-chunked").status == 200
    q = one_req(be, "/chunked")
    assert seen_body(q) == payload
    assert seen(q)["body_truncated"] is False
    assert q.chunked and q.body == payload, q
    assert q.header_all("transfer-encoding") == ["chunked"] and q.header("content-length") is None
    assert one_req(be, "/after-chunked").body == b""


def test_body_chunked_sent_slowly(sluice, recorder):
    """Chunks arriving in separate packets are collected before the hook."""
    s, be = body_start(sluice, recorder, "16k")
    parts = [b"first-", b"second-", b"third"]
    with H.Client(s.port) as c:
        c.send(H.build_request("POST", "/slowchunks", [("Transfer-Encoding", "chunked")]))
        for p in parts:
            time.sleep(0.05)   # separate packets (not synchronisation)
            c.send(b"%x\r\n%s\r\n" % (len(p), p))
        c.send(b"0\r\n\r\n")
        assert c.read_response().status == 200
    q = one_req(be, "/slowchunks")
    assert seen_body(q) == b"".join(parts) and q.body == b"".join(parts)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_body_overflow_partial(sluice, recorder, chunked):
    s, be = body_start(sluice, recorder, "1k", "partial")
    payload = H.pattern_bytes(5000, seed=4)
    hs = [("Transfer-Encoding", "chunked")] if chunked else []
    body = H.chunk_encode(payload, chunk=300) if chunked else payload
    with H.Client(s.port) as c:
        c.send(H.build_request("POST", "/big", hs, body=None if chunked else body) +
               (body if chunked else b""))
        r = c.read_response()
        assert r.status == 200, r
        assert c.request("GET", "/big-after").status == 200
    q = one_req(be, "/big")
    t = seen(q)
    assert t["body_truncated"] is True and t["body_len"] == 1024, t
    assert seen_body(q) == payload[:1024]
    assert q.body == payload and q.chunked == chunked


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_body_overflow_reject(sluice, recorder, chunked):
    s, be = body_start(sluice, recorder, "1k", "reject")
    payload = H.pattern_bytes(5000, seed=5)
    hs = [("Transfer-Encoding", "chunked")] if chunked else []
    with H.Client(s.port) as c:
        c.send(H.build_request("POST", "/toobig", hs, body=None if chunked else payload) +
               (H.chunk_encode(payload, chunk=300) if chunked else b""))
        r = c.read_response()
        assert r.status == 413, r
    assert reqs_to(be, "/toobig") == []
    e = access(s, "/toobig")
    assert e["status"] == "413" and e["reason"] == "inspect_body_too_large", e
    st = s.status()["listeners"][0]["inspect"]
    assert st["body"] == 1024 and st["allow"] + st["deny"] + st["error"] == 0, st
    # the hook was not called: nothing counted, nothing timed
    assert H.http_request(s.port, "GET", "/small").status == 200
    m = wait_metric(s, lambda m: m.n("sluice_inspect_seconds_count", LI) >= 1)
    assert m.n("sluice_inspect_seconds_count", LI) == 1
    assert outcome_counts(m) == (1, 0, 0)


@pytest.mark.parametrize("overflow", ["partial", "reject"])
def test_body_exactly_the_limit_is_not_over_it(sluice, recorder, overflow):
    """docs: only a body *longer* than `body` overflows. 1024 bytes with
    body: 1k is inspected whole: not truncated, not rejected."""
    s, be = body_start(sluice, recorder, "1k", overflow)
    payload = H.pattern_bytes(1024, seed=6)
    r = H.http_request(s.port, "POST", "/exact", body=payload)
    assert r.status == 200, r
    q = one_req(be, "/exact")
    assert seen(q)["body_truncated"] is False
    assert seen_body(q) == payload and q.body == payload
    r = H.http_request(s.port, "POST", "/exact-plus-one", body=payload + b"!")
    assert r.status == (200 if overflow == "partial" else 413), r


def test_body_pipelined_requests(sluice, recorder):
    """Pipelined requests with bodies (Content-Length, chunked, none) under
    body inspection: each is inspected with its own body and forwarded
    intact, in order."""
    s, be = body_start(sluice, recorder, "16k")
    bodies = [b"first body", b"", H.pattern_bytes(3000, seed=8), b"last"]
    with H.Client(s.port) as c:
        c.send(H.build_request("POST", "/pb0", body=bodies[0]) +
               H.build_request("GET", "/pb1") +
               H.build_request("POST", "/pb2", [("Transfer-Encoding", "chunked")]) +
               H.chunk_encode(bodies[2], chunk=1000) +
               H.build_request("PUT", "/pb3", body=bodies[3]))
        got = [c.read_response().status for _ in range(4)]
    assert got == [200] * 4
    assert [q.target for q in be.all_requests()] == ["/pb%d" % i for i in range(4)]
    for i, b in enumerate(bodies):
        q = one_req(be, "/pb%d" % i)
        assert q.body == b, i
        assert (seen_body(q) or b"") == b, i


def test_body_error_with_on_error_deny_keeps_connection(sluice, recorder, tmp_path):
    """A script error after the whole body was held: 500 (on_error deny),
    nothing forwarded, and the connection goes on (the body was read)."""
    name = write_script(tmp_path, "bodyerr.lua",
                        "function inspect(req) if req:body() == 'bad' then error('bad body') end end\n")
    s, be = start(sluice, recorder, name, inspect={"body": "1k", "on_error": "deny"})
    with H.Client(s.port) as c:
        r = c.request("POST", "/be1", body=b"bad")
        assert r.status == 500 and not r.has_token("connection", "close"), r
        assert c.request("POST", "/be2", body=b"good").status == 200
    assert [q.target for q in be.all_requests()] == ["/be2"]
    assert access(s, "/be1")["reason"] == "inspect_error"


def test_body_expect_100_continue(sluice, recorder):
    s, be = body_start(sluice, recorder, "16k")
    payload = b"after the interim response"
    with H.Client(s.port) as c:
        c.send(H.build_request("POST", "/expect", [("Expect", "100-continue"),
                                                   ("Content-Length", str(len(payload)))]))
        r = c.read_response(skip_1xx=False)
        assert r.status == 100, r
        c.send(payload)
        r = c.read_response()
        assert r.status == 200, r
    q = one_req(be, "/expect")
    assert seen_body(q) == payload and q.body == payload


BODY_DENY = """\
function inspect(req)
  local b = req:body()
  if b and b:find("attack", 1, true) then
    req:tag("body-attack")
    req:deny(403, "body says attack")
  end
end
"""


def test_body_deny_on_content(sluice, recorder, tmp_path):
    """A deny from the body: the body was read in full, so the connection
    stays usable; the backend gets only the clean request."""
    name = write_script(tmp_path, "bodydeny.lua", BODY_DENY)
    s, be = body_start(sluice, recorder, "4k", script=name)
    with H.Client(s.port) as c:
        r = c.request("POST", "/bad", body=b"x" * 100 + b"attack" + b"y" * 100)
        assert (r.status, r.body) == (403, b"body says attack"), r
        assert not r.has_token("connection", "close")
        r = c.request("POST", "/bad-chunked", headers=[("Transfer-Encoding", "chunked")],
                      body=H.chunk_encode(b"an attack here", chunk=4))
        assert r.status == 403, r
        r = c.request("POST", "/good", body=b"harmless")
        assert r.status == 200, r
    assert [q.target for q in be.all_requests()] == ["/good"]
    assert access(s, "/bad")["tags"] == "body-attack"
    # a deny from the first `body` bytes of a longer body: the rest is unread, so the connection closes
    with H.Client(s.port) as c:
        c.send(H.build_request("POST", "/bad-long", [("Content-Length", "100000")]) + b"attack" + b"z" * 5000)
        r = c.read_response()
        assert r.status == 403 and r.has_token("connection", "close"), r
        assert c.is_closed(3.0)
    assert [q.target for q in be.all_requests()] == ["/good"]


# ==========================================================================
# 9. configuration

def cfg_text(tmp_path, script_line, top=(), inspect_lines=()):
    """A config as text; returns (path, line number of the script key)."""
    lines = [
        "workers: 1",
        "error_log: stderr",
        'access_log: "off"',
    ] + list(top) + [
        "listeners:",
        "  - name: http",
        '    address: "127.0.0.1:%d"' % H.free_port(),
        "    backend: app",
        "    inspect:",
        "      " + script_line,
    ] + ["      " + l for l in inspect_lines] + [
        "backends:",
        "  - name: app",
        "    servers:",
        "      - name: s1",
        '        address: "127.0.0.1:%d"' % H.free_port(),
    ]
    path = os.path.join(str(tmp_path), "check.yaml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path, lines.index("      " + script_line) + 1, lines


def error_lines(stderr, path):
    rx = re.compile(r"^%s:(\d+):(\d+): (\S+): (.+)$" % re.escape(path))
    return [m.groups() for m in (rx.match(l.strip()) for l in stderr.splitlines()) if m]


SCRIPT_ERRORS = {
    "syntax": ("local x = 1\nlocal y = = 2\nfunction inspect(req) end\n",
               r"bad\.lua:2: unexpected symbol near '='"),
    "no-inspect": ("function inspec(req) end\n", r"inspect"),
    "inspect-not-function": ("inspect = 42\n", r"inspect"),
    "response-not-function": ("function inspect(req) end\ninspect_response = 'x'\n", r"inspect_response"),
    "main-chunk-error": ("function inspect(req) end\nlocal t = nil\nerror('at load ' .. 1)\n",
                         r"bad\.lua:3: at load 1"),
    "main-chunk-bad-regex": ("local re = sluice.regex('(unclosed')\nfunction inspect(req) end\n",
                             r"bad\.lua:1: .*offset"),
    "main-chunk-memory": ("local t = {} for i = 1, 1e9 do t[i] = string.rep('m', 1 << 20) .. i end\n"
                          "function inspect(req) end\n", r"memory"),
    "binary-chunk": ("\x1bLua", r"binary|bad\.lua"),
}


@pytest.mark.parametrize("case", sorted(SCRIPT_ERRORS))
def test_config_script_errors(sluice_bin, tmp_path, case):
    src, msg = SCRIPT_ERRORS[case]
    write_script(tmp_path, "bad.lua", src)
    path, line, _ = cfg_text(tmp_path, 'script: "bad.lua"', top=["lua_memory_max: 8m"])
    r = run_check(sluice_bin, tmp_path, path)
    assert r.returncode == 1, r
    errs = error_lines(r.stderr, path)
    hits = [e for e in errs if int(e[0]) == line and e[2] == "listeners[0].inspect.script"]
    assert hits, "no %s:%d: listeners[0].inspect.script: error in:\n%s" % (path, line, r.stderr)
    assert re.search(msg, hits[0][3]), hits


def test_config_missing_script(sluice_bin, tmp_path):
    path, line, _ = cfg_text(tmp_path, 'script: "lua/nope.lua"')
    r = run_check(sluice_bin, tmp_path, path)
    assert r.returncode == 1
    hits = [e for e in error_lines(r.stderr, path) if e[2] == "listeners[0].inspect.script"]
    assert hits and int(hits[0][0]) == line and "lua/nope.lua" in hits[0][3], r.stderr


def test_config_script_loop_at_load_is_stopped(sluice_bin, tmp_path):
    """A main chunk that never ends is stopped by the load budget (10 s of
    CPU time, 40 s in ASan builds: on a busy machine that is more wall time,
    hence the bound)."""
    write_script(tmp_path, "bad.lua", "while true do end\nfunction inspect(req) end\n")
    path, line, _ = cfg_text(tmp_path, 'script: "bad.lua"')
    t0 = time.monotonic()
    r = run_check(sluice_bin, tmp_path, path, timeout=80)
    took = time.monotonic() - t0
    assert r.returncode == 1, r
    assert 9 < took < 75, took
    hits = [e for e in error_lines(r.stderr, path) if e[2] == "listeners[0].inspect.script"]
    assert hits and int(hits[0][0]) == line and "budget" in hits[0][3], r.stderr


def test_config_good_script_passes(sluice_bin, tmp_path):
    write_script(tmp_path, "good.lua", "function inspect(req) end\n")
    path, _, _ = cfg_text(tmp_path, 'script: "good.lua"',
                          top=["inspection: off", "lua_memory_max: 16m"],
                          inspect_lines=["body: 8k", "body_overflow: reject", "on_error: deny",
                                         "mode: shadow", "budget:", "  instructions: 0",
                                         "  time: 500us"])
    r = run_check(sluice_bin, tmp_path, path)
    assert r.returncode == 0, r.stderr


BAD_VALUES = [
    ("body", ["body: lots"], "listeners[0].inspect.body"),
    ("body-negative", ["body: -1"], "listeners[0].inspect.body"),
    ("body_overflow", ["body_overflow: truncate"], "listeners[0].inspect.body_overflow"),
    ("on_error", ["on_error: explode"], "listeners[0].inspect.on_error"),
    ("mode", ["mode: loud"], "listeners[0].inspect.mode"),
    ("instructions", ["budget:", "  instructions: many"], "listeners[0].inspect.budget.instructions"),
    ("instructions-negative", ["budget:", "  instructions: -5"], "listeners[0].inspect.budget.instructions"),
    ("time", ["budget:", "  time: fast"], "listeners[0].inspect.budget.time"),
    ("unknown-budget-key", ["budget:", "  cycles: 5"], "listeners[0].inspect.budget.cycles"),
    ("unknown-inspect-key", ["scirpt: x.lua"], "listeners[0].inspect.scirpt"),
]


@pytest.mark.parametrize("name,lines,key", BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_config_bad_inspect_values(sluice_bin, tmp_path, name, lines, key):
    write_script(tmp_path, "good.lua", "function inspect(req) end\n")
    path, sline, all_lines = cfg_text(tmp_path, 'script: "good.lua"', inspect_lines=lines)
    want_line = all_lines.index("      " + lines[-1]) + 1
    r = run_check(sluice_bin, tmp_path, path)
    assert r.returncode == 1, (r.returncode, r.stderr)
    errs = error_lines(r.stderr, path)
    leaf = key.rsplit(".", 1)[-1]
    hits = [e for e in errs if int(e[0]) == want_line and (e[2] == key or e[2] == leaf)]
    assert hits, "expected line %d key %s, got %r\n%s" % (want_line, key, errs, r.stderr)


@pytest.mark.parametrize("line,key", [("inspection: maybe", "inspection"),
                                      ("lua_memory_max: 100k", "lua_memory_max"),
                                      ("lua_memory_max: lots", "lua_memory_max")])
def test_config_bad_top_level_values(sluice_bin, tmp_path, line, key):
    write_script(tmp_path, "good.lua", "function inspect(req) end\n")
    path, _, all_lines = cfg_text(tmp_path, 'script: "good.lua"', top=[line])
    r = run_check(sluice_bin, tmp_path, path)
    assert r.returncode == 1, r.stderr
    hits = [e for e in error_lines(r.stderr, path) if int(e[0]) == all_lines.index(line) + 1 and e[2] == key]
    assert hits, r.stderr


def test_config_missing_script_key(sluice_bin, tmp_path):
    path, _, _ = cfg_text(tmp_path, "on_error: deny")
    r = run_check(sluice_bin, tmp_path, path)
    assert r.returncode == 1 and "script" in r.stderr, r.stderr


def test_config_memory_cap_applies_to_the_check(sluice_bin, tmp_path):
    """A script that needs ~4 MiB at load passes with 64m, fails with 2m."""
    write_script(tmp_path, "big.lua", "local t = {} for i = 1, 4 do t[i] = string.rep('b', 1 << 20) .. i end\n"
                                      "keep = t\nfunction inspect(req) end\n")
    path, _, _ = cfg_text(tmp_path, 'script: "big.lua"', top=["lua_memory_max: 64m"])
    assert run_check(sluice_bin, tmp_path, path).returncode == 0
    path, line, _ = cfg_text(tmp_path, 'script: "big.lua"', top=["lua_memory_max: 2m"])
    r = run_check(sluice_bin, tmp_path, path)
    assert r.returncode == 1
    hits = [e for e in error_lines(r.stderr, path) if e[2] == "listeners[0].inspect.script"]
    assert hits and int(hits[0][0]) == line and "memory" in hits[0][3], r.stderr


def test_start_with_broken_script_fails(sluice_bin, tmp_path):
    write_script(tmp_path, "bad.lua", "function inspect(req\n")
    path, _, _ = cfg_text(tmp_path, 'script: "bad.lua"')
    proc = subprocess.Popen([sluice_bin, "-c", path], cwd=str(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=15)
    finally:
        H.kill_popen(proc, grace=1)
    assert proc.returncode != 0
    assert "bad.lua:1:" in err.decode() or "bad.lua:2:" in err.decode(), err


def test_inspection_off_at_start(sluice, recorder):
    s, be = start(sluice, recorder, SEEN, top={"inspection": "off"})
    assert H.http_request(s.port, "GET", "/off").status == 200
    assert one_req(be, "/off").header_all("x-seen") == []
    e = access(s, "/off")
    assert (e["inspect_us"], e["inspect"]) == ("-", "off"), e
    assert s.status()["inspect"] == "off"
    m = scrape(s)
    assert m.n("sluice_inspect_enabled", {}) == 0
    assert m.n("sluice_inspect_seconds_count", LI) == 0
    assert outcome_counts(m) == (0, 0, 0)


def test_inspection_off_does_not_hold_bodies(sluice, recorder):
    """With the switch off a body is streamed, not held: the backend sees
    the head before the client sent the body."""
    s, be = body_start(sluice, recorder, "16k", top={"inspection": "off"})
    with H.Client(s.port) as c:
        c.send(H.build_request("POST", "/stream", [("Content-Length", "10")]))
        H.wait_for(lambda: be.total_bytes() > 0, 3, what="head at the backend before the body")
        c.send(b"0123456789")
        assert c.read_response().status == 200
    assert one_req(be, "/stream").body == b"0123456789"


# ==========================================================================
# 10. the live switch

COUNT_SCRIPT = """\
function inspect(req)
  local s = sluice.worker_state
  s.n = (s.n or 0) + 1
  req:set_header("X-Count", tostring(s.n))
  req:set_header("X-Worker", tostring(sluice.worker))
end
"""


def test_live_switch(sluice, recorder, tmp_path):
    name = write_script(tmp_path, "count.lua", COUNT_SCRIPT)
    s, be = start(sluice, recorder, name)
    with H.Client(s.port) as c:
        assert c.request("GET", "/on1").status == 200
        r = s.admin_post("/inspect/off")
        assert r.status == 200, r
        assert s.status()["inspect"] == "off"
        assert scrape(s).n("sluice_inspect_enabled", {}) == 0
        for i in range(3):
            assert c.request("GET", "/off%d" % i).status == 200
        r = s.admin_post("/inspect/on")
        assert r.status == 200, r
        assert c.request("GET", "/on2").status == 200
        assert s.status()["inspect"] == "on"
    assert one_req(be, "/on1").header_all("x-count") == ["1"]
    for i in range(3):
        assert one_req(be, "/off%d" % i).header_all("x-count") == []
        e = access(s, "/off%d" % i)
        assert (e["inspect"], e["inspect_us"]) == ("off", "-"), e
    assert one_req(be, "/on2").header_all("x-count") == ["2"]
    assert access(s, "/on2")["inspect"] == "allow"
    # the hook's histogram counted only the inspected requests
    m = scrape(s)
    assert m.n("sluice_inspect_seconds_count", LI) == 2
    assert outcome_counts(m) == (2, 0, 0)
    s.wait_error_log(r"admin: inspection hook switched off")
    s.wait_error_log(r"admin: inspection hook switched on")
    assert s.admin_post("/inspect/maybe").status == 404
    assert s.admin_get("/inspect/off").status == 405


def test_live_switch_two_workers(sluice, recorder, tmp_path):
    """Both workers honour the switch within a second; the keepalive
    connections opened before the toggles keep working."""
    name = write_script(tmp_path, "count.lua", COUNT_SCRIPT)
    s, be = start(sluice, recorder, name, workers=2)
    workers = set(s.worker_pids())
    assert len(workers) == 2
    conns = {}
    opened = []
    try:
        for i in range(64):
            c = H.Client(s.port)
            opened.append(c)
            assert c.request("GET", "/probe").status == 200
            owner = s.socket_owner(c.sock.getsockname()[1])
            conns.setdefault(owner, c)
            if set(conns) == workers:
                break
        assert set(conns) == workers, "connections reached only %s" % set(conns)

        def inspected(c, path):
            assert c.request("GET", path).status == 200
            return reqs_to(be, path)[-1].header("x-count") is not None
        seq = [0]

        def path():
            seq[0] += 1
            return "/sw%d" % seq[0]
        for c in conns.values():
            assert inspected(c, path())
        assert s.admin_post("/inspect/off").status == 200
        for c in conns.values():
            H.wait_for(lambda: not inspected(c, path()), 1.0, interval=0.05, what="switch off")
        assert s.admin_post("/inspect/on").status == 200
        for c in conns.values():
            H.wait_for(lambda: inspected(c, path()), 1.0, interval=0.05, what="switch on")
        assert {reqs_to(be, "/sw%d" % k)[0].header("x-worker") for k in (1, 2)} == {"0", "1"}
        # sluice.worker_state is per worker: each worker counted its own calls from 1, without gaps
        counts = {}
        for q in be.all_requests():
            if q.header("x-count") is not None:
                counts.setdefault(q.header("x-worker"), []).append(int(q.header("x-count")))
        assert set(counts) == {"0", "1"}
        for w, got in counts.items():
            assert sorted(got) == list(range(1, len(got) + 1)), (w, sorted(got))
    finally:
        for c in opened:
            c.close()


def test_live_switch_and_reload(sluice, recorder, tmp_path):
    """A reload keeps where an operator put the switch unless `inspection:`
    changed in the file."""
    name = write_script(tmp_path, "count.lua", COUNT_SCRIPT)
    s, be = start(sluice, recorder, name)

    def state(path):
        assert H.http_request(s.port, "GET", path).status == 200
        st = s.status()["inspect"]
        return st, access(s, path)["inspect"]
    assert state("/a") == ("on", "allow")
    assert s.admin_post("/inspect/off").status == 200
    s.reload()
    assert state("/b") == ("off", "off")          # unchanged file: operator's choice kept
    cfg = dict(s.config)
    cfg["inspection"] = "off"
    assert s.admin_post("/inspect/on").status == 200
    s.reload(cfg)
    assert state("/c") == ("off", "off")          # the file changed on -> off: the file wins
    assert s.admin_post("/inspect/on").status == 200
    s.reload()
    assert state("/d") == ("on", "allow")         # unchanged (off) file: operator's on kept


# ==========================================================================
# 11. metrics and /status

def test_metrics_and_status_exact(sluice, recorder):
    s, be = start(sluice, recorder)
    plan = [("/m1", None, 200), ("/m2", "req:tag('t-allow')", 200), ("/m3", "local x = 1", 200),
            ("/m4", "req:tag('t-deny') req:deny()", 403), ("/m5", "req:redirect('/x')", 302),
            ("/m6", "req:tag('t-err') error('e')", 200)]
    with H.Client(s.port) as c:
        for path, code, want in plan:
            assert ev(s, code, path=path, client=c).status == want, path
    entries = [access(s, p) for p, _, _ in plan]
    m = wait_metric(s, lambda m: m.n("sluice_inspect_seconds_count", LI) == len(plan))
    assert outcome_counts(m) == (3, 2, 1)
    total_us = sum(int(e["inspect_us"]) for e in entries)
    got_us = round(m.get("sluice_inspect_seconds_sum", LI) * 1e6)
    assert abs(got_us - total_us) <= len(plan), (got_us, total_us)
    # buckets: cumulative, the +Inf one holds every call
    assert m.n("sluice_inspect_seconds_bucket", dict(LI, le="+Inf")) == len(plan)
    for tag, outcome in (("t-allow", "allow"), ("t-deny", "deny"), ("t-err", "error")):
        assert m.n("sluice_inspect_tag_total", {"tag": tag, "outcome": outcome}) == 1
    st = s.status()
    assert st["inspect"] == "on"
    ins = st["listeners"][0]["inspect"]
    assert ins == {"script": EVAL, "mode": "enforce", "body": 0, "on_error": "allow",
                   "allow": 3, "deny": 2, "error": 1}, ins


def test_metrics_two_listeners_counted_apart(sluice, recorder):
    be = recorder()
    s = sluice(config(be, EVAL, extra_listeners=[("other", {"script": EVAL, "on_error": "deny"})]))
    assert ev(s, "req:deny()", path="/x").status == 403
    assert ev(s, "error('x')", path="/y", port=port_of(s, "other")).status == 500
    assert ev(s, None, path="/z", port=port_of(s, "other")).status == 200
    m = wait_metric(s, lambda m: m.n("sluice_inspect_seconds_count", {"listener": "other"}) == 2)
    assert m.n("sluice_inspect_seconds_count", LI) == 1
    assert outcome_counts(m) == (0, 1, 0)
    assert outcome_counts(m, {"listener": "other"}) == (1, 0, 1)
    st = {l["name"]: l["inspect"] for l in s.status()["listeners"]}
    assert st["other"]["on_error"] == "deny" and st["other"]["error"] == 1


def test_status_listener_without_inspect(sluice, recorder):
    be = recorder()
    c = H.make_config(H.free_port(), [H.server(be.port)], admin=H.admin_config())
    s = sluice(c)
    assert s.status()["listeners"][0]["inspect"] is None
    assert H.http_request(s.port, "GET", "/plain").status == 200
    assert access(s, "/plain")["inspect"] == "off"


# ==========================================================================
# 12. reload

def test_reload_loads_changed_script_and_rejects_broken_one(sluice, recorder, tmp_path):
    name = write_script(tmp_path, "ver.lua", "function inspect(req) req:set_header('X-Version', '1') end\n")
    s, be = start(sluice, recorder, name)
    assert H.http_request(s.port, "GET", "/v1").status == 200
    assert one_req(be, "/v1").header_all("x-version") == ["1"]
    write_script(tmp_path, "ver.lua", "function inspect(req) req:set_header('X-Version', '2') end\n")
    s.reload()
    assert H.http_request(s.port, "GET", "/v2").status == 200
    assert one_req(be, "/v2").header_all("x-version") == ["2"]
    pids = s.worker_pids()
    off = err_offset(s)
    write_script(tmp_path, "ver.lua", "function inspect(req) req:set_header('X-Version', '3'\n")
    s.signal(signal.SIGHUP)
    m = s.wait_error_log(r"reload rejected: .*ver\.lua:\d+:", start=off)
    s.wait_error_log(r"reload rejected: keeping the running configuration", start=off)
    assert s.worker_pids() == pids
    assert H.http_request(s.port, "GET", "/v3").status == 200
    assert one_req(be, "/v3").header_all("x-version") == ["2"]


def test_reload_resets_worker_state(sluice, recorder, tmp_path):
    """sluice.worker_state belongs to a worker's state: a reload starts afresh
    (sluice.shared, instance-wide, survives it: test_shared.py)."""
    name = write_script(tmp_path, "count.lua", COUNT_SCRIPT)
    s, be = start(sluice, recorder, name)
    for i in range(3):
        assert H.http_request(s.port, "GET", "/c%d" % i).status == 200
    assert one_req(be, "/c2").header("x-count") == "3"
    s.reload()
    assert H.http_request(s.port, "GET", "/c3").status == 200
    assert one_req(be, "/c3").header("x-count") == "1"


# ==========================================================================
# 13. the scripts shipped in lua/

def shipped(name):
    p = os.path.join(SHIPPED, name)
    if not os.path.exists(p):
        pytest.skip("%s not shipped yet" % p)
    return p


def test_shipped_scripts_pass_the_check(sluice_bin, tmp_path):
    # waf.lua is loaded by the corpus tests' sluice (its check alone takes seconds)
    names = sorted(n for n in os.listdir(SHIPPED) if n.endswith(".lua") and n != "waf.lua") \
        if os.path.isdir(SHIPPED) else []
    if not names:
        pytest.skip("no scripts in lua/")
    for n in names:
        path, _, _ = cfg_text(tmp_path, 'script: "%s"' % os.path.join(SHIPPED, n), inspect_lines=["body: 16k"])
        r = run_check(sluice_bin, tmp_path, path)
        assert r.returncode == 0, (n, r.stderr)


def test_shipped_allow_all(sluice, recorder):
    s, be = start(sluice, recorder, shipped("allow_all.lua"))
    with H.Client(s.port) as c:
        for i, (m, p, body) in enumerate([("GET", "/", None), ("POST", "/x?a=1'%20or%201=1--", b"<script>"),
                                          ("DELETE", "/../../etc/passwd", None), ("GET", "/%00", None)]):
            assert c.request(m, p, body=body).status == 200, p
    assert len(be.all_requests()) == 4
    H.wait_for(lambda: len(s.access_entries()) >= 4, 3, what="4 access log lines")
    assert {e["inspect"] for e in s.access_entries()} == {"allow"}


def test_shipped_rate_limit(sluice, recorder):
    """Over the rate (BURST then RATE per second per client): 429, tagged
    ratelimit; another client address has its own bucket."""
    path = shipped("rate_limit.lua")
    src = H.read_text(path)
    rate = int(re.search(r"^local RATE = (\d+)", src, re.M).group(1))
    burst = int(re.search(r"^local BURST = (\d+)", src, re.M).group(1))
    s, be = start(sluice, recorder, path)
    n = burst + 100
    with H.Client(s.port) as c:
        t0 = time.monotonic()
        c.send(b"".join(H.build_request("GET", "/rl%d" % i) for i in range(n)))
        got = [c.read_response().status for _ in range(n)]
        took = time.monotonic() - t0
    assert set(got) <= {200, 429}, got
    ok = got.count(200)
    assert got[:burst] == [200] * burst, got[:burst]
    assert 429 in got
    assert ok <= burst + int(took * rate) + 1, (ok, took)
    e = s.wait_access_entry(lambda x: x["status"] == "429")
    assert (e["inspect"], e["tags"]) == ("deny", "ratelimit"), e
    # a different client address is not limited
    with H.Client(s.port, source=(CLIENT_IP, 0)) as c:
        assert c.request("GET", "/other").status == 200


def test_shipped_ip_blocklist_with_proxy_protocol(sluice, recorder):
    s, be = start(sluice, recorder, shipped("ip_blocklist.lua"),
                  listener={"accept_proxy_from": ["127.0.0.1/32"]})
    cases = [("192.0.2.55", 403), ("198.51.100.1", 403), ("203.0.113.254", 403), ("192.0.3.1", 200),
             ("2001:db8::1", 403), ("2001:db9::1", 200)]
    for i, (ip, want) in enumerate(cases):
        proto = "TCP6" if ":" in ip else "TCP4"
        dst = "::1" if ":" in ip else "127.0.0.1"
        with H.Client(s.port) as c:
            c.send(P.v1(ip, dst, 40000 + i, s.port, proto=proto) + H.build_request("GET", "/ip%d" % i))
            r = c.read_response()
        assert r.status == want, (ip, r)
        e = access(s, "/ip%d" % i)
        assert e["inspect"] == ("deny" if want == 403 else "allow"), e
        if want == 403:
            assert e["tags"] == "blocklist"
    assert sorted(q.target for q in be.all_requests()) == ["/ip3", "/ip5"]
    # a peer outside accept_proxy_from sends no PROXY header: its own address is checked
    with H.Client(s.port, source=(CLIENT_IP, 0)) as c:
        assert c.request("GET", "/direct").status == 200


def test_shipped_headers_limits(sluice, recorder):
    s, be = start(sluice, recorder, shipped("headers_limits.lua"))
    assert H.http_request(s.port, "GET", "/fine", headers=[("Accept", "*/*")]).status == 200
    r = H.http_request(s.port, "GET", "/many", headers=[("X-H%d" % i, "v") for i in range(80)])
    assert r.status == 431 and access(s, "/many")["tags"] == "limits-count", r
    r = H.http_request(s.port, "GET", "/long", headers=[("X-Long", "v" * 5000)])
    assert r.status == 431 and access(s, "/long")["tags"] == "limits-value-len", r
    r = H.http_request(s.port, "GET", "/dup", headers=[("User-Agent", "a"), ("User-Agent", "b")])
    assert r.status == 400 and access(s, "/dup")["tags"] == "limits-dup-user-agent", r
    assert [q.target for q in be.all_requests()] == ["/fine"]


# --------------------------------------------------------------------------
# waf.lua against the corpus (tests/e2e/waf_corpus/{attacks,benign}.json)

def load_corpus(name):
    p = os.path.join(CORPUS, name)
    if not os.path.exists(p):
        return []
    with open(p) as f:
        return json.load(f)


ATTACKS = load_corpus("attacks.json")
BENIGN = load_corpus("benign.json")


def corpus_params(entries, what):
    if not entries:
        return [pytest.param(None, id="none", marks=pytest.mark.skip(reason="no %s yet" % what))]
    return [pytest.param(e, id="%d-%s" % (i, re.sub(r"[^A-Za-z0-9_.-]+", "_", e["name"])))
            for i, e in enumerate(entries)]


@pytest.fixture(scope="module")
def waf_sluice(sluice_bin, tmp_path_factory):
    """One sluice running lua/waf.lua (body inspection on) for every corpus
    entry: compiling its databases takes seconds."""
    path = os.path.join(SHIPPED, "waf.lua")
    if not os.path.exists(path):
        pytest.skip("lua/waf.lua not shipped yet")
    d = tmp_path_factory.mktemp("waf")
    be = H.RecordingBackend()
    s = H.Sluice(sluice_bin, d, config(be, path, inspect={"body": "64k"}), name="waf")
    try:
        s.start(timeout=60)
        yield s, be
    finally:
        s.kill()
        be.stop()


def waf_send(s, e):
    """Send corpus entry E on a new connection; returns (Response, its
    access log entry)."""
    hs = list((e.get("headers") or {}).items())
    body = e.get("body")
    if isinstance(body, str):
        body = body.encode("utf-8")
    kw = {"host": None} if any(k.lower() == "host" for k, _ in hs) else {}
    # Only lines written after this request's: over a long run the client's
    # ephemeral port comes round again, and an older line would match it.
    n0 = len(s.access_entries())
    with H.Client(s.port) as c:
        cport = c.sock.getsockname()[1]
        r = c.request(e["method"], e["target"], headers=hs, body=body, **kw)
    ent = H.wait_for(lambda: next((x for x in s.access_entries()[n0:] if x["cport"] == str(cport)), None),
                     3.0, what="the access log line of client port %d" % cport)
    return r, ent


@pytest.mark.parametrize("entry", corpus_params(ATTACKS, "waf_corpus/attacks.json"))
def test_waf_blocks_attack(waf_sluice, entry):
    s, be = waf_sluice
    r, e = waf_send(s, entry)
    assert (r.status, e["inspect"]) == (403, "deny"), \
        "not blocked by the WAF: %r -> %r, access log %r" % (entry, r, e)
    tags = (e["tags"] or "").split(",")
    if entry.get("expect_tag"):
        assert any(t.startswith(entry["expect_tag"] + "-") for t in tags), \
            "blocked, but no %s-* tag: %r" % (entry["expect_tag"], tags)


@pytest.mark.parametrize("entry", corpus_params(BENIGN, "waf_corpus/benign.json"))
def test_waf_passes_benign(waf_sluice, entry):
    s, be = waf_sluice
    r, e = waf_send(s, entry)
    assert (r.status, e["inspect"]) == (200, "allow"), \
        "blocked: %r -> %r, access log %r" % (entry, r, e)
