"""TLS termination end to end, with real clients: Python ssl, openssl
s_client, curl and wrk, against whichever build SLUICE_BIN names (AWS-LC
or OpenSSL 3).

Certificates come from tlsutil.make_pki (openssl CLI, once per session).
Every test checks what the client saw (certificate, version, cipher, ALPN,
resumption) and what sluice logged for it (the access log's TLS fields).
"""

import os
import re
import shutil
import socket
import ssl
import subprocess
import time

import pytest

import harness as H
import tlsutil as T

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")

REQ = b"GET /sclient HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


# --------------------------------------------------------------------------
# fixtures and helpers

@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    return T.make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def tls_lib(sluice_bin):
    """'awslc' or 'openssl', from the "tls ..." line of
    `sluice -V`; a binary that names none fails the tests that ask."""
    out = subprocess.run([sluice_bin, "-V"], capture_output=True, text=True, timeout=10)
    line = next((l for l in (out.stdout + out.stderr).splitlines() if l.startswith("tls ")), "")
    for name, lib in (("AWS-LC", "awslc"), ("OpenSSL", "openssl")):
        if name in line:
            return lib
    pytest.fail("sluice -V names no TLS library: %r" % line)


@pytest.fixture
def https(sluice, demo, pki):
    """Factory: https(tls=None, workers=1, start=True, name=None,
    timeouts=None, listener=None) -> Sluice with one TLS listener in front of one demo
    backend (shared by the instances of a test). TLS is merged into the
    listener's tls mapping; certificates default to the ECDSA P-256 +
    RSA-2048 pair."""
    state = {}

    def make(tls=None, workers=1, start=True, name=None, timeouts=None, listener=None):
        if "demo" not in state:
            state["demo"] = demo(keepalive_ms=60000)
        t = {"certificates": [pki.ecdsa.entry(), pki.rsa.entry()]}
        t.update(tls or {})
        cfg = H.make_config(H.free_port(), [H.server(state["demo"].port)], workers=workers,
                            timeouts=timeouts)
        cfg["listeners"][0]["name"] = "https"
        cfg["listeners"][0]["tls"] = t
        cfg["listeners"][0].update(listener or {})
        s = sluice(cfg, start=start, name=name)
        s.demo = state["demo"]
        return s
    return make


def cctx(verify_ca=None, min_v=None, max_v=None, cert=None, no_ticket=False, ciphers=None,
         alpn=None):
    """A client SSLContext. Without VERIFY_CA it accepts any certificate
    (tests compare the served certificate's DER themselves)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if verify_ca:
        ctx.load_verify_locations(verify_ca)
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.options |= getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", 0)
    if min_v:
        ctx.minimum_version = min_v
    if max_v:
        ctx.maximum_version = max_v
    if cert:
        ctx.load_cert_chain(cert.cert, cert.key)
    if no_ticket:
        ctx.options |= ssl.OP_NO_TICKET
    if ciphers:
        ctx.set_ciphers(ciphers)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx


TLS12 = dict(max_v=ssl.TLSVersion.TLSv1_2)
TLS13 = dict(min_v=ssl.TLSVersion.TLSv1_3)


class TlsClient(H.Client):
    """H.Client over TLS: same request/read_response helpers."""

    def __init__(self, port, ctx=None, sni=None, session=None, timeout=H.DEFAULT_TIMEOUT):
        raw = socket.create_connection((H.HOST, port), timeout=timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cport = raw.getsockname()[1]
        try:
            self.sock = (ctx or cctx()).wrap_socket(raw, server_hostname=sni, session=session)
        except BaseException:
            raw.close()
            raise
        self.sock.settimeout(timeout)
        self.st = H.Stream(self.sock)

    @property
    def der(self):
        return self.sock.getpeercert(binary_form=True)


def tls_get(port, ctx=None, sni=None, session=None, path="/", **kw):
    """One request on a new TLS connection. Returns (Response, info) where
    info has version, cipher, reused, alpn, der, session, cport."""
    with TlsClient(port, ctx, sni, session) as c:
        r = c.request("GET", path, **kw)
        info = dict(version=c.sock.version(), cipher=c.sock.cipher()[0],
                    reused=c.sock.session_reused, alpn=c.sock.selected_alpn_protocol(),
                    der=c.der, session=c.sock.session, cport=c.cport)
    return r, info


def tls_refused(port, ctx, sni=None):
    """True if the server ends the connection during the handshake or
    before answering (TLS 1.3 client-auth failures arrive after the
    client's Finished, so a request is sent and a response awaited)."""
    try:
        with TlsClient(port, ctx, sni) as c:
            c.send(H.build_request("GET", "/refused"))
            c.read_response()
    except (ssl.SSLError, ConnectionError, H.ConnClosed, socket.timeout, OSError):
        return True
    return False


TLS_REST_RE = re.compile(r'^ cipher=(?P<cipher>\S+) sni=(?P<sni>\S+) alpn=(?P<alpn>\S+) '
                         r'resumed=(?P<resumed>[01]) cert=(?P<cert>ecdsa|rsa) '
                         r'ccert=(?P<ccert>-|"[^"]*" verify=(?P<verify>\d+))$')


def tls_entry(s, path, timeout=3.0):
    """The access log entry for PATH (unique per test) with its TLS fields
    parsed; fails if the TLS suffix is missing or malformed."""
    e = s.wait_access_entry(lambda e: e["target"] == path, timeout=timeout)
    assert e["tls"], "no TLS fields in the access line: %r" % e
    m = TLS_REST_RE.match(e["tls_rest"])
    assert m, "malformed TLS fields: %r" % e["tls_rest"]
    e.update(m.groupdict())
    if e["ccert"] != "-":
        e["ccert"] = e["ccert"].split('" verify=')[0] + '"'
    return e


def s_client(port, *args, sni=None, stdin=REQ, timeout=15):
    """Run openssl s_client; returns (returncode, stdout+stderr). With a
    STDIN request it waits for the server to close (-ign_eof); without,
    it leaves once the handshake is done."""
    cmd = ["openssl", "s_client", "-connect", "%s:%d" % (H.HOST, port)]
    cmd += ["-ign_eof"] if stdin else []
    cmd += ["-servername", sni] if sni else ["-noservername"]
    cmd += list(args)
    if stdin:
        p = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout)
    else:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace") + p.stderr.decode("utf-8", "replace")


def sc_field(out, rx):
    m = re.search(rx, out, re.M)
    return m.group(1) if m else None


def curl(args, timeout=15):
    if shutil.which("curl") is None:
        pytest.skip("curl not installed")
    p = subprocess.run(["curl", "-sS", "--max-time", "10"] + args, capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def socket_owner(s, cport):
    """PID of the sluice worker holding the server side of the client
    connection from local port CPORT (looked up in /proc/net/tcp and the
    workers' fd tables)."""
    inode = None
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fl = line.split()
            lport = int(fl[1].split(":")[1], 16)
            rport = int(fl[2].split(":")[1], 16)
            if lport == s.port and rport == cport:
                inode = fl[9]
    assert inode, "no server socket for client port %d" % cport
    target = "socket:[%s]" % inode
    for pid in s.worker_pids():
        d = "/proc/%d/fd" % pid
        for fd in os.listdir(d):
            try:
                if os.readlink(os.path.join(d, fd)) == target:
                    return pid
            except OSError:
                pass
    return None


def error_log_since(s, off):
    return H.read_text(s.error_log)[off:]


# --------------------------------------------------------------------------
# certificate choice: SNI (exact, wildcard, default) and key type

def test_sni_picks_exact_then_wildcard_then_default(https, pki):
    s = https({"certificates": [pki.ecdsa.entry(), pki.rsa.entry(), pki.b_ecdsa.entry(),
                                pki.b_rsa.entry(), pki.wild.entry(), pki.xwild.entry(),
                                pki.cnonly.entry()]})
    cases = [
        (None, pki.ecdsa), ("a.test", pki.ecdsa), ("localhost", pki.ecdsa),
        ("b.test", pki.b_ecdsa),
        ("foo.wild.test", pki.wild),         # wildcard, one label
        ("x.wild.test", pki.xwild),          # exact name beats the wildcard
        ("a.b.wild.test", pki.ecdsa),        # wildcard covers one label only -> default
        ("wild.test", pki.ecdsa),            # nor the bare parent
        ("unknown.test", pki.ecdsa),         # no match -> default
        ("cn.test", pki.cnonly),             # no SAN: the CN is the name
    ]
    for i, (sni, want) in enumerate(cases):
        path = "/sni-%d" % i
        r, info = tls_get(s.port, cctx(), sni=sni, path=path)
        assert r.status == 200, (sni, r)
        assert info["der"] == want.der(), "SNI %r: expected the %s certificate" % (sni, want.cn)
        e = tls_entry(s, path)
        assert e["sni"] == (sni or "-") and e["cert"] == "ecdsa", (sni, e)
    # an RSA-only client (TLS 1.2, RSA suite) gets the RSA certificate of the same name
    for i, (sni, want) in enumerate([(None, pki.rsa), ("a.test", pki.rsa), ("b.test", pki.b_rsa)]):
        path = "/sni-rsa-%d" % i
        r, info = tls_get(s.port, cctx(ciphers="ECDHE-RSA-AES128-GCM-SHA256", **TLS12), sni=sni,
                          path=path)
        assert r.status == 200
        assert info["der"] == want.der(), "SNI %r (RSA-only): expected %s" % (sni, want.cn)
        assert tls_entry(s, path)["cert"] == "rsa"
    # SNI is matched without regard to case
    rc, out = s_client(s.port, sni="B.Test")
    assert rc == 0 and "HTTP/1.1 200" in out, out[-2000:]
    assert sc_field(out, r"^subject=CN = (\S+)") == "b-ecdsa"


def test_curl_resolve_verifies_each_name(https, pki):
    s = https({"certificates": [pki.ecdsa.entry(), pki.rsa.entry(), pki.b_ecdsa.entry(),
                                pki.wild.entry()]})
    for i, name in enumerate(["a.test", "b.test", "deep.wild.test", "localhost"]):
        url = "https://%s:%d/curl-%d" % (name, s.port, i)
        rc, out, err = curl(["--cacert", pki.ca.cert, "--resolve", "%s:%d:127.0.0.1" % (name, s.port),
                             "-o", "/dev/null", "-w", "%{http_code} %{ssl_verify_result}", url])
        assert rc == 0, (name, rc, err)      # curl checked the name against the certificate
        assert out == "200 0", (name, out)
        e = tls_entry(s, "/curl-%d" % i)
        # curl offers h2 first, and sluice's TLS listeners offer it by default
        assert e["sni"] == name and e["alpn"] == "h2" and e["tls"] == "TLSv1.3", e
    # a name only the default covers fails curl's host check (the default is served)
    rc, out, err = curl(["--cacert", pki.ca.cert, "--resolve", "other.test:%d:127.0.0.1" % s.port,
                         "https://other.test:%d/x" % s.port])
    assert rc == 60, (rc, err)


@pytest.mark.parametrize("version", ["-tls1_2", "-tls1_3"])
def test_s_client_sigalgs_choose_ecdsa_or_rsa(https, pki, version):
    # RSA listed first: ECDSA still wins whenever the client can verify it
    s = https({"certificates": [pki.rsa.entry(), pki.ecdsa.entry()]})
    runs = [
        (["-sigalgs", "ECDSA+SHA256"], "256", "ECDSA", "main-ecdsa", "ecdsa"),
        (["-sigalgs", "RSA-PSS+SHA256:RSA+SHA256"], "2048", "RSA-PSS", "main-rsa", "rsa"),
        ([], "256", "ECDSA", "main-ecdsa", "ecdsa"),
    ]
    for i, (args, bits, sigtype, cn, kind) in enumerate(runs):
        req = REQ.replace(b"/sclient", b"/sig-%d" % i)
        rc, out = s_client(s.port, version, *args, stdin=req)
        assert rc == 0 and "HTTP/1.1 200" in out, out[-3000:]
        assert sc_field(out, r"^Server public key is (\d+) bit") == bits, (args, out[-3000:])
        assert sc_field(out, r"^Peer signature type: (\S+)") == sigtype, (args, out[-3000:])
        assert sc_field(out, r"^subject=CN = (\S+)") == cn
        want = "TLSv1.2" if version == "-tls1_2" else "TLSv1.3"
        assert sc_field(out, r"^\s*Protocol\s*: (\S+)") == want
        e = tls_entry(s, "/sig-%d" % i)
        assert e["cert"] == kind and e["tls"] == want, e


def test_tls12_without_ecdsa_suite_gets_rsa(https, pki):
    """Under TLS 1.2 an ECDSA signature algorithm is not enough: the client
    must also offer an ECDHE-ECDSA suite."""
    s = https()
    req = REQ.replace(b"/sclient", b"/nosuite")
    rc, out = s_client(s.port, "-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256", stdin=req)
    assert rc == 0 and "HTTP/1.1 200" in out, out[-3000:]
    assert sc_field(out, r"^Server public key is (\d+) bit") == "2048"
    assert sc_field(out, r"Cipher is (\S+)") == "ECDHE-RSA-AES128-GCM-SHA256"
    e = tls_entry(s, "/nosuite")
    assert e["cert"] == "rsa" and e["cipher"] == "ECDHE-RSA-AES128-GCM-SHA256", e


def test_p384_needs_the_p384_sigalg(https, pki):
    s = https({"certificates": [pki.p384.entry(), pki.rsa.entry()]})
    rc, out = s_client(s.port, "-tls1_3", "-sigalgs", "ECDSA+SHA384:RSA-PSS+SHA256")
    assert rc == 0 and "HTTP/1.1 200" in out, out[-3000:]
    assert sc_field(out, r"^Server public key is (\d+) bit") == "384"
    assert sc_field(out, r"^subject=CN = (\S+)") == "main-p384"
    # ecdsa_secp256r1_sha256 cannot sign with a P-384 key under TLS 1.3
    rc, out = s_client(s.port, "-tls1_3", "-sigalgs", "ECDSA+SHA256:RSA-PSS+SHA256")
    assert rc == 0 and "HTTP/1.1 200" in out, out[-3000:]
    assert sc_field(out, r"^Server public key is (\d+) bit") == "2048"
    assert sc_field(out, r"^subject=CN = (\S+)") == "main-rsa"


def test_chain_and_key_in_one_pem(https, pki):
    """cert: leaf + intermediate + key, no key entry: the client verifies
    against the root alone, so the intermediate was sent."""
    s = https({"certificates": [{"cert": pki.chain.combined}]})
    r, info = tls_get(s.port, cctx(verify_ca=pki.ca.cert), sni="chain.test", path="/chain")
    assert r.status == 200
    assert info["der"] == pki.chain.der()
    rc, out = s_client(s.port, "-showcerts", sni="chain.test")
    assert rc == 0
    assert out.count("-----BEGIN CERTIFICATE-----") == 2, out[-3000:]


# --------------------------------------------------------------------------
# versions, ciphers, curves, ALPN

def test_tls12_and_tls13(https, pki):
    s = https()
    for flag, want in (("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")):
        rc, out = s_client(s.port, flag)
        assert rc == 0 and "HTTP/1.1 200" in out, out[-3000:]
        assert sc_field(out, r"^\s*Protocol\s*: (\S+)") == want
    for i, (args, want) in enumerate(((["--tls-max", "1.2"], "TLSv1.2"), ([], "TLSv1.3"),
                                      (["--tlsv1.3"], "TLSv1.3"))):
        rc, out, err = curl(["-k", "-o", "/dev/null", "-w", "%{http_code}"] + args +
                            ["https://127.0.0.1:%d/ver-%d" % (s.port, i)])
        assert rc == 0 and out == "200", (args, rc, out, err)
        assert tls_entry(s, "/ver-%d" % i)["tls"] == want
    for i, (kw, want) in enumerate(((TLS12, "TLSv1.2"), (TLS13, "TLSv1.3"))):
        r, info = tls_get(s.port, cctx(**kw), path="/pyver-%d" % i)
        assert r.status == 200 and info["version"] == want
        assert tls_entry(s, "/pyver-%d" % i)["tls"] == want


def test_min_version_tls13_refuses_tls12_client(https, pki):
    s = https({"min_version": "TLSv1.3"})
    off = len(H.read_text(s.error_log))
    rc, out = s_client(s.port, "-tls1_2")
    assert rc != 0 and "HTTP/1.1" not in out
    assert re.search(r"alert protocol version|unsupported protocol|wrong version", out), out[-2000:]
    rc, out, err = curl(["-k", "--tls-max", "1.2", "https://127.0.0.1:%d/" % s.port])
    assert rc == 35, (rc, err)
    assert tls_refused(s.port, cctx(**TLS12))
    s.wait_error_log(r"TLS handshake failed", start=off)
    r, info = tls_get(s.port, cctx(), path="/v13")
    assert r.status == 200 and info["version"] == "TLSv1.3"


def test_max_version_tls12(https, pki):
    s = https({"max_version": "TLSv1.2"})
    r, info = tls_get(s.port, cctx(), path="/max12")
    assert r.status == 200 and info["version"] == "TLSv1.2"
    assert tls_entry(s, "/max12")["tls"] == "TLSv1.2"
    assert tls_refused(s.port, cctx(**TLS13))


def test_cipher_list_and_curves(https, pki):
    s = https({"ciphers": "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384",
               "curves": "P-256"})
    r, info = tls_get(s.port, cctx(**TLS12), path="/cipher")
    assert r.status == 200 and info["cipher"] == "ECDHE-ECDSA-AES256-GCM-SHA384"
    e = tls_entry(s, "/cipher")
    assert e["cipher"] == "ECDHE-ECDSA-AES256-GCM-SHA384" and e["cert"] == "ecdsa"
    # a client that only wants a suite outside the list is refused
    assert tls_refused(s.port, cctx(ciphers="ECDHE-ECDSA-AES128-GCM-SHA256", **TLS12))
    # only P-256 for key exchange
    for flag in ("-tls1_2", "-tls1_3"):
        rc, out = s_client(s.port, flag, "-groups", "X25519")
        assert rc != 0 and "HTTP/1.1" not in out, (flag, out[-2000:])
        rc, out = s_client(s.port, flag, "-groups", "X25519:P-256")
        assert rc == 0 and "HTTP/1.1 200" in out, (flag, out[-2000:])
        assert "Server Temp Key: ECDH, prime256v1" in out, (flag, out[-3000:])


def test_rsa_only_cipher_list_serves_rsa_cert(https, pki):
    """ciphers without any ECDHE-ECDSA suite on a listener holding both an
    ECDSA and an RSA certificate: a TLS 1.2 client offering both kinds of
    suite must get the RSA certificate, not a failed handshake."""
    s = https({"ciphers": "ECDHE-RSA-AES128-GCM-SHA256", "max_version": "TLSv1.2"})
    r, info = tls_get(s.port, cctx(**TLS12), path="/rsaonly")
    assert r.status == 200 and info["cipher"] == "ECDHE-RSA-AES128-GCM-SHA256"
    assert info["der"] == pki.rsa.der()
    assert tls_entry(s, "/rsaonly")["cert"] == "rsa"


def test_ciphersuites(https, pki):
    s = https({"ciphersuites": "TLS_CHACHA20_POLY1305_SHA256"}, start=False)
    r = s.check()
    assert r.returncode == 0, r.stderr
    s.start()
    r, info = tls_get(s.port, cctx(**TLS13), path="/suite")
    assert r.status == 200 and info["cipher"] == "TLS_CHACHA20_POLY1305_SHA256"
    assert tls_entry(s, "/suite")["cipher"] == "TLS_CHACHA20_POLY1305_SHA256"


def test_close_request_ends_with_close_notify(https, pki):
    """A Connection: close request over TLS (1.2 and 1.3), which sluice
    closes without lingering: the response, then a close_notify (never a
    bare TCP EOF, which Python reports as SSLEOFError here)."""
    s = https()
    for ver in (TLS12, TLS13):
        raw = socket.create_connection((H.HOST, s.port), timeout=5)
        c = cctx(**ver).wrap_socket(raw, suppress_ragged_eofs=False)
        c.sendall(b"GET /bye HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data, clean = b"", False
        while True:
            try:
                d = c.recv(65536)
            except ssl.SSLZeroReturnError:
                clean = True
                break
            if not d:
                clean = True  # close_notify read (Python returns b"" for it here)
                break
            data += d
        assert data.startswith(b"HTTP/1.1 200 ") and b"connection: close" in data.lower(), data[:200]
        assert clean
        c.close()


def test_alpn(https, pki):
    """Default protocols [h2, http/1.1]: the server's preference, h2, when
    the client offers it in any order; http/1.1 when only that is offered;
    no ALPN at all is HTTP/1.1."""
    s = https()
    cases = [(["-alpn", "http/1.1"], "http/1.1"), (["-alpn", "h2"], "h2"),
             (["-alpn", "h2,http/1.1"], "h2"), (["-alpn", "http/1.1,h2"], "h2"), ([], None)]
    for i, (args, want) in enumerate(cases):
        if want == "h2":
            rc, out = s_client(s.port, *args, stdin=None)
            assert rc == 0 and "ALPN protocol: h2" in out, (args, out[-3000:])
            continue
        req = REQ.replace(b"/sclient", b"/alpn-%d" % i)
        rc, out = s_client(s.port, *args, stdin=req)
        assert rc == 0 and "HTTP/1.1 200" in out, (args, out[-2000:])
        if want:
            assert "ALPN protocol: %s" % want in out, (args, out[-3000:])
        else:
            assert "No ALPN negotiated" in out, (args, out[-3000:])
        assert tls_entry(s, "/alpn-%d" % i)["alpn"] == (want or "-")
    r, info = tls_get(s.port, cctx(alpn=["http/1.1"]), path="/alpn-py")
    assert r.status == 200 and info["alpn"] == "http/1.1"
    r, info = tls_get(s.port, cctx(alpn=["spdy/3"]), path="/alpn-py2")
    assert r.status == 200 and info["alpn"] is None and r.version == "HTTP/1.1"


def test_alpn_http11_only(https, pki):
    """protocols: [http/1.1] turns h2 off: a client offering only h2 goes
    on without ALPN and speaks HTTP/1.1, as before HTTP/2 existed."""
    s2 = https(listener={"protocols": ["http/1.1"]})
    cases = [(["-alpn", "http/1.1"], "http/1.1"), (["-alpn", "h2"], None),
             (["-alpn", "h2,http/1.1"], "http/1.1"), ([], None)]
    for i, (args, want) in enumerate(cases):
        req = REQ.replace(b"/sclient", b"/alpn-%d" % i)
        rc, out = s_client(s2.port, *args, stdin=req)
        assert rc == 0 and "HTTP/1.1 200" in out, (args, out[-2000:])
        if want:
            assert "ALPN protocol: %s" % want in out, (args, out[-3000:])
        else:
            assert "No ALPN negotiated" in out, (args, out[-3000:])
        assert tls_entry(s2, "/alpn-%d" % i)["alpn"] == (want or "-")
    r, info = tls_get(s2.port, cctx(alpn=["h2"]), path="/alpn-py2")
    assert r.status == 200 and info["alpn"] is None and r.version == "HTTP/1.1"


def test_alpn_h2_only(https, pki):
    """protocols: [h2]: a client that offers only http/1.1 fails the
    handshake (no_application_protocol) instead of speaking what the
    listener does not offer; one that offers nothing is HTTP/1.1's
    compatibility case and is refused the same way."""
    s2 = https(listener={"protocols": ["h2"]})
    rc, out = s_client(s2.port, "-alpn", "h2", stdin=None)
    assert rc == 0 and "ALPN protocol: h2" in out, out[-3000:]
    rc, out = s_client(s2.port, "-alpn", "http/1.1", stdin=None)
    assert "no application protocol" in out.lower(), out[-3000:]


# --------------------------------------------------------------------------
# resumption

VERSIONS = [pytest.param(TLS12, id="tls12"), pytest.param(TLS13, id="tls13")]


def first_session(port, ctx, path):
    r, info = tls_get(port, ctx, path=path)
    assert r.status == 200 and not info["reused"]
    assert info["session"] is not None
    return info["session"]


@pytest.mark.parametrize("ver", VERSIONS)
def test_tickets_resume_across_workers(https, pki, ver):
    s = https(workers=2)
    workers = set(s.worker_pids())
    assert len(workers) == 2
    ctx = cctx(**ver)
    sess = first_session(s.port, ctx, "/w-first")
    assert tls_entry(s, "/w-first")["resumed"] == "0"
    seen = set()
    for i in range(40):
        path = "/w-%d" % i
        with TlsClient(s.port, ctx, session=sess) as c:
            r = c.request("GET", path)
            assert r.status == 200
            assert c.sock.session_reused, "connection %d not resumed" % i
            seen.add(socket_owner(s, c.cport))
            sess = c.sock.session
        assert tls_entry(s, path)["resumed"] == "1"
        if i >= 7 and seen == workers:
            break
    assert seen == workers, "resumed connections only reached %s of %s" % (seen, workers)


def test_tickets_resume_across_reload(https, pki):
    s = https(workers=2)
    ctx = cctx()
    sess = first_session(s.port, ctx, "/rl-first")
    s.reload()
    for i in range(4):
        r, info = tls_get(s.port, ctx, session=sess, path="/rl-%d" % i)
        assert r.status == 200 and info["reused"], i
        assert tls_entry(s, "/rl-%d" % i)["resumed"] == "1"


@pytest.mark.parametrize("ver", VERSIONS)
def test_ticket_key_file_shared_by_two_instances(https, pki, ver, tmp_path):
    keys = T.ticket_keys_file(str(tmp_path / "ticket.keys"), [os.urandom(48), os.urandom(48)])
    a = https({"ticket_keys": keys}, workers=2, name="a")
    b = https({"ticket_keys": keys}, workers=2, name="b")
    ctx = cctx(**ver)
    for src, dst, tag in ((a, b, "ab"), (b, a, "ba")):
        sess = first_session(src.port, ctx, "/k-%s-first" % tag)
        for i in range(3):
            r, info = tls_get(dst.port, ctx, session=sess, path="/k-%s-%d" % (tag, i))
            assert r.status == 200 and info["reused"], (tag, i)
            assert tls_entry(dst, "/k-%s-%d" % (tag, i))["resumed"] == "1"


@pytest.mark.parametrize("ver", VERSIONS)
def test_no_resumption_across_instances_without_key_file(https, pki, ver):
    a = https(name="a")
    b = https(name="b")
    ctx = cctx(**ver)
    sess = first_session(a.port, ctx, "/nk-first")
    r, info = tls_get(b.port, ctx, session=sess, path="/nk-b")
    assert r.status == 200 and not info["reused"]
    assert tls_entry(b, "/nk-b")["resumed"] == "0"
    r, info = tls_get(a.port, ctx, session=sess, path="/nk-a")
    assert r.status == 200 and info["reused"]
    assert tls_entry(a, "/nk-a")["resumed"] == "1"


def test_ticket_key_rotation_by_reload(https, pki, tmp_path):
    k1, k2 = os.urandom(48), os.urandom(48)
    path = str(tmp_path / "ticket.keys")
    T.ticket_keys_file(path, [k1])
    s = https({"ticket_keys": path}, workers=2)
    ctx = cctx(**TLS12)
    s1 = first_session(s.port, ctx, "/rot-1")
    T.ticket_keys_file(path, [k2, k1])          # new current key, k1 still decrypts
    s.reload()
    r, info = tls_get(s.port, ctx, session=s1, path="/rot-2")
    assert r.status == 200 and info["reused"], "a ticket under the previous key must resume"
    s2 = first_session(s.port, ctx, "/rot-3")  # issued under k2
    T.ticket_keys_file(path, [k2])              # k1 retired
    s.reload()
    r, info = tls_get(s.port, ctx, session=s1, path="/rot-4")
    assert r.status == 200 and not info["reused"], "a ticket under a retired key must not resume"
    r, info = tls_get(s.port, ctx, session=s2, path="/rot-5")
    assert r.status == 200 and info["reused"]
    assert [tls_entry(s, "/rot-%d" % i)["resumed"] for i in range(1, 6)] == ["0", "1", "0", "0", "1"]


def test_tickets_off_means_no_resumption(https, pki):
    s = https({"tickets": "off"})
    ctx = cctx(**TLS12)
    sess = first_session(s.port, ctx, "/toff-1")
    assert not sess.has_ticket
    r, info = tls_get(s.port, ctx, session=sess, path="/toff-2")
    assert r.status == 200 and not info["reused"]
    assert tls_entry(s, "/toff-2")["resumed"] == "0"
    ctx = cctx(**TLS13)
    r, info = tls_get(s.port, ctx, path="/toff-3")
    assert r.status == 200
    r, info2 = tls_get(s.port, ctx, session=info["session"], path="/toff-4")
    assert r.status == 200 and not info2["reused"]
    assert tls_entry(s, "/toff-4")["resumed"] == "0"
    # and no TLS 1.3 NewSessionTicket is sent at all (none the client could use)
    assert not info["session"].has_ticket, "TLS 1.3 ticket issued with tickets: off"


@pytest.mark.parametrize("closer", ["client_closes", "server_closes"])
@pytest.mark.parametrize("tickets", ["off", "on"])
def test_session_cache_resumes_tls12_by_session_id(https, pki, closer, tickets):
    """TLS 1.2 resumption by session id from the per-worker cache. With
    tickets on, the client refuses tickets (OP_NO_TICKET). CLOSER: who ends
    each connection -- the client after its response (the usual keepalive
    case) or sluice (Connection: close)."""
    s = https({"tickets": tickets, "session_cache": 100})
    ctx = cctx(no_ticket=(tickets == "on"), **TLS12)
    sess = None
    for i in range(4):
        path = "/cache-%d" % i
        with TlsClient(s.port, ctx, session=sess) as c:
            if closer == "server_closes":
                r = c.request("GET", path, headers={"Connection": "close"})
                c.wait_closed()
            else:
                r = c.request("GET", path)
            assert r.status == 200
            reused = c.sock.session_reused
            if sess is None:
                sess = c.sock.session
                assert not sess.has_ticket and sess.id
        assert reused == (i > 0), "connection %d: reused=%s" % (i, reused)
        assert tls_entry(s, path)["resumed"] == ("1" if i > 0 else "0")


def test_s_client_reconnect_tls12(https, pki):
    s = https(workers=2)
    rc, out = s_client(s.port, "-tls1_2", "-reconnect", stdin=None)
    assert rc == 0, out[-3000:]
    assert len(re.findall(r"^New, TLSv1\.2", out, re.M)) == 1, out[-3000:]
    assert len(re.findall(r"^Reused, TLSv1\.2", out, re.M)) == 5, out[-3000:]


@pytest.mark.parametrize("flag", ["-tls1_2", "-tls1_3"])
def test_s_client_sess_out_sess_in(https, pki, flag, tmp_path):
    """s_client -reconnect leaves before a TLS 1.3 ticket arrives, so the
    session goes through a file: the first run reads a response (and the
    tickets after it), the others resume from it."""
    s = https(workers=2)
    sess = str(tmp_path / "sess.pem")
    rc, out = s_client(s.port, flag, "-sess_out", sess, stdin=REQ.replace(b"/sclient", b"/so-0"))
    assert rc == 0 and "HTTP/1.1 200" in out and re.search(r"^New, TLSv1", out, re.M), out[-3000:]
    for i in range(1, 5):
        rc, out = s_client(s.port, flag, "-sess_in", sess,
                           stdin=REQ.replace(b"/sclient", b"/so-%d" % i))
        assert rc == 0 and "HTTP/1.1 200" in out, out[-3000:]
        assert re.search(r"^Reused, TLSv1\.[23]", out, re.M), out[-3000:]
        assert tls_entry(s, "/so-%d" % i)["resumed"] == "1"


# --------------------------------------------------------------------------
# client certificates

def test_client_cert_optional(https, pki):
    s = https({"client_auth": "optional", "client_ca": pki.client_ca.cert})
    for i, kw in enumerate((TLS12, TLS13)):
        r, _ = tls_get(s.port, cctx(**kw), path="/opt-none-%d" % i)
        assert r.status == 200
        assert tls_entry(s, "/opt-none-%d" % i)["ccert"] == "-"
        r, _ = tls_get(s.port, cctx(cert=pki.client, **kw), path="/opt-good-%d" % i)
        assert r.status == 200
        e = tls_entry(s, "/opt-good-%d" % i)
        assert e["ccert"] == '"/O=Sluice Test/CN=client1"' and e["verify"] == "0", e
        # a certificate from another CA: served, and the failure recorded
        r, _ = tls_get(s.port, cctx(cert=pki.rogue, **kw), path="/opt-rogue-%d" % i)
        assert r.status == 200
        e = tls_entry(s, "/opt-rogue-%d" % i)
        # X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE: the issuer is unknown
        assert e["ccert"] == '"/CN=rogue"' and e["verify"] == "21", e


def test_client_cert_required(https, pki):
    s = https({"client_auth": "required", "client_ca": pki.client_ca.cert})
    off = len(H.read_text(s.error_log))
    for i, kw in enumerate((TLS12, TLS13)):
        assert tls_refused(s.port, cctx(**kw)), "no certificate: must fail"
        assert tls_refused(s.port, cctx(cert=pki.rogue, **kw)), "foreign CA: must fail"
        r, _ = tls_get(s.port, cctx(cert=pki.client, **kw), path="/req-good-%d" % i)
        assert r.status == 200
        e = tls_entry(s, "/req-good-%d" % i)
        assert e["ccert"] == '"/O=Sluice Test/CN=client1"' and e["verify"] == "0", e
    assert len(re.findall(r"TLS handshake failed", error_log_since(s, off))) >= 4
    assert "/refused" not in H.read_text(s.access_log)
    rc, out, err = curl(["-k", "https://127.0.0.1:%d/" % s.port])
    assert rc != 0
    rc, out, err = curl(["-k", "--cert", pki.client.cert, "--key", pki.client.key, "-o", "/dev/null",
                         "-w", "%{http_code}", "https://127.0.0.1:%d/curl-cc" % s.port])
    assert rc == 0 and out == "200", err


# --------------------------------------------------------------------------
# configuration errors (sluice -t)

def entry_line(text, i):
    """1-based line number of the I-th `- cert:` entry in the YAML TEXT."""
    lines = [n + 1 for n, l in enumerate(text.splitlines()) if l.lstrip().startswith("- cert:")]
    return lines[i]


def check_fails(s, key, message):
    r = s.check()
    assert r.returncode == 1, (r.returncode, r.stderr)
    rx = r"^%s:(\d+):(\d+): %s: %s$" % (re.escape(s.config_path), re.escape(key), message)
    m = re.search(rx, r.stderr, re.M)
    assert m, "expected /%s/ in:\n%s" % (rx, r.stderr)
    return int(m.group(1)), r.stderr


def _bad_cert_cases():
    """(id, certificates(pki, missing), index of the entry at fault, key, message regex)."""
    q = re.escape
    return [
        ("key_mismatch", lambda p, m: [p.ecdsa.entry(), {"cert": p.rsa.cert, "key": p.ecdsa.key}], 1,
         "listeners[0].tls.certificates[1].key",
         lambda p, m: "the key in %s does not match the certificate in %s" % (q(p.ecdsa.key), q(p.rsa.cert))),
        ("missing_cert", lambda p, m: [{"cert": m, "key": p.ecdsa.key}], 0,
         "listeners[0].tls.certificates[0].cert",
         lambda p, m: "cannot open %s: No such file or directory" % q(m)),
        ("missing_key", lambda p, m: [p.ecdsa.entry(), {"cert": p.rsa.cert, "key": m}], 1,
         "listeners[0].tls.certificates[1].key",
         lambda p, m: "cannot open %s: No such file or directory" % q(m)),
        ("wrong_passphrase_pkcs8",
         lambda p, m: [p.ecdsa.entry(), p.rsa_enc.entry(passphrase="not it")], 1,
         "listeners[0].tls.certificates[1].passphrase",
         lambda p, m: "cannot decrypt the private key in %s: wrong passphrase" % q(p.rsa_enc.key)),
        ("no_passphrase_pkcs8", lambda p, m: [p.ecdsa.entry(), p.rsa_enc.entry()], 1,
         "listeners[0].tls.certificates[1].key",
         lambda p, m: "the private key in %s is encrypted and no passphrase is set" % q(p.rsa_enc.key)),
        ("wrong_passphrase_traditional",
         lambda p, m: [p.rsa_enc_trad.entry(passphrase="not it")], 0,
         "listeners[0].tls.certificates[0].passphrase",
         lambda p, m: "cannot decrypt the private key in %s: wrong passphrase" % q(p.rsa_enc_trad.key)),
        ("no_passphrase_traditional", lambda p, m: [p.rsa_enc_trad.entry()], 0,
         "listeners[0].tls.certificates[0].key",
         lambda p, m: "the private key in %s is encrypted and no passphrase is set" % q(p.rsa_enc_trad.key)),
        ("empty_cert_file", lambda p, m: [{"cert": p.empty, "key": p.ecdsa.key}], 0,
         "listeners[0].tls.certificates[0].cert",
         lambda p, m: "no usable certificate in %s: .+" % q(p.empty)),
        ("garbage_cert_file", lambda p, m: [p.ecdsa.entry(), {"cert": p.garbage, "key": p.rsa.key}], 1,
         "listeners[0].tls.certificates[1].cert",
         lambda p, m: "no usable certificate in %s: .+" % q(p.garbage)),
        ("no_key_in_cert_file", lambda p, m: [{"cert": p.ecdsa.cert}], 0,
         "listeners[0].tls.certificates[0].cert",
         lambda p, m: "no private key in %s" % q(p.ecdsa.cert)),
    ]


BAD_CERTS = _bad_cert_cases()


@pytest.mark.parametrize("certs,idx,key,message", [c[1:] for c in BAD_CERTS],
                         ids=[c[0] for c in BAD_CERTS])
def test_bad_certificate_config_fails_check(https, pki, tmp_path, certs, idx, key, message):
    """`sluice -t` exits 1 with one FILE:LINE:COL: KEY: message line that
    points at the certificate entry at fault."""
    missing = str(tmp_path / "nope.pem")
    s = https({"certificates": certs(pki, missing)}, start=False)
    line, err = check_fails(s, key, message(pki, missing))
    assert line == entry_line(H.read_text(s.config_path), idx), (line, err)
    assert err.count(s.config_path + ":") == 1, "one error line expected:\n" + err


def test_bad_ticket_keys_file(https, pki, tmp_path):
    bad = tmp_path / "short.keys"
    bad.write_text("c2hvcnQ=\n")
    s = https({"ticket_keys": str(bad)}, start=False)
    check_fails(s, "listeners[0].tls.ticket_keys",
                "%s: each line must be 48 bytes in base64 .*" % re.escape(str(bad)))
    s = https({"ticket_keys": str(tmp_path / "nope.keys")}, start=False, name="missing")
    check_fails(s, "listeners[0].tls.ticket_keys", "cannot open .*nope.keys: No such file or directory")


@pytest.mark.parametrize("key,value,message", [
    ("ciphers", "NOT-A-CIPHER", 'no usable cipher in "NOT-A-CIPHER": .+'),
    ("curves", "NOPE", 'bad list "NOPE": .+'),
], ids=["ciphers", "curves"])
def test_bad_tls_list_names_its_own_key(https, pki, key, value, message):
    """A bad listener-wide setting is one error, reported at that key
    (listeners[0].tls.ciphers), not once per certificate entry."""
    s = https({key: value}, start=False)
    line, err = check_fails(s, "listeners[0].tls.%s" % key, message)
    assert err.count(s.config_path + ":") == 1, "one error line expected:\n" + err


def test_passphrase_key_serves(https, pki):
    s = https({"certificates": [pki.rsa_enc.entry(passphrase=pki.passphrase)]}, start=False)
    r = s.check()
    assert r.returncode == 0, r.stderr
    s.start()
    r, info = tls_get(s.port, cctx(), path="/pass")
    assert r.status == 200 and info["der"] == pki.rsa.der()
    assert tls_entry(s, "/pass")["cert"] == "rsa"


def test_expired_certificate_warns_and_serves(https, pki):
    s = https({"certificates": [pki.expired.entry()]}, start=False)
    r = s.check()
    assert r.returncode == 0, r.stderr
    assert re.search(r"\[warn\].*certificates\[0\]\.cert: certificate %s has expired"
                     % re.escape(pki.expired.cert), r.stderr), r.stderr
    s.start()
    s.wait_error_log(r"\[warn\].*has expired; serving it anyway")
    r, info = tls_get(s.port, cctx(), path="/expired")
    assert r.status == 200 and info["der"] == pki.expired.der()
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_get(s.port, cctx(verify_ca=pki.ca.cert), sni="localhost")


# --------------------------------------------------------------------------
# bad input on the TLS port

def test_plain_http_on_tls_port(https, pki):
    s = https()
    r, rest = H.raw_exchange(s.port, H.build_request("GET", "/plain"))
    assert r.status == 400 and r.version == "HTTP/1.1"
    assert b"plain HTTP request sent to a TLS port" in r.body
    assert rest == b"", "connection must close after the 400"
    e = s.wait_access_entry(lambda e: e["reason"] == "plain_http_on_tls_port")
    assert e["status"] == "400"
    r, _ = tls_get(s.port, cctx(), path="/after-plain")
    assert r.status == 200


def client_hello(sni="a.test"):
    """The bytes of a real ClientHello (Python ssl over memory BIOs)."""
    ctx = cctx()
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname=sni)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return out.read()


def wait_closed_within(sock, seconds):
    """Read until EOF; return (elapsed, bytes). Fails if still open."""
    sock.settimeout(seconds)
    t0 = time.monotonic()
    data = b""
    try:
        while True:
            d = sock.recv(65536)
            if not d:
                break
            data += d
    except ConnectionResetError:
        pass
    except socket.timeout:
        raise AssertionError("connection still open after %.1fs" % seconds)
    return time.monotonic() - t0, data


GARBAGE = [
    pytest.param(b"\x16\x03\x01\x00\x05hello", id="bad_handshake_record"),
    pytest.param(b"\x00" + H.pattern_bytes(700, seed=3), id="random_bytes"),
    pytest.param(b"\x16\x03\x01\x00\x10" + b"\x01\x00\x00\x0c" + b"\x03\x03" + b"\x00" * 10,
                 id="short_hello_body"),
    pytest.param(b"\x80\x2e\x01\x03\x01\x00\x15\x00\x00\x00\x10" + b"\x00" * 37, id="sslv2_hello"),
    pytest.param(b"\x17\x03\x03\x00\x10" + b"\x00" * 16, id="appdata_before_handshake"),
]


@pytest.mark.parametrize("payload", GARBAGE)
def test_garbage_closes_and_worker_serves_on(https, pki, payload):
    s = https()
    pids = s.worker_pids()
    off = len(H.read_text(s.error_log))
    with socket.create_connection((H.HOST, s.port), timeout=5) as c:
        c.sendall(payload)
        elapsed, data = wait_closed_within(c, 3.0)
    assert b"HTTP/" not in data
    s.wait_error_log(r"TLS handshake failed", start=off)
    assert s.worker_pids() == pids
    r, _ = tls_get(s.port, cctx(), path="/after")
    assert r.status == 200


def test_truncated_client_hello(https, pki):
    s = https({"handshake_timeout": "1s"})
    hello = client_hello()
    assert len(hello) > 100
    # the peer goes away mid-hello: closed at once
    with socket.create_connection((H.HOST, s.port), timeout=5) as c:
        c.sendall(hello[:len(hello) // 2])
        c.shutdown(socket.SHUT_WR)
        elapsed, data = wait_closed_within(c, 2.0)
    assert elapsed < 0.5 and data == b""
    # the peer stays: the handshake timeout closes it
    off = len(H.read_text(s.error_log))
    with socket.create_connection((H.HOST, s.port), timeout=5) as c:
        c.sendall(hello[:len(hello) - 7])
        elapsed, data = wait_closed_within(c, 3.0)
    assert 0.8 <= elapsed <= 2.5, elapsed
    s.wait_error_log(r"TLS handshake timeout", start=off)
    r, _ = tls_get(s.port, cctx(), path="/after-trunc")
    assert r.status == 200


def bio_handshake(port, sni=None):
    """A TLS client over memory BIOs on a raw socket, so the test can put
    arbitrary bytes on the wire after the handshake. Returns (sock, obj,
    outgoing BIO)."""
    sock = socket.create_connection((H.HOST, port), timeout=5)
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = cctx().wrap_bio(inc, out, server_hostname=sni)
    while True:
        try:
            obj.do_handshake()
            break
        except ssl.SSLWantReadError:
            if out.pending:
                sock.sendall(out.read())
            d = sock.recv(65536)
            if not d:
                raise H.ConnClosed("EOF during handshake")
            inc.write(d)
    if out.pending:
        sock.sendall(out.read())
    return sock, obj, out


@pytest.mark.parametrize("kind", ["bad_record", "truncated_record_then_eof"])
def test_bad_record_after_handshake(https, pki, kind):
    s = https()
    pids = s.worker_pids()
    off = len(H.read_text(s.error_log))
    sock, obj, out = bio_handshake(s.port)
    with sock:
        if kind == "bad_record":
            sock.sendall(b"\x17\x03\x03\x00\x40" + H.pattern_bytes(64, seed=9))
        else:
            obj.write(H.build_request("GET", "/trunc-record"))
            rec = out.read()
            sock.sendall(rec[:len(rec) // 2])
            sock.shutdown(socket.SHUT_WR)
        elapsed, data = wait_closed_within(sock, 3.0)
    assert elapsed < 1.0
    if kind == "bad_record":
        s.wait_error_log(r"TLS error", start=off)
    assert "/trunc-record" not in H.read_text(s.access_log)
    assert s.worker_pids() == pids
    r, _ = tls_get(s.port, cctx(), path="/after-record")
    assert r.status == 200


def test_handshake_timeout(https, pki):
    s = https({"handshake_timeout": "500ms"})
    off = len(H.read_text(s.error_log))
    # a finished handshake is not subject to it (keepalive applies)
    done = TlsClient(s.port, cctx())
    assert done.request("GET", "/hs-before").status == 200
    # nothing sent
    with socket.create_connection((H.HOST, s.port), timeout=5) as c:
        elapsed, data = wait_closed_within(c, 2.0)
    assert 0.4 <= elapsed <= 1.5 and data == b"", elapsed
    s.wait_error_log(r"TLS handshake timeout", start=off)
    # a slow drip of hello bytes does not extend it: the whole handshake is bounded
    hello = client_hello()
    with socket.create_connection((H.HOST, s.port), timeout=5) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.monotonic()
        closed = False
        for b in hello[:30]:
            try:
                c.sendall(bytes([b]))
            except OSError:
                closed = True
                break
            time.sleep(0.1)
            if time.monotonic() - t0 > 2.5:
                break
        if not closed:
            rest, _ = wait_closed_within(c, 2.0)
        total = time.monotonic() - t0
    assert total <= 1.5, "dripped handshake lived %.1fs with handshake_timeout 500ms" % total
    time.sleep(0.3)  # outlive the timeout on the established connection
    assert done.request("GET", "/hs-after").status == 200
    done.close()


# --------------------------------------------------------------------------
# data over TLS

def test_upload_and_download_2mb(https, pki):
    s = https()
    body = H.pattern_bytes(2 * 1024 * 1024, seed=7)
    with TlsClient(s.port, cctx(), timeout=20) as c:
        r = c.request("POST", "/echo", body=body)
        assert r.status == 200
        assert len(r.body) == len(body) and H.sha256(r.body) == H.sha256(body)
        r = c.request("GET", "/?size=%d" % len(body))
        assert r.status == 200 and len(r.body) == len(body)
        got = H.sha256(r.body)
    direct = H.http_request(s.demo.port, "GET", "/?size=%d" % len(body), timeout=20)
    assert got == H.sha256(direct.body)


def test_keepalive_requests_on_one_connection(https, pki):
    s = https()
    with TlsClient(s.port, cctx()) as c:
        for i in range(6):
            r = c.request("GET", "/ka-%d" % i)
            assert r.status == 200 and len(r.body) == 100
        cport = c.cport
    for i in range(6):
        e = tls_entry(s, "/ka-%d" % i)
        assert int(e["cport"]) == cport and e["resumed"] == "0"


def test_keepalive_across_idle_trims(https, pki):
    """An idle TLS keepalive connection gives its buffers back after 250 ms
    (the TLS library's BIO buffers too): requests after idle spells, on
    TLS 1.2 and 1.3, still work on the same connection, with bodies larger
    than one TLS record both ways."""
    s = https()
    for v, ver in enumerate((TLS12, TLS13)):
        paths = ["/idle-%d-%d?size=40000" % (v, i) for i in range(3)]
        with TlsClient(s.port, cctx(**ver)) as c:
            for p in paths:
                r = c.request("POST", p, body=b"x" * 30000)
                assert r.status == 200 and len(r.body) == 40000
                time.sleep(0.4)
            cport = c.cport
        assert {int(tls_entry(s, p)["cport"]) for p in paths} == {cport}


def test_wrk_over_https(https, pki):
    if shutil.which("wrk") is None:
        pytest.skip("wrk not installed")
    s = https(workers=2)
    p = subprocess.run(["wrk", "-t1", "-c4", "-d1s", "https://127.0.0.1:%d/" % s.port],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert "Socket errors" not in p.stdout, p.stdout
    assert "Non-2xx" not in p.stdout, p.stdout
    m = re.search(r"(\d+) requests in", p.stdout)
    assert m and int(m.group(1)) > 100, p.stdout
    H.wait_for(lambda: len(s.access_entries()) >= int(m.group(1)), 5, what="access lines")
    entries = s.access_entries()
    assert all(e["tls"] in ("TLSv1.2", "TLSv1.3") and e["status"] == "200" for e in entries)


def test_handshake_flood_completes_and_established_client_keeps_being_served(sluice, demo, pki):
    """A burst of new TLS connections (RSA: the costly handshake) on one
    worker goes beyond the per-loop handshake budget, so handshakes are
    deferred and resumed from buffered bytes: every one must still complete,
    and an established keepalive client is served throughout."""
    import threading
    d = demo(threads=16, keepalive_ms=60000)
    # max_connections below the demo's 16 threads: the pool, not the
    # backend's accept queue, absorbs the burst.
    cfg = H.make_config(H.free_port(), [H.server(d.port, max_connections=8)])
    cfg["listeners"][0]["tls"] = {"certificates": [pki.rsa.entry()]}
    s = sluice(cfg)
    established = TlsClient(s.port, cctx())
    try:
        assert established.request("GET", "/warm").status == 200
        n, results, lock = 120, [], threading.Lock()
        start = threading.Event()

        def flood():
            start.wait(5)
            try:
                r, _ = tls_get(s.port, cctx(max_v=ssl.TLSVersion.TLSv1_2), path="/flood")
                ok = r.status == 200
            except (OSError, ssl.SSLError, H.ConnClosed) as e:
                ok = repr(e)
            with lock:
                results.append(ok)
        threads = [threading.Thread(target=flood) for _ in range(n)]
        for t in threads:
            t.start()
        start.set()
        served = 0
        while any(t.is_alive() for t in threads) and served < 200:
            assert established.request("GET", "/during").status == 200
            served += 1
        for t in threads:
            t.join(30)
        assert len(results) == n and all(r is True for r in results), [r for r in results if r is not True]
        assert served >= 1
    finally:
        established.close()


def test_tls13_resumption_chains_with_fresh_tickets(https, tmp_path):
    """A client that uses each TLS 1.3 ticket once (as OpenSSL clients and
    wrk do) must get a new ticket on every resumption; the OpenSSL build once
    sent none after a resumption, so every other handshake was a full one."""
    s = https()
    sess = str(tmp_path / "sess.pem")
    seen = []
    for i in range(4):
        args = ["-tls1_3", "-msg", "-sess_out", sess] + (["-sess_in", sess] if i else [])
        rc, out = s_client(s.port, *args)
        assert rc == 0, out
        kind = "Reused" if "\nReused, TLSv1.3" in out else "New" if "\nNew, TLSv1.3" in out else "?"
        seen.append((kind, "NewSessionTicket" in out))
    assert seen == [("New", True)] + [("Reused", True)] * 3, seen
