"""The admin listener: /status structure, controls that change what the
data path does (disable, enable, drain, max_connections, inspection switch,
reload), the bearer token, bad admin input, where the admin listener lives
(its own address, 127.0.0.1:9901 by default, never a listener's), and the
JSON access log format."""

import json
import re
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import harness as H


def servers_by_name(st, backend="app"):
    be = [b for b in st["backends"] if b["name"] == backend][0]
    return {x["name"]: x for x in be["servers"]}


def served_by(s, prefix):
    """{server name: count} of access log entries whose target starts with
    PREFIX."""
    out = {}
    for e in s.access_entries():
        if e["target"].startswith(prefix):
            name = e["server"].split("/", 1)[-1]
            out[name] = out.get(name, 0) + 1
    return out


def burst(s, prefix, n):
    """N requests, each on its own connection (so with workers: 2 they
    spread over both workers); all must succeed."""
    for i in range(n):
        r = H.http_request(s.port, "GET", "%s%d" % (prefix, i))
        assert r.status == 200, r
    H.wait_for(lambda: sum(served_by(s, prefix).values()) >= n, 5,
               what="%d access log entries for %s" % (n, prefix))
    return served_by(s, prefix)


def assert_text_error(r, status, *words):
    assert r.status == status, r
    assert (r.header("content-type") or "").startswith("text/plain"), r.headers
    body = r.body.decode()
    assert body.strip(), "an admin error needs a message"
    for w in words:
        assert w in body, (w, body)


# --------------------------------------------------------------------------
# /status


def test_status_structure(sluice, demo):
    """Every field an operator needs: version, master pid, uptime, config
    path, inspection switch, the workers (pids = the real children), each
    listener (address, backend, connections, accepted, TLS figures,
    requests), each backend (queue, reuse, figures) and each of its servers
    (address, health, admin state, max_connections, connections, busy, idle,
    connection_reuse, figures, latency quantiles)."""
    d1, d2 = demo(keepalive_ms=60000), demo(keepalive_ms=60000)
    cfg = H.make_config(H.free_port(), [H.server(d1.port, "a", max_connections=7),
                                        H.server(d2.port, "b", max_connections=9)],
                        workers=2, admin=H.admin_config())
    # a second backend, reachable from a second listener
    d3 = demo(keepalive_ms=60000)
    be2 = dict(cfg["backends"][0], name="other",
               servers=[H.server(d3.port, "c", max_connections=3)])
    cfg["backends"].append(be2)
    cfg["listeners"].append({"name": "http2", "address": "127.0.0.1:%d" % H.free_port(),
                             "backend": "other"})
    s = sluice(cfg)
    with H.Client(s.port) as c:
        for i in range(4):
            assert c.request("GET", "/s%d" % i).status == 200
    st = s.status()
    assert st["version"] and isinstance(st["version"], str)
    assert st["master_pid"] == s.pid
    assert isinstance(st["uptime_s"], int) and 0 <= st["uptime_s"] < 60
    assert st["config"] == s.config_path
    assert st["inspect"] in ("on", "off")
    assert sorted(w["pid"] for w in st["workers"]) == sorted(s.worker_pids())
    assert len({w["slot"] for w in st["workers"]}) == 2
    assert all(isinstance(w["generation"], int) for w in st["workers"])
    assert [l["name"] for l in st["listeners"]] == ["http", "http2"]
    li = st["listeners"][0]
    assert li["address"] == cfg["listeners"][0]["address"] and li["backend"] == "app"
    assert li["tls"] is False
    assert li["inspect"] is None  # no inspect: configured on this listener
    for k in ("connections", "accepted", "requests", "bytes_in", "bytes_out"):
        assert isinstance(li[k], int), k
    assert set(li["tls_handshakes"]) == {"full_ecdsa", "full_rsa", "resumed", "failed"}
    assert set(li["responses"]) == {"1xx", "2xx", "3xx", "4xx", "5xx", "none"}
    assert li["requests"] == 4 and li["responses"]["2xx"] == 4
    assert [b["name"] for b in st["backends"]] == ["app", "other"]
    be = st["backends"][0]
    for k in ("queued", "connection_reuse", "requests", "responses", "errors", "latency_us"):
        assert k in be, k
    assert be["requests"] == 4
    sv = servers_by_name(st)
    assert sorted(sv) == ["a", "b"]
    assert sv["a"]["address"] == "127.0.0.1:%d" % d1.port
    assert (sv["a"]["max_connections"], sv["b"]["max_connections"]) == (7, 9)
    for x in sv.values():
        assert x["health"] == "up" and x["admin"] == "enabled"
        for k in ("connections", "busy", "idle", "requests"):
            assert isinstance(x[k], int) and x[k] >= 0, k
        assert 0.0 <= x["connection_reuse"] <= 1.0
        assert set(x["latency_us"]) == {"queue_seconds", "backend_connect_seconds",
                                        "backend_response_seconds", "request_seconds",
                                        "inspect_seconds"}
        for q in x["latency_us"].values():
            assert set(q) == {"count", "mean", "p50", "p90", "p99", "p999"}
            assert q["p50"] <= q["p90"] <= q["p99"] <= q["p999"]
    assert sv["a"]["requests"] + sv["b"]["requests"] == 4
    # one client connection, 4 requests, alternating: each server sees a
    # new connection then reuses it
    assert sv["a"]["requests"] == 2 and sv["a"]["connection_reuse"] == 0.5
    assert sv["a"]["connections"] == sv["a"]["idle"] == 1 and sv["a"]["busy"] == 0
    assert servers_by_name(st, "other")["c"]["max_connections"] == 3
    time.sleep(1.1)
    assert s.status()["uptime_s"] >= st["uptime_s"] + 1


# --------------------------------------------------------------------------
# controls


def test_disable_and_enable_server(sluice, demo):
    """workers: 2. Disabling a of {a, b} sends every following request to b
    (both workers obey), /status and sluice_server_up show it; enabling a
    brings it back into rotation."""
    d1, d2 = demo(keepalive_ms=60000), demo(keepalive_ms=60000)
    s = sluice(H.make_config(H.free_port(), [H.server(d1.port, "a"), H.server(d2.port, "b")],
                             workers=2, admin=H.admin_config()))
    assert set(burst(s, "/before", 12)) == {"a", "b"}
    r = s.admin_post("/servers/app/a/disable")
    assert r.status == 200 and b"disabled" in r.body, r
    assert servers_by_name(s.status())["a"]["admin"] == "disabled"
    assert 'sluice_server_up{backend="app",server="a"} 0' in s.metrics_text()
    d1.reset_stats()
    assert burst(s, "/off", 20) == {"b": 20}
    assert d1.stats()["requests"] == 0
    # a disabled server keeps no idle connections
    H.wait_for(lambda: servers_by_name(s.status())["a"]["connections"] == 0, 3,
               what="a's pooled connections closed")
    r = s.admin_post("/servers/app/a/enable")
    assert r.status == 200 and b"enabled" in r.body
    assert servers_by_name(s.status())["a"]["admin"] == "enabled"
    assert 'sluice_server_up{backend="app",server="a"} 1' in s.metrics_text()
    got = burst(s, "/on", 20)
    assert set(got) == {"a", "b"} and got["a"] >= 5, got


def test_drain_server(sluice, demo):
    """Draining a: a request already running on a finishes normally; every
    new request goes to b; a ends up with no connections; enable puts it
    back."""
    d1, d2 = demo(keepalive_ms=60000), demo(keepalive_ms=60000)
    s = sluice(H.make_config(H.free_port(), [H.server(d1.port, "a"), H.server(d2.port, "b")],
                             admin=H.admin_config()))
    assert s.admin_post("/servers/app/b/disable").status == 200
    with ThreadPoolExecutor(1) as ex:
        slow = ex.submit(H.http_request, s.port, "GET", "/slow?sleep_ms=1200", timeout=10)
        H.wait_for(lambda: servers_by_name(s.status())["a"]["busy"] == 1, 3, what="a busy")
        assert s.admin_post("/servers/app/b/enable").status == 200
        r = s.admin_post("/servers/app/a/drain")
        assert r.status == 200 and b"drain" in r.body
        assert servers_by_name(s.status())["a"]["admin"] == "drain"
        assert burst(s, "/drained", 10) == {"b": 10}
        assert not slow.done(), "the running request should still be running"
        r = slow.result(10)
    assert r.status == 200 and len(r.body) > 0
    e = s.wait_access_entry(lambda e: e["target"].startswith("/slow"))
    assert e["server"] == "app/a" and e["reason"] == "ok"
    H.wait_for(lambda: servers_by_name(s.status())["a"]["connections"] == 0, 3,
               what="a drained of connections")
    assert s.admin_post("/servers/app/a/enable").status == 200
    assert set(burst(s, "/back", 10)) == {"a", "b"}


def concurrent_slow(s, n, tag, ms=250):
    with ThreadPoolExecutor(n) as ex:
        fs = [ex.submit(H.http_request, s.port, "GET", "/%s%d?sleep_ms=%d" % (tag, i, ms),
                        timeout=30) for i in range(n)]
        return [f.result(30).status for f in fs]


def test_max_connections_change_limits_concurrency(sluice, demo):
    """max_connections 8 in the config, set to 2 at run time: 10 concurrent
    slow requests never hold more than 2 connections at the demo backend;
    raised to 5: exactly up to 5. /status shows each value."""
    d = demo(threads=32, keepalive_ms=60000)
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1", max_connections=8)],
                             backend={"queue_timeout": "30s"}, admin=H.admin_config()))
    r = s.admin_post("/servers/app/s1/max_connections", "2")
    assert r.status == 200, r
    assert servers_by_name(s.status())["s1"]["max_connections"] == 2
    d.reset_stats()
    assert concurrent_slow(s, 10, "two") == [200] * 10
    assert d.stats()["proxy_max_active"] == 2
    r = s.admin_post("/servers/app/s1/max_connections", "5\n")
    assert r.status == 200, r
    assert servers_by_name(s.status())["s1"]["max_connections"] == 5
    d.reset_stats()
    assert concurrent_slow(s, 10, "five") == [200] * 10
    assert d.stats()["proxy_max_active"] == 5


class InflightOrigin:
    """Recording-backend handler that sleeps DELAY per request and tracks
    how many requests it is serving at once (exact, in-process)."""

    def __init__(self, delay=0.25):
        self.delay = delay
        self.lock = threading.Lock()
        self.now = 0
        self.max = 0

    def reset(self):
        with self.lock:
            self.max = self.now

    def __call__(self, conn):
        while True:
            q = conn.read_request()
            with self.lock:
                self.now += 1
                self.max = max(self.max, self.now)
            try:
                time.sleep(self.delay)
            finally:
                with self.lock:
                    self.now -= 1
            conn.respond(q.target.encode())


def test_max_connections_lowered_below_pooled_connections(sluice, recorder):
    """8 connections pooled (idle), max_connections lowered to 3: 10
    concurrent requests are never served more than 3 at a time, and the
    pool shrinks to 3 connections. (The cap is on connections to the
    server; pooled ones above a lowered cap must not keep serving.)"""
    origin = InflightOrigin()
    rb = recorder(origin)
    s = sluice(H.make_config(H.free_port(), [H.server(rb.port, "s1", max_connections=8)],
                             backend={"queue_timeout": "30s"}, admin=H.admin_config()))
    assert concurrent_slow(s, 8, "warm") == [200] * 8
    assert origin.max == 8
    H.wait_for(lambda: servers_by_name(s.status())["s1"]["idle"] == 8, 3, what="8 idle")
    assert s.admin_post("/servers/app/s1/max_connections", "3").status == 200
    origin.reset()
    assert concurrent_slow(s, 10, "low") == [200] * 10
    assert origin.max <= 3, "%d requests at once at the origin after max_connections 3" \
        % origin.max
    conns = servers_by_name(s.status())["s1"]["connections"]
    assert conns <= 3, "sluice still holds %d connections after max_connections 3" % conns
    live = sum(1 for c in rb.conns if not c.closed and not H._peer_gone(c.sock))
    assert live <= 3, live


def test_max_connections_override_survives_reload(sluice, demo):
    """The operator's max_connections stays in force across a reload (the
    config's value returns only on restart)."""
    d = demo(threads=32, keepalive_ms=60000)
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1", max_connections=8)],
                             backend={"queue_timeout": "30s"}, admin=H.admin_config()))
    assert s.admin_post("/servers/app/s1/max_connections", "3").status == 200
    s.reload()
    H.wait_port(s.admin_port, 10)
    H.wait_for(lambda: min(w["generation"] for w in s.status()["workers"]) >= 1, 10,
               what="the new generation serving /status")
    assert servers_by_name(s.status())["s1"]["max_connections"] == 3
    d.reset_stats()
    assert concurrent_slow(s, 8, "rl") == [200] * 8
    assert d.stats()["proxy_max_active"] <= 3


def counting_origin(counts):
    """Keepalive origin counting requests per target (health checks
    included) in COUNTS."""
    lock = threading.Lock()

    def handler(conn):
        while True:
            q = conn.read_request()
            with lock:
                counts[q.target] = counts.get(q.target, 0) + 1
            conn.respond(b"ok")
    return handler


def test_disable_pauses_health_checks_drain_keeps_them(sluice, recorder):
    """Health checks every 50 ms: a disabled server gets none, a draining
    one keeps getting them; every control is logged at warning level."""
    counts = {}
    rb = recorder(counting_origin(counts))
    other = recorder()
    s = sluice(H.make_config(H.free_port(), [H.server(rb.port, "a"), H.server(other.port, "b")],
                             health={"path": "/health", "interval": "50ms", "timeout": "40ms",
                                     "rise": 1, "fall": 1},
                             admin=H.admin_config()))
    H.wait_for(lambda: counts.get("/health", 0) >= 3, 5, what="health checks on a")
    off = len(H.read_text(s.error_log))
    assert s.admin_post("/servers/app/a/disable").status == 200
    time.sleep(0.15)              # a check already on its way may still arrive
    n = counts.get("/health", 0)
    time.sleep(0.6)
    assert counts.get("/health", 0) == n, "health checks continued on a disabled server"
    assert s.admin_post("/servers/app/a/drain").status == 200
    H.wait_for(lambda: counts.get("/health", 0) >= n + 4, 3,
               what="health checks on a draining server")
    assert servers_by_name(s.status())["a"]["health"] == "up"
    assert s.admin_post("/servers/app/a/max_connections", "9").status == 200
    assert s.admin_post("/inspect/off").status == 200
    assert s.admin_post("/servers/app/a/enable").status == 200
    log = H.read_text(s.error_log)[off:]
    for what in ("app/a set to disabled", "app/a set to drain", "app/a max_connections set to 9",
                 "inspection hook switched off", "app/a set to enabled"):
        assert any("[warn]" in l and what in l for l in log.splitlines()), (what, log)


def test_inspect_switch(sluice, demo):
    """/inspect/off and /inspect/on flip the switch all workers read:
    /status inspect and sluice_inspect_enabled follow; traffic keeps
    flowing. (The hook itself arrives with the Lua issue.)"""
    d = demo()
    s = sluice(H.make_config(H.free_port(), [H.server(d.port)], workers=2,
                             admin=H.admin_config()))
    with H.Client(s.port) as held:   # a connection open across the switch
        assert held.request("GET", "/x").status == 200
        r = s.admin_post("/inspect/off")
        assert r.status == 200 and b"off" in r.body
        assert s.status()["inspect"] == "off"
        assert re.search(r"^sluice_inspect_enabled 0$", s.metrics_text(), re.M)
        assert held.request("GET", "/y").status == 200
        r = s.admin_post("/inspect/on")
        assert r.status == 200 and b"on" in r.body
        assert s.status()["inspect"] == "on"
        assert re.search(r"^sluice_inspect_enabled 1$", s.metrics_text(), re.M)
        assert held.request("GET", "/z").status == 200
    assert_text_error(s.admin_post("/inspect/maybe"), 404, "/inspect/on")
    assert s.status()["inspect"] == "on"


def test_reload_control(sluice, demo):
    """POST /reload: a new worker generation appears in /status (new pids)
    and the rewritten config is in force (the new max_connections)."""
    d = demo()
    cfg = H.make_config(H.free_port(), [H.server(d.port, "s1", max_connections=4)],
                        workers=2, admin=H.admin_config())
    s = sluice(cfg)
    st0 = s.status()
    gen0 = max(w["generation"] for w in st0["workers"])
    pids0 = {w["pid"] for w in st0["workers"]}
    cfg["backends"][0]["servers"][0]["max_connections"] = 6
    s.write_config(cfg)
    r = s.admin_post("/reload")
    assert r.status in (200, 202), r
    assert r.body.strip()

    def reloaded():
        try:
            st = s.status()
        except (OSError, H.ConnClosed, AssertionError):
            return None
        ws = st["workers"]
        if len(ws) == 2 and all(w["generation"] > gen0 for w in ws):
            return st
        return None
    st = H.wait_for(reloaded, 10, what="a new worker generation in /status")
    assert not ({w["pid"] for w in st["workers"]} & pids0)
    assert servers_by_name(st)["s1"]["max_connections"] == 6
    assert H.http_request(s.port, "GET", "/after").status == 200


# --------------------------------------------------------------------------
# token


def test_token(sluice, demo):
    """admin.token set: no Authorization, a wrong token, a token that is a
    prefix or extension of the right one, and another scheme all get 401
    with a message, for reads and controls (and the control has no effect);
    the right bearer token gets 200."""
    d = demo()
    tok = "s3cr3t-Token_42"
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1")],
                             admin=H.admin_config(token=tok)))
    for path in ("/status", "/metrics"):
        assert_text_error(s.admin_get(path, token=None), 401, "token")
        for bad in ("wrong", tok[:-1], tok + "x", tok.upper(), ""):
            assert s.admin_get(path, token=bad).status == 401, (path, bad)
        assert s.admin_get(path, headers=[("Authorization", "Basic " + tok)],
                           token=None).status == 401
        assert s.admin_get(path).status == 200
    assert s.admin_post("/servers/app/s1/disable", token=None).status == 401
    assert s.admin_post("/servers/app/s1/disable", token="nope").status == 401
    assert servers_by_name(s.status())["s1"]["admin"] == "enabled"
    assert s.admin_post("/servers/app/s1/disable").status == 200
    assert servers_by_name(s.status())["s1"]["admin"] == "disabled"
    # the scheme is case-insensitive (RFC 9110 11.1)
    assert s.admin_get("/status", headers=[("Authorization", "bearer " + tok)],
                       token=None).status == 200


def test_token_dashboard_page_loads_without_token(sluice, demo):
    """With a token, the dashboard page itself must load in a browser (which
    cannot add a bearer header to a navigation): its script asks for the
    token when /status or /metrics answer 401. The page holds no data, so
    serving it without the token discloses nothing."""
    d = demo()
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1")],
                             admin=H.admin_config(token="tok")))
    assert s.admin_get("/status", token=None).status == 401
    r = s.admin_get("/", token=None)
    assert r.status == 200, "GET / with a token configured: %s %r" % (r.status, r.body[:100])
    assert r.header("content-type").startswith("text/html")


# --------------------------------------------------------------------------
# bad input


def test_bad_admin_requests(sluice, demo):
    d = demo()
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1", max_connections=11)],
                             admin=H.admin_config()))
    # unknown server / backend / action, and unknown paths
    assert_text_error(s.admin_post("/servers/nope/x/enable"), 404, "x", "nope")
    assert_text_error(s.admin_post("/servers/app/x/enable"), 404, "x")
    assert_text_error(s.admin_post("/servers/app/s1/frobnicate"), 404, "frobnicate")
    assert_text_error(s.admin_post("/servers/app/s1"), 404)
    assert_text_error(s.admin_post("/nope"), 404)
    assert_text_error(s.admin_get("/nope"), 404)
    assert_text_error(s.admin_get("/metrics/extra"), 404)
    # max_connections needs a number 1..1000000
    for body in ("abc", "0", "", "-1", "1000001", "7x", " 7", "99999999999999999999"):
        assert_text_error(s.admin_post("/servers/app/s1/max_connections", body), 400), body
    assert servers_by_name(s.status())["s1"]["max_connections"] == 11
    assert servers_by_name(s.status())["s1"]["admin"] == "enabled"
    # malformed HTTP
    for raw in (b"GARBAGE\r\n\r\n", b"GET /status HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"):
        r, _ = H.raw_exchange(s.admin_port, raw)
        assert_text_error(r, 400)
    # the data path is unaffected
    assert H.http_request(s.port, "GET", "/ok").status == 200


def test_controls_are_post_only(sluice, demo):
    """GET (or PUT, DELETE) on a control is 405 with a message, not a state
    change."""
    d = demo()
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1")], admin=H.admin_config()))
    for method in ("GET", "PUT", "DELETE"):
        for path in ("/servers/app/s1/disable", "/inspect/off", "/reload",
                     "/servers/app/s1/max_connections"):
            r = s.admin_request(method, path)
            assert_text_error(r, 405, "POST")
    st = s.status()
    assert servers_by_name(st)["s1"]["admin"] == "enabled" and st["inspect"] == "on"
    assert min(w["generation"] for w in st["workers"]) == 0


def test_head_request_has_no_body(sluice, demo):
    """HEAD /status and HEAD /metrics: the headers of the GET (Content-Length
    included) and no content (RFC 9110 9.3.2)."""
    d = demo()
    s = sluice(H.make_config(H.free_port(), [H.server(d.port)], admin=H.admin_config()))
    for path in ("/status", "/metrics"):
        with H.Client(s.admin_port) as c:
            c.send(H.build_request("HEAD", path))
            r = c.read_response("HEAD")
            rest = c.wait_closed(5)
        assert r.status == 200 and int(r.header("content-length")) > 0, r
        assert rest == b"", "%d bytes of content after the HEAD %s response" % (len(rest), path)


def test_oversized_control_body_is_413(sluice, demo):
    """A control body over the admin limit (4 KiB) is refused with 413 and a
    message, not reported as a malformed request."""
    d = demo()
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1", max_connections=4)],
                             admin=H.admin_config()))
    r = s.admin_post("/servers/app/s1/max_connections", "7" * 5000)
    assert_text_error(r, 413)
    assert servers_by_name(s.status())["s1"]["max_connections"] == 4


# --------------------------------------------------------------------------
# where the admin listener lives


def test_admin_listener_is_separate_from_data_listener(sluice, demo):
    """GET /metrics on the data port is an ordinary proxied request (the
    demo backend answers it, the access log names the server); the admin
    port serves sluice's own pages and never proxies."""
    d = demo(keepalive_ms=60000)
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1")], admin=H.admin_config()))
    d.reset_stats()
    r = H.http_request(s.port, "GET", "/metrics")
    assert r.status == 200
    assert r.header("x-conn-id") is not None, "not answered by the demo backend"
    assert b"sluice_" not in r.body
    e = s.wait_access_entry(lambda e: e["target"] == "/metrics")
    assert e["server"] == "app/s1"
    assert d.stats()["requests"] == 1
    m = s.admin_get("/metrics")
    assert m.status == 200 and b"# TYPE sluice_requests_total counter" in m.body
    assert m.header("x-conn-id") is None
    assert s.admin_get("/anything").status == 404
    assert d.stats()["requests"] == 1
    assert s.admin_port != s.port


def port_free(port):
    """Nobody listens on PORT (SO_REUSEADDR as sluice does: a TIME_WAIT
    leftover does not count)."""
    t = socket.socket()
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        t.bind((H.HOST, port))
        t.listen(1)
        return True
    except OSError:
        return False
    finally:
        t.close()


def test_admin_default_address(sluice, demo):
    """admin: {} listens on 127.0.0.1:9901."""
    if not port_free(9901):
        pytest.skip("127.0.0.1:9901 is in use here")
    d = demo()
    s = sluice(H.make_config(H.free_port(), [H.server(d.port)], admin={}))
    assert s.admin_port == 9901
    st = json.loads(H.http_request(9901, "GET", "/status").body)
    assert st["config"] == s.config_path and st["master_pid"] == s.pid
    pids = H.socket_pids(9901, None, s.worker_pids())
    assert len(pids) == 1, pids


def test_admin_address_equal_to_listener_is_a_config_error(sluice, demo):
    port = H.free_port()
    cfg = H.make_config(port, [H.server(H.free_port())],
                        admin={"address": "127.0.0.1:%d" % port})
    s = sluice(cfg, start=False)
    r = s.check()
    assert r.returncode != 0, r
    assert "admin.address" in r.stdout + r.stderr, r


def test_admin_port_in_use_is_reported(sluice, demo):
    """Another process holds the admin port: the error log says so, naming
    the admin address."""
    d = demo()
    hold = socket.socket()
    hold.bind((H.HOST, 0))
    hold.listen(1)
    port = hold.getsockname()[1]
    try:
        s = sluice(H.make_config(H.free_port(), [H.server(d.port)],
                                 admin={"address": "127.0.0.1:%d" % port}))
        s.wait_error_log(r"admin.*127\.0\.0\.1:%d" % port, timeout=5)
        assert H.http_request(s.port, "GET", "/").status == 200
    finally:
        hold.close()


# --------------------------------------------------------------------------
# JSON access log

JSON_FIELDS = {"ts", "client", "client_port", "method", "target", "status", "bytes", "backend",
               "server", "total_us", "queue_us", "connect_us", "backend_us", "be_conn_req",
               "inspect_us", "inspect", "reason", "proto"}
TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def check_json_entry(e, tls=False):
    want = JSON_FIELDS | ({"tls"} if tls else set()) | ({"tags"} if "tags" in e else set())
    assert set(e) == want, "fields: extra %s, missing %s" % (set(e) - want, want - set(e))
    assert TS_RE.match(e["ts"]), e["ts"]
    assert isinstance(e["client"], str) and isinstance(e["client_port"], int)
    assert isinstance(e["status"], int) and isinstance(e["bytes"], int)
    for k in ("total_us", "queue_us", "connect_us", "backend_us"):
        assert isinstance(e[k], int) and e[k] >= 0, k
    assert e["be_conn_req"] is None or isinstance(e["be_conn_req"], int)
    assert e["inspect_us"] is None or isinstance(e["inspect_us"], int)
    assert e["inspect"] in ("off", "allow", "deny", "redirect", "error", "would_deny", "would_redirect")
    assert isinstance(e["reason"], str)
    assert e["proto"] in (None, "HTTP/1.0", "HTTP/1.1", "HTTP/2.0")
    for k in ("method", "target", "backend", "server"):
        assert e[k] is None or isinstance(e[k], str), k


def test_json_access_log(sluice, demo):
    """access_log_format: json: every line is one JSON object with exactly
    the documented fields, typed; the values match what the client saw;
    quotes and backslashes in the target survive a round trip; a malformed
    request and a refused backend are logged too."""
    d = demo(keepalive_ms=60000)
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1"),
                                             H.server(H.free_port(), "dead")],
                             backend={"balance": "roundrobin"}, access_log_format="json",
                             admin=H.admin_config()))
    targets = ['/plain?x=1', '/q?a="quoted"&b=back\\slash\\', '/p%22%5C?{}|^`']
    seen = {}
    for t in targets:
        for attempt in range(2):   # round robin: one of two reaches s1
            with H.Client(s.port) as c:
                raw = ("GET %s HTTP/1.1\r\nHost: h\r\n\r\n" % t).encode()
                c.send(raw)
                r = c.read_response()
                seen.setdefault(t, []).append((r.status, len(r.raw), c.sock.getsockname()[1]))
    H.raw_exchange(s.port, b"GARBAGE\r\n\r\n")
    n = 2 * len(targets) + 1
    H.wait_for(lambda: len(s.access_json()) >= n, 5, what="%d JSON lines" % n)
    es = s.access_json()
    assert len(es) == n
    for e in es:
        check_json_entry(e)
    for t in targets:
        mine = [e for e in es if e["target"] == t]
        assert len(mine) == 2, (t, [e["target"] for e in es])
        for e, (status, nbytes, cport) in zip(mine, seen[t]):
            assert e["status"] == status and e["bytes"] == nbytes and e["client_port"] == cport
            assert e["client"] == "127.0.0.1" and e["method"] == "GET" and e["backend"] == "app"
            if e["server"] == "s1":
                assert e["reason"] == "ok" and e["be_conn_req"] >= 1
                assert e["total_us"] >= e["backend_us"] > 0
            else:
                assert e["server"] == "dead" and e["reason"] == "backend_refused"
                assert e["status"] == 502
    bad = [e for e in es if e["reason"] == "bad_request"]
    assert len(bad) == 1 and bad[0]["status"] == 400 and bad[0]["method"] is None
    assert bad[0]["backend"] is None and bad[0]["server"] is None
    # the file is exactly one object per line, nothing else
    with open(s.access_log, "rb") as f:
        lines = f.read().split(b"\n")
    assert lines[-1] == b"" and all(l.startswith(b"{") and l.endswith(b"}") for l in lines[:-1])


def test_json_access_log_tls_object(sluice, demo, id_pki):
    """On a TLS listener every JSON line carries a tls object (version,
    cipher, sni, alpn, resumed as a boolean, cert kind)."""
    d = demo(keepalive_ms=60000)
    cfg = H.make_config(H.free_port(), [H.server(d.port, "s1")], access_log_format="json",
                        admin=H.admin_config(),
                        listener={"tls": {"certificates": [id_pki.ecdsa.entry(),
                                                           id_pki.rsa.entry()]}})
    s = sluice(cfg)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    raw = socket.create_connection((H.HOST, s.port), timeout=5)
    with ctx.wrap_socket(raw, server_hostname="localhost") as sk:
        sk.settimeout(5)
        sk.sendall(H.build_request("GET", "/tls-json"))
        r = H.read_response(H.Stream(sk))
        version, cipher = sk.version(), sk.cipher()[0]
    assert r.status == 200
    H.wait_for(lambda: s.access_json(), 5, what="a JSON line")
    e = [x for x in s.access_json() if x["target"] == "/tls-json"][0]
    check_json_entry(e, tls=True)
    t = e["tls"]
    assert t["version"] == version and t["cipher"] == cipher
    assert t["sni"] == "localhost" and t["alpn"] == "http/1.1"
    assert t["resumed"] is False and t["cert"] in ("ecdsa", "rsa")


def test_bad_access_log_format_is_a_config_error(sluice):
    cfg = H.make_config(H.free_port(), [H.server(H.free_port())], access_log_format="xml")
    s = sluice(cfg, start=False)
    r = s.check()
    assert r.returncode != 0
    assert "access_log_format" in r.stdout + r.stderr, r
    cfg["access_log_format"] = "json"
    s.write_config(cfg)
    assert s.check().returncode == 0
