"""TLS to backends (re-encryption), against a real nginx TLS origin: the
certificate is verified against the configured CA and the SNI name, TLS
connections are pooled and reused, new connections resume the server's
session, health checks speak TLS, and a failed verification is a 502."""

import os
import shutil
import signal
import subprocess
import time

import pytest

import harness as H

pytestmark = pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx not installed")


def _run(*cmd, cwd):
    subprocess.run(list(cmd), cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("bpki"))
    _run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", "ca.key", "-out", "ca.pem", "-days", "30", "-subj", "/CN=sluice-test-ca", cwd=d)
    _run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", "other.key", "-out", "other.pem", "-days", "30", "-subj", "/CN=other-ca", cwd=d)
    _run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", "origin.key", "-out", "origin.csr", "-subj", "/CN=origin.test", cwd=d)
    with open(os.path.join(d, "ext"), "w") as f:
        f.write("subjectAltName=DNS:origin.test\n")
    _run("openssl", "x509", "-req", "-in", "origin.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
         "-CAcreateserial", "-out", "origin.pem", "-days", "30", "-extfile", "ext", cwd=d)
    return d


@pytest.fixture
def origin(pki, tmp_path):
    """nginx serving TLS; the body tells which connection, how many requests
    on it, whether the session was resumed, and the SNI it got."""
    port = H.free_port()
    conf = tmp_path / "nginx.conf"
    conf.write_text("""
worker_processes 1;
daemon off;
pid %(d)s/nginx.pid;
error_log %(d)s/nginx.err;
events {}
http {
  access_log off;
  keepalive_requests 100000;
  ssl_session_cache shared:S:1m;
  server {
    listen 127.0.0.1:%(port)d ssl;
    ssl_certificate %(pki)s/origin.pem;
    ssl_certificate_key %(pki)s/origin.key;
    location / { return 200 "conn=$connection reqs=$connection_requests reused=$ssl_session_reused sni=$ssl_server_name"; }
  }
}
""" % {"d": str(tmp_path), "port": port, "pki": pki})
    p = subprocess.Popen(["nginx", "-c", str(conf), "-p", str(tmp_path)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    H.wait_port(port, timeout=10)
    yield port
    H.kill_popen(p)


def fields(body):
    return dict(kv.split("=", 1) for kv in body.decode().split())


def cfg_for(origin_port, pki, **tls):
    t = {"ca": os.path.join(pki, "ca.pem"), "sni": "origin.test"}
    t.update(tls)
    return H.make_config(H.free_port(), [H.server(origin_port, max_connections=4)],
                         backend={"tls": t})


def test_pooled_tls_connection_carries_many_requests(sluice, origin, pki):
    s = sluice(cfg_for(origin, pki))
    with H.Client(s.port) as c:
        got = [fields(c.request("GET", "/%d" % i).body) for i in range(10)]
    assert {g["sni"] for g in got} == {"origin.test"}
    assert len({g["conn"] for g in got}) == 1, got
    assert [int(g["reqs"]) for g in got] == list(range(1, 11))


def test_new_connections_resume_the_session(sluice, origin, pki):
    cfg = cfg_for(origin, pki)
    cfg["backends"][0]["idle_max"] = 0  # every request on a new connection
    s = sluice(cfg)
    got = [fields(H.http_request(s.port, "GET", "/").body) for _ in range(4)]
    assert len({g["conn"] for g in got}) == 4
    assert got[0]["reused"] == "."
    assert all(g["reused"] == "r" for g in got[1:]), got


def test_session_reuse_off(sluice, origin, pki):
    cfg = cfg_for(origin, pki, session_reuse="off")
    cfg["backends"][0]["idle_max"] = 0
    s = sluice(cfg)
    got = [fields(H.http_request(s.port, "GET", "/").body) for _ in range(3)]
    assert all(g["reused"] == "." for g in got), got


def test_wrong_name_fails_verification_with_502(sluice, origin, pki):
    s = sluice(cfg_for(origin, pki, sni="not-the-origin.test"))
    r = H.http_request(s.port, "GET", "/")
    assert r.status == 502
    s.wait_error_log(r"TLS handshake failed: .*(certificate verify failed|CERTIFICATE_VERIFY_FAILED)")
    s.wait_access_log(r"reason=backend_tls_failed")


def test_other_ca_fails_verification_and_verify_off_accepts(sluice, origin, pki):
    s = sluice(cfg_for(origin, pki, ca=os.path.join(pki, "other.pem")))
    assert H.http_request(s.port, "GET", "/").status == 502
    s2 = sluice(cfg_for(origin, pki, ca="", verify="off"))
    assert H.http_request(s2.port, "GET", "/").status == 200


def test_plain_backend_behind_tls_config_is_502_not_a_hang(sluice, recorder, pki):
    def plain_http(conn):  # answers the ClientHello in plain HTTP, as a plain server would
        conn.sock.recv(4096)
        conn.send(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        conn.close()
    rb = recorder(plain_http)
    cfg = H.make_config(H.free_port(), [H.server(rb.port)],
                        backend={"tls": {"ca": os.path.join(pki, "ca.pem"), "sni": "origin.test"}})
    s = sluice(cfg)
    t0 = time.monotonic()
    assert H.http_request(s.port, "GET", "/", timeout=10).status == 502
    assert time.monotonic() - t0 < 5


def test_health_check_speaks_tls(sluice, origin, pki):
    cfg = cfg_for(origin, pki)
    cfg["backends"][0]["health_check"] = {"path": "/", "interval": "200ms", "timeout": "150ms",
                                          "rise": 1, "fall": 1}
    s = sluice(cfg)
    time.sleep(0.8)
    assert H.http_request(s.port, "GET", "/").status == 200
    assert "DOWN" not in H.read_text(s.error_log or s.stderr_path)


def test_missing_backend_ca_file_fails_config_check(sluice_bin, tmp_path, pki):
    cfg = cfg_for(1, pki, ca=str(tmp_path / "nope.pem"))
    s = H.Sluice(sluice_bin, tmp_path, cfg)
    r = s.check()
    assert r.returncode == 1
    assert "backends[0].tls.ca: cannot load" in r.stderr, r.stderr
