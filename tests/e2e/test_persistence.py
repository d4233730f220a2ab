"""Session persistence (backends[].persistence): real Tomcat 10 JVMs with
their jvmRoute and a session counter (types jvm_route and cookie, plain and
over TLS, with curl's cookie engine as the browser), a WebLogic-like cluster
(type weblogic: primary, secondary failover, JVMIDs learned and relearned
after a restart), app_cookie, source hashing, a draining server keeping its
sessions, the per-server queue, two sluice instances agreeing on cookies,
and what a reload keeps."""

import re
import shutil
import subprocess
import threading
import time

import pytest

import harness as H
import tlsutil as T
import wlsim as wl

COUNTER_RE = re.compile(r"count=(\d+) route=(\S+) session=(\S+)")
WL_BODY_RE = re.compile(r"^count=(\d+) server=(\S+) id=(-?\d+)$")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return T.make_pki(tmp_path_factory.mktemp("pki"))


def entries_for(s, prefix):
    return [e for e in s.access_entries() if e["target"].startswith(prefix)]


def wait_entries(s, prefix, n):
    H.wait_for(lambda: len(entries_for(s, prefix)) >= n, 5, what="%d access log entries" % n)
    return entries_for(s, prefix)


def set_cookie(r, name):
    for v in r.header_all("set-cookie"):
        n, _, rest = v.partition("=")
        if n.strip() == name:
            return rest.split(";", 1)[0]
    return None


# --------------------------------------------------------------------------
# Tomcat: jvm_route and cookie, plain and TLS, with curl as the browser

def curl_run(url, jar, n, tls):
    """N GETs of URL in one curl process (one keep-alive connection), its
    cookie engine reading and writing JAR between them as a browser does.
    Returns [(count, route, session)] in order."""
    args = ["curl", "-sS", "--max-time", "60", "-w", "\\n", "-b", jar, "-c", jar]
    if tls:
        args.append("-k")
    args += [url] * n
    out = subprocess.run(args, capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    got = [(int(c), r, sid) for c, r, sid in COUNTER_RE.findall(out.stdout)]
    assert len(got) == n, out.stdout[-500:]
    return got


def tomcat_pair(tomcat):
    a = tomcat(jvm_route="ta", start=False)
    b = tomcat(jvm_route="tb", start=False)
    for t in (a.launch(), b.launch()):     # overlap the two JVM startups
        t.wait_ready()
    return a, b


def tomcat_sluice(sluice, pki, a, b, ptype, tls, admin=False):
    servers = [H.server(a.port, "a"), H.server(b.port, "b")]
    if ptype == "jvm_route":
        servers[0]["route"], servers[1]["route"] = "ta", "tb"
    cfg = H.make_config(H.free_port(), servers, workers=2, backend={"persistence": {"type": ptype}},
                        admin=H.admin_config() if admin else None)
    if tls:
        cfg["listeners"][0]["tls"] = {"certificates": [pki.ecdsa.entry(), pki.rsa.entry()]}
    return sluice(cfg)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("ptype", ["jvm_route", "cookie"])
def test_tomcat_session_counts_to_200_then_fails_over(tomcat, sluice, pki, tmp_path, ptype, tls):
    a, b = tomcat_pair(tomcat)
    s = tomcat_sluice(sluice, pki, a, b, ptype, tls, admin=True)
    url = "%s://127.0.0.1:%d/counter.jsp" % ("https" if tls else "http", s.port)
    jar = str(tmp_path / "jar")
    # Four browser connections in a row (two workers), 50 requests each:
    # one session, its counter climbing 1..200 on one Tomcat.
    got = []
    for _ in range(4):
        got += curl_run(url, jar, 50, tls)
    assert [g[0] for g in got] == list(range(1, 201)), got[:5]
    assert len({g[1] for g in got}) == 1 and len({g[2] for g in got}) == 1, got[:3]
    route = got[0][1]
    es = wait_entries(s, "/counter.jsp", 200)
    assert [e["persistence"] for e in es] == ["miss"] + ["hit"] * 199
    jar_text = open(jar).read()
    if ptype == "cookie":
        # sluice's cookie, set once, Secure only over TLS
        assert "SLUICE_SERVER" in jar_text, jar_text
        assert ("#HttpOnly_127.0.0.1\tFALSE\t/\t%s\t" % ("TRUE" if tls else "FALSE")) in jar_text, jar_text
    else:
        assert "SLUICE_SERVER" not in jar_text
    # The Tomcat holding the session stops: the next request is answered
    # by the other one, with a new session, no error.
    holder, other = (a, b) if route == "ta" else (b, a)
    holder.stop()
    after = curl_run(url, jar, 3, tls)
    assert after[0][:2] == (1, other.jvm_route), after
    assert [g[0] for g in after] == [1, 2, 3] and len({g[2] for g in after}) == 1, after
    es = wait_entries(s, "/counter.jsp", 203)[200:]
    assert [e["status"] for e in es] == ["200"] * 3
    assert es[0]["persistence"] == "failover" and es[1]["persistence"] == "hit", es
    m = s.metrics_text()
    assert re.search(r'^sluice_persistence_failovers_total\{backend="app"\} 1$', m, re.M), m
    assert re.search(r'^sluice_persistence_hits_total\{backend="app"\} 201$', m, re.M), m
    assert re.search(r'^sluice_persistence_misses_total\{backend="app"\} 1$', m, re.M), m


@pytest.mark.parametrize("ptype", ["jvm_route", "cookie"])
def test_drain_keeps_sessions_new_clients_elsewhere(tomcat, sluice, pki, ptype):
    a, b = tomcat_pair(tomcat)
    s = tomcat_sluice(sluice, pki, a, b, ptype, False, admin=True)
    name = "SLUICE_SERVER" if ptype == "cookie" else "JSESSIONID"

    def new_client():
        jar = {}
        r = H.http_request(s.port, "GET", "/counter.jsp")
        assert r.status == 200, r
        for n in ("JSESSIONID", "SLUICE_SERVER"):
            if set_cookie(r, n):
                jar[n] = set_cookie(r, n)
        return jar, COUNTER_RE.search(r.body.decode()).group(2)

    def again(jar):
        r = H.http_request(s.port, "GET", "/counter.jsp",
                           headers=[("Cookie", "; ".join("%s=%s" % kv for kv in jar.items()))])
        assert r.status == 200, r
        c = COUNTER_RE.search(r.body.decode())
        return int(c.group(1)), c.group(2)

    clients = [new_client() for _ in range(4)]
    assert {c[1] for c in clients} == {"ta", "tb"}, clients   # round-robin spread them
    assert name in clients[0][0]
    r = s.admin_post("/servers/app/a/drain")
    assert r.status == 200, r
    for jar, route in clients:
        assert again(jar) == (2, route)                          # sessions stay, on a too
        assert again(jar) == (3, route)
    fresh = [new_client()[1] for _ in range(6)]
    assert fresh == ["tb"] * 6, fresh                             # new clients: b only
    # disable: a no longer keeps its sessions; they fail over to b
    assert s.admin_post("/servers/app/a/disable").status == 200
    on_a = [c for c in clients if c[1] == "ta"]
    for jar, _ in on_a:
        assert again(jar) == (1, "tb")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_two_sluice_instances_agree_on_the_cookie(tomcat, sluice, tmp_path):
    """The cookie's token is derived from the names: a client alternating
    between two instances (no shared state) stays on its Tomcat."""
    a, b = tomcat_pair(tomcat)
    cfgs = []
    for _ in range(2):
        cfgs.append(H.make_config(H.free_port(), [H.server(a.port, "a"), H.server(b.port, "b")],
                                  backend={"persistence": {"type": "cookie"}}))
    s1, s2 = sluice(cfgs[0], name="one"), sluice(cfgs[1], name="two")
    jar = str(tmp_path / "jar")
    got = []
    for i in range(20):
        port = (s1 if i % 2 == 0 else s2).port
        got += curl_run("http://127.0.0.1:%d/counter.jsp" % port, jar, 5, False)
    assert [g[0] for g in got] == list(range(1, 101)), got[:8]
    assert len({g[1] for g in got}) == 1
    assert [e["persistence"] for e in wait_entries(s2, "/counter.jsp", 50)] == ["hit"] * 50


def test_cookie_attributes_exact(sluice, demo, pki):
    d1, d2 = demo(), demo()
    servers = [H.server(d1.port, "a", cookie="alpha"), H.server(d2.port, "b", cookie="beta")]
    cfg = H.make_config(H.free_port(), servers, backend={"persistence": {
        "type": "cookie", "cookie": "LB", "max_age": "1h", "domain": "example.com",
        "path": "/app", "same_site": "strict", "secure": True, "http_only": False}})
    s = sluice(cfg)
    r = H.http_request(s.port, "GET", "/x")
    assert r.header_all("set-cookie") == ["LB=alpha; Path=/app; Domain=example.com; Max-Age=3600; Secure; SameSite=Strict"]
    # naming a server: no new cookie; naming the other one: it goes there
    r = H.http_request(s.port, "GET", "/x", headers=[("Cookie", "x=1; LB=beta")])
    assert r.status == 200 and r.header_all("set-cookie") == []
    r = H.http_request(s.port, "GET", "/x", headers=[("Cookie", 'LB="alpha"')])
    assert r.header_all("set-cookie") == []
    # a token that names no server is a miss, and gets a cookie
    r = H.http_request(s.port, "GET", "/x", headers=[("Cookie", "LB=gamma")])
    assert len(r.header_all("set-cookie")) == 1
    es = wait_entries(s, "/x", 4)
    assert [(e["server"], e["persistence"]) for e in es] == [
        ("app/a", "miss"), ("app/b", "hit"), ("app/a", "hit"), ("app/b", "miss")], es
    # the default token: 16 hex digits, not the name, not the address
    cfg2 = H.make_config(H.free_port(), [H.server(d1.port, "a"), H.server(d2.port, "b")],
                         backend={"persistence": {"type": "cookie"}})
    s2 = sluice(cfg2, name="derived")
    tok = set_cookie(H.http_request(s2.port, "GET", "/y"), "SLUICE_SERVER")
    assert re.fullmatch(r"[0-9a-f]{16}", tok), tok
    assert set_cookie(H.http_request(s2.port, "GET", "/y"), "SLUICE_SERVER") != tok


def test_jvm_route_from_cookie_or_path_parameter(sluice, demo):
    """The route after the first '.', from the JSESSIONID cookie first,
    else from ;jsessionid= in the path (not from the query); a route no
    server has is a miss; the request reaches the server unchanged."""
    d1, d2 = demo(), demo()
    servers = [H.server(d1.port, "a", route="node1"), H.server(d2.port, "b", route="node.2")]
    s = sluice(H.make_config(H.free_port(), servers, backend={"persistence": {"type": "jvm_route"}}))
    cases = [
        ("/p1", [("Cookie", "JSESSIONID=0A1B.node.2")], "app/b", "hit"),          # dots in a route
        ("/p2;jsessionid=0A1B.node1", None, "app/a", "hit"),
        ("/p3;jsessionid=0A1B.node1/x?y=1", None, "app/a", "hit"),
        ("/p4;jsessionid=0A1B.node1", [("Cookie", "JSESSIONID=0A1B.node.2")], "app/b", "hit"),
        ("/p5?jsessionid=0A1B.node1", None, None, "miss"),
        ("/p6", [("Cookie", "JSESSIONID=0A1B.node9")], None, "miss"),
        ("/p7", [("Cookie", "JSESSIONID=0A1B")], None, "miss"),
    ]
    for path, hs, server, result in cases:
        r = H.http_request(s.port, "GET", path, headers=hs)
        assert r.status == 200, r
        e = wait_entries(s, path.split(";")[0].split("?")[0], 1)[0]
        assert e["persistence"] == result, (path, e)
        if server:
            assert e["server"] == server, (path, e)
    assert set_cookie(H.http_request(s.port, "GET", "/none"), "SLUICE_SERVER") is None  # no cookie of sluice's


# --------------------------------------------------------------------------
# WebLogic-like cluster

def wl_get(port, value=None, path="/app", name="JSESSIONID"):
    hs = [("Cookie", "%s=%s" % (name, value))] if value else None
    r = H.http_request(port, "GET", path, headers=hs)
    assert r.status == 200, r
    m = WL_BODY_RE.match(r.body.decode())
    assert m, r
    return r, int(m.group(1)), m.group(2)


def wl_cluster(wlsim, n=3, **kw):
    rep = {}
    members = [wlsim(replicated=rep, start=False, **kw) for _ in range(n)]
    for i, m in enumerate(members):
        m.secondary = members[(i + 1) % n]    # each replicates to the next
        m.start()
    return members


def wl_sluice(sluice, members, admin=False, workers=2, **persist):
    p = {"type": "weblogic"}
    p.update(persist)
    servers = [H.server(m.port, m.name) for m in members]
    return sluice(H.make_config(H.free_port(), servers, workers=workers, backend={"persistence": p},
                                admin=H.admin_config() if admin else None))


def test_weblogic_primary_then_secondary_with_learned_ids(wlsim, sluice):
    w1, w2, w3 = wl_cluster(wlsim)
    s = wl_sluice(sluice, [w1, w2, w3])
    # New sessions until each member holds one (each worker balances on
    # its own), sluice learning each member's JVMID from its answers.
    sessions = {}
    for _ in range(12):
        r, count, server = wl_get(s.port)
        assert count == 1
        sessions[server] = set_cookie(r, "JSESSIONID")
        if len(sessions) == 3:
            break
    assert sorted(sessions) == ["wls1", "wls2", "wls3"]
    s.wait_error_log(r"server wls3 has JVMID %s" % re.escape(w3.server_id))
    # Every session stays on its primary (cookie and path parameter).
    for server, v in sessions.items():
        for want in (2, 3):
            assert wl_get(s.port, v)[1:] == (want, server)
        assert wl_get(s.port, path="/app;jsessionid=%s?q=1" % v)[1:] == (4, server)
    # wls1 dies: its session goes to its secondary (wls2, not wls3), which
    # has the replica: the counter goes on.
    v = sessions["wls1"]
    assert wl._REPLICA_LOCK and wl.parse_cookie_value(v)[2] == w2.server_id
    w1.kill()
    r, count, server = wl_get(s.port, v, path="/app?after-kill")
    assert (count, server) == (5, "wls2"), r
    newv = set_cookie(r, "JSESSIONID")
    assert wl.parse_cookie_value(newv)[1] == w2.server_id      # wls2 is the primary now
    assert wl_get(s.port, newv, path="/app?next")[1:] == (6, "wls2")
    assert wait_entries(s, "/app?after-kill", 1)[0]["persistence"] == "failover"
    assert wait_entries(s, "/app?next", 1)[0]["persistence"] == "hit"
    # sluice never touched the cookie: the client saw WebLogic's own value
    assert r.header_all("set-cookie") == ["JSESSIONID=%s; path=/; HttpOnly" % newv]
    # Every request reached the backend with the cookie as sent.
    sent = [q.header("cookie") for q in w2.all_requests() if q.header("cookie")]
    assert "JSESSIONID=%s" % v in sent


def test_weblogic_drain_moves_sessions_to_their_secondary(wlsim, sluice):
    """The plug-in's behaviour: a draining primary's sessions go to their
    secondary (it has the replica, the counter goes on); new sessions go
    to the others; with the secondary down too, the draining primary keeps
    its sessions rather than lose them."""
    w1, w2, w3 = wl_cluster(wlsim)
    s = wl_sluice(sluice, [w1, w2, w3], admin=True, workers=1)
    sessions = {}
    for _ in range(6):
        r, _, server = wl_get(s.port)
        sessions[server] = set_cookie(r, "JSESSIONID")
    assert s.admin_post("/servers/app/wls1/drain").status == 200
    v = sessions["wls1"]                               # primary wls1, secondary wls2
    r, count, server = wl_get(s.port, v, path="/app?drained")
    assert (count, server) == (2, "wls2"), r
    assert wait_entries(s, "/app?drained", 1)[0]["persistence"] == "failover"
    assert all(wl_get(s.port, path="/app?new")[2] != "wls1" for _ in range(6))
    # another wls1 session whose secondary (wls2) is down: it stays on wls1
    sid = "B" * 52
    w1.sessions[sid] = 7
    w2.kill()
    r, count, server = wl_get(s.port, "%s!%s!%s" % (sid, w1.server_id, w2.server_id), path="/app?kept")
    assert (count, server) == (8, "wls1"), r
    assert wait_entries(s, "/app?kept", 1)[0]["persistence"] == "hit"


def test_weblogic_relearns_an_id_after_restart(wlsim, sluice):
    w1, w2 = wl_cluster(wlsim, n=2)
    s = wl_sluice(sluice, [w1, w2], workers=1)
    r, _, server = wl_get(s.port)
    first = {server: set_cookie(r, "JSESSIONID")}
    r, _, server = wl_get(s.port)
    first[server] = set_cookie(r, "JSESSIONID")
    old_id = w1.server_id
    w1.restart()                               # a new JVMID, sessions gone
    assert w1.server_id != old_id
    # The old session of wls1: its primary id is still the one sluice knows
    # for wls1, so it goes there; wls1 takes it over from the replica and
    # shows its new id, which sluice learns.
    r, count, server = wl_get(s.port, first["wls1"])
    assert (count, server) == (2, "wls1")
    s.wait_error_log(r"server wls1 has JVMID %s" % re.escape(w1.server_id))
    # A new session made on wls1 after the restart is routed by the new id.
    for _ in range(2):
        r, count, server = wl_get(s.port)
        if server == "wls1":
            break
    assert server == "wls1"
    v = set_cookie(r, "JSESSIONID")
    for want in (2, 3, 4):
        assert wl_get(s.port, v)[1:] == (want, "wls1")
    # A cookie naming the old id for its primary: unknown now, so its
    # secondary (wls2) serves it.
    sid = wl.parse_cookie_value(first["wls1"])[0]
    r, count, server = wl_get(s.port, "%s!%s!%s" % (sid, old_id, w2.server_id), path="/app?old-id")
    assert server == "wls2"
    assert wait_entries(s, "/app?old-id", 1)[0]["persistence"] == "failover"


def test_weblogic_seeded_ids_and_cookie_name(wlsim, sluice):
    w1 = wlsim(server_id=-1111, cookie_name="WLS_APP", jvmid_header=False)
    w2 = wlsim(server_id=2222, cookie_name="WLS_APP", jvmid_header=False)
    servers = [H.server(w1.port, "w1", jvmid="-1111"), H.server(w2.port, "w2", jvmid="2222")]
    s = sluice(H.make_config(H.free_port(), servers,
                             backend={"persistence": {"type": "weblogic", "cookie": "WLS_APP"}}))
    # a cookie made up by the client, naming w2 as primary: the seed routes it
    sid = "A" * 52
    r, count, server = wl_get(s.port, "%s!2222!-1111" % sid, name="WLS_APP")
    assert server == w2.name
    r, count, server = wl_get(s.port, "%s!-1111!2222" % sid, name="WLS_APP")
    assert server == w1.name
    # the other cookie name means nothing to this backend
    es = wait_entries(s, "/app", 2)
    assert [e["persistence"] for e in es] == ["hit", "hit"]


# --------------------------------------------------------------------------
# app_cookie, and what a reload keeps

def test_app_cookie_learned_and_kept_across_reload(wlsim, sluice):
    """wlsim as an application with its own cookie (APPSESSION; sluice
    reads nothing else of it). Also: WebLogic ids learned survive reload."""
    members = [wlsim(cookie_name="APPSESSION", jvmid_header=False) for _ in range(2)]
    servers = [H.server(m.port, m.name) for m in members]
    cfg = H.make_config(H.free_port(), servers, workers=2,
                        backend={"persistence": {"type": "app_cookie", "cookie": "APPSESSION",
                                                 "ttl": "10m"}})
    s = sluice(cfg)
    sessions = {}
    for _ in range(8):
        r, _, server = wl_get(s.port, path="/new")
        sessions[server] = set_cookie(r, "APPSESSION")
        if len(sessions) == 2:
            break
    assert sorted(sessions) == ["wls1", "wls2"]
    for server, v in sessions.items():
        for want in (2, 3, 4):
            assert wl_get(s.port, v, name="APPSESSION")[1:] == (want, server)
    s.reload(cfg)
    for server, v in sessions.items():
        assert wl_get(s.port, v, name="APPSESSION")[1:] == (5, server)
    es = wait_entries(s, "/app", 8)
    assert [e["persistence"] for e in es] == ["hit"] * 8
    assert all(e["persistence"] == "miss" for e in entries_for(s, "/new"))
    # an unknown value: balanced
    wl_get(s.port, "nosuchvalue", name="APPSESSION", path="/unknown")
    assert wait_entries(s, "/unknown", 1)[0]["persistence"] == "miss"


def test_app_cookie_ttl_forgets(wlsim, sluice):
    m1 = wlsim(cookie_name="SID", jvmid_header=False)
    m2 = wlsim(cookie_name="SID", jvmid_header=False)
    cfg = H.make_config(H.free_port(), [H.server(m1.port, "a"), H.server(m2.port, "b")],
                        backend={"persistence": {"type": "app_cookie", "cookie": "SID", "ttl": "1s"}})
    s = sluice(cfg)
    r, _, server = wl_get(s.port)
    v = set_cookie(r, "SID")
    assert wl_get(s.port, v, name="SID")[2] == server
    time.sleep(2.2)    # past the ttl (whole seconds): nothing to wait for but the clock
    wl_get(s.port, v, name="SID")
    assert wait_entries(s, "/app", 3)[-1]["persistence"] == "miss"


def test_weblogic_ids_survive_reload(wlsim, sluice):
    w1, w2 = wl_cluster(wlsim, n=2)
    servers = [H.server(w1.port, "wls1"), H.server(w2.port, "wls2")]
    cfg = H.make_config(H.free_port(), servers, backend={"persistence": {"type": "weblogic"}})
    s = sluice(cfg)
    vals = {}
    for _ in range(2):
        r, _, server = wl_get(s.port)
        vals[server] = set_cookie(r, "JSESSIONID")
    s.reload(cfg)
    for server, v in vals.items():
        assert wl_get(s.port, v)[1:] == (2, server)
    es = wait_entries(s, "/app", 4)
    assert [e["persistence"] for e in es] == ["miss", "miss", "hit", "hit"]


# --------------------------------------------------------------------------
# source

def test_source_hashing_is_sticky_and_remaps_minimally(sluice, demo):
    ds = [demo() for _ in range(3)]
    names = ["a", "b", "c"]

    def config(n):
        servers = [H.server(d.port, names[i]) for i, d in enumerate(ds[:n])]
        return H.make_config(H.free_port() if n == 3 else port, servers, workers=2,
                             backend={"persistence": {"type": "source"}},
                             listener={"trusted_forwarders": ["127.0.0.0/8"]})

    port = None
    cfg = config(3)
    port = cfg["listeners"][0]["address"].rsplit(":", 1)[1]
    port = int(port)
    s = sluice(cfg)
    ips = ["198.51.100.%d" % i for i in range(1, 121)]

    def where(tag):
        for ip in ips:
            r = H.http_request(s.port, "GET", "/%s/%s" % (tag, ip),
                               headers=[("X-Forwarded-For", "203.0.113.9, %s" % ip)])
            assert r.status == 200, r
        es = wait_entries(s, "/%s/" % tag, len(ips))
        assert all(e["persistence"] == "hit" for e in es), es[:3]
        return {e["target"].rsplit("/", 1)[1]: e["server"] for e in es}

    first = where("r1")
    assert where("r2") == first                          # sticky
    share = {n: list(first.values()).count("app/" + n) for n in names}
    assert all(20 <= v <= 60 for v in share.values()), share
    s.reload(config(2))                                  # c removed
    after = where("r3")
    moved = [ip for ip in ips if after[ip] != first[ip]]
    assert sorted(moved) == sorted(ip for ip in ips if first[ip] == "app/c"), moved


def test_source_failover_follows_the_ranking(sluice, demo):
    ds = [demo() for _ in range(3)]
    servers = [H.server(d.port, n) for d, n in zip(ds, "abc")]
    s = sluice(H.make_config(H.free_port(), servers, backend={"persistence": {"type": "source"}},
                             admin=H.admin_config()))
    r = H.http_request(s.port, "GET", "/one")
    home = wait_entries(s, "/one", 1)[0]["server"].split("/")[1]
    assert s.admin_post("/servers/app/%s/disable" % home).status == 200
    for i in range(5):
        H.http_request(s.port, "GET", "/two")
    es = wait_entries(s, "/two", 5)
    assert len({e["server"] for e in es}) == 1 and es[0]["server"] != "app/" + home
    assert all(e["persistence"] == "failover" for e in es)
    assert s.admin_post("/servers/app/%s/enable" % home).status == 200
    H.http_request(s.port, "GET", "/three")
    e = wait_entries(s, "/three", 1)[0]
    assert (e["server"], e["persistence"]) == ("app/" + home, "hit")


# --------------------------------------------------------------------------
# the server's own queue

def test_full_session_server_queues_its_sessions_not_the_others(sluice, demo):
    """a has one connection, busy with a slow request: a request whose
    session is on a waits in a's queue (then is served by a), while new
    clients are balanced to b at once; a's waiter that outlives
    queue_timeout gets 503."""
    da, db = demo(keepalive_ms=60000), demo(keepalive_ms=60000)
    servers = [H.server(da.port, "a", max_connections=1, cookie="A"),
               H.server(db.port, "b", cookie="B")]
    s = sluice(H.make_config(H.free_port(), servers, workers=1,
                             backend={"persistence": {"type": "cookie"}, "queue_timeout": "3s"}))
    results = {}

    def req(key, path, cookie):
        results[key] = H.http_request(s.port, "GET", path, headers=[("Cookie", "SLUICE_SERVER=%s" % cookie)],
                                      timeout=10)

    slow = threading.Thread(target=req, args=("slow", "/slow?sleep_ms=1500", "A"))
    slow.start()
    H.wait_for(lambda: da.stats()["requests"] >= 1, 5, what="the slow request at a")
    waiter = threading.Thread(target=req, args=("waiter", "/waiter", "A"))
    waiter.start()
    # meanwhile new clients go to b without waiting behind a's queue
    for i in range(5):
        r = H.http_request(s.port, "GET", "/new%d" % i, timeout=1.0)
        assert r.status == 200 and set_cookie(r, "SLUICE_SERVER") == "B", r
    slow.join(10)
    waiter.join(10)
    assert results["slow"].status == 200 and results["waiter"].status == 200
    es = {e["target"]: e for e in wait_entries(s, "/", 7)}
    assert es["/waiter"]["server"] == "app/a" and es["/waiter"]["persistence"] == "hit"
    assert int(es["/waiter"]["queue_us"]) > 500000, es["/waiter"]
    assert all(int(es["/new%d" % i]["queue_us"]) < 500000 for i in range(5))
    # a's queue times out while a stays busy
    n = da.stats()["requests"]
    slow = threading.Thread(target=req, args=("slow2", "/slow2?sleep_ms=5000", "A"))
    slow.start()
    H.wait_for(lambda: da.stats()["requests"] > n, 5, what="the second slow request at a")
    r = H.http_request(s.port, "GET", "/late", headers=[("Cookie", "SLUICE_SERVER=A")], timeout=10)
    assert r.status == 503, r
    e = wait_entries(s, "/late", 1)[0]
    assert e["reason"] == "queue_timeout", e
    slow.join(10)


@pytest.mark.parametrize("workers", [1, 2])
def test_saturated_servers_still_take_new_users(sluice, demo, workers):
    """Both servers full with users whose sessions come straight back:
    a new user (no session yet) is served in its turn, oldest first across
    the backend's queue and the servers' own, not starved by them."""
    da, db = demo(keepalive_ms=60000), demo(keepalive_ms=60000)
    servers = [H.server(da.port, "a", max_connections=1, cookie="A"),
               H.server(db.port, "b", max_connections=1, cookie="B")]
    s = sluice(H.make_config(H.free_port(), servers, workers=workers,
                             backend={"persistence": {"type": "cookie"}, "queue_timeout": "3s"}))
    stop = threading.Event()
    errors = []

    def session_user(cookie):
        while not stop.is_set():
            r = H.http_request(s.port, "GET", "/sess?sleep_ms=40",
                               headers=[("Cookie", "SLUICE_SERVER=%s" % cookie)], timeout=10)
            if r.status != 200:
                errors.append(r.status)

    users = [threading.Thread(target=session_user, args=(c,)) for c in "AABBAB"]
    for u in users:
        u.start()
    try:
        H.wait_for(lambda: len(entries_for(s, "/sess")) >= 12, 10, what="the session users going")
        for i in range(6):
            r = H.http_request(s.port, "GET", "/new%d" % i, timeout=10)
            assert r.status == 200, r
    finally:
        stop.set()
        for u in users:
            u.join(15)
    assert errors == []
    news = wait_entries(s, "/new", 6)
    assert all(e["persistence"] == "miss" for e in news)
    # each waited at most for the requests queued before it (a few of 40 ms)
    assert max(int(e["queue_us"]) for e in news) < 1000000, news


# --------------------------------------------------------------------------
# sluice -t

BAD = [
    ({"type": "sticky"}, None, "backends[0].persistence.type", "unknown value"),
    ({"type": "app_cookie"}, None, "backends[0].persistence", "needs the name"),
    ({"type": "cookie", "cookie": "a b"}, None, "backends[0].persistence.cookie", "token"),
    ({"type": "jvm_route", "secure": True}, None, "backends[0].persistence.secure", "type cookie"),
    ({"type": "cookie", "same_site": "none", "secure": False}, None,
     "backends[0].persistence.same_site", "Secure"),
    ({"type": "cookie"}, {"route": "n1"}, "backends[0].servers[0].route", "jvm_route"),
    ({"type": "jvm_route"}, {"route": "x y"}, "backends[0].servers[0].route", "cookie characters"),
    ({"type": "weblogic"}, {"jvmid": "1!2"}, "backends[0].servers[0].jvmid", "without '!'"),
    ({"type": "source", "cookie": "X"}, None, "backends[0].persistence.cookie", "no cookie"),
    ({"type": "cookie", "ttl": "5m"}, None, "backends[0].persistence.ttl", "app_cookie"),
]


@pytest.mark.parametrize("persist,srv,key,text", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_persistence_config(sluice, persist, srv, key, text):
    servers = [H.server(H.free_port(), "s1", **(srv or {})), H.server(H.free_port(), "s2")]
    s = sluice(H.make_config(H.free_port(), servers, backend={"persistence": persist}), start=False)
    r = s.check()
    assert r.returncode == 1, r.stderr
    assert re.search(r":\d+:\d+: %s: .*%s" % (re.escape(key), re.escape(text)), r.stderr), r.stderr


def test_duplicate_routes_refused(sluice):
    servers = [H.server(H.free_port(), "s1", route="n"), H.server(H.free_port(), "s2", route="n")]
    s = sluice(H.make_config(H.free_port(), servers, backend={"persistence": {"type": "jvm_route"}}),
               start=False)
    r = s.check()
    assert r.returncode == 1 and re.search(r"servers\[1\]\.route: servers s1 and s2 have the same route", r.stderr), r.stderr
