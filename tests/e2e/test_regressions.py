"""Regression tests, each named after what broke (found in code review of the
core): framing headers unlisted by Connection, resets taken for clean ends,
slow readers cut off by the linger timer or by drain, pipelined requests lost
after a half-close, sockets left listening after a reload removed them."""

import signal
import socket
import time

import harness as H


def proxy(sluice, backend, **kw):
    return sluice(H.make_config(H.free_port(), [H.server(backend.port)], **kw))


def test_connection_header_cannot_unlist_content_length(sluice, recorder):
    """`Connection: content-length` must not make sluice drop Content-Length:
    the backend would see a bodyless POST followed by the body as a second,
    smuggled request."""
    rb = recorder()
    s = proxy(sluice, rb)
    inner = b"GET /admin HTTP/1.1\r\nHost: t\r\n\r\n"
    req = (b"POST /public HTTP/1.1\r\nHost: t\r\nConnection: content-length, host\r\n"
           b"Content-Length: %d\r\n\r\n" % len(inner)) + inner
    with H.Client(s.port) as c:
        c.send(req)
        assert c.read_response().status == 200
    q = rb.wait_requests(1)[0]
    assert q.method == "POST" and q.body == inner
    assert q.header("content-length") == str(len(inner))
    assert q.header("host") == "t"
    time.sleep(0.2)
    assert len(rb.all_requests()) == 1, rb.all_requests()


def test_backend_reset_mid_close_delimited_body_is_not_a_clean_end(sluice, recorder):
    """A close-delimited response ended by RST (not FIN) is truncated: the
    client must not get the chunked terminator that says it is complete."""
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\npartial-body")
        time.sleep(0.2)
        conn.reset()
    rb = recorder(handler)
    s = proxy(sluice, rb)
    with H.Client(s.port, timeout=5) as c:
        c.send(H.build_request("GET", "/"))
        data = b""
        try:
            data = c.read_to_eof()
        except (ConnectionResetError, H.ConnClosed) as e:
            data = getattr(e, "partial", b"")
    assert b"0\r\n\r\n" not in data, data
    s.wait_access_log(r"GET / 200 .* reason=backend_aborted_response")


def test_backend_fin_ends_close_delimited_body_cleanly(sluice, recorder):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\n\r\nwhole-body")
        conn.close()
    rb = recorder(handler)
    s = proxy(sluice, rb)
    with H.Client(s.port) as c:
        r = c.request("GET", "/")
    assert r.status == 200 and r.body == b"whole-body"


def _small_window_socket(port):
    """A client whose receive window stays small (set before connect), so a
    big response has to wait in sluice's own queue, not in the kernel."""
    sk = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32768)
    sk.settimeout(20)
    sk.connect((H.HOST, port))
    return sk


def _big_response_backend(size):
    body = H.pattern_bytes(size)

    def handler(conn):
        while True:
            conn.read_request()
            conn.respond(body)
    return body, handler


def test_slow_reader_gets_whole_response_after_linger_period(sluice, recorder):
    """The last response on a closing connection is delivered even when the
    client starts reading only after 3 s (the 2 s linger once cut it off)."""
    body, handler = _big_response_backend(24 * 1024 * 1024)
    rb = recorder(handler)
    s = proxy(sluice, rb)
    sk = _small_window_socket(s.port)
    try:
        sk.sendall(H.build_request("GET", "/big", headers=[("Connection", "close")]))
        time.sleep(3.0)
        r = H.read_response(H.Stream(sk))
    finally:
        sk.close()
    assert r.status == 200 and H.sha256(r.body) == H.sha256(body)


def test_client_that_never_reads_is_closed_at_client_send_timeout(sluice, recorder):
    body, handler = _big_response_backend(8 * 1024 * 1024)
    rb = recorder(handler)
    s = proxy(sluice, rb, timeouts={"client_send": "1s"})
    sk = _small_window_socket(s.port)
    try:
        sk.sendall(H.build_request("GET", "/big"))
        t0 = time.monotonic()
        s.wait_access_log(r"reason=client_send_timeout", timeout=8)
        assert time.monotonic() - t0 < 6
    finally:
        sk.close()
    # the worker still serves
    with H.Client(s.port) as c2:
        c2.sock.settimeout(10)
        assert c2.request("GET", "/after").status == 200


def test_pipelined_requests_answered_after_client_half_close(sluice, recorder):
    rb = recorder()
    s = proxy(sluice, rb)
    with H.Client(s.port) as c:
        c.send(H.build_request("GET", "/one") + H.build_request("GET", "/two"))
        c.sock.shutdown(socket.SHUT_WR)
        r1 = c.read_response()
        r2 = c.read_response()
        assert (r1.status, r2.status) == (200, 200)
        assert c.wait_closed(5) == b""
    assert [q.target for q in rb.all_requests()] == ["/one", "/two"]


def test_drain_delivers_response_still_queued_for_slow_reader(sluice, recorder):
    body, handler = _big_response_backend(24 * 1024 * 1024)
    rb = recorder(handler)
    s = proxy(sluice, rb, timeouts={"drain": "10s"})
    sk = _small_window_socket(s.port)
    try:
        sk.sendall(H.build_request("GET", "/big"))
        time.sleep(0.5)  # the response is still mostly queued in sluice
        s.signal(signal.SIGTERM)
        time.sleep(0.5)
        r = H.read_response(H.Stream(sk))
    finally:
        sk.close()
    assert r.status == 200 and H.sha256(r.body) == H.sha256(body)
    assert s.proc.wait(timeout=15) == 0


def test_listener_removed_by_reload_stops_listening(sluice, recorder):
    rb = recorder()
    p1, p2 = H.free_port(), H.free_port()
    cfg = H.make_config(p1, [H.server(rb.port)], workers=2)
    cfg["listeners"].append({"name": "extra", "address": "%s:%d" % (H.HOST, p2), "backend": "app"})
    s = sluice(cfg)
    assert H.http_request(p2, "GET", "/").status == 200
    cfg2 = H.make_config(p1, [H.server(rb.port)], workers=2)
    s.reload(cfg2)

    def refused():
        try:
            socket.create_connection((H.HOST, p2), timeout=0.5).close()
            return False
        except socket.timeout:
            # The master keeps a removed listener's socket, ignoring new
            # SYNs, until its queued connections are accepted (up to 2 s).
            return False
        except ConnectionRefusedError:
            return True
    H.wait_for(refused, timeout=5, what="removed listener refusing connections")
    assert H.http_request(p1, "GET", "/").status == 200


def test_tunnel_half_close_is_passed_on_and_answer_delivered(sluice, recorder):
    """After a 101, a client that sends its last bytes and half-closes must
    still get the backend's answer: the FIN is passed on, not turned into
    an abort that drops the bytes in flight both ways."""
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: raw\r\nConnection: Upgrade\r\n\r\n")
        got = conn.st.read_to_eof()
        conn.send(b"got %d bytes" % len(got))
        conn.close()
    rb = recorder(handler)
    s = proxy(sluice, rb)
    with H.Client(s.port, timeout=10) as c:
        c.send(H.build_request("GET", "/tunnel", headers=[("Connection", "Upgrade"),
                                                          ("Upgrade", "raw")]))
        r = c.read_response()
        assert r.status == 101
        c.send(b"x" * 100000)
        c.sock.shutdown(socket.SHUT_WR)
        assert c.read_to_eof() == b"got 100000 bytes"
