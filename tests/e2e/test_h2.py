"""HTTP/2 to clients (h2.c): negotiation (ALPN on TLS listeners, prior
knowledge with h2c: on), streams as HTTP/1.1 requests to the backend, bodies
both ways, the HTTP/2-to-HTTP/1.1 mapping and the malformed shapes that must
never reach a backend."""

import hashlib
import shutil
import subprocess

import pytest

import harness as H
import tlsutil as T
from h2client import H2Client

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")

PROTOCOL_ERROR = 1
NO_ERROR = 0


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return T.make_pki(tmp_path_factory.mktemp("h2pki"))


def cfg_for(port, listener=None, server_kw=None, **kw):
    return H.make_config(H.free_port(), [H.server(port, **(server_kw or {}))], listener=listener, **kw)


def h2c_cfg(port, **kw):
    listener = {"h2c": "on"}
    listener.update(kw.pop("listener", {}) or {})
    return cfg_for(port, listener=listener, **kw)


def tls_cfg(port, pki, **kw):
    listener = {"tls": {"certificates": [pki.ecdsa.entry()]}}
    listener.update(kw.pop("listener", {}) or {})
    return cfg_for(port, listener=listener, **kw)


def curl(args, timeout=30):
    p = subprocess.run(["curl", "-sS", "--max-time", "20"] + args, capture_output=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def echo_handler(conn):
    """Answer each request with its body, and the body's sha256 in a header."""
    while True:
        q = conn.read_request()
        conn.respond(q.body, headers=[("X-Sha256", hashlib.sha256(q.body).hexdigest()),
                                      ("X-Chunked", "1" if q.chunked else "0")])


# ---- negotiation ----

def test_prior_knowledge_h2c(sluice, recorder):
    be = recorder()
    s = sluice(h2c_cfg(be.port))
    rc, out, err = curl(["--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
                         "http://127.0.0.1:%d/pk?a=1" % s.port])
    assert rc == 0 and out == b"2 200", (out, err)
    q = be.conns[0].requests[0]
    # the backend hears HTTP/1.1, with Host from :authority
    assert q.method == "GET" and q.target == "/pk?a=1" and q.version == "HTTP/1.1"
    assert q.header("Host") == "127.0.0.1:%d" % s.port
    e = s.wait_access_entry(lambda e: e["target"] == "/pk?a=1")
    assert e["status"] == "200" and e["reason"] == "ok"
    # HTTP/1.1 on the same listener still works
    rc, out, err = curl(["-o", "/dev/null", "-w", "%{http_version} %{http_code}", "http://127.0.0.1:%d/h1" % s.port])
    assert out == b"1.1 200", (out, err)


def test_prior_knowledge_refused_without_h2c(sluice, recorder):
    """Off by default: the preface is an HTTP/1.1 parse error, 400, and the
    backend hears nothing."""
    be = recorder()
    s = sluice(cfg_for(be.port))
    r, _ = H.raw_exchange(s.port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    assert r.status == 400
    assert be.conns == [] or all(not c.data for c in be.conns)


def test_preface_in_pieces(sluice, recorder):
    """A preface split across reads still selects h2 on an h2c listener."""
    be = recorder()
    s = sluice(h2c_cfg(be.port))
    import socket
    sock = socket.create_connection((H.HOST, s.port), timeout=5)
    import h2.connection
    import h2.config
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    data = c.data_to_send()
    sock.sendall(data[:3])
    import time
    time.sleep(0.05)
    sock.sendall(data[3:10])
    time.sleep(0.05)
    sock.sendall(data[10:])
    c.send_headers(1, [(":method", "GET"), (":scheme", "http"), (":authority", "x"), (":path", "/split")],
                   end_stream=True)
    sock.sendall(c.data_to_send())
    got = {}
    import h2.events
    sock.settimeout(5)
    while "end" not in got:
        d = sock.recv(65536)
        assert d, "closed"
        for ev in c.receive_data(d):
            if isinstance(ev, h2.events.ResponseReceived):
                got["status"] = dict(ev.headers)[b":status"]
            if isinstance(ev, h2.events.StreamEnded):
                got["end"] = True
        sock.sendall(c.data_to_send())
    assert got["status"] == b"200"
    sock.close()


def test_alpn_h2(sluice, recorder, pki):
    be = recorder()
    s = sluice(tls_cfg(be.port, pki))
    rc, out, err = curl(["-k", "--http2", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
                         "https://127.0.0.1:%d/alpn" % s.port])
    assert rc == 0 and out == b"2 200", (out, err)
    e = s.wait_access_entry(lambda e: e["target"] == "/alpn")
    assert "alpn=h2" in e["tls_rest"]
    rc, out, err = curl(["-k", "--http1.1", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
                         "https://127.0.0.1:%d/alpn1" % s.port])
    assert out == b"1.1 200", (out, err)


def test_protocols_config_errors(sluice_bin, tmp_path):
    cases = [
        ({"protocols": ["h2"]}, "h2 is offered by ALPN on TLS listeners only"),
        ({"protocols": ["h3"]}, "unknown protocol"),
        ({"h2c": "maybe"}, "expected on or off"),
        ({"http2": {"max_concurrent_streams": 0}}, "max_concurrent_streams"),
    ]
    for i, (listener, want) in enumerate(cases):
        cfg = H.make_config(H.free_port(), [H.server(1)], listener=listener)
        p = tmp_path / ("c%d.yaml" % i)
        p.write_text(H.to_yaml(cfg))
        r = subprocess.run([sluice_bin, "-t", "-c", str(p)], capture_output=True, text=True, timeout=10)
        assert r.returncode != 0 and want in r.stderr + r.stdout, (listener, r.stderr)


# ---- streams ----

def test_concurrent_streams_one_connection(sluice, recorder):
    be = recorder()
    s = sluice(h2c_cfg(be.port))
    c = H2Client(s.port)
    sids = [c.request("/s/%d" % i) for i in range(40)]
    recs = c.wait(*sids)
    assert [r.status for r in recs] == [200] * 40
    targets = sorted(q.target for conn in be.conns for q in conn.requests)
    assert targets == sorted("/s/%d" % i for i in range(40))
    assert c.remote_settings.get(3) == 100  # SETTINGS_MAX_CONCURRENT_STREAMS, the default
    c.close()


def test_many_streams_queue_on_one_backend_connection(sluice, recorder):
    """50 concurrent streams, max_connections 1: they queue and all
    complete, over one backend connection."""
    be = recorder()
    s = sluice(h2c_cfg(be.port, server_kw={"max_connections": 1}))
    c = H2Client(s.port)
    sids = [c.request("/q/%d" % i) for i in range(50)]
    recs = c.wait(*sids, timeout=30)
    assert all(r.status == 200 for r in recs)
    assert len(be.conns) == 1 and len(be.conns[0].requests) == 50
    c.close()


@pytest.mark.parametrize("size", [1, 65535, 65536 + 17, 1 << 20])
def test_request_body_with_length(sluice, recorder, size):
    be = recorder(echo_handler)
    s = sluice(h2c_cfg(be.port))
    body = H.pattern_bytes(size, seed=size)
    c = H2Client(s.port)
    r = c.get("/up", method="POST", headers=[("content-length", str(size))], body=body)
    assert r.status == 200 and r.header("x-sha256") == hashlib.sha256(body).hexdigest()
    assert bytes(r.data) == body
    q = be.conns[0].requests[0]
    assert q.header("Content-Length") == str(size) and not q.chunked
    c.close()


def test_request_body_without_length_goes_chunked(sluice, recorder):
    be = recorder(echo_handler)
    s = sluice(h2c_cfg(be.port))
    body = H.pattern_bytes(200000, seed=3)
    c = H2Client(s.port)
    r = c.get("/up", method="POST", body=body)
    assert r.status == 200 and bytes(r.data) == body
    q = be.conns[0].requests[0]
    assert q.chunked and q.header("Transfer-Encoding") == "chunked" and q.header("Content-Length") is None
    c.close()


def test_large_response_and_bodies_curl(sluice, demo):
    be = demo()
    s = sluice(h2c_cfg(be.port))
    rc, out, err = curl(["--http2-prior-knowledge", "-o", "-", "http://127.0.0.1:%d/?size=10485760" % s.port])
    assert rc == 0 and len(out) == 10485760, (len(out), err)
    body = H.pattern_bytes(3 * 1024 * 1024, seed=9)
    p = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "--data-binary", "@-", "-o", "-",
                        "http://127.0.0.1:%d/echo" % s.port], input=body, capture_output=True, timeout=30)
    assert p.returncode == 0 and H.sha256(p.stdout) == H.sha256(body), p.stderr


def test_slow_reader_stalls_only_its_stream(sluice, demo):
    """A stream whose client window stays shut does not hold the others."""
    be = demo()
    s = sluice(h2c_cfg(be.port))
    c = H2Client(s.port, settings={4: 0})  # INITIAL_WINDOW_SIZE 0: nothing flows until we open it
    c.pump(lambda: c.remote_settings.get(3) is not None, what="settings")
    big = c.request("/?size=4000000")
    c.conn.increment_flow_control_window(1 << 30)  # the connection window is not the limit
    c.flush()
    small = [c.request("/?size=100") for _ in range(5)]
    for sid in small:
        c.conn.increment_flow_control_window(1000, stream_id=sid)
    c.flush()
    recs = c.wait(*small)
    assert all(r.status == 200 and len(r.data) == 100 for r in recs)
    assert not c.streams[big].done and len(c.streams[big].data) == 0
    c.conn.increment_flow_control_window(8000000, stream_id=big)
    c.flush()
    rec = c.wait(big, timeout=20)[0]
    assert len(rec.data) == 4000000
    c.close()


def test_cookie_crumbs_joined(sluice, recorder):
    be = recorder()
    s = sluice(h2c_cfg(be.port))
    c = H2Client(s.port)
    r = c.get("/c", headers=[("cookie", "a=1"), ("cookie", "b=2"), ("x-other", "y"), ("cookie", "c=3")])
    assert r.status == 200
    q = be.conns[0].requests[0]
    assert q.header_all("Cookie") == ["a=1; b=2; c=3"]
    c.close()


def test_host_without_authority_and_neither(sluice, recorder):
    be = recorder()
    s = sluice(h2c_cfg(be.port))
    c = H2Client(s.port, validate=False)
    r = c.get("/h", authority=None, headers=[("host", "only-host.test")])
    assert r.status == 200
    assert be.conns[0].requests[0].header("Host") == "only-host.test"
    r = c.get("/none", authority=None)
    assert r.status == 400 or r.reset == PROTOCOL_ERROR, (r.status, r.reset)
    c.close()
    assert all(q.target != "/none" for conn in be.conns for q in conn.requests)


def test_authority_host_mismatch_is_400(sluice, recorder):
    be = recorder()
    s = sluice(h2c_cfg(be.port))
    c = H2Client(s.port, validate=False)
    r = c.get("/mm", authority="a.test", headers=[("host", "b.test")])
    assert r.status == 400
    ok = c.get("/ok", authority="a.test", headers=[("host", "A.test")])
    assert ok.status == 200
    c.close()
    assert [q.target for conn in be.conns for q in conn.requests] == ["/ok"]


def test_header_limits_431_per_stream(sluice, recorder):
    be = recorder()
    s = sluice(h2c_cfg(be.port, limits={"max_header_size": "4k"}))
    c = H2Client(s.port)
    big = c.request("/big", headers=[("x-big", "v" * 5000)])
    ok = c.request("/fine")
    rb, rok = c.wait(big, ok)
    assert rb.status == 431 and rok.status == 200
    c.close()
    assert [q.target for conn in be.conns for q in conn.requests] == ["/fine"]


MALFORMED = [
    ("uppercase name", [("X-Upper", "1")]),
    ("connection header", [("connection", "keep-alive")]),
    ("transfer-encoding", [("transfer-encoding", "chunked")]),
    ("te other than trailers", [("te", "gzip")]),
    ("upgrade", [("upgrade", "websocket")]),
    ("CR in value", [("x-v", "a\rb")]),
    ("LF in value", [("x-v", "a\nb")]),
    ("NUL in value", [("x-v", "a\x00b")]),
    ("space in name", [("x v", "1")]),
    ("colon name", [(":x", "1")]),
]


@pytest.mark.parametrize("what,fields", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_fields_reset_nothing_forwarded(sluice, recorder, what, fields):
    be = recorder()
    s = sluice(h2c_cfg(be.port))
    c = H2Client(s.port, validate=False)
    bad = c.request("/bad", headers=fields)
    r = c.wait(bad)[0]
    assert r.reset == PROTOCOL_ERROR or (r.status == 400), (what, r.reset, r.status)
    # the connection and the worker serve on
    ok = c.get("/after")
    assert ok.status == 200
    c.close()
    assert [q.target for conn in be.conns for q in conn.requests] == ["/after"], what


def test_bad_pseudo_headers(sluice, recorder):
    be = recorder()
    s = sluice(h2c_cfg(be.port))
    cases = [
        [(":method", "GET"), (":scheme", "http"), (":authority", "a"), (":path", "")],
        [(":method", "GET"), (":scheme", "http"), (":authority", "a"), (":path", "rel")],
        [(":method", "GET"), (":scheme", "http"), (":authority", "a"), (":path", "/"), (":path", "/2")],
        [(":method", "GET"), (":scheme", "http"), (":authority", "a")],
        [(":method", "GET"), (":authority", "a"), ("x", "1"), (":scheme", "http"), (":path", "/")],
        [(":method", "CONNECT"), (":authority", "a:443")],
        [(":method", "GET"), (":scheme", "http"), (":authority", "a@b"), (":path", "/")],
    ]
    for fields in cases:
        c = H2Client(s.port, validate=False)
        sid = c.conn.get_next_available_stream_id()
        from h2client import StreamRecord
        c.streams[sid] = StreamRecord()
        c.conn.send_headers(sid, fields, end_stream=True)
        c.flush()
        r = c.wait(sid)[0]
        assert r.reset is not None or r.status in (400, 501), (fields, r.reset, r.status)
        c.close()
    assert be.conns == [] or all(not conn.requests for conn in be.conns)


def test_content_length_disagreeing_with_data(sluice, recorder):
    """H2.CL: more DATA than content-length says is reset before a byte of
    the excess goes on; a body cut short of it never makes a request the
    backend can complete."""
    be = recorder(echo_handler)
    s = sluice(h2c_cfg(be.port))
    c = H2Client(s.port, validate=False)
    sid = c.request("/cl", method="POST", headers=[("content-length", "5")], body=b"0123456789")
    r = c.wait(sid)[0]
    assert r.reset == PROTOCOL_ERROR, (r.reset, r.status)
    ok = c.get("/after")
    assert ok.status == 200
    c.close()
    for conn in be.conns:
        for q in conn.requests:
            assert q.target != "/cl" or len(q.body) <= 5


def test_client_reset_stream_never_reaches_backend_when_queued(sluice, recorder):
    """A stream reset while queued for a backend connection leaves the
    queue: the backend never hears it."""
    import threading
    release = threading.Event()

    def slow(conn):
        q = conn.read_request()
        release.wait(10)
        conn.respond(b"slow")
        while True:
            conn.read_request()
            conn.respond(b"next")

    be = recorder(slow)
    s = sluice(h2c_cfg(be.port, server_kw={"max_connections": 1}))
    c = H2Client(s.port)
    first = c.request("/first")
    H.wait_for(lambda: be.conns and be.conns[0].requests, what="first request at the backend")
    queued = c.request("/queued")
    after = c.request("/after")
    c.reset(queued)
    # sluice has taken the reset (the stream's log line) before the backend frees up
    s.wait_access_entry(lambda e: e["target"] == "/queued" and e["reason"] == "client_aborted")
    release.set()
    r1, r3 = c.wait(first, after)
    assert r1.status == 200 and r3.status == 200
    c.close()
    assert [q.target for conn in be.conns for q in conn.requests] == ["/first", "/after"]


# ---- the stream layer's features, per stream ----

INSPECT = """
function inspect(req)
  req:set_header("X-Version", req:version())
  if req:path() == "/deny" then req:deny(403, "no") end
end
"""


def test_inspection_per_stream(sluice, recorder, tmp_path):
    """The hook runs per stream: req:version() says 2, and a stream it
    denies ends with its 403 while the others on the connection complete."""
    (tmp_path / "h2.lua").write_text(INSPECT)
    be = recorder()
    s = sluice(h2c_cfg(be.port, listener={"inspect": {"script": "h2.lua"}}))
    c = H2Client(s.port)
    sids = [c.request("/a"), c.request("/deny"), c.request("/b"), c.request("/c")]
    recs = c.wait(*sids)
    assert [r.status for r in recs] == [200, 403, 200, 200]
    assert bytes(recs[1].data) == b"no"
    qs = [q for conn in be.conns for q in conn.requests]
    assert sorted(q.target for q in qs) == ["/a", "/b", "/c"]
    assert all(q.header("X-Version") == "2" for q in qs)
    c.close()
    e = s.wait_access_entry(lambda e: e["target"] == "/deny")
    assert e["status"] == "403" and e["inspect"] == "deny" and e["proto"] == "HTTP/2.0"


def test_access_log_and_metrics(sluice, recorder):
    be = recorder()
    s = sluice(h2c_cfg(be.port, admin=H.admin_config()))
    c = H2Client(s.port)
    recs = c.wait(*[c.request("/m%d" % i) for i in range(3)])
    assert all(r.status == 200 for r in recs)
    body = s.admin_get("/metrics").body.decode()
    def sample(name):
        import re
        m = re.search(r'^%s\{listener="http"\} (\S+)$' % name, body, re.M)
        assert m, name
        return float(m.group(1))
    assert sample("sluice_h2_client_connections") == 1
    assert sample("sluice_h2_connections_total") == 1
    c.close()
    H.wait_for(lambda: "sluice_h2_client_connections{listener=\"http\"} 0" in s.admin_get("/metrics").body.decode(),
               what="h2 connection gauge back to 0")
    body = s.admin_get("/metrics").body.decode()
    assert sample("sluice_h2_requests_total") == 3
    assert sample("sluice_h2_streams") == 0
    rc, out, err = curl(["-o", "/dev/null", "http://127.0.0.1:%d/h1" % s.port])
    e = s.wait_access_entry(lambda e: e["target"] == "/h1")
    assert e["proto"] == "HTTP/1.1"
    assert s.wait_access_entry(lambda e: e["target"] == "/m0")["proto"] == "HTTP/2.0"


# ---- limits and attacks ----

ENHANCE_YOUR_CALM = 11
REFUSED_STREAM = 7


def test_rapid_reset_is_cut_off_and_never_reaches_backend(sluice, recorder):
    """CVE-2023-44487: streams opened and reset at once. Every pair in one
    write: none reaches the backend (a head waits for the end of the input it
    came in), and the connection ends with GOAWAY ENHANCE_YOUR_CALM."""
    be = recorder()
    s = sluice(h2c_cfg(be.port))
    c = H2Client(s.port)
    c.pump(lambda: c.remote_settings.get(3) is not None, what="settings")
    for i in range(400):
        sid = c.conn.get_next_available_stream_id()
        c.conn.send_headers(sid, [(":method", "GET"), (":scheme", "http"), (":authority", "a"),
                                  (":path", "/rr/%d" % i)], end_stream=True)
        c.conn.reset_stream(sid, error_code=8)
    c.flush()
    c.pump(lambda: c.goaway is not None, timeout=10, what="GOAWAY")
    assert c.goaway.error_code == ENHANCE_YOUR_CALM, c.goaway
    got = [q.target for conn in be.conns for q in conn.requests]
    assert got == [], got
    s.wait_error_log(r"rapid reset")
    # the worker serves on
    c2 = H2Client(s.port)
    assert c2.get("/after").status == 200
    c2.close()


def test_resets_among_completed_requests_are_tolerated(sluice, recorder):
    """A browser cancels streams now and then: resets below the completed
    count keep the connection."""
    be = recorder()
    s = sluice(h2c_cfg(be.port))
    c = H2Client(s.port)
    for i in range(150):
        assert c.get("/ok/%d" % i).status == 200
        sid = c.request("/cancel/%d" % i)
        c.reset(sid)
    assert c.get("/last").status == 200 and c.goaway is None
    c.close()


def test_max_concurrent_streams_refuses_the_excess(sluice, recorder):
    import threading
    gate = threading.Event()

    def held(conn):
        while True:
            conn.read_request()
            gate.wait(10)
            conn.respond(b"x")

    be = recorder(held)
    s = sluice(h2c_cfg(be.port, listener={"http2": {"max_concurrent_streams": 3}}))
    c = H2Client(s.port)
    c.pump(lambda: c.remote_settings.get(3) == 3, what="SETTINGS_MAX_CONCURRENT_STREAMS 3")
    # the client library enforces the limit itself: bypass it for the 4th
    c.conn.remote_settings._settings[3] = [100]
    sids = [c.request("/mc/%d" % i) for i in range(4)]
    c.pump(lambda: c.streams[sids[3]].reset is not None or c.goaway is not None, what="4th stream refused")
    # RFC 9113 5.1.2: a stream error (REFUSED_STREAM); nghttp2 makes it a
    # connection error once our SETTINGS are acknowledged (5.4.1 allows it):
    # GOAWAY naming the third stream as the last one it takes
    if c.goaway is not None:
        assert c.goaway.error_code == PROTOCOL_ERROR and c.goaway.last_stream_id == sids[2], c.goaway
    else:
        assert c.streams[sids[3]].reset == REFUSED_STREAM
        gate.set()
        recs = c.wait(*sids[:3])
        assert all(r.status == 200 for r in recs)
    gate.set()
    c.close()
    assert "/mc/3" not in [q.target for conn in be.conns for q in conn.requests]


def test_stalled_window_bounded_by_client_send(sluice, demo):
    """A client that never opens a stream's window: the response waits for
    client_send, then the stream is cancelled; the connection serves on."""
    be = demo()
    s = sluice(h2c_cfg(be.port, timeouts={"client_send": "1s"}))
    c = H2Client(s.port, settings={4: 0})
    c.pump(lambda: c.remote_settings.get(3) is not None, what="settings")
    stuck = c.request("/?size=1000")
    r = c.wait(stuck, timeout=10)[0]
    assert r.reset == 8 and len(r.data) == 0, (r.reset, len(r.data))  # CANCEL
    s.wait_error_log(r"did not take the response within client_send")
    ok = c.request("/?size=10")
    c.conn.increment_flow_control_window(100, stream_id=ok)
    c.flush()
    assert c.wait(ok)[0].status == 200
    c.close()


def test_idle_body_bounded_by_client_body(sluice, recorder):
    """A stream that opens a body and stops sending: client_body ends it
    with a 408 and the backend connection, which has a partial request, is
    not reused."""
    be = recorder()
    s = sluice(h2c_cfg(be.port, timeouts={"client_body": "1s"}))
    c = H2Client(s.port)
    sid = c.request("/slow", method="POST", headers=[("content-length", "10")], body=b"12345", end=False)
    r = c.wait(sid, timeout=10)[0]
    assert r.status == 408 or r.reset is not None, (r.status, r.reset)
    e = s.wait_access_entry(lambda e: e["target"] == "/slow")
    assert e["reason"] == "client_body_timeout"
    assert c.get("/after").status == 200
    c.close()


def test_continuation_flood_is_cut_off(sluice, recorder):
    """HEADERS followed by endless CONTINUATION frames (the 2024 family):
    the connection ends; nothing reaches the backend."""
    import struct
    be = recorder()
    s = sluice(h2c_cfg(be.port))
    c = H2Client(s.port)
    c.pump(lambda: c.remote_settings.get(3) is not None, what="settings")

    def frame(ftype, flags, sid, payload):
        return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload

    # HEADERS without END_HEADERS: ":method GET" indexed (0x82), then literal fields in CONTINUATIONs
    data = frame(1, 0x1, 1, b"\x82\x86\x84")
    lit = b"\x00\x01a\x01b"  # literal without indexing, name "a", value "b"
    for _ in range(2000):
        data += frame(9, 0, 1, lit * 20)
    try:
        c.send_raw(data)
    except OSError:
        pass
    closed = c.pump(lambda: c.goaway is not None or c.closed, timeout=10, what="connection cut")
    assert closed
    assert all(not conn.requests for conn in be.conns)
    c2 = H2Client(s.port)
    assert c2.get("/after").status == 200
    c2.close()


@pytest.mark.parametrize("kind", ["ping", "settings"])
def test_control_frame_flood_from_a_non_reader(sluice, recorder, kind):
    """PING or SETTINGS frames from a client that reads none of the
    acknowledgements: once 256 KiB of output wait, sluice stops reading the
    connection (no ACK queue grows without bound), and client_send ends it."""
    import socket
    import struct
    import time
    be = recorder()
    s = sluice(h2c_cfg(be.port, timeouts={"client_send": "2s"}))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(3)
    sock.connect((H.HOST, s.port))

    def frame(ftype, flags, sid, payload):
        return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload

    one = frame(6, 0, 0, b"12345678") if kind == "ping" else frame(4, 0, 0, b"")
    batch = one * 2000
    sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b""))
    sent, stopped = 0, False
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sent < 2000000:
        try:
            sock.sendall(batch)
            sent += 2000
        except OSError:  # blocked (sluice stopped reading) or closed
            stopped = True
            break
    assert stopped, "sluice kept reading %d %s frames from a client that read nothing" % (sent, kind)
    # nghttp2 counts the ACKs it has queued (1,000 at most), sluice's own
    # flood count ends it, or sluice stops reading and client_send ends it:
    # whichever comes first (it depends on timing), a line says which
    s.wait_error_log(r"Flooding was detected|closing \(flood\)|client did not read within client_send",
                     timeout=10)
    sock.close()
    c2 = H2Client(s.port)
    assert c2.get("/after").status == 200
    c2.close()


# ---- graceful drain ----

def test_reloads_under_h2load_fail_no_request(sluice, demo, tmp_path):
    """20 reloads while h2load runs: every request h2load sent is answered
    (its per-request log has no failure), thanks to the two-step GOAWAY (a
    notice and a PING, then the last stream id once the client has seen
    it). h2load does not reconnect after a GOAWAY, so the run's rate falls
    as its clients meet one; what matters is that none of theirs failed."""
    import os
    import signal
    import time
    if shutil.which("h2load") is None:
        pytest.fail("h2load missing: make test-deps installs nghttp2-client")
    be = demo(threads=64)
    s = sluice(h2c_cfg(be.port, workers=2, timeouts={"drain": "5s"},
                       server_kw={"max_connections": 32}))
    log = tmp_path / "h2load-requests.tsv"
    p = subprocess.Popen(["h2load", "-D", "7", "-c", "60", "-m", "10", "--log-file", str(log),
                          "http://127.0.0.1:%d/" % s.port], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        time.sleep(0.8)
        for _ in range(20):
            s.reload(wait=False)
            time.sleep(0.25)
        out, _ = p.communicate(timeout=40)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    out = out.decode("utf-8", "replace")
    lines = [l.split("\t") for l in log.read_text().splitlines() if l.strip()]
    # A line with start time 0 is a request h2load queued but never sent:
    # its session saw the GOAWAY first and refused to start the stream.
    sent = [l for l in lines if l[0] != "0"]
    failed = [l for l in sent if l[1] != "200"]
    assert len(sent) > 1000, out
    assert failed == [], (failed[:10], out)
    assert s.alive()


def test_status_reports_protocols_and_h2_figures(sluice, recorder, pki):
    be = recorder()
    cfg = tls_cfg(be.port, pki, admin=H.admin_config())
    s = sluice(cfg)
    c = H2Client(s.port, tls=True)
    assert c.get("/st").status == 200
    import json
    st = json.loads(s.admin_get("/status").body)
    li = st["listeners"][0]
    assert li["protocols"] == ["h2", "http/1.1"] and li["h2c"] is False
    assert li["h2"]["connections"] == 1 and li["h2"]["connections_total"] == 1
    assert li["h2"]["requests"] == 1 and li["h2"]["streams"] == 0
    c.close()


def test_interim_103_passes_through(sluice, recorder):
    def early_hints(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
        conn.respond(b"final")
        while True:
            conn.read_request()
            conn.respond(b"x")

    be = recorder(early_hints)
    s = sluice(h2c_cfg(be.port))
    c = H2Client(s.port)
    r = c.get("/hints")
    assert r.status == 200 and bytes(r.data) == b"final"
    assert len(r.interim) == 1
    fields = dict(r.interim[0])
    assert fields[":status"] == "103" and fields["link"] == "</a.css>; rel=preload"
    c.close()


def test_ten_megabyte_upload_checksummed(sluice, demo):
    be = demo()
    s = sluice(h2c_cfg(be.port))
    body = H.pattern_bytes(10 * 1024 * 1024, seed=11)
    p = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "--data-binary", "@-", "-o", "-",
                        "-H", "Content-Type: application/octet-stream",
                        "http://127.0.0.1:%d/echo" % s.port], input=body, capture_output=True, timeout=60)
    assert p.returncode == 0 and H.sha256(p.stdout) == H.sha256(body), p.stderr


def _frame(ftype, flags, sid, payload):
    import struct
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


@pytest.mark.parametrize("kind", ["priority", "ping", "settings", "empty-data"])
def test_frame_flood_from_a_reader_is_cut_off(sluice, recorder, kind):
    """Frames that cost work and move no request forward, from a client
    that does read the ACKs: past 1,000 of them, more than 100 per completed
    stream ends the connection with GOAWAY ENHANCE_YOUR_CALM; other clients
    are served meanwhile."""
    import struct
    be = recorder()
    s = sluice(h2c_cfg(be.port))
    c = H2Client(s.port)
    c.pump(lambda: c.remote_settings.get(3) is not None, what="settings")
    if kind == "empty-data":
        sid = c.request("/upload", method="POST", end=False)
        one = _frame(0, 0, sid, b"")
    elif kind == "priority":
        one = _frame(2, 0, 1001, struct.pack(">I", 0) + b"\x10")
    elif kind == "ping":
        one = _frame(6, 0, 0, b"pingpong")
    else:
        one = _frame(4, 0, 0, b"")
    for _ in range(6):
        try:
            c.send_raw(one * 500)
        except OSError:
            break
        other = H2Client(s.port)
        assert other.get("/other").status == 200
        other.close()
    c.pump(lambda: c.goaway is not None or c.closed, timeout=10, what="GOAWAY")
    assert c.goaway is not None and c.goaway.error_code == ENHANCE_YOUR_CALM, (c.goaway, c.closed)
    s.wait_error_log(r"control or empty frames for \d+ completed streams: closing \(flood\)")


def test_normal_pings_and_window_updates_are_fine(sluice, demo):
    """A client that pings now and then and opens windows as it reads a
    large download is no flood."""
    be = demo()
    s = sluice(h2c_cfg(be.port))
    c = H2Client(s.port)
    for i in range(20):
        c.conn.ping(b"keepaliv")
        c.flush()
        r = c.get("/?size=2000000")
        assert r.status == 200 and len(r.data) == 2000000
    assert c.goaway is None
    c.close()


def test_max_headers_count_is_431(sluice, recorder):
    be = recorder()
    s = sluice(h2c_cfg(be.port, limits={"max_headers": 20}))
    c = H2Client(s.port)
    r = c.get("/many", headers=[("x-h%d" % i, "v") for i in range(25)])
    assert r.status == 431
    ok = c.get("/few", headers=[("x-h%d" % i, "v") for i in range(10)])
    assert ok.status == 200
    c.close()
    assert [q.target for conn in be.conns for q in conn.requests] == ["/few"]


def test_body_limits(sluice, recorder):
    be = recorder(echo_handler)
    s = sluice(h2c_cfg(be.port, limits={"max_body_size": "1k"}))
    c = H2Client(s.port)
    r = c.get("/declared", method="POST", headers=[("content-length", "2000")], body=b"x" * 2000)
    assert r.status == 413
    r = c.get("/streamed", method="POST", body=b"y" * 3000)  # no content-length: chunked, cut when it grows past
    assert r.status == 413 or r.reset is not None, (r.status, r.reset)
    ok = c.get("/small", method="POST", body=b"z" * 100)
    assert ok.status == 200 and bytes(ok.data) == b"z" * 100
    c.close()
    targets = [q.target for conn in be.conns for q in conn.requests]
    assert "/declared" not in targets and "/small" in targets


def test_hpack_table_size_beyond_our_setting_is_a_compression_error(sluice, recorder):
    """SETTINGS_HEADER_TABLE_SIZE is 4,096: a header block that grows the
    decoder's table past it is a connection error (COMPRESSION_ERROR)."""
    be = recorder()
    s = sluice(h2c_cfg(be.port))
    c = H2Client(s.port, validate=False)
    c.pump(lambda: c.remote_settings.get(3) is not None, what="settings")
    # dynamic table size update to 65,536 (0x3f e1 ff 03), then :method GET
    c.send_raw(_frame(1, 0x5, 1, b"\x3f\xe1\xff\x03\x82\x86\x84\x41\x01a"))
    c.pump(lambda: c.goaway is not None or c.closed, timeout=5, what="GOAWAY")
    assert c.goaway is not None and c.goaway.error_code == 9, c.goaway  # COMPRESSION_ERROR
    assert all(not conn.requests for conn in be.conns)
