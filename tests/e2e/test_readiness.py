"""Readiness for a layer-4 balancer in front: the admin listener's GET /ready,
a listener's `monitor_uri` (HAProxy's monitor-uri), admin POST /drain and
POST /ready, and `timeouts.drain_notice` (not ready but still accepting,
before a stop or a reload that removes a listener closes sockets).

Exact outcomes: status codes, bodies, Cache-Control, the access log's
reason=monitor, /status and /metrics, the moment a listener stops accepting
(measured against deadlines), and a real HAProxy in TCP mode with
`option httpchk GET /ready` that marks sluice DOWN before it stops
accepting. Config errors for bad values name the key."""

import re
import signal
import subprocess
import time

import pytest

import harness as H
import peers
from h2client import H2Client
from test_config import base_lines, error_lines, mutate, run_check

NOTICE_S = 2.0


def cfg_with(port, server_port, notice="2s", workers=2, extra_listeners=(), **kw):
    cfg = H.make_config(port, [H.server(server_port)], workers=workers, admin=H.admin_config(),
                        timeouts={"drain_notice": notice, "drain": "2s"},
                        listener={"monitor_uri": "/ready"}, **kw)
    for li in extra_listeners:
        cfg["listeners"].append(dict(li, backend="app"))
    return cfg


def get(port, path="/", method="GET", timeout=3.0):
    return H.http_request(port, method, path, headers=[("Host", "t")], timeout=timeout)


def ready_status(port, path="/ready"):
    return get(port, path).status


def refuses(port):
    """True once PORT no longer takes a connection (refused, or SYNs
    ignored by the closing socket's filter)."""
    return not H.port_accepts(port, timeout=0.2)


def test_monitor_uri_answered_by_sluice_not_proxied(sluice, recorder, tmp_path):
    """The monitor_uri is answered by sluice itself: 200 "ready", no-store,
    never proxied, not inspected (a deny-all hook lets it through), logged
    with reason=monitor; the query is ignored; HEAD has no body; any other
    path goes to the backend as usual."""
    deny = tmp_path / "deny.lua"
    deny.write_text("function inspect(req) req:deny(403) end\n")
    rec = recorder()
    cfg = cfg_with(H.free_port(), rec.port, workers=1)
    cfg["listeners"][0].update(inspect={"script": str(deny)}, h2c="on")
    s = sluice(cfg)
    r = get(s.port, "/ready")
    assert (r.status, r.body) == (200, b"ready\n"), r
    assert r.header("Cache-Control") == "no-store"
    assert r.header("Content-Type") == "text/plain"
    r = get(s.port, "/ready?from=haproxy")
    assert (r.status, r.body) == (200, b"ready\n"), r
    r = get(s.port, "/ready", method="HEAD")
    assert (r.status, r.body, r.header("Content-Length")) == (200, b"", "6"), r
    # Not the monitor_uri: proxied, so the deny-all hook answers.
    assert get(s.port, "/readyz").status == 403
    assert get(s.port, "/ready/x").status == 403
    # The same over HTTP/2 (h2c: the stream layer answers, whatever the codec).
    c = H2Client(s.port)
    h = c.get("/ready")
    assert (h.status, bytes(h.data), h.header("cache-control")) == (200, b"ready\n", "no-store")
    c.close()
    assert rec.all_requests() == []

    def monitor_lines():
        return [e for e in s.access_entries() if e.get("reason") == "monitor"]
    H.wait_for(lambda: len(monitor_lines()) == 4, what="4 access log lines with reason=monitor")
    assert [e["status"] for e in monitor_lines()] == ["200"] * 4, monitor_lines()


def test_stop_notice_not_ready_then_listener_closes(sluice, demo):
    """SIGTERM with drain_notice: /ready (admin and monitor_uri) goes 503
    at once, new connections are still accepted and served during the
    notice, and the listener stops accepting only after drain_notice."""
    d = demo()
    s = sluice(cfg_with(H.free_port(), d.port))
    assert s.admin_get("/ready").status == 200
    assert ready_status(s.port) == 200
    st = s.status()
    assert (st["ready"], st["draining"]) == (True, []), st
    assert "sluice_ready 1\n" in s.metrics_text()
    t0 = time.monotonic()
    s.signal(signal.SIGTERM)
    H.wait_for(lambda: s.admin_get("/ready").status == 503, what="admin /ready 503")
    r = s.admin_get("/ready")
    assert (r.status, r.body) == (503, b"draining\n")
    r = get(s.port, "/ready")
    assert (r.status, r.body, r.header("Cache-Control")) == (503, b"draining\n", "no-store"), r
    st = s.status()
    assert (st["ready"], st["draining"]) == (False, ["stop"]), st
    m = s.metrics_text()
    assert "sluice_ready 0\n" in m and 'sluice_draining{cause="stop"} 1\n' in m
    # A stop's not-ready is not the admin's to undo.
    r = s.admin_post("/ready")
    assert (r.status, r.body) == (409, b"stopping: the instance stays not ready\n"), r
    assert s.admin_get("/ready").status == 503
    # Still serving traffic on new connections during the notice.
    assert get(s.port, "/").status == 200
    assert time.monotonic() - t0 < NOTICE_S, "the checks above outlasted the notice"
    H.wait_for(lambda: refuses(s.port), timeout=NOTICE_S + 5, interval=0.02,
               what="listener closed")
    closed = time.monotonic() - t0
    assert closed >= NOTICE_S - 0.05, "listener closed %.3fs after SIGTERM, before the notice" % closed
    assert s.proc.wait(timeout=10) == 0
    log = H.read_text(s.error_log)
    assert "stopping: not ready; listeners close in 2000 ms (timeouts.drain_notice" in log


def test_second_sigterm_cuts_the_notice_short(sluice, demo):
    d = demo()
    s = sluice(cfg_with(H.free_port(), d.port, notice="30s", workers=1))
    t0 = time.monotonic()
    s.signal(signal.SIGTERM)
    H.wait_for(lambda: ready_status(s.port) == 503, what="monitor_uri 503")
    assert get(s.port, "/").status == 200
    s.signal(signal.SIGTERM)
    assert s.proc.wait(timeout=10) == 0
    assert time.monotonic() - t0 < 10
    assert "stopping: second signal, drain notice cut short" in H.read_text(s.error_log)


def test_post_drain_and_post_ready(sluice, demo):
    """POST /drain: every worker's monitor_uri and the admin /ready answer
    503 while the listener keeps serving; it survives a reload; POST /ready
    undoes it. GET /ready needs no token, the controls do."""
    d = demo()
    cfg = cfg_with(H.free_port(), d.port)
    cfg["admin"]["token"] = "sekret"
    s = sluice(cfg)
    assert s.admin_get("/ready", token=None).status == 200
    assert s.admin_post("/drain", token=None).status == 401
    assert s.admin_get("/drain").status == 405
    r = s.admin_post("/drain")
    assert r.status == 200 and r.body.startswith(b"draining"), r
    assert s.admin_get("/ready", token=None).status == 503
    # New connections spread over both workers (SO_REUSEPORT): all agree.
    assert {ready_status(s.port) for _ in range(20)} == {503}
    assert {get(s.port, "/").status for _ in range(10)} == {200}
    st = s.status()
    assert (st["ready"], st["draining"]) == (False, ["admin"]), st
    m = s.metrics_text()
    assert "sluice_ready 0\n" in m and 'sluice_draining{cause="admin"} 1\n' in m
    assert "admin: drain: GET /ready and monitor_uri answer 503 until POST /ready" in H.read_text(s.error_log)
    s.reload()
    assert s.admin_get("/ready").status == 503
    assert ready_status(s.port) == 503
    r = s.admin_post("/ready")
    assert (r.status, r.body) == (200, b"ready\n"), r
    assert s.admin_get("/ready").status == 200
    assert {ready_status(s.port) for _ in range(20)} == {200}
    assert s.status()["draining"] == []


def test_monitor_uri_with_expect_continue_and_a_body_while_draining_answers_503(sluice, demo):
    """A balancer's check that announces a body with Expect: 100-continue
    is answered at once (no 100 Continue; the connection then closes) with
    readiness's own status: 503 "draining" after POST /drain, not the 200
    of the reason table."""
    d = demo()
    s = sluice(cfg_with(H.free_port(), d.port, workers=1))
    assert s.admin_post("/drain").status == 200
    req = (b"POST /ready HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
           b"Content-Length: 10\r\n\r\n")
    r, rest = H.raw_exchange(s.port, req)
    assert (r.status, r.body, r.header("Cache-Control")) == (503, b"draining\n", "no-store"), r
    assert r.interim == [] and rest == b""
    assert s.admin_post("/ready").status == 200
    r, rest = H.raw_exchange(s.port, req)
    assert (r.status, r.body) == (200, b"ready\n"), r
    entries = H.wait_for(lambda: (lambda es: es if len(es) == 2 else None)(
        [e for e in s.access_entries() if e.get("reason") == "monitor"]), what="2 monitor log lines")
    assert [e["status"] for e in entries] == ["503", "200"], entries
    assert " monitor: " not in H.read_text(s.error_log), "a readiness answer is not an error"


def test_reload_removing_listener_notice(sluice, demo):
    """A reload that removes listener `old`: its monitor_uri answers 503
    for drain_notice while it still accepts and serves; the kept listener
    and the instance stay ready; then `old` stops accepting."""
    d = demo()
    old_port = H.free_port()
    cfg = cfg_with(H.free_port(), d.port, extra_listeners=[
        {"name": "old", "address": "%s:%d" % (H.HOST, old_port), "monitor_uri": "/ready"}])
    s = sluice(cfg)
    assert ready_status(old_port) == 200
    new = dict(cfg, listeners=cfg["listeners"][:1])
    s.write_config(new)
    t0 = time.monotonic()
    s.signal(signal.SIGHUP)
    H.wait_for(lambda: ready_status(old_port) == 503, what="removed listener's monitor_uri 503")
    assert get(old_port, "/").status == 200
    assert ready_status(s.port) == 200
    assert s.admin_get("/ready").status == 200
    assert time.monotonic() - t0 < NOTICE_S, "the checks above outlasted the notice"
    H.wait_for(lambda: refuses(old_port), timeout=NOTICE_S + 5, interval=0.02,
               what="removed listener closed")
    assert time.monotonic() - t0 >= NOTICE_S - 0.05
    s.wait_error_log(r"reload: 1 removed listening address not ready; closing in 2000 ms")
    assert ready_status(s.port) == 200
    assert get(s.port, "/").status == 200


def test_haproxy_marks_sluice_down_before_it_stops_accepting(sluice, demo, tmp_path):
    if peers.HAPROXY is None:
        pytest.skip("haproxy not installed")
    d = demo()
    s = sluice(cfg_with(H.free_port(), d.port, notice="2s"))
    hp = peers.TcpBalancer(tmp_path, [("sluice", "127.0.0.1", s.port, None)], fall=2).start()
    try:
        H.wait_for(lambda: get(hp.port, "/").status == 200, what="traffic through haproxy")
        # POST /drain: HAProxy takes sluice out; sluice keeps serving.
        assert s.admin_post("/drain").status == 200
        H.wait_for(lambda: hp.state("sluice") == "DOWN", what="haproxy: sluice DOWN")
        assert "Layer7 wrong status, code: 503" in H.read_text(hp.log_path)
        assert H.port_accepts(s.port) and get(s.port, "/").status == 200
        assert s.admin_post("/ready").status == 200
        H.wait_for(lambda: hp.state_changes("sluice")[-1:] == ["UP"], what="haproxy: sluice UP again")
        assert get(hp.port, "/").status == 200
        # SIGTERM: DOWN is logged while sluice still accepts.
        s.signal(signal.SIGTERM)
        H.wait_for(lambda: hp.state("sluice") == "DOWN", what="haproxy: sluice DOWN on stop")
        assert H.port_accepts(s.port), "sluice stopped accepting before haproxy took it out"
        H.wait_for(lambda: refuses(s.port), timeout=10, what="sluice listener closed")
        assert s.proc.wait(timeout=10) == 0
    finally:
        hp.stop()


BAD = [
    ("monitor_uri_not_a_path", "    backend: app", None, "    monitor_uri: ready",
     "listeners[0].monitor_uri", "is not a path: it must start with / (e.g. /ready)"),
    ("monitor_uri_with_query", "    backend: app", None, "    monitor_uri: /ready?x=1",
     "listeners[0].monitor_uri", "bad character in \"/ready?x=1\""),
    ("monitor_uri_empty", "    backend: app", None, "    monitor_uri: \"\"",
     "listeners[0].monitor_uri", ""),
    ("drain_notice_bad_duration", "  drain:", None, "  drain_notice: soon",
     "timeouts.drain_notice", "bad duration \"soon\""),
    ("drain_notice_too_long", "  drain:", None, "  drain_notice: 11m",
     "timeouts.drain_notice", "660000ms is too long (at most 10m)"),
]


@pytest.mark.parametrize("name,find,repl,ins,key,msg", BAD, ids=[b[0] for b in BAD])
def test_bad_readiness_config(sluice_bin, tmp_path, name, find, repl, ins, key, msg):
    lines, lineno = mutate(base_lines(), find, repl, ins)
    p = tmp_path / ("%s.yaml" % name)
    p.write_text("\n".join(lines) + "\n")
    r = run_check(sluice_bin, str(p))
    assert r.returncode == 1, (r.returncode, r.stderr)
    hits = [e for e in error_lines(r.stderr, str(p)) if e[0] == lineno and e[2] == key]
    assert hits, r.stderr
    assert msg in hits[0][3], hits


def test_good_readiness_config_passes(sluice_bin, tmp_path):
    lines, _ = mutate(base_lines(), "    backend: app", None, "    monitor_uri: /-/ready")
    lines, _ = mutate(lines, "  drain:", None, "  drain_notice: 10m")
    p = tmp_path / "ok.yaml"
    p.write_text("\n".join(lines) + "\n")
    r = run_check(sluice_bin, str(p))
    assert r.returncode == 0, r.stderr
