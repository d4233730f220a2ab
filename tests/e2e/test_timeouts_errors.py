"""Every timeout and every backend-side error status: 408 (header, body),
silent keepalive close, 502 (refused, reset, garbage, early close), 504
(connect, response), backend idle timeout, truncated backend response, and
that a worker survives all of it."""

import socket
import threading
import time

import pytest

import harness as H

SLACK = 2.0  # seconds of scheduling slack allowed above a configured timeout


def assert_sluice_error(r, status):
    assert r.status == status, r
    assert (r.header("content-type") or "").startswith("text/plain"), r.headers
    assert r.header("content-length") == str(len(r.body))
    assert r.has_token("connection", "close"), r.headers


def cfg_for(port, servers=None, **kw):
    servers = servers if servers is not None else [H.server(port)]
    return H.make_config(H.free_port(), servers, **kw)


# ---------------------------------------------------------------- client side

def test_client_header_timeout_408(sluice, recorder):
    rb = recorder()
    s = sluice(cfg_for(rb.port, timeouts={"client_header": "1s"}))
    with H.Client(s.port, timeout=1 + 2 * SLACK) as c:
        t0 = time.monotonic()
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n")  # head never completes
        r = c.read_response()
        elapsed = time.monotonic() - t0
        assert_sluice_error(r, 408)
        assert 0.8 <= elapsed <= 1 + SLACK, elapsed
        c.wait_closed(3)
    assert rb.conn_count() == 0 and rb.total_bytes() == 0


def test_slowloris_dribble_still_times_out(sluice, recorder):
    """One byte every 100 ms does not extend client_header: the whole head
    must arrive in time."""
    rb = recorder()
    s = sluice(cfg_for(rb.port, timeouts={"client_header": "1s"}))
    head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
    with H.Client(s.port, timeout=0.1) as c:
        t0 = time.monotonic()
        got = b""
        for b in head:
            try:
                c.send(bytes([b]))
            except (BrokenPipeError, ConnectionResetError):
                break
            try:
                d = c.sock.recv(4096)
                got += d
                if not d or b"\r\n\r\n" in got:
                    break
            except socket.timeout:
                pass
            assert time.monotonic() - t0 < 1 + SLACK + 1, "still open while dribbling"
        c.settimeout(3)
        st = H.Stream(c.sock)
        st.buf = got
        r = H.read_response(st)
        assert r.status == 408
        assert time.monotonic() - t0 <= 1 + SLACK
    assert rb.conn_count() == 0


def test_keepalive_idle_closed_silently(sluice, recorder):
    rb = recorder()
    s = sluice(cfg_for(rb.port, timeouts={"client_keepalive": "1s", "client_header": "10s"}))
    with H.Client(s.port, timeout=5) as c:
        assert c.request("GET", "/").status == 200
        t0 = time.monotonic()
        rest = c.wait_closed(1 + SLACK + 1)
        elapsed = time.monotonic() - t0
        assert rest == b"", "idle keepalive close must send nothing, got %r" % rest
        assert 0.8 <= elapsed <= 1 + SLACK, elapsed


def test_keepalive_activity_keeps_connection(sluice, recorder):
    """Requests spaced below client_keepalive keep the connection open past
    the keepalive timeout in total."""
    rb = recorder()
    s = sluice(cfg_for(rb.port, timeouts={"client_keepalive": "1s"}))
    with H.Client(s.port, timeout=5) as c:
        for _ in range(4):
            assert c.request("GET", "/").status == 200
            time.sleep(0.5)  # deliberate idle gap, below the timeout


def test_keepalive_idle_past_buffer_trim(sluice, recorder):
    """After 250 ms of keepalive idleness a connection gives its buffers back
    (docs/architecture.md): the next request on it is served in full, the
    backend gets the same bytes, and the keepalive timeout is still counted
    from the end of the last response, not restarted by the trim."""
    rb = recorder()
    s = sluice(cfg_for(rb.port, timeouts={"client_keepalive": "5s", "client_header": "10s"}))
    with H.Client(s.port, timeout=12) as c:
        big = "v" * 3000
        r = c.request("POST", "/a", headers=[("X-Big", big)], body=b"x" * 5000)
        assert r.status == 200
        time.sleep(1.6)  # well past the 250 ms trim
        r = c.request("POST", "/b", headers=[("X-Big", big)], body=b"y" * 5000)
        assert r.status == 200
        time.sleep(1.6)
        assert c.request("GET", "/c").status == 200
        t0 = time.monotonic()
        rest = c.wait_closed(5 + SLACK + 1)
        elapsed = time.monotonic() - t0
        assert rest == b""
        # a keepalive restarted by the trim would close at 6 s
        assert 4.7 <= elapsed < 5.9, elapsed
    reqs = rb.all_requests()
    assert [q.target for q in reqs] == ["/a", "/b", "/c"]
    assert reqs[1].body == b"y" * 5000 and reqs[1].header("x-big") == big


def test_new_connection_without_bytes_is_closed(sluice, recorder):
    """A connection that never sends a byte is closed within the header or
    keepalive timeout (silently or with 408, the spec leaves that open)."""
    rb = recorder()
    s = sluice(cfg_for(rb.port, timeouts={"client_header": "1s", "client_keepalive": "1s"}))
    with H.Client(s.port) as c:
        t0 = time.monotonic()
        rest = c.wait_closed(1 + SLACK + 1)
        assert time.monotonic() - t0 <= 1 + SLACK
        assert rest == b"" or rest.startswith(b"HTTP/1.1 408")


def test_client_body_timeout_408(sluice, recorder):
    rb = recorder(lambda conn: conn.hang(15))
    s = sluice(cfg_for(rb.port, timeouts={"client_body": "1s"}))
    with H.Client(s.port, timeout=1 + 2 * SLACK) as c:
        c.send(H.build_request("POST", "/", [("Content-Length", "100")]) + b"0123456789")
        t0 = time.monotonic()
        r = c.read_response()
        elapsed = time.monotonic() - t0
        assert_sluice_error(r, 408)
        assert 0.8 <= elapsed <= 1 + SLACK, elapsed
        c.wait_closed(3)


def test_client_body_timeout_chunked(sluice, recorder):
    rb = recorder(lambda conn: conn.hang(15))
    s = sluice(cfg_for(rb.port, timeouts={"client_body": "1s"}))
    with H.Client(s.port, timeout=1 + 2 * SLACK) as c:
        c.send(H.build_request("POST", "/", [("Transfer-Encoding", "chunked")]) + b"5\r\nhel")
        r = c.read_response()
        assert_sluice_error(r, 408)


# ---------------------------------------------------------------- backend side

def test_backend_refused_502(sluice):
    dead = H.free_port()  # nothing listens there
    s = sluice(cfg_for(dead, backend={"connect_timeout": "2s"}))
    t0 = time.monotonic()
    r = H.http_request(s.port, "GET", "/refused")
    assert_sluice_error(r, 502)
    assert time.monotonic() - t0 < 2.0  # refused is immediate, not a timeout
    e = s.wait_access_entry(lambda e: e["target"] == "/refused")
    assert e["status"] == "502" and e["reason"] == "backend_refused"


def test_backend_reset_502(sluice, recorder):
    def handler(conn):
        conn.read_request()
        conn.reset()
    rb = recorder(handler)
    s = sluice(cfg_for(rb.port))
    r = H.http_request(s.port, "GET", "/reset")
    assert_sluice_error(r, 502)


def test_backend_closes_without_response_502(sluice, recorder):
    def handler(conn):
        conn.read_request()
        conn.close()
    rb = recorder(handler)
    s = sluice(cfg_for(rb.port))
    r = H.http_request(s.port, "POST", "/early-close", body=b"abc")
    assert_sluice_error(r, 502)


@pytest.mark.parametrize("garbage", [
    b"garbage\r\n\r\n",
    b"HTTP/1.1 abc OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
    b"\x00\x01\x02\x03\r\n\r\n",
], ids=["not_http", "bad_status", "dup_cl", "bad_header", "binary"])
def test_backend_garbage_502(sluice, recorder, garbage):
    def handler(conn):
        conn.read_request()
        conn.send(garbage)
        conn.hang(5)
    rb = recorder(handler)
    s = sluice(cfg_for(rb.port))
    r = H.http_request(s.port, "GET", "/garbage")
    assert_sluice_error(r, 502)


def test_backend_connect_timeout_504(sluice, blackhole):
    s = sluice(cfg_for(blackhole.port, backend={"connect_timeout": "500ms"}))
    t0 = time.monotonic()
    r = H.http_request(s.port, "GET", "/ct", timeout=10)
    elapsed = time.monotonic() - t0
    assert_sluice_error(r, 504)
    assert 0.4 <= elapsed <= 0.5 + SLACK, elapsed
    e = s.wait_access_entry(lambda e: e["target"] == "/ct")
    assert e["status"] == "504"


def test_backend_response_timeout_504(sluice, recorder):
    rb = recorder(lambda conn: conn.hang(15))
    s = sluice(cfg_for(rb.port, backend={"response_timeout": "500ms"}))
    t0 = time.monotonic()
    r = H.http_request(s.port, "GET", "/rt", timeout=10)
    elapsed = time.monotonic() - t0
    assert_sluice_error(r, 504)
    assert 0.4 <= elapsed <= 0.5 + SLACK, elapsed
    e = s.wait_access_entry(lambda e: e["target"] == "/rt")
    assert e["status"] == "504" and e["reason"] == "backend_timeout"


def test_response_timeout_applies_between_reads(sluice, recorder):
    """A backend that sends the head then stalls mid-body: the client gets
    the head and then the connection is closed (the status is already
    sent), within response_timeout."""
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
        conn.hang(15)
    rb = recorder(handler)
    s = sluice(cfg_for(rb.port, backend={"response_timeout": "500ms"}))
    with H.Client(s.port, timeout=5) as c:
        c.send(H.build_request("GET", "/stall"))
        t0 = time.monotonic()
        with pytest.raises(H.ConnClosed):
            c.read_response()
        assert time.monotonic() - t0 <= 0.5 + SLACK


def test_truncated_backend_response_closes_client(sluice, recorder):
    """Backend promises 100 bytes, sends 10 and closes: the client must see
    the connection closed (not hang, not get a wrongly framed keepalive),
    and the next connection is served."""
    def handler(conn):
        q = conn.read_request()
        if q.target == "/trunc":
            conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
            conn.close()
        else:
            conn.respond(b"fine")
            conn.drain_until_eof()
    rb = recorder(handler)
    s = sluice(cfg_for(rb.port))
    with H.Client(s.port, timeout=5) as c:
        c.send(H.build_request("GET", "/trunc"))
        with pytest.raises(H.ConnClosed):
            c.read_response()
    r = H.http_request(s.port, "GET", "/after")
    assert r.status == 200 and r.body == b"fine"


def test_backend_idle_timeout_closes_pooled_connection(sluice, recorder):
    rb = recorder()
    s = sluice(cfg_for(rb.port, backend={"idle_timeout": "300ms"}))
    assert H.http_request(s.port, "GET", "/").status == 200
    t0 = time.monotonic()
    H.wait_for(lambda: rb.conns[0].closed_by_peer, 0.3 + SLACK + 1,
               what="sluice to close the idle pooled connection")
    assert time.monotonic() - t0 <= 0.3 + SLACK
    assert H.http_request(s.port, "GET", "/").status == 200
    assert rb.conn_count() == 2


def test_idle_max_limits_pooled_connections(sluice, recorder):
    """idle_max: 1 — after 4 concurrent requests, at most one backend
    connection stays open idle."""
    gate = threading.Event()

    def handler(conn):
        while True:
            conn.read_request()
            gate.wait(10)
            conn.respond(b"ok")
    rb = recorder(handler)
    s = sluice(cfg_for(rb.port, backend={"idle_max": 1}))
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(4) as ex:
        fs = [ex.submit(H.http_request, s.port, "GET", "/%d" % i) for i in range(4)]
        rb.wait_requests(4)
        gate.set()
        assert [f.result(10).status for f in fs] == [200] * 4
    H.wait_for(lambda: sum(1 for c in rb.conns if not c.closed) <= 1, 3,
               what="idle connections beyond idle_max to be closed")


def test_worker_survives_bad_peers(sluice, recorder):
    """After a barrage of bad clients and a bad backend the same worker
    (workers: 1, same PID) still serves."""
    def handler(conn):
        q = conn.read_request()
        if q.target == "/bad":
            conn.send(b"\xff\xfe garbage")
            conn.reset()
        else:
            conn.respond(b"ok")
            conn.drain_until_eof()
    rb = recorder(handler)
    s = sluice(cfg_for(rb.port))
    pids = s.worker_pids()
    for i in range(20):
        with H.Client(s.port, timeout=5) as c:
            c.send([b"\x00" * 100, b"GET / HTTP/1.1\r\n" + b"X" * 5000,
                    H.build_request("GET", "/bad"), b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nab"][i % 4])
            # half of them hang up abruptly without reading
            if i % 2:
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    try:
        r = H.http_request(s.port, "GET", "/good")
    except (socket.timeout, H.ConnClosed, ConnectionError) as e:
        pytest.fail("no answer after the barrage (%r); worker pids before %s, now %s"
                    % (e, pids, s.worker_pids()))
    assert r.status == 200 and r.body == b"ok"
    assert s.worker_pids() == pids, "the worker was replaced: it crashed"


def test_client_abort_while_backend_connects_does_not_poison_pool(sluice, recorder):
    """Clients that send a partial POST and vanish at once (sluice is still
    connecting to the backend): connections established for them must not
    end up pooled in a state where the next request's response is never
    read. Afterwards requests are answered promptly."""
    rb = recorder()
    s = sluice(cfg_for(rb.port))
    for i in range(20):
        with H.Client(s.port, timeout=5) as c:
            c.send(b"POST /abort%d HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nab" % i)
    for i in range(5):
        try:
            r = H.http_request(s.port, "GET", "/next%d" % i, timeout=3)
        except socket.timeout:
            got = [bytes(c.data)[:40] for c in rb.conns if b"/next%d" % i in bytes(c.data)]
            pytest.fail("GET /next%d unanswered; the backend received it (%r) so sluice is not "
                        "reading that backend connection" % (i, got))
        assert r.status == 200, r
