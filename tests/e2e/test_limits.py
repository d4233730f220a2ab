"""Every request and connection limit, at its exact boundary: the default
values (a config without `limits`), configured values, the response-side
limits, a body limit hit mid-stream, and the per-worker connection cap.

test_malformed.py checks that over-limit requests never reach the backend;
this module checks where each limit starts to bite, to the byte.

How sluice counts (docs/config.md "limits"): max_request_line bounds the
request target; max_header_size bounds the header block as target + the sum
over fields of name + value + 4 (": " and CRLF); max_headers counts fields,
Host included."""

import socket
import time

import pytest

import harness as H

DEFAULTS = {"max_request_line": 8192, "max_header_size": 32768, "max_headers": 100}
SMALL = {"max_request_line": 100, "max_header_size": 600, "max_headers": 10, "max_body_size": 256}


def cfg_without_limits(backend_port):
    cfg = H.make_config(H.free_port(), [H.server(backend_port)])
    del cfg["limits"]
    return cfg


def head(target=b"/", fields=(), method=b"GET", body=b""):
    fields = [(b"Host", b"t.example")] + list(fields)
    out = method + b" " + target + b" HTTP/1.1\r\n"
    out += b"".join(k + b": " + v + b"\r\n" for k, v in fields)
    if body:
        out += b"Content-Length: %d\r\n" % len(body)
    return out + b"\r\n" + body


def header_block_bytes(target, fields):
    """sluice's count for a request built by head() (Host included)."""
    fields = [(b"Host", b"t.example")] + list(fields)
    return len(target) + sum(len(k) + len(v) + 4 for k, v in fields)


def target_of(n):
    return b"/" + b"a" * (n - 1)


def fields_of(n):
    """N fields in all, Host included."""
    return [(b"X-F%d" % i, b"v") for i in range(n - 1)]


def filler_for(total, target=b"/"):
    """One X-Big field that makes the header block exactly TOTAL bytes."""
    base = header_block_bytes(target, [(b"X-Big", b"")])
    return [(b"X-Big", b"b" * (total - base))]


def exchange(port, raw):
    """One request on a new connection; the response (not waiting for the
    close a keepalive response would never bring)."""
    with H.Client(port) as c:
        c.send(raw)
        return c.read_response()


def boundary_cases(lim):
    """(name, raw at the limit, raw one past it, status past it)."""
    line, hsize, nh = lim["max_request_line"], lim["max_header_size"], lim["max_headers"]
    return [
        ("request_line", head(target_of(line)), head(target_of(line + 1)), 414),
        ("header_count", head(fields=fields_of(nh)), head(fields=fields_of(nh + 1)), 431),
        ("header_block", head(fields=filler_for(hsize)), head(fields=filler_for(hsize + 1)), 431),
    ]


def check_boundary(port, rb, at, past, status):
    before = rb.total_bytes()
    r = exchange(port, at)
    assert r.status == 200, r
    got = rb.all_requests()[-1]
    assert got.target == at.split(b" ")[1].decode("latin-1")
    n_bytes = rb.total_bytes()
    assert n_bytes > before
    r = exchange(port, past)
    assert r.status == status, r
    assert r.has_token("connection", "close")
    time.sleep(0.05)
    assert rb.total_bytes() == n_bytes, "an over-limit request reached the backend"


@pytest.mark.parametrize("which", ["request_line", "header_count", "header_block"])
def test_default_limit_boundary(sluice, recorder, which):
    """Without a limits mapping: 8 KiB target, 100 fields and a 32 KiB
    header block pass at the limit and are refused one past it."""
    rb = recorder()
    s = sluice(cfg_without_limits(rb.port))
    case = {c[0]: c for c in boundary_cases(DEFAULTS)}[which]
    check_boundary(s.port, rb, *case[1:])


@pytest.mark.parametrize("which", ["request_line", "header_count", "header_block"])
def test_configured_limit_boundary(sluice, recorder, which):
    rb = recorder()
    s = sluice(H.make_config(H.free_port(), [H.server(rb.port)], limits=SMALL))
    case = {c[0]: c for c in boundary_cases(SMALL)}[which]
    check_boundary(s.port, rb, *case[1:])


def test_default_body_size_is_unlimited_and_streamed(sluice, recorder):
    """max_body_size defaults to 0 (no limit, as HAProxy): a 4 MiB body is
    forwarded whole."""
    rb = recorder()
    s = sluice(cfg_without_limits(rb.port))
    body = H.pattern_bytes(4 << 20, seed=3)
    r = H.http_request(s.port, "POST", "/up", body=body, timeout=20)
    assert r.status == 200, r
    q = rb.all_requests()[-1]
    assert H.sha256(q.body) == H.sha256(body)


def test_configured_body_limit_boundary_content_length(sluice, recorder):
    rb = recorder()
    s = sluice(H.make_config(H.free_port(), [H.server(rb.port)], limits=SMALL))
    at = b"x" * SMALL["max_body_size"]
    r = exchange(s.port, head(b"/b", method=b"POST", body=at))
    assert r.status == 200, r
    assert rb.all_requests()[-1].body == at
    n_bytes = rb.total_bytes()
    r = exchange(s.port, head(b"/b", method=b"POST", body=at + b"y"))
    assert r.status == 413, r
    assert r.has_token("connection", "close")
    time.sleep(0.05)
    assert rb.total_bytes() == n_bytes


def test_chunked_body_over_limit_mid_stream_413(sluice, recorder):
    """A chunked body has no length up front, so the head is forwarded at
    once; when the body passes max_body_size the client gets 413 and the
    backend connection carrying the partial request is closed, never
    reused (its request is incomplete: no final chunk was sent)."""
    rb = recorder(lambda conn: (conn.read_request(), conn.respond()))
    s = sluice(H.make_config(H.free_port(), [H.server(rb.port)], limits=SMALL))
    with H.Client(s.port) as c:
        c.send(b"POST /c HTTP/1.1\r\nHost: t.example\r\nTransfer-Encoding: chunked\r\n\r\n")
        c.send(b"100\r\n" + b"x" * 256 + b"\r\n")
        c.send(b"1\r\ny\r\n")
        r = c.read_response()
        assert r.status == 413, r
        c.wait_closed(3)
    conns = rb.wait_conns(1)
    H.wait_for(lambda: conns[0].closed, 5, what="backend connection closed")
    data = bytes(conns[0].data)
    assert b"0\r\n\r\n" not in data, "the truncated request was completed for the backend"
    assert len(data) < 256 + 200 + 64
    # The next request gets a fresh backend connection.
    r = H.http_request(s.port, "GET", "/after")
    assert r.status == 200
    assert rb.conn_count() == 2


def many_headers_response(n):
    hs = "".join("X-R%d: v\r\n" % i for i in range(n))
    return ("HTTP/1.1 200 OK\r\n%sContent-Length: 2\r\n\r\nok" % hs).encode()


@pytest.mark.parametrize("kind", ["count", "size"])
def test_response_over_header_limits_502(sluice, recorder, kind):
    """The same max_headers / max_header_size apply to backend responses:
    over them the client gets 502, nothing of the bad head, and the backend
    connection is closed rather than pooled."""
    if kind == "count":
        bad = many_headers_response(SMALL["max_headers"] + 1)
    else:
        bad = b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * SMALL["max_header_size"] + b"\r\nContent-Length: 2\r\n\r\nok"

    def handler(conn):
        while True:
            conn.read_request()
            if conn.index == 0:
                conn.send(bad)
                conn.drain_until_eof()
                return
            conn.respond(b"fine")

    rb = recorder(handler)
    s = sluice(H.make_config(H.free_port(), [H.server(rb.port)], limits=SMALL))
    r = H.http_request(s.port, "GET", "/")
    assert r.status == 502, r
    assert b"X-R" not in r.body and b"bbbb" not in r.body
    conns = rb.wait_conns(1)
    H.wait_for(lambda: conns[0].closed, 5, what="bad backend connection closed")
    r = H.http_request(s.port, "GET", "/again")
    assert (r.status, r.body) == (200, b"fine")
    assert rb.conn_count() == 2


def test_response_at_header_count_limit_passes(sluice, recorder):
    # Content-Length is the response's max_headers-th field.
    n = SMALL["max_headers"] - 1

    def handler(conn):
        while True:
            conn.read_request()
            conn.send(many_headers_response(n))

    rb = recorder(handler)
    s = sluice(H.make_config(H.free_port(), [H.server(rb.port)], limits=SMALL))
    r = H.http_request(s.port, "GET", "/")
    assert r.status == 200, r
    assert r.header("x-r%d" % (n - 1)) == "v"


def test_max_connections_per_worker(sluice, recorder):
    """limits.max_connections: a connection past the cap is closed at once
    without a response (logged, at most once a second); the connections
    already open keep being served; once one leaves, a new one is accepted."""
    rb = recorder()
    s = sluice(H.make_config(H.free_port(), [H.server(rb.port)], limits={"max_connections": 3}))
    time.sleep(0.2)  # the readiness probe's connection must be gone first
    held = []
    for _ in range(3):
        held.append(H.Client(s.port))
        time.sleep(0.05)
    try:
        for c in held:
            assert c.request("GET", "/held").status == 200
        extra = socket.create_connection((H.HOST, s.port), timeout=5)
        extra.sendall(b"GET /extra HTTP/1.1\r\nHost: t.example\r\n\r\n")
        try:
            assert extra.recv(100) == b""
        except ConnectionResetError:
            pass
        extra.close()
        s.wait_error_log(r"limits\.max_connections \(3\) reached: closing new connections")
        for c in held:
            assert c.request("GET", "/still").status == 200
        held.pop().close()
        time.sleep(0.1)
        with H.Client(s.port) as c:
            assert c.request("GET", "/new").status == 200
    finally:
        for c in held:
            c.close()
    assert "/extra" not in [q.target for q in rb.all_requests()]
