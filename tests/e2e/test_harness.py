"""Self-tests of the harness pieces that need no sluice binary: the YAML
writer, the recording origin, the raw client parser, the WebSocket codec,
the blackhole server and process helpers. If these fail, every other result
is suspect."""

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

import harness as H


def test_free_port_is_bindable():
    p = H.free_port()
    s = socket.socket()
    s.bind((H.HOST, p))
    s.close()


def test_free_port_never_repeats():
    """A listener and an admin port picked one after the other must differ
    (a repeat made a config invalid: "same address as listeners[0]")."""
    ports = [H.free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_to_yaml_shape():
    cfg = H.make_config(8080, [H.server(9000, max_connections=2)], workers=2,
                        error_log="/tmp/e.log", access_log="off",
                        health={"path": "/health", "interval": "200ms"})
    text = H.to_yaml(cfg)
    lines = text.splitlines()
    assert lines[0] == "workers: 2"
    assert 'error_log: "/tmp/e.log"' in lines
    assert "listeners:" in lines
    assert '  - name: "http"' in lines
    assert '    address: "127.0.0.1:8080"' in lines
    assert '    backend: "app"' in lines
    assert "    servers:" in lines
    assert '      - name: "s1"' in lines
    assert '        address: "127.0.0.1:9000"' in lines
    assert "        max_connections: 2" in lines
    assert "    health_check:" in lines
    assert '      interval: "200ms"' in lines
    assert '  client_header: "10s"' in lines
    # structural check with a real YAML parser when one happens to exist
    try:
        import yaml  # noqa: F401  (optional; never required)
    except ImportError:
        return
    assert yaml.safe_load(text) == cfg


def test_recording_backend_records_exact_bytes(recorder):
    rb = recorder()
    req1 = H.build_request("GET", "/a?x=1", [("X-A", "1")])
    req2 = H.build_request("POST", "/b", body=b"hello")
    req3 = H.build_request("POST", "/c", [("Transfer-Encoding", "chunked")],
                           body=H.chunk_encode(b"abcdefghij", chunk=4, ext=b"e=1",
                                               trailers=[("X-T", "t")]))
    with H.Client(rb.port) as c:
        c.send(req1 + req2)  # pipelined
        r1 = c.read_response()
        r2 = c.read_response()
        r3 = c.request("POST", "/c", [("Transfer-Encoding", "chunked")],
                       body=H.chunk_encode(b"abcdefghij", chunk=4, ext=b"e=1",
                                           trailers=[("X-T", "t")]))
    assert (r1.status, r1.body) == (200, b"conn=0 req=0")
    assert (r2.status, r2.body) == (200, b"conn=0 req=1")
    assert r3.body == b"conn=0 req=2"
    qs = rb.wait_requests(3)
    assert [q.target for q in qs] == ["/a?x=1", "/b", "/c"]
    assert qs[1].body == b"hello"
    assert qs[2].chunked and qs[2].body == b"abcdefghij"
    assert qs[2].trailers == [("X-T", "t")]
    assert b";e=1" in qs[2].raw_body
    H.wait_for(lambda: rb.conns[0].closed, 2)
    assert bytes(rb.conns[0].data) == req1 + req2 + req3
    assert rb.conns[0].closed_by_peer
    assert rb.conn_count() == 1 and not rb.errors


def test_recording_backend_scripted_reset_and_garbage(recorder):
    def handler(conn):
        conn.read_request()
        if conn.index == 0:
            conn.reset()
        else:
            conn.send(b"garbage\r\n\r\n")
            conn.close()
    rb = recorder(handler)
    with H.Client(rb.port) as c:
        c.send(H.build_request())
        with pytest.raises((H.ConnClosed, ConnectionResetError)):
            c.read_response()
    with H.Client(rb.port) as c:
        c.send(H.build_request())
        assert c.wait_closed(2) == b"garbage\r\n\r\n"


def test_response_parser_framings(recorder):
    def handler(conn):
        conn.read_request()
        conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        conn.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n")
        conn.read_request()
        conn.send(b"HTTP/1.1 204 No Content\r\nX: y\r\n\r\n")
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")  # HEAD
        conn.read_request()
        conn.send(b"HTTP/1.1 200 OK\r\n\r\nuntil close")
        conn.close()
    rb = recorder(handler)
    with H.Client(rb.port) as c:
        r = c.request()
        assert r.status == 200 and r.chunked and r.body == b"abcde"
        assert [i.status for i in r.interim] == [100]
        assert r.trailers == [("X-T", "1")]
        assert c.request().status == 204
        r = c.request("HEAD")
        assert r.body == b"" and r.header("content-length") == "10"
        r = c.request()
        assert r.closed and r.body == b"until close"


def test_websocket_codec_against_recorder(recorder):
    rb = recorder(H.websocket_handler)
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    assert H.ws_accept(key) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455 example
    with H.Client(rb.port) as c:
        r = c.request("GET", "/ws", [("Connection", "Upgrade"), ("Upgrade", "websocket"),
                                     ("Sec-WebSocket-Key", key), ("Sec-WebSocket-Version", "13")])
        assert r.status == 101
        for n in (5, 300, 70000):
            data = H.pattern_bytes(n, n)
            c.send(H.ws_frame(data))
            assert H.ws_read_frame(c.st) == (True, 2, data)
        c.send(H.ws_frame(b"\x03\xe8", opcode=8))
        assert H.ws_read_frame(c.st)[1] == 8
        assert c.wait_closed(2) == b""


def test_blackhole_connect_times_out(blackhole):
    s = socket.socket()
    s.settimeout(0.5)
    t0 = time.monotonic()
    with pytest.raises(socket.timeout):
        s.connect((H.HOST, blackhole.port))
    assert time.monotonic() - t0 >= 0.4
    s.close()


def test_process_helpers(tmp_path):
    # a parent with two children; children_of finds them; kill_popen cleans up
    code = ("import subprocess,sys,time\n"
            "ps=[subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)']) for _ in range(2)]\n"
            "print('ready',flush=True)\n"
            "time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         start_new_session=True)
    try:
        assert p.stdout.readline().strip() == b"ready"
        kids = H.wait_for(lambda: len(H.children_of(p.pid)) == 2 and H.children_of(p.pid), 5)
        assert all(H.pid_alive(k) for k in kids)
    finally:
        H.kill_popen(p, grace=2)
    H.wait_for(lambda: not any(H.pid_alive(k) for k in kids), 5, what="children gone")


def test_wait_log_and_access_parse(tmp_path):
    path = str(tmp_path / "a.log")
    line = ("2024-01-01T00:00:00.000Z 127.0.0.1:5555 GET /x?y=1 200 123 app/s1 total_us=10 "
            "queue_us=0 connect_us=5 backend_us=3 be_conn_req=1 inspect_us=- inspect=off reason=ok")

    def writer():
        time.sleep(0.1)
        with open(path, "a") as f:
            f.write(line + "\n")
    t = threading.Thread(target=writer)
    t.start()
    m = H.wait_log(path, r"GET /x\?y=1 200", timeout=3)
    t.join()
    assert m
    e = H.parse_access_line(line)
    assert e["status"] == "200" and e["server"] == "app/s1" and e["reason"] == "ok"
    with pytest.raises(TimeoutError):
        H.wait_log(path, "never", timeout=0.2)
