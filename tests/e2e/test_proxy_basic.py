"""Core HTTP/1.1 proxying: keepalive reuse, pipelining, HTTP/1.0, hop-by-hop
headers, request/response bodies (chunked, Content-Length, large,
close-delimited), 100-continue, HEAD/1xx/204/304 and the WebSocket tunnel."""

import time
import os
import shutil
import subprocess
import threading

import pytest

import harness as H


def proxy_for(sluice, backend, workers=1, **kw):
    cfg = H.make_config(H.free_port(), [H.server(backend.port, max_connections=kw.pop("maxconn", 64))],
                        workers=workers, **kw)
    return sluice(cfg)


def send_while_reading(client, data, method="GET"):
    """Send DATA from a thread while reading the response, so a proxy that
    streams (and answers early) cannot deadlock the test."""
    err = []

    def tx():
        try:
            client.send(data)
        except OSError as e:
            err.append(e)
    t = threading.Thread(target=tx, daemon=True)
    t.start()
    r = client.read_response(method)
    t.join(30)
    assert not err, err
    return r


# ---------------------------------------------------------------- basics

def test_get_through_proxy(sluice, demo):
    d = demo(size=321)
    s = proxy_for(sluice, d)
    r = H.http_request(s.port, "GET", "/")
    assert r.status == 200
    assert len(r.body) == 321
    assert r.header("x-conn-id") is not None


def test_keepalive_reuse_many_requests_few_backend_connections(sluice, demo):
    """200 client requests (5 keepalive clients x 20 + 100 one-shot
    connections) reach the backend over at most a few pooled connections."""
    d = demo(threads=16, size=64, keepalive_ms=60000)
    s = proxy_for(sluice, d)
    d.reset_stats()
    conn_ids = set()
    for _ in range(5):
        with H.Client(s.port) as c:
            for _ in range(20):
                r = c.request("GET", "/")
                assert r.status == 200 and len(r.body) == 64
                conn_ids.add(r.header("x-conn-id"))
    for _ in range(100):
        r = H.http_request(s.port, "GET", "/")
        assert r.status == 200
        conn_ids.add(r.header("x-conn-id"))
    st = d.stats()
    assert st["requests"] == 200
    assert st["accepted"] <= 4, st          # M << N
    assert len(conn_ids) <= 4, conn_ids
    assert st["proxy_max_active"] <= 4, st


def test_keepalive_reuse_with_curl(sluice, demo):
    if not shutil.which("curl"):
        pytest.skip("curl not installed")
    d = demo(size=10, keepalive_ms=60000)
    s = proxy_for(sluice, d)
    d.reset_stats()
    urls = ["http://127.0.0.1:%d/?n=%d" % (s.port, i) for i in range(30)]
    args = []
    for u in urls:
        args += ["-o", "/dev/null", u]
    p = subprocess.run(["curl", "-sS", "--max-time", "20", "-w", "%{http_code}\\n"] + args,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["200"] * 30
    st = d.stats()
    assert st["requests"] == 30 and st["accepted"] <= 2, st


def test_pipelining_keeps_response_order(sluice, demo):
    """16 pipelined requests whose backend latency decreases along the
    pipeline (slow first) plus /headers and POST /echo in between: responses
    come back in request order."""
    d = demo(threads=16)
    s = proxy_for(sluice, d)
    reqs, checks = [], []
    n = 16
    for i in range(n):
        if i % 4 == 0:
            path = "/?size=%d&sleep_ms=%d" % (1000 + i, (n - i) * 10)
            reqs.append(H.build_request("GET", path))
            checks.append(lambda r, i=i: len(r.body) == 1000 + i)
        elif i % 4 == 1:
            reqs.append(H.build_request("GET", "/headers?id=%d" % i, [("X-Seq", str(i))]))
            checks.append(lambda r, i=i: b"/headers?id=%d " % i in r.body and b"X-Seq: %d" % i in r.body)
        elif i % 4 == 2:
            body = b"echo-%d-" % i * (i + 1)
            reqs.append(H.build_request("POST", "/echo", body=body))
            checks.append(lambda r, body=body: r.body == body)
        else:
            code = (201, 202, 404, 500)[i // 4]
            reqs.append(H.build_request("GET", "/status/%d" % code))
            checks.append(lambda r, code=code: r.status == code)
    with H.Client(s.port, timeout=10) as c:
        c.send(b"".join(reqs))
        for i in range(n):
            r = c.read_response()
            assert checks[i](r), "response %d out of order or wrong: %r" % (i, r)
        # connection still usable afterwards
        assert c.request("GET", "/").status == 200


def test_pipelined_head_and_204_304(sluice, demo):
    d = demo(size=77)
    s = proxy_for(sluice, d)
    with H.Client(s.port) as c:
        c.send(H.build_request("HEAD", "/") + H.build_request("GET", "/status/204") +
               H.build_request("GET", "/status/304") + H.build_request("GET", "/"))
        r = c.read_response("HEAD")
        assert r.status == 200 and r.body == b""
        r = c.read_response()
        assert r.status == 204 and r.body == b""
        r = c.read_response()
        assert r.status == 304 and r.body == b""
        r = c.read_response()
        assert r.status == 200 and len(r.body) == 77


def test_head_204_304_have_no_body(sluice, demo):
    """Sequential on one connection: a stray body byte would corrupt the
    next response's status line."""
    d = demo(size=500)
    s = proxy_for(sluice, d)
    with H.Client(s.port) as c:
        r = c.request("HEAD", "/")
        assert r.status == 200 and r.body == b""
        if r.header("content-length") is not None:
            assert r.header("content-length") == "500"
        for st in (204, 304):
            r = c.request("GET", "/status/%d" % st)
            assert r.status == st and r.body == b""
            assert r.header("transfer-encoding") is None
        r = c.request("GET", "/")
        assert r.status == 200 and len(r.body) == 500
        assert c.st.buf == b""


def test_backend_interim_1xx_then_final(sluice, recorder):
    """A backend 103 before the final response: the client gets the final
    200 with its body (the 1xx may or may not be forwarded; it never has a
    body) and the connection stays in sync."""
    def handler(conn):
        while True:
            conn.read_request()
            conn.send(b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n")
            conn.respond(b"final")
    rb = recorder(handler)
    s = proxy_for(sluice, rb)
    with H.Client(s.port) as c:
        for _ in range(2):
            r = c.request("GET", "/")
            assert r.status == 200 and r.body == b"final"
            for i in r.interim:
                assert i.status == 103


# ---------------------------------------------------------------- HTTP/1.0 and Connection

def test_http10_client_closed_after_response(sluice, demo):
    d = demo(size=42)
    s = proxy_for(sluice, d)
    with H.Client(s.port) as c:
        c.send(b"GET / HTTP/1.0\r\nHost: h10\r\n\r\n")
        r = c.read_response()
        assert r.status == 200 and len(r.body) == 42
        assert c.wait_closed(3) == b""


def test_http10_keepalive_client(sluice, demo):
    d = demo(size=42)
    s = proxy_for(sluice, d)
    with H.Client(s.port) as c:
        for _ in range(3):
            c.send(b"GET / HTTP/1.0\r\nHost: h10\r\nConnection: keep-alive\r\n\r\n")
            r = c.read_response()
            assert r.status == 200 and len(r.body) == 42
            assert not r.has_token("transfer-encoding", "chunked")
            assert not r.closed


def test_http10_client_never_gets_chunked(sluice, demo):
    d = demo()
    s = proxy_for(sluice, d)
    direct = d.get("/chunked?size=20000&chunk=1000")
    assert direct.chunked
    with H.Client(s.port) as c:
        c.send(b"GET /chunked?size=20000&chunk=1000 HTTP/1.0\r\nHost: x\r\n\r\n")
        r = c.read_response()
        assert r.status == 200
        assert r.header("transfer-encoding") is None
        assert r.body == direct.body


def test_http10_without_host_forwarded_with_host(sluice, recorder, demo):
    """An HTTP/1.0 request may omit Host, but what sluice sends upstream is
    HTTP/1.1, which requires exactly one Host: sluice must supply one (a
    strict backend such as the demo would otherwise answer 400)."""
    rb = recorder()
    s = proxy_for(sluice, rb)
    with H.Client(s.port) as c:
        c.send(b"GET /nohost HTTP/1.0\r\n\r\n")
        assert c.read_response().status == 200
    q = rb.wait_requests(1)[0]
    assert q.version == "HTTP/1.1"
    # The address the client connected to, never a listener wildcard.
    assert q.header_all("host") == ["127.0.0.1:%d" % s.port], q.headers
    d = demo(size=42)
    s2 = proxy_for(sluice, d)
    r, _ = H.raw_exchange(s2.port, b"GET / HTTP/1.0\r\n\r\n")
    assert r.status == 200 and len(r.body) == 42, r


def test_client_connection_close(sluice, demo):
    d = demo()
    s = proxy_for(sluice, d)
    with H.Client(s.port) as c:
        r = c.request("GET", "/", [("Connection", "close")])
        assert r.status == 200
        assert r.has_token("connection", "close")
        assert c.wait_closed(3) == b""


def test_client_that_said_close_is_closed_at_once(sluice, demo):
    """A client that announced its last request (Connection: close, or
    HTTP/1.0 without keep-alive) and sent nothing after it is closed as soon
    as its response is out: no half-close and wait for its EOF (lingering
    lasts 2 s), so the connection is gone from /status well within that
    while the client still holds its socket open."""
    d = demo(size=42)
    s = sluice(H.make_config(H.free_port(), [H.server(d.port)], admin=H.admin_config()))
    for req in (b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                b"GET /b HTTP/1.0\r\nHost: x\r\n\r\n"):
        with H.Client(s.port) as c:
            c.send(req)
            r = c.read_response()
            assert r.status == 200 and len(r.body) == 42
            assert c.wait_closed(3) == b""
            t0 = time.monotonic()
            H.wait_for(lambda: s.status()["listeners"][0]["connections"] == 0, 5, what="connection closed")
            assert time.monotonic() - t0 < 1.0, "closed only after %.2f s" % (time.monotonic() - t0)


def test_bytes_after_a_close_request_still_linger(sluice, demo):
    """Bytes the client sent after its Connection: close request (a
    pipelined request it should not have sent) keep the lingering close:
    the response arrives whole, more bytes sent after it are read and
    dropped, and the client sees an EOF, never a reset; meanwhile the
    connection is still open on sluice's side."""
    d = demo(size=42)
    s = sluice(H.make_config(H.free_port(), [H.server(d.port)], admin=H.admin_config()))
    with H.Client(s.port) as c:
        c.send(b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
               b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
        r = c.read_response()
        assert r.status == 200 and len(r.body) == 42
        assert s.status()["listeners"][0]["connections"] == 1
        c.send(b"more bytes the server will not read as a request\r\n" * 100)
        assert c.wait_closed(5) == b""
    H.wait_for(lambda: s.status()["listeners"][0]["connections"] == 0, 5, what="connection closed")
    H.wait_for(lambda: len(s.access_entries()) >= 1, 5, what="access log line")
    assert [e["target"] for e in s.access_entries()] == ["/a"]


def test_request_hop_by_hop_headers_removed(sluice, recorder):
    rb = recorder()
    s = proxy_for(sluice, rb)
    hdrs = [("Host", "example.test:8080"), ("Connection", "keep-alive, X-Hop"),
            ("Keep-Alive", "timeout=300"), ("Proxy-Connection", "keep-alive"),
            ("TE", "trailers"), ("Trailer", "X-T"), ("Upgrade", "foo/1"),
            ("X-Hop", "secret"), ("X-Keep", "yes"), ("User-Agent", "e2e")]
    with H.Client(s.port) as c:
        r = c.request("GET", "/p/a%20th?q=1&b=2", hdrs, host=None)
        assert r.status == 200
    q = rb.wait_requests(1)[0]
    assert q.version == "HTTP/1.1"
    assert q.method == "GET" and q.target == "/p/a%20th?q=1&b=2"
    assert q.header_all("host") == ["example.test:8080"]
    assert q.header("x-keep") == "yes" and q.header("user-agent") == "e2e"
    for h in ("keep-alive", "proxy-connection", "te", "trailer", "upgrade", "x-hop",
              "transfer-encoding", "expect"):
        assert h not in q.names(), (h, q.headers)
    for v in q.header_all("connection"):
        assert "x-hop" not in v.lower(), q.headers


def test_http10_request_forwarded_as_http11(sluice, recorder):
    rb = recorder()
    s = proxy_for(sluice, rb)
    with H.Client(s.port) as c:
        c.send(b"GET /old HTTP/1.0\r\nHost: h10\r\nX-A: 1\r\n\r\n")
        r = c.read_response()
        assert r.status == 200
    q = rb.wait_requests(1)[0]
    assert q.version == "HTTP/1.1" and q.target == "/old"
    assert q.header("host") == "h10" and q.header("x-a") == "1"


def test_response_hop_by_hop_headers_removed(sluice, recorder):
    def handler(conn):
        while True:
            conn.read_request()
            conn.respond(b"body", headers=[("Connection", "X-Drop"), ("Keep-Alive", "timeout=5"),
                                           ("X-Drop", "1"), ("Proxy-Connection", "keep-alive"),
                                           ("Trailer", "X-T"), ("X-Keep", "1")])
    rb = recorder(handler)
    s = proxy_for(sluice, rb)
    with H.Client(s.port) as c:
        r = c.request("GET", "/")
        assert r.status == 200 and r.body == b"body"
        assert r.header("x-keep") == "1"
        for h in ("x-drop", "keep-alive", "proxy-connection", "trailer"):
            assert r.header(h) is None, (h, r.headers)
        for v in r.header_all("connection"):
            assert "x-drop" not in v.lower()
        assert c.request("GET", "/").status == 200  # still keepalive


# ---------------------------------------------------------------- bodies

def test_chunked_request_is_rechunked(sluice, recorder):
    rb = recorder()
    s = proxy_for(sluice, rb)
    payload = H.pattern_bytes(10000, 1)
    body = H.chunk_encode(payload, chunk=3000, ext=b"ext=val", trailers=[("X-Trailer", "t")])
    with H.Client(s.port) as c:
        r = c.request("POST", "/up", [("Transfer-Encoding", "chunked")], body=body)
        assert r.status == 200
    q = rb.wait_requests(1)[0]
    assert q.chunked
    assert q.header("content-length") is None
    assert q.body == payload
    assert b"ext=val" not in q.raw_body
    assert q.trailers == []
    assert q.raw_body.endswith(b"\r\n0\r\n\r\n")
    assert b"X-Trailer" not in bytes(rb.conns[0].data)


def test_content_length_body_forwarded_byte_exact(sluice, recorder):
    rb = recorder()
    s = proxy_for(sluice, rb)
    payload = H.pattern_bytes(100000, 2)
    with H.Client(s.port) as c:
        r = c.request("PUT", "/up", body=payload)
        assert r.status == 200
    q = rb.wait_requests(1)[0]
    assert not q.chunked
    assert q.header_all("content-length") == [str(len(payload))]
    assert q.body == payload
    data = bytes(rb.conns[0].data)
    assert data.endswith(payload)
    assert data.index(b"\r\n\r\n") + 4 + len(payload) == len(data)


BIG = 5 * 1024 * 1024


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_large_upload_echo_checksummed(sluice, demo, framing):
    d = demo()
    s = proxy_for(sluice, d)
    payload = H.pattern_bytes(BIG, 3)
    if framing == "chunked":
        req = H.build_request("POST", "/echo", [("Transfer-Encoding", "chunked")],
                              body=H.chunk_encode(payload, chunk=100000))
    else:
        req = H.build_request("POST", "/echo", body=payload)
    with H.Client(s.port, timeout=30) as c:
        r = send_while_reading(c, req)
    assert r.status == 200
    assert r.header("x-body-len") == str(BIG)
    assert len(r.body) == BIG
    assert H.sha256(r.body) == H.sha256(payload)


def test_large_download_content_length_checksummed(sluice, demo):
    d = demo()
    s = proxy_for(sluice, d)
    direct = d.get("/?size=%d" % BIG, timeout=30)
    with H.Client(s.port, timeout=30) as c:
        r = c.request("GET", "/?size=%d" % BIG)
    assert r.status == 200 and len(r.body) == BIG
    assert H.sha256(r.body) == H.sha256(direct.body)


def test_large_download_chunked_checksummed(sluice, demo):
    d = demo()
    s = proxy_for(sluice, d)
    path = "/chunked?size=%d&chunk=65521" % BIG
    direct = d.get(path, timeout=30)
    assert direct.chunked and len(direct.body) == BIG
    with H.Client(s.port, timeout=30) as c:
        r = c.request("GET", path)
        assert r.status == 200 and len(r.body) == BIG
        assert H.sha256(r.body) == H.sha256(direct.body)
        assert c.request("GET", "/").status == 200  # framing intact


def test_large_chunked_upload_with_curl(sluice, demo, tmp_path):
    if not shutil.which("curl"):
        pytest.skip("curl not installed")
    d = demo()
    s = proxy_for(sluice, d)
    src = tmp_path / "up.bin"
    dst = tmp_path / "down.bin"
    payload = H.pattern_bytes(BIG, 4)
    src.write_bytes(payload)
    p = subprocess.run(["curl", "-sS", "--max-time", "30", "-H", "Transfer-Encoding: chunked",
                        "--data-binary", "@%s" % src, "-o", str(dst), "-w", "%{http_code}",
                        "http://127.0.0.1:%d/echo" % s.port],
                       capture_output=True, text=True, timeout=40)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "200"
    assert H.sha256(dst.read_bytes()) == H.sha256(payload)


def test_close_delimited_backend_body(sluice, recorder):
    payload = H.pattern_bytes(200000, 5)

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + payload)
        conn.close()
    rb = recorder(handler)
    s = proxy_for(sluice, rb)
    with H.Client(s.port, timeout=10) as c:
        r = c.request("GET", "/")
        assert r.status == 200
        assert H.sha256(r.body) == H.sha256(payload)


def test_backend_body_is_streamed(sluice, recorder):
    """The first chunk reaches the client while the backend still holds the
    rest (the backend waits for the test to see chunk 1)."""
    seen_first = threading.Event()

    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        if not seen_first.wait(10):
            return
        conn.send(b"6\r\nsecond\r\n0\r\n\r\n")
        conn.drain_until_eof()
    rb = recorder(handler)
    s = proxy_for(sluice, rb)
    with H.Client(s.port, timeout=5) as c:
        c.send(H.build_request("GET", "/stream"))
        while b"first" not in c.st.buf:
            assert c.st._fill(), "EOF before the first chunk arrived"
        seen_first.set()
        r = c.read_response()
        assert r.status == 200
        assert r.body == b"firstsecond"  # however sluice re-framed it


def test_request_body_is_streamed_to_backend(sluice, recorder):
    """Backend sees the first part of a Content-Length body before the client
    sent the rest (no whole-body buffering)."""
    got_part = threading.Event()

    def handler(conn):
        conn.st.read_until(b"\r\n\r\n")
        while b"PART1" not in conn.st.buf:
            if not conn.st._fill():
                return
        got_part.set()
        conn.st.read_until(b"PART2")
        conn.respond(b"done")
        conn.drain_until_eof()
    rb = recorder(handler)
    s = proxy_for(sluice, rb)
    with H.Client(s.port, timeout=5) as c:
        c.send(H.build_request("POST", "/up", [("Content-Length", "10")]) + b"PART1")
        assert got_part.wait(5), "first body part was not forwarded before the rest arrived"
        c.send(b"PART2")
        r = c.read_response()
        assert r.status == 200 and r.body == b"done"


# ---------------------------------------------------------------- 100-continue

def test_expect_100_continue(sluice, demo):
    d = demo()
    s = proxy_for(sluice, d)
    with H.Client(s.port) as c:
        c.send(H.build_request("POST", "/echo", [("Expect", "100-continue"),
                                                ("Content-Length", "11")]))
        # sluice must answer 100 before we send the body (we wait for it)
        interim = c.read_response(skip_1xx=False)
        assert interim.status == 100
        assert interim.raw == b"HTTP/1.1 100 Continue\r\n\r\n"
        c.send(b"hello world")
        r = c.read_response()
        assert r.status == 200 and r.body == b"hello world"


def test_expect_not_forwarded(sluice, recorder):
    rb = recorder()
    s = proxy_for(sluice, rb)
    with H.Client(s.port) as c:
        c.send(H.build_request("POST", "/x", [("Expect", "100-continue"), ("Content-Length", "3")]))
        assert c.read_response(skip_1xx=False).status == 100
        c.send(b"abc")
        r = c.read_response()
        assert r.status == 200
    q = rb.wait_requests(1)[0]
    assert q.header("expect") is None
    assert q.body == b"abc"
    assert b"100-continue" not in bytes(rb.conns[0].data)


def test_expect_other_value_is_417(sluice, recorder):
    rb = recorder()
    s = proxy_for(sluice, rb)
    r, rest = H.raw_exchange(s.port, H.build_request("POST", "/x", [("Expect", "something-else"),
                                                                    ("Content-Length", "3")]) + b"abc")
    assert r.status == 417
    assert r.has_token("connection", "close")
    assert rest is not None
    assert rb.total_bytes() == 0 and rb.conn_count() == 0


# ---------------------------------------------------------------- WebSocket

def test_websocket_echo_through_tunnel(sluice, recorder):
    rb = recorder(H.websocket_handler)
    s = proxy_for(sluice, rb)
    key = "x3JJHMbDL1EzLkh9GBhXDw=="
    with H.Client(s.port, timeout=5) as c:
        r = c.request("GET", "/ws", [("Connection", "Upgrade"), ("Upgrade", "websocket"),
                                     ("Sec-WebSocket-Key", key), ("Sec-WebSocket-Version", "13")])
        assert r.status == 101, r
        assert r.header("sec-websocket-accept") == H.ws_accept(key)
        assert (r.header("upgrade") or "").lower() == "websocket"
        assert r.has_token("connection", "upgrade")
        c.send(H.ws_frame(b"hello", opcode=1))
        assert H.ws_read_frame(c.st) == (True, 1, b"hello")
        for n in (300, 70000, 1):
            data = H.pattern_bytes(n, n)
            c.send(H.ws_frame(data))
            assert H.ws_read_frame(c.st) == (True, 2, data)
        # several frames in one write, echoed in order
        frames = [H.pattern_bytes(100 + i, i) for i in range(10)]
        c.send(b"".join(H.ws_frame(f) for f in frames))
        for f in frames:
            assert H.ws_read_frame(c.st)[2] == f
        c.send(H.ws_frame(b"\x03\xe8", opcode=8))
        assert H.ws_read_frame(c.st)[1] == 8
        assert c.wait_closed(5) == b""
    q = rb.all_requests()[0]
    assert (q.header("upgrade") or "").lower() == "websocket"
    assert "upgrade" in (q.header("connection") or "").lower()
    assert q.header("sec-websocket-key") == key
