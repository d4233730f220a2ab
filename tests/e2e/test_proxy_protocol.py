"""PROXY protocol end to end (issue 4).

Out: the exact v1 line and v2 bytes a recording backend receives (parsed
here from the spec, independently of sluice's encoder), every TLV, CRC-32C
checked in Python; HAProxy (`accept-proxy`) and nginx (`listen ...
proxy_protocol`) as real receivers; a pool that never lets one client's
backend connection carry another client's request; parked connections
closed with their client; health checks that send LOCAL.

In: v1 and v2 headers from a trusted network become the client address
everywhere (headers, access log, outgoing PROXY header), on plain and TLS
listeners; every malformed header closes the connection with a logged
reason, and the worker keeps serving; a header from outside
accept_proxy_from is refused while plain requests from there are served.
"""

import re
import socket
import ssl
import struct
import subprocess
import time

import pytest

import harness as H
import peers as P
from peers import haproxy, nginx  # noqa: F401  (fixtures)

SIG = P.V2_SIG


def ipv6_loopback():
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.bind(("::1", 0))
        s.close()
        return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback (::1) here")


def cfg_pp(backend_port, pp="v2", tlvs=None, listener=None, tls=None, forward=None,
           timeouts=None, health=None, backend=None, listen_host=H.HOST, max_connections=64):
    extra = {}
    if pp is not None:
        extra["proxy_protocol"] = pp
    if tlvs:
        extra["proxy_tlvs"] = tlvs
    li = dict(listener or {})
    if tls:
        li["tls"] = tls
    return H.make_config(H.free_port(), [H.server(backend_port, max_connections=max_connections, **extra)],
                         listener=li, forward=forward, timeouts=timeouts, health=health,
                         backend=backend, listen_host=listen_host)


def cport_of(c):
    return c.sock.getsockname()[1]


def tls_cfg(pki, pair=None, client_auth=True):
    t = {"certificates": [(pair or pki.ecdsa).entry()]}
    if client_auth:
        t["client_auth"] = "optional"
        t["client_ca"] = pki.client_ca.cert
    return t


def cert_sig_alg(path):
    """The certificate's signature algorithm as the openssl CLI names it."""
    out = subprocess.run(["openssl", "x509", "-in", path, "-noout", "-text"], capture_output=True,
                         text=True, timeout=30).stdout
    return re.search(r"Signature Algorithm: (\S+)", out).group(1)


def access_for(s, path, timeout=3.0):
    return s.wait_access_entry(lambda e: e["target"] == path, timeout=timeout)


def req_by_path(be, path):
    for q in be.all_requests():
        if q.target == path:
            return q
    raise AssertionError("%s not received; got %r" % (path, [q.target for q in be.all_requests()]))


def conn_of(be, path):
    with be.lock:
        conns = list(be.conns)
    for c in conns:
        if any(q.target == path for q in c.requests):
            return c
    raise AssertionError("no backend connection carried %s" % path)


# ==========================================================================
# A1. PROXY out: exact bytes at a recording backend

def test_v1_header_exact_then_request(sluice, recorder):
    be = recorder(P.pp_handler)
    s = sluice(cfg_pp(be.port, "v1"))
    with H.Client(s.port) as c:
        cport = cport_of(c)
        assert c.request("GET", "/v1-one").status == 200
        assert c.request("GET", "/v1-two").status == 200
    be.wait_requests(2)
    data = bytes(be.conns[0].data)
    hdr = b"PROXY TCP4 127.0.0.1 127.0.0.1 %d %d\r\n" % (cport, s.port)
    assert data.startswith(hdr + b"GET /v1-one HTTP/1.1\r\n"), data[:200]
    # one header per backend connection, not one per request
    assert data.count(b"PROXY ") == 1, data
    assert be.conn_count() == 1
    assert be.conns[0].pp.command == "TCP4"


def test_v2_header_exact_bytes_then_request(sluice, recorder):
    be = recorder(P.pp_handler)
    s = sluice(cfg_pp(be.port, "v2"))
    with H.Client(s.port) as c:
        cport = cport_of(c)
        assert c.request("GET", "/v2-one").status == 200
        assert c.request("GET", "/v2-two").status == 200
    be.wait_requests(2)
    data = bytes(be.conns[0].data)
    want = (SIG + bytes([0x21, 0x11]) + struct.pack("!H", 12)
            + socket.inet_aton("127.0.0.1") + socket.inet_aton("127.0.0.1")
            + struct.pack("!HH", cport, s.port))
    assert len(want) == 28
    assert data.startswith(want + b"GET /v2-one HTTP/1.1\r\n"), data[:100]
    # parsed field by field
    h = P.parse_v2(data)
    assert (h.ver_cmd, h.fam, h.length) == (0x21, 0x11, 12)
    assert (h.src, h.sport, h.dst, h.dport) == ("127.0.0.1", cport, "127.0.0.1", s.port)
    assert h.tlvs == []
    assert data.count(SIG) == 1
    assert be.conn_count() == 1


@needs_ipv6
@pytest.mark.parametrize("version", ["v1", "v2", "v2-crc"])
def test_ipv6_client_header(sluice, recorder, version):
    be = recorder(P.pp_handler)
    if version == "v2-crc":
        s = sluice(cfg_pp(be.port, "v2", tlvs=["unique_id", "crc32c"], listen_host="[::1]"))
        with H.Client(s.port, host="::1") as c:
            cport = cport_of(c)
            assert c.request("GET", "/six-crc").status == 200
        be.wait_requests(1)
        h = be.conns[0].pp
        assert (h.fam, h.src, h.sport, h.dst, h.dport) == (0x21, "::1", cport, "::1", s.port), h
        assert sorted(h.tlv_types()) == [P.PP2_TYPE_CRC32C, P.PP2_TYPE_UNIQUE_ID], h
        assert P.crc_ok(h.raw)
        return
    s = sluice(cfg_pp(be.port, version, listen_host="[::1]"))
    with H.Client(s.port, host="::1") as c:
        cport = cport_of(c)
        assert c.request("GET", "/six").status == 200
    be.wait_requests(1)
    data = bytes(be.conns[0].data)
    if version == "v1":
        assert data.startswith(b"PROXY TCP6 ::1 ::1 %d %d\r\nGET /six " % (cport, s.port)), data[:100]
    else:
        want = (SIG + bytes([0x21, 0x21]) + struct.pack("!H", 36)
                + socket.inet_pton(socket.AF_INET6, "::1") * 2 + struct.pack("!HH", cport, s.port))
        assert data.startswith(want + b"GET /six "), data[:100]


def test_v2_tlvs_on_plain_listener(sluice, recorder):
    """All TLVs configured, plain client: UNIQUE_ID and CRC32C only (no
    ALPN, AUTHORITY or SSL without TLS); the CRC verifies; each client
    connection has its own unique id."""
    be = recorder(P.pp_handler)
    s = sluice(cfg_pp(be.port, "v2", tlvs=["alpn", "authority", "unique_id", "crc32c", "ssl"]))
    ports = []
    for i in range(2):
        with H.Client(s.port) as c:
            ports.append(cport_of(c))
            assert c.request("GET", "/plain-%d" % i).status == 200
    be.wait_requests(2)
    hs = [conn_of(be, "/plain-%d" % i).pp for i in range(2)]
    for h, cport in zip(hs, ports):
        assert (h.ver_cmd, h.fam, h.src, h.sport, h.dport) == (0x21, 0x11, "127.0.0.1", cport, s.port)
        assert sorted(h.tlv_types()) == [P.PP2_TYPE_CRC32C, P.PP2_TYPE_UNIQUE_ID], h
        assert P.crc_ok(h.raw), h.raw
        assert h.length == len(h.raw) - 16
        uid = h.tlv(P.PP2_TYPE_UNIQUE_ID)
        assert 0 < len(uid) <= 128, uid
    assert hs[0].tlv(P.PP2_TYPE_UNIQUE_ID) != hs[1].tlv(P.PP2_TYPE_UNIQUE_ID)
    assert be.conns[0].requests[0].target == "/plain-0"


def test_v2_unique_ids_unique_across_workers(sluice, recorder):
    be = recorder(P.pp_handler)
    cfg = cfg_pp(be.port, "v2", tlvs=["unique_id"])
    cfg["workers"] = 2
    s = sluice(cfg)
    for i in range(24):
        with H.Client(s.port) as c:
            assert c.request("GET", "/uid-%d" % i).status == 200
    be.wait_requests(24)
    with be.lock:
        conns = list(be.conns)
    uids = [c.pp.tlv(P.PP2_TYPE_UNIQUE_ID) for c in conns]
    assert len(conns) == 24 and all(uids), uids
    assert len(set(uids)) == 24, uids


def check_ssl_tlv(h, *, version, cipher, sig_alg, key_alg, ccert, resumed=False):
    t = h.ssl()
    assert t is not None, h
    subs = dict(t["subs"])
    assert len(subs) == len(t["subs"]), "duplicate sub-TLV: %r" % t["subs"]
    if ccert:
        want_client = 0x01 | 0x04 | (0 if resumed else 0x02)
        assert t["client"] == want_client, t
        assert t["verify"] == 0, t
        assert subs.get(P.PP2_SUBTYPE_SSL_CN) == b"client1", t
    else:
        assert t["client"] == 0x01, t
        assert t["verify"] != 0, t
        assert P.PP2_SUBTYPE_SSL_CN not in subs, t
    assert subs.get(P.PP2_SUBTYPE_SSL_VERSION) == version.encode(), t
    assert subs.get(P.PP2_SUBTYPE_SSL_CIPHER) == cipher.encode(), t
    assert subs.get(P.PP2_SUBTYPE_SSL_SIG_ALG) == sig_alg.encode(), t
    assert subs.get(P.PP2_SUBTYPE_SSL_KEY_ALG) == key_alg.encode(), t
    want_types = {P.PP2_SUBTYPE_SSL_VERSION, P.PP2_SUBTYPE_SSL_CIPHER, P.PP2_SUBTYPE_SSL_SIG_ALG,
                  P.PP2_SUBTYPE_SSL_KEY_ALG} | ({P.PP2_SUBTYPE_SSL_CN} if ccert else set())
    assert set(subs) == want_types, t


@pytest.mark.parametrize("tlsver", ["TLSv1.2", "TLSv1.3"])
@pytest.mark.parametrize("ccert", [True, False], ids=["client-cert", "no-client-cert"])
def test_v2_tlvs_on_tls_listener(sluice, recorder, id_pki, tlsver, ccert):
    pki = id_pki
    be = recorder(P.pp_handler)
    s = sluice(cfg_pp(be.port, "v2", tlvs=["alpn", "authority", "unique_id", "crc32c", "ssl"],
                      tls=tls_cfg(pki)))
    v = ssl.TLSVersion.TLSv1_2 if tlsver == "TLSv1.2" else ssl.TLSVersion.TLSv1_3
    ctx = P.cctx(cert=pki.client if ccert else None, alpn=["http/1.1"], min_v=v, max_v=v)
    with P.TlsClient(s.port, ctx, sni="a.test") as c:
        r = c.request("GET", "/tls-tlv")
        assert r.status == 200
        version, cipher = c.sock.version(), c.sock.cipher()[0]
        assert c.sock.selected_alpn_protocol() == "http/1.1"
        cport = c.cport
    assert version == tlsver
    be.wait_requests(1)
    h = be.conns[0].pp
    assert (h.ver_cmd, h.fam, h.src, h.sport, h.dst, h.dport) == \
        (0x21, 0x11, "127.0.0.1", cport, "127.0.0.1", s.port), h
    assert h.tlv(P.PP2_TYPE_ALPN) == b"http/1.1", h
    assert h.tlv(P.PP2_TYPE_AUTHORITY) == b"a.test", h
    uid = h.tlv(P.PP2_TYPE_UNIQUE_ID)
    assert uid and len(uid) <= 128, h
    assert P.crc_ok(h.raw), h.raw
    assert sorted(h.tlv_types()) == sorted([P.PP2_TYPE_ALPN, P.PP2_TYPE_AUTHORITY, P.PP2_TYPE_UNIQUE_ID,
                                            P.PP2_TYPE_SSL, P.PP2_TYPE_CRC32C]), h
    check_ssl_tlv(h, version=tlsver, cipher=cipher, sig_alg=cert_sig_alg(pki.ecdsa.cert),
                  key_alg="EC256", ccert=ccert)


def test_v2_ssl_tlv_unverified_client_cert(sluice, recorder, id_pki):
    """A client certificate from another CA under client_auth optional: the
    CN is sent, with a non-zero verify result."""
    pki = id_pki
    be = recorder(P.pp_handler)
    s = sluice(cfg_pp(be.port, "v2", tlvs=["ssl"], tls=tls_cfg(pki)))
    with P.TlsClient(s.port, P.cctx(cert=pki.rogue), sni="a.test") as c:
        assert c.request("GET", "/rogue").status == 200
    be.wait_requests(1)
    t = be.conns[0].pp.ssl()
    subs = dict(t["subs"])
    assert t["client"] == 0x07 and t["verify"] != 0, t
    assert subs.get(P.PP2_SUBTYPE_SSL_CN) == b"rogue", t


def test_v2_ssl_tlv_rsa_certificate(sluice, recorder, id_pki):
    """KEY_ALG and SIG_ALG describe the certificate sluice presented: an
    RSA-2048 key (signed by the ECDSA test CA)."""
    pki = id_pki
    be = recorder(P.pp_handler)
    s = sluice(cfg_pp(be.port, "v2", tlvs=["ssl"], tls=tls_cfg(pki, pki.rsa, client_auth=False)))
    with P.TlsClient(s.port, P.cctx(), sni="a.test") as c:
        assert c.request("GET", "/rsa").status == 200
        version, cipher = c.sock.version(), c.sock.cipher()[0]
    be.wait_requests(1)
    h = be.conns[0].pp
    assert h.tlv_types() == [P.PP2_TYPE_SSL], h
    check_ssl_tlv(h, version=version, cipher=cipher, sig_alg=cert_sig_alg(pki.rsa.cert),
                  key_alg="RSA2048", ccert=False)


def test_v2_tls_without_sni_or_alpn(sluice, recorder, id_pki):
    """No SNI: no AUTHORITY TLV; no ALPN offered: no ALPN TLV; SSL still sent."""
    pki = id_pki
    be = recorder(P.pp_handler)
    s = sluice(cfg_pp(be.port, "v2", tlvs=["alpn", "authority", "ssl"], tls=tls_cfg(pki)))
    with P.TlsClient(s.port, P.cctx(), sni=None) as c:
        assert c.request("GET", "/nosni").status == 200
    be.wait_requests(1)
    h = be.conns[0].pp
    assert h.tlv_types() == [P.PP2_TYPE_SSL], h


def test_v2_ssl_tlv_resumed_session_with_client_cert(sluice, recorder, id_pki):
    """TLS 1.2 resumption of a session that had a client certificate: bit
    0x04 (certificate in the session) without 0x02 (on this connection)."""
    pki = id_pki
    be = recorder(P.pp_handler)
    s = sluice(cfg_pp(be.port, "v2", tlvs=["ssl"], tls=tls_cfg(pki)))
    ctx = P.cctx(cert=pki.client, max_v=ssl.TLSVersion.TLSv1_2)
    with P.TlsClient(s.port, ctx, sni="a.test") as c:
        assert c.request("GET", "/full").status == 200
        sess = c.sock.session
        cipher = c.sock.cipher()[0]
    with P.TlsClient(s.port, ctx, sni="a.test", session=sess) as c:
        assert c.request("GET", "/resumed").status == 200
        assert c.sock.session_reused, "the session was not resumed: test precondition"
    be.wait_requests(2)
    check_ssl_tlv(conn_of(be, "/full").pp, version="TLSv1.2", cipher=cipher,
                  sig_alg=cert_sig_alg(pki.ecdsa.cert), key_alg="EC256", ccert=True)
    check_ssl_tlv(conn_of(be, "/resumed").pp, version="TLSv1.2", cipher=cipher,
                  sig_alg=cert_sig_alg(pki.ecdsa.cert), key_alg="EC256", ccert=True, resumed=True)


# ==========================================================================
# A2. HAProxy as the receiving backend

def test_haproxy_logs_client_address_authority_unique_id(sluice, haproxy, id_pki):
    hap = haproxy()
    pki = id_pki
    s = sluice(cfg_pp(hap.port, "v2", tlvs=["alpn", "authority", "unique_id", "crc32c", "ssl"],
                      tls=tls_cfg(pki)))
    ctx = P.cctx(alpn=["http/1.1"])
    with P.TlsClient(s.port, ctx, sni="a.test", source=("127.0.0.2", 0)) as a:
        ra1 = a.request("GET", "/hap-a1")
        ra2 = a.request("GET", "/hap-a2")
        with P.TlsClient(s.port, ctx, sni="b.test", source=("127.0.0.3", 0)) as b:
            rb = b.request("GET", "/hap-b")
            bport = b.cport
        aport = a.cport
    for r in (ra1, ra2, rb):
        assert r.status == 200 and r.body == b"haproxy-ok", r
    ea1 = hap.wait_entry(lambda e: e["path"] == "/hap-a1")
    ea2 = hap.wait_entry(lambda e: e["path"] == "/hap-a2")
    eb = hap.wait_entry(lambda e: e["path"] == "/hap-b")
    assert (ea1["ci"], ea1["cport"], ea1["fi"], ea1["fport"]) == ("127.0.0.2", str(aport), "127.0.0.1", str(s.port)), ea1
    assert (eb["ci"], eb["cport"], eb["fi"], eb["fport"]) == ("127.0.0.3", str(bport), "127.0.0.1", str(s.port)), eb
    assert ea1["auth"] == "a.test" and eb["auth"] == "b.test", (ea1, eb)
    assert ea1["uid"] not in ("", "-") and eb["uid"] not in ("", "-"), (ea1, eb)
    assert ea2["uid"] == ea1["uid"] and ea2["ci"] == "127.0.0.2" and ea2["cport"] == str(aport), ea2
    assert eb["uid"] != ea1["uid"], (ea1, eb)
    assert ea1["st"] == "200"


def test_haproxy_v1_logs_client_address(sluice, haproxy):
    hap = haproxy()
    s = sluice(cfg_pp(hap.port, "v1"))
    with H.Client(s.port, source=("127.0.0.2", 0)) as c:
        r = c.request("GET", "/hap-v1")
        cport = cport_of(c)
    assert r.status == 200 and r.body == b"haproxy-ok"
    e = hap.wait_entry(lambda e: e["path"] == "/hap-v1")
    assert (e["ci"], e["cport"], e["fi"], e["fport"]) == ("127.0.0.2", str(cport), "127.0.0.1", str(s.port)), e


def haproxy_answers(hap, data, timeout=3.0):
    """Send DATA to HAProxy; return the response or None if it closed the
    connection without one."""
    with H.Client(hap.port, timeout=timeout) as c:
        c.send(data)
        try:
            return c.read_response()
        except (H.ConnClosed, ConnectionError):
            return None


def test_haproxy_checks_sluice_crc32c(sluice, recorder, haproxy, id_pki):
    """The exact v2 header sluice sends (with CRC32C, captured at a
    recording backend) is accepted by HAProxy, which logs its address,
    authority and unique id; with one address byte flipped HAProxy drops
    the connection; with the CRC recomputed over the flipped header it
    accepts it again (so the CRC was the reason)."""
    pki = id_pki
    be = recorder(P.pp_handler)
    s = sluice(cfg_pp(be.port, "v2", tlvs=["alpn", "authority", "unique_id", "crc32c", "ssl"],
                      tls=tls_cfg(pki)))
    with P.TlsClient(s.port, P.cctx(alpn=["http/1.1"]), sni="a.test") as c:
        assert c.request("GET", "/capture").status == 200
        cport = c.cport
    be.wait_requests(1)
    h = be.conns[0].pp
    raw = h.raw
    assert P.crc_ok(raw)
    uid = h.tlv(P.PP2_TYPE_UNIQUE_ID).decode()
    hap = haproxy()
    req = H.build_request("GET", "/replay", headers=[("Connection", "close")])
    r = haproxy_answers(hap, raw + req)
    assert r is not None and r.status == 200, r
    e = hap.wait_entry(lambda e: e["path"] == "/replay")
    assert (e["ci"], e["cport"], e["auth"], e["uid"]) == ("127.0.0.1", str(cport), "a.test", uid), e

    bad = bytearray(raw)
    bad[17] ^= 0x01                                 # 127.0.0.1 -> 127.1.0.1
    r = haproxy_answers(hap, bytes(bad) + H.build_request("GET", "/flipped"))
    assert r is None, "HAProxy answered a header with a bad CRC: %r" % r
    at = P.crc_offset(raw)
    bad_crc = bytearray(raw)
    bad_crc[at + 3] ^= 0x80                          # the checksum itself
    r = haproxy_answers(hap, bytes(bad_crc) + H.build_request("GET", "/badcrc"))
    assert r is None, r

    fixed = bytearray(bad)
    fixed[at:at + 4] = b"\0\0\0\0"
    fixed[at:at + 4] = struct.pack("!I", P.crc32c(bytes(fixed)))
    r = haproxy_answers(hap, bytes(fixed) + H.build_request("GET", "/refixed",
                                                            headers=[("Connection", "close")]))
    assert r is not None and r.status == 200, r
    e = hap.wait_entry(lambda e: e["path"] == "/refixed")
    assert e["ci"] == "127.1.0.1", e
    paths = [e["path"] for e in hap.entries()]
    assert "/flipped" not in paths and "/badcrc" not in paths, paths


# ==========================================================================
# A3. nginx as the receiving backend

@pytest.mark.parametrize("version", ["v1", "v2"])
def test_nginx_logs_client_address(sluice, nginx, version):
    ng = nginx()
    s = sluice(cfg_pp(ng.port, version))
    with H.Client(s.port, source=("127.0.0.2", 0)) as c:
        r1 = c.request("GET", "/ng-%s-1" % version)
        r2 = c.request("GET", "/ng-%s-2" % version)
        cport = cport_of(c)
    assert r1.status == 200 and r1.body == b"nginx-ok"
    assert r2.status == 200
    e1 = ng.wait_entry(lambda e: e["uri"] == "/ng-%s-1" % version)
    e2 = ng.wait_entry(lambda e: e["uri"] == "/ng-%s-2" % version)
    assert (e1["addr"], e1["port"]) == ("127.0.0.2", str(cport)), e1
    assert (e2["addr"], e2["port"]) == ("127.0.0.2", str(cport)), e2
    # the second request reused the backend connection that carried the header
    assert e2["conn"] == e1["conn"] and (e1["n"], e2["n"]) == ("1", "2"), (e1, e2)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_nginx_tls_backend_header_before_handshake(sluice, nginx, id_pki, version):
    """A TLS backend (`listen ... ssl proxy_protocol`): the header goes in
    the clear before the handshake, and the pooled TLS connection keeps
    serving the same client."""
    pki = id_pki
    ng = nginx(ssl_cert=pki.ecdsa.cert, ssl_key=pki.ecdsa.key)
    s = sluice(cfg_pp(ng.port, version, backend={"tls": {"ca": pki.ca.cert, "sni": "a.test"}}))
    with H.Client(s.port, source=("127.0.0.3", 0)) as c:
        r1 = c.request("GET", "/ngtls-1")
        r2 = c.request("GET", "/ngtls-2")
        cport = cport_of(c)
    assert (r1.status, r1.body, r2.status) == (200, b"nginx-ok", 200), (r1, r2)
    e1 = ng.wait_entry(lambda e: e["uri"] == "/ngtls-1")
    e2 = ng.wait_entry(lambda e: e["uri"] == "/ngtls-2")
    for e in (e1, e2):
        assert (e["addr"], e["port"], e["sni"]) == ("127.0.0.3", str(cport), "a.test"), e
        assert e["ssl"].startswith("TLSv1."), e
    assert e2["conn"] == e1["conn"] and e2["n"] == "2", (e1, e2)


# ==========================================================================
# A4/A5. pooling stays correct with the PROXY protocol

def interleave(port, rounds, sources):
    """Clients bound to SOURCES (list of (label, ip)), each sending ROUNDS
    keepalive requests, interleaved. Returns {label: (client ip, port)}."""
    clients = [(label, ip, H.Client(port, source=(ip, 0))) for label, ip in sources]
    who = {}
    try:
        for i in range(rounds):
            for label, ip, c in clients:
                who[label] = (ip, cport_of(c))
                r = c.request("GET", "/%s/%d" % (label, i), headers=[("X-Who", label)])
                assert r.status == 200, r
    finally:
        for _, _, c in clients:
            c.close()
    return who


def test_pp_pool_never_mixes_clients(sluice, recorder):
    be = recorder(P.pp_handler)
    s = sluice(cfg_pp(be.port, "v2"))
    sources = [("c2", "127.0.0.2"), ("c3", "127.0.0.3"), ("c2b", "127.0.0.2")]
    clients = [(label, ip, H.Client(s.port, source=(ip, 0))) for label, ip in sources]
    who = {label: (ip, cport_of(c)) for label, ip, c in clients}
    try:
        for i in range(5):
            for label, ip, c in clients:
                r = c.request("GET", "/%s/%d" % (label, i), headers=[("X-Who", label)])
                assert r.status == 200, r
        be.wait_requests(15)
        with be.lock:
            conns = list(be.conns)
        for bc in conns:
            labels = {q.header("x-who") for q in bc.requests}
            assert len(labels) == 1, "one backend connection carried %s" % sorted(labels)
            label = labels.pop()
            ip, port = who[label]
            assert (bc.pp.src, bc.pp.sport) == (ip, port), (label, bc.pp)
            for q in bc.requests:
                assert q.header_all("x-forwarded-for") == [ip], q
        # each client connection keeps reusing its own backend connection
        assert len(conns) == 3, [(c.pp, [q.target for q in c.requests]) for c in conns]
        for label in who:
            bc = conn_of(be, "/%s/0" % label)
            assert [q.target for q in bc.requests] == ["/%s/%d" % (label, i) for i in range(5)]
        # A5: the access log numbers the requests on each backend connection
        for label in who:
            nums = [access_for(s, "/%s/%d" % (label, i))["be_conn_req"] for i in range(5)]
            assert nums == ["1", "2", "3", "4", "5"], (label, nums)

        # a closed client takes its parked backend connection with it
        c2 = conn_of(be, "/c2/0")
        c3 = conn_of(be, "/c3/0")
        clients[0][2].close()
        H.wait_for(lambda: c2.closed_by_peer, 3.0, what="sluice closing c2's parked connection")
        assert not c3.closed_by_peer, "c3's connection closed with c2's"
    finally:
        for _, _, c in clients:
            c.close()
    H.wait_for(lambda: c3.closed_by_peer, 3.0, what="sluice closing c3's parked connection")


def test_pp_pool_concurrent_clients_different_sources(sluice, recorder):
    """Eight clients from eight source addresses, in parallel threads, ten
    requests each: every backend connection's header names the client of
    every request it carried."""
    import threading
    be = recorder(P.pp_handler)
    s = sluice(cfg_pp(be.port, "v2", max_connections=4))
    errors = []

    def run(k):
        ip = "127.0.0.%d" % (10 + k)
        try:
            with H.Client(s.port, source=(ip, 0)) as c:
                for i in range(10):
                    r = c.request("GET", "/t%d/%d" % (k, i), headers=[("X-Who", ip)])
                    assert r.status == 200, r
        except Exception as e:  # reported below
            errors.append("client %d: %r" % (k, e))
    ts = [threading.Thread(target=run, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors
    be.wait_requests(80)
    with be.lock:
        conns = list(be.conns)
    for bc in conns:
        for q in bc.requests:
            assert q.header("x-who") == bc.pp.src, (bc.pp, q)
            assert q.header_all("x-forwarded-for") == [bc.pp.src], q
    assert be.max_active <= 4, be.max_active


def test_header_only_mode_multiplexes_clients(sluice, recorder):
    """Without the PROXY protocol two clients' requests share one backend
    connection, and X-Forwarded-For names the right client each time; the
    connection outlives its clients."""
    be = recorder()
    s = sluice(cfg_pp(be.port, pp=None))
    sources = [("c2", "127.0.0.2"), ("c3", "127.0.0.3")]
    clients = [(label, ip, H.Client(s.port, source=(ip, 0))) for label, ip in sources]
    try:
        for i in range(5):
            for label, ip, c in clients:
                assert c.request("GET", "/%s/%d" % (label, i), headers=[("X-Who", label)]).status == 200
    finally:
        for _, _, c in clients:
            c.close()
    be.wait_requests(10)
    assert be.conn_count() == 1, be.conn_count()
    ips = dict(sources)
    qs = be.conns[0].requests
    assert [q.header("x-who") for q in qs] == ["c2", "c3"] * 5
    for q in qs:
        assert q.header_all("x-forwarded-for") == [ips[q.header("x-who")]], q
    assert not bytes(be.conns[0].data).startswith(b"PROXY")
    nums = [access_for(s, "/%s/%d" % (label, i))["be_conn_req"] for i in range(5) for label, _ in sources]
    assert nums == [str(n) for n in range(1, 11)], nums
    time.sleep(1.0)  # the pooled connection is not tied to a client
    assert not be.conns[0].closed_by_peer


def test_be_conn_req_new_then_reused(sluice, recorder):
    be = recorder(P.pp_handler)
    s = sluice(cfg_pp(be.port, "v2"))
    with H.Client(s.port) as c:
        assert c.request("GET", "/bcr-1").status == 200
        assert c.request("GET", "/bcr-2").status == 200
    with H.Client(s.port) as c:  # another client: a new backend connection
        assert c.request("GET", "/bcr-3").status == 200
    assert access_for(s, "/bcr-1")["be_conn_req"] == "1"
    assert access_for(s, "/bcr-2")["be_conn_req"] == "2"
    assert access_for(s, "/bcr-3")["be_conn_req"] == "1"
    assert be.conn_count() == 2


# ==========================================================================
# A6. health checks against a server that requires the header

@pytest.mark.parametrize("version", ["v1", "v2"])
def test_health_checks_send_local_header(sluice, nginx, version):
    ng = nginx()
    health = {"path": "/health", "interval": "200ms", "timeout": "200ms", "rise": 1, "fall": 1}
    s = sluice(cfg_pp(ng.port, version, health=health))
    H.wait_for(lambda: len([e for e in ng.entries() if e["uri"] == "/health"]) >= 5, 10.0,
               what="5 health checks at nginx")
    checks = [e for e in ng.entries() if e["uri"] == "/health"]
    # LOCAL (v2) / UNKNOWN (v1): nginx has no PROXY address for them (logged "-")
    assert all(e["addr"] == "-" for e in checks), checks
    assert "is DOWN" not in H.read_text(s.error_log), H.read_text(s.error_log)
    assert "invalid PROXY" not in H.read_text(ng.error_path)
    with H.Client(s.port) as c:
        cport = cport_of(c)
        r = c.request("GET", "/after-checks")
    assert r.status == 200 and r.body == b"nginx-ok"
    e = ng.wait_entry(lambda e: e["uri"] == "/after-checks")
    assert (e["addr"], e["port"]) == ("127.0.0.1", str(cport))


def test_health_checks_local_header_before_tls(sluice, nginx, id_pki):
    """A TLS server that requires the header: the check's LOCAL header
    comes before its TLS handshake, and the server stays up."""
    pki = id_pki
    ng = nginx(ssl_cert=pki.ecdsa.cert, ssl_key=pki.ecdsa.key)
    health = {"path": "/health", "interval": "200ms", "timeout": "200ms", "rise": 1, "fall": 1}
    s = sluice(cfg_pp(ng.port, "v2", health=health,
                      backend={"tls": {"ca": pki.ca.cert, "sni": "a.test"}}))
    H.wait_for(lambda: len([e for e in ng.entries() if e["uri"] == "/health"]) >= 5, 10.0,
               what="5 TLS health checks at nginx")
    checks = [e for e in ng.entries() if e["uri"] == "/health"]
    assert all(e["addr"] == "-" and e["ssl"].startswith("TLSv1.") for e in checks), checks
    assert "is DOWN" not in H.read_text(s.error_log), H.read_text(s.error_log)
    assert H.http_request(s.port, "GET", "/after-tls-checks").status == 200


def test_health_checks_without_header_fail_control(sluice, nginx):
    """Control for the test above: without proxy_protocol the same checks
    fail against nginx (so the checks really run and nginx really
    requires the header)."""
    ng = nginx()
    health = {"path": "/health", "interval": "200ms", "timeout": "200ms", "rise": 1, "fall": 1}
    s = sluice(cfg_pp(ng.port, pp=None, health=health))
    s.wait_error_log(r"is DOWN", timeout=5.0)


# ==========================================================================
# B. PROXY in

def cfg_in(backend_port, accept=("127.0.0.0/8",), pp=None, tlvs=None, tls=None, timeouts=None,
           forward=None):
    fwd = {"x_forwarded_for": "append", "x_forwarded_port": True, "forwarded": True}
    fwd.update(forward or {})
    return cfg_pp(backend_port, pp, tlvs=tlvs, tls=tls, timeouts=timeouts, forward=fwd,
                  listener={"accept_proxy_from": list(accept)})


SSL_TLV = P.tlv(P.PP2_TYPE_SSL, bytes([0x01]) + struct.pack("!I", 0)
                + P.tlv(P.PP2_SUBTYPE_SSL_VERSION, b"TLSv1.3")
                + P.tlv(P.PP2_SUBTYPE_SSL_CIPHER, b"TLS_AES_128_GCM_SHA256"))

GOOD_HEADERS = {
    "v1": (P.v1("192.0.2.10", "192.0.2.20", 40001, 443), "192.0.2.10", 40001, "192.0.2.20", 443),
    "v1-tcp6": (P.v1("2001:db8::10", "2001:db8::20", 40002, 8443, proto="TCP6"),
                "2001:db8::10", 40002, "2001:db8::20", 8443),
    "v2": (P.v2("192.0.2.11", "192.0.2.21", 40003, 444), "192.0.2.11", 40003, "192.0.2.21", 444),
    "v2-tlvs": (P.v2("192.0.2.12", "192.0.2.22", 40004, 445,
                     tlvs=P.tlv(P.PP2_TYPE_AUTHORITY, b"lb.test") + P.tlv(P.PP2_TYPE_UNIQUE_ID, b"lb-1")
                     + P.tlv(P.PP2_TYPE_NOOP, b"\0\0\0") + P.tlv(P.PP2_TYPE_ALPN, b"h2")),
                "192.0.2.12", 40004, "192.0.2.22", 445),
    "v2-tlvs-crc": (P.v2("192.0.2.13", "192.0.2.23", 40005, 446,
                         tlvs=P.tlv(P.PP2_TYPE_UNIQUE_ID, b"lb-2") + SSL_TLV, crc=True),
                    "192.0.2.13", 40005, "192.0.2.23", 446),
    "v2-tcp6": (P.v2("2001:db8::11", "2001:db8::21", 40006, 447), "2001:db8::11", 40006,
                "2001:db8::21", 447),
}


def forwarded_for(ip):
    return ip if ":" not in ip else '"[%s]"' % ip


@pytest.mark.parametrize("name", sorted(GOOD_HEADERS))
def test_proxy_in_address_used_everywhere(sluice, recorder, name):
    hdr, src, sport, dst, dport = GOOD_HEADERS[name]
    be = recorder(P.pp_handler)
    s = sluice(cfg_in(be.port, pp="v2"))
    with H.Client(s.port) as c:
        c.send(hdr + H.build_request("GET", "/in-" + name, host="example.com"))
        r = c.read_response()
        assert r.status == 200, r
        # the next request on the same connection keeps the identity
        assert c.request("GET", "/in2-" + name).status == 200
    be.wait_requests(2)
    for path in ("/in-" + name, "/in2-" + name):
        q = req_by_path(be, path)
        assert q.header_all("x-forwarded-for") == [src], q
        assert q.header_all("x-forwarded-port") == [str(dport)], q
        assert q.header_all("forwarded") == ["for=%s;proto=http;host=%s"
                                             % (forwarded_for(src), "example.com" if path.startswith("/in-")
                                                else "test.local")], q
        e = access_for(s, path)
        # the access log writes an IPv6 peer in brackets: [2001:db8::10]:40002
        assert (e["client"], e["cport"]) == ("[%s]" % src if ":" in src else src, str(sport)), e
    # the outgoing header carries the incoming one's addresses
    h = be.conns[0].pp
    fam = 0x21 if ":" in src else 0x11
    assert (h.fam, h.src, h.sport, h.dst, h.dport) == (fam, src, sport, dst, dport), h
    assert be.conn_count() == 1


def test_proxy_in_v1_out_v1(sluice, recorder):
    be = recorder(P.pp_handler)
    s = sluice(cfg_in(be.port, pp="v1"))
    with H.Client(s.port) as c:
        c.send(P.v1("198.51.100.7", "198.51.100.8", 1234, 80) + H.build_request("GET", "/v1v1"))
        assert c.read_response().status == 200
    be.wait_requests(1)
    assert bytes(be.conns[0].data).startswith(b"PROXY TCP4 198.51.100.7 198.51.100.8 1234 80\r\nGET /v1v1 ")


_UNIX_V2 = SIG + bytes([0x21, 0x31]) + struct.pack("!H", 216) + b"/tmp/a.sock".ljust(108, b"\0") \
    + b"/tmp/b.sock".ljust(108, b"\0")
_UNSPEC_V2 = SIG + bytes([0x21, 0x00]) + struct.pack("!H", 0)


@pytest.mark.parametrize("hdr", [P.v2(command=0x20), P.v2(command=0x20, tlvs=P.tlv(P.PP2_TYPE_NOOP, b"x"),
                                                           crc=True),
                                 b"PROXY UNKNOWN\r\n",
                                 b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n", _UNIX_V2, _UNSPEC_V2],
                         ids=["v2-local", "v2-local-crc", "v1-unknown", "v1-unknown-addrs", "v2-proxy-unix",
                              "v2-proxy-unspec"])
def test_proxy_in_local_keeps_real_address(sluice, recorder, hdr):
    be = recorder(P.pp_handler)
    s = sluice(cfg_in(be.port, pp="v2"))
    with H.Client(s.port) as c:
        cport = cport_of(c)
        c.send(hdr + H.build_request("GET", "/local"))
        assert c.read_response().status == 200
    be.wait_requests(1)
    q = req_by_path(be, "/local")
    assert q.header_all("x-forwarded-for") == ["127.0.0.1"], q
    assert q.header_all("x-forwarded-port") == [str(s.port)], q
    e = access_for(s, "/local")
    assert (e["client"], e["cport"]) == ("127.0.0.1", str(cport)), e
    h = be.conns[0].pp
    assert (h.command, h.src, h.sport, h.dst, h.dport) == ("PROXY", "127.0.0.1", cport, "127.0.0.1", s.port), h


def test_proxy_in_header_in_pieces(sluice, recorder):
    """The header arriving a few bytes at a time, then the request."""
    be = recorder()
    s = sluice(cfg_in(be.port))
    hdr = P.v2("192.0.2.77", "192.0.2.78", 5555, 443, tlvs=P.tlv(P.PP2_TYPE_UNIQUE_ID, b"abc"), crc=True)
    with H.Client(s.port) as c:
        for i in range(0, len(hdr), 5):
            c.send(hdr[i:i + 5])
            time.sleep(0.02)
        c.send(b"GET /pieces HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.02)
        c.send(b"\r\n")
        assert c.read_response().status == 200
    be.wait_requests(1)
    assert req_by_path(be, "/pieces").header_all("x-forwarded-for") == ["192.0.2.77"]
    # v1 too, with the request in the same segment as the header's end
    hdr = P.v1("192.0.2.79", "192.0.2.80", 5556, 443)
    with H.Client(s.port) as c:
        c.send(hdr[:10])
        time.sleep(0.05)
        c.send(hdr[10:] + H.build_request("GET", "/pieces-v1"))
        assert c.read_response().status == 200
    assert req_by_path(be, "/pieces-v1").header_all("x-forwarded-for") == ["192.0.2.79"]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_proxy_in_then_tls_handshake(sluice, recorder, id_pki, version):
    pki = id_pki
    be = recorder(P.pp_handler)
    s = sluice(cfg_in(be.port, pp="v2", tlvs=["authority", "ssl"], tls=tls_cfg(pki, client_auth=False)))
    hdr = (P.v1("192.0.2.30", "192.0.2.31", 41000, 443) if version == "v1"
           else P.v2("192.0.2.30", "192.0.2.31", 41000, 443, crc=True))
    with P.TlsClient(s.port, P.cctx(), sni="a.test", prefix=hdr) as c:
        r = c.request("GET", "/tls-in")
        assert r.status == 200
        assert c.request("GET", "/tls-in-2").status == 200
    be.wait_requests(2)
    q = req_by_path(be, "/tls-in")
    assert q.header_all("x-forwarded-for") == ["192.0.2.30"], q
    assert q.header_all("x-forwarded-proto") == ["https"], q
    assert q.header_all("x-forwarded-port") == ["443"], q
    e = access_for(s, "/tls-in")
    assert (e["client"], e["cport"], e["tls"] is not None) == ("192.0.2.30", "41000", True), e
    h = be.conns[0].pp
    assert (h.src, h.sport, h.dst, h.dport) == ("192.0.2.30", 41000, "192.0.2.31", 443), h
    assert h.tlv(P.PP2_TYPE_AUTHORITY) == b"a.test" and h.ssl()["client"] == 0x01, h


# --------------------------------------------------------------------------
# bad input: closed, logged, nothing reaches the backend, worker keeps serving

GOOD = P.v2("192.0.2.10", "192.0.2.20", 40001, 443)
_overflow_tlv = bytes([P.PP2_TYPE_UNIQUE_ID]) + struct.pack("!H", 100) + b"short"
_bad_crc = bytearray(P.v2("192.0.2.10", "192.0.2.20", 40001, 443, crc=True))
_bad_crc[16] ^= 0x01                  # an address byte, CRC left as it was

BAD_CASES = {
    # name: (bytes, shut_wr_after, reason regex)
    "v2-truncated-then-eof": (GOOD[:20], True, r"PROXY"),
    "v2-truncated-then-timeout": (GOOD[:20], False, r"PROXY header within client_header"),
    "v1-truncated-then-eof": (b"PROXY TCP4 192.0.2.10 19", True, r"PROXY"),
    "v1-truncated-then-timeout": (b"PROXY TCP4 192.0.2.10 19", False, r"PROXY header within client_header"),
    "v2-bad-signature": (b"\r\n\r\n\0\r\nQUIX\n" + GOOD[12:] + H.build_request("GET", "/x"), False,
                         r"did not start with a PROXY"),
    "v2-bad-version": (GOOD[:12] + b"\x11" + GOOD[13:] + H.build_request("GET", "/x"), False, r"version"),
    "v2-bad-command": (GOOD[:12] + b"\x2f" + GOOD[13:] + H.build_request("GET", "/x"), False, r"command"),
    "v2-udp": (P.v2("192.0.2.10", "192.0.2.20", 1, 2, fam=0x12) + H.build_request("GET", "/x"), False,
               r"UDP|datagram"),
    "v2-unknown-family": (P.v2("192.0.2.10", "192.0.2.20", 1, 2, fam=0x41) + H.build_request("GET", "/x"),
                          False, r"family"),
    "v2-short-address-block": (P.v2("192.0.2.10", "192.0.2.20", 1, 2, length=8)[:24]
                               + H.build_request("GET", "/x"), False, r"address block"),
    "v2-tlv-overflow": (P.v2(tlvs=_overflow_tlv) + H.build_request("GET", "/x"), False, r"TLV overflow"),
    "v2-tlv-header-truncated": (P.v2(tlvs=b"\x05\x00") + H.build_request("GET", "/x"), False,
                                r"TLV header truncated"),
    "v2-ssl-subtlv-overflow": (P.v2(tlvs=P.tlv(P.PP2_TYPE_SSL, b"\x01\0\0\0\0" + b"\x21\x00\x50TLS"))
                               + H.build_request("GET", "/x"), False, r"TLV overflow"),
    "v2-bad-crc": (bytes(_bad_crc) + H.build_request("GET", "/x"), False, r"CRC32C mismatch"),
    "v2-too-long": (GOOD[:14] + struct.pack("!H", 2000) + b"\0" * 2000 + H.build_request("GET", "/x"), False,
                    r"longer than"),
    "v1-field-count": (b"PROXY TCP4 192.0.2.10 192.0.2.20 40001\r\n" + H.build_request("GET", "/x"), False,
                       r"two addresses and two ports"),
    "v1-garbage": (b"PROXY FOO 192.0.2.10 192.0.2.20 40001 443\r\n" + H.build_request("GET", "/x"), False, r"TCP4, TCP6 or UNKNOWN"),
    "v1-no-crlf": (b"PROXY TCP4 192.0.2.10 192.0.2.20 40001 443\n" + H.build_request("GET", "/x"), False,
                   r"CRLF"),
    "v1-no-lf-at-all": (b"PROXY TCP4 " + b"1" * 120, False, r"CRLF"),
    "v1-bad-address": (b"PROXY TCP4 192.0.2.300 192.0.2.20 40001 443\r\n" + H.build_request("GET", "/x"),
                       False, r"address"),
    "v1-bad-port": (b"PROXY TCP4 192.0.2.10 192.0.2.20 70000 443\r\n" + H.build_request("GET", "/x"),
                    False, r"port"),
    "v1-tcp4-with-ipv6": (b"PROXY TCP4 ::1 ::1 1 2\r\n" + H.build_request("GET", "/x"), False, r"IPv4"),
    "missing-header-plain-get": (H.build_request("GET", "/x"), False, r"did not start with a PROXY"),
}


@pytest.mark.parametrize("name", list(BAD_CASES))
def test_proxy_in_bad_header_closes_and_logs(sluice, recorder, name):
    data, shut, reason = BAD_CASES[name]
    be = recorder()
    s = sluice(cfg_in(be.port, timeouts={"client_header": "1s"}))
    off = len(H.read_text(s.error_log))
    with H.Client(s.port, timeout=5.0) as c:
        cport = cport_of(c)
        c.send(data)
        if shut:
            c.sock.shutdown(socket.SHUT_WR)
        try:
            got = c.wait_closed(4.0)
        except socket.timeout:
            pytest.fail("%s: sluice kept the connection open" % name)
        except ConnectionResetError:
            got = b""
    assert got == b"", "%s: sluice answered %r" % (name, got[:200])
    s.wait_error_log(r"127\.0\.0\.1:%d\b.*(%s)" % (cport, reason), timeout=3.0, start=off)
    # the worker keeps serving
    with H.Client(s.port) as c:
        c.send(GOOD + H.build_request("GET", "/after-" + name))
        r = c.read_response()
    assert r.status == 200, r
    be.wait_requests(1)
    assert [q.target for q in be.all_requests()] == ["/after-" + name], "bad input reached the backend"
    assert req_by_path(be, "/after-" + name).header_all("x-forwarded-for") == ["192.0.2.10"]
    assert len(s.worker_pids()) == 1


@pytest.mark.parametrize("hdr", [P.v1("192.0.2.10", "192.0.2.20", 1, 2), GOOD,
                                 P.v2(crc=True)], ids=["v1", "v2", "v2-crc"])
def test_proxy_header_from_untrusted_peer_refused(sluice, recorder, hdr):
    be = recorder()
    s = sluice(cfg_in(be.port, accept=("10.0.0.0/8",)))
    off = len(H.read_text(s.error_log))
    with H.Client(s.port) as c:
        cport = cport_of(c)
        c.send(hdr + H.build_request("GET", "/spoof"))
        got = c.wait_closed(4.0)
    assert got == b"", got[:200]
    s.wait_error_log(r"127\.0\.0\.1:%d\b.*outside accept_proxy_from" % cport, start=off)
    # the same client, a normal request: served, with its own address
    with H.Client(s.port) as c:
        cport = cport_of(c)
        r = c.request("GET", "/direct")
        assert r.status == 200
        assert c.request("GET", "/direct-2").status == 200
    assert [q.target for q in be.all_requests()] == ["/direct", "/direct-2"]
    assert req_by_path(be, "/direct").header_all("x-forwarded-for") == ["127.0.0.1"]
    e = access_for(s, "/direct")
    assert (e["client"], e["cport"]) == ("127.0.0.1", str(cport))


def test_mixed_tls_listener_direct_and_balanced(sluice, recorder, id_pki):
    """One TLS listener for a balancer (10.0.0.0/8, must send the header)
    and direct clients (everyone else: a TLS ClientHello is served); a peer
    inside accept_proxy_from that starts the handshake without a header is
    closed and logged."""
    pki = id_pki
    be = recorder()
    s = sluice(cfg_in(be.port, accept=("10.0.0.0/8",), tls=tls_cfg(pki, client_auth=False)))
    with P.TlsClient(s.port, P.cctx(), sni="a.test") as c:
        assert c.request("GET", "/direct-tls").status == 200
    assert req_by_path(be, "/direct-tls").header_all("x-forwarded-for") == ["127.0.0.1"]
    s2 = sluice(cfg_in(be.port, accept=("127.0.0.0/8",), tls=tls_cfg(pki, client_auth=False)))
    off = len(H.read_text(s2.error_log))
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with P.TlsClient(s2.port, P.cctx(), sni="a.test") as c:
            c.request("GET", "/no-header-tls")
    s2.wait_error_log(r"did not start with a PROXY", start=off)
    assert "/no-header-tls" not in [q.target for q in be.all_requests()]


def test_untrusted_peer_request_in_pieces_served(sluice, recorder):
    """From outside accept_proxy_from a request that starts like neither
    header is served even when it arrives one byte at a time ("P" could
    start "PROXY ": sluice must wait, then serve)."""
    be = recorder()
    s = sluice(cfg_in(be.port, accept=("10.0.0.0/8",)))
    with H.Client(s.port) as c:
        for b in b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi":
            c.send(bytes([b]))
            time.sleep(0.002)
        r = c.read_response()
    assert r.status == 200
    q = req_by_path(be, "/p")
    assert q.method == "POST" and q.body == b"hi"
