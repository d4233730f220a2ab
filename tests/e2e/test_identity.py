"""Identity headers for the app server (issue 4), checked line by line at
a recording backend: each `forward` header alone over plain and TLS, the
X-Forwarded-For modes, the defaults, IPv6 (RFC 7239 quoting), the Host
header passed unchanged, anti-spoofing for untrusted clients (every
identity header, odd letter cases, all switches on and all off), the
`Connection:` trick, and chains from trusted forwarders (kept and
appended to), also when the trusted address came in a PROXY header.
"""

import base64
import re
import socket

import pytest

import harness as H
import peers as P

CLIENT_IP = "127.0.0.2"          # clients bind here, so it differs from sluice's own 127.0.0.1

KEYS = ["x_forwarded_for", "x_forwarded_proto", "x_forwarded_host", "x_forwarded_port", "forwarded",
        "x_real_ip", "wl_proxy_ssl", "wl_proxy_client_ip", "wl_proxy_client_port",
        "wl_proxy_client_cert"]
ALL_OFF = {k: False for k in KEYS}
ALL_OFF["x_forwarded_for"] = "off"
ALL_ON = {k: True for k in KEYS}
ALL_ON["x_forwarded_for"] = "append"

IDENTITY_RE = re.compile(r"^(x-forwarded-.*|forwarded|x-real-ip|proxy-client-ip|wl-proxy-.*|x-weblogic-.*)$",
                         re.I)


def identity(q):
    """The identity headers the backend received, in order, as (name, value)."""
    return [(k, v) for k, v in q.headers if IDENTITY_RE.match(k)]


def ipv6_loopback():
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.bind(("::1", 0))
        s.close()
        return True
    except OSError:
        return False


def start(sluice, recorder, forward=None, listener=None, tls=None, listen_host=H.HOST):
    be = recorder()
    li = dict(listener or {})
    if tls:
        li["tls"] = tls
    s = sluice(H.make_config(H.free_port(), [H.server(be.port)], forward=forward, listener=li,
                             listen_host=listen_host))
    return s, be


def tls_cfg(pki):
    return {"certificates": [pki.ecdsa.entry()], "client_auth": "optional",
            "client_ca": pki.client_ca.cert}


def client(s, tls, pki=None, source=CLIENT_IP, cert=True, host=H.HOST):
    src = (source, 0) if source else None
    if tls:
        return P.TlsClient(s.port, P.cctx(cert=pki.client if cert else None), sni="a.test", source=src,
                           host=host)
    return H.Client(s.port, source=src, host=host)


def cport(c):
    return c.sock.getsockname()[1]


def one_request(s, be, tls=False, pki=None, path="/", headers=None, host="example.com:8443",
                cert=True, source=CLIENT_IP):
    """Send one request; return (backend Request, client port)."""
    with client(s, tls, pki, source=source, cert=cert) as c:
        p = cport(c)
        r = c.request("GET", path, headers=headers, host=host)
        assert r.status == 200, r
    qs = be.wait_requests(1)
    q = [x for x in be.all_requests() if x.target == path][-1]
    return q, p


def expected(forward, *, tls, ip, cport, lport, host, der=None):
    """sluice's own identity headers for FORWARD (a full mapping)."""
    out = []
    proto = "https" if tls else "http"
    if forward["x_forwarded_for"] in ("append", "replace"):
        out.append(("X-Forwarded-For", ip))
    if forward["forwarded"]:
        fh = host if re.fullmatch(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+", host) else '"%s"' % host
        fip = '"[%s]"' % ip if ":" in ip else ip
        out.append(("Forwarded", "for=%s;proto=%s;host=%s" % (fip, proto, fh)))
    if forward["x_forwarded_proto"]:
        out.append(("X-Forwarded-Proto", proto))
    if forward["x_forwarded_host"]:
        out.append(("X-Forwarded-Host", host))
    if forward["x_forwarded_port"]:
        out.append(("X-Forwarded-Port", str(lport)))
    if forward["x_real_ip"]:
        out.append(("X-Real-IP", ip))
    if forward["wl_proxy_ssl"]:
        out.append(("WL-Proxy-SSL", "true" if tls else "false"))
    if forward["wl_proxy_client_ip"]:
        out.append(("WL-Proxy-Client-IP", ip))
    if forward["wl_proxy_client_port"]:
        out.append(("WL-Proxy-Client-Port", str(cport)))
    if forward["wl_proxy_client_cert"] and tls and der is not None:
        out.append(("WL-Proxy-Client-Cert", base64.b64encode(der).decode()))
    return out


def assert_identity(q, want):
    """Exactly WANT among the identity headers, each as the exact line in
    the request head, after all of the client's headers and in the order
    of docs/client-identity.md's table (the order expected() builds)."""
    got = identity(q)
    assert sorted(got) == sorted(want), "identity headers:\n got  %r\n want %r" % (got, want)
    for k, v in want:
        assert ("\r\n%s: %s\r\n" % (k, v)).encode() in q.head, (k, v, q.head)
    if want:
        tail = q.headers[-len(want):]
        assert tail == want, "sluice's headers are not last, in table order: %r" % q.headers


# --------------------------------------------------------------------------
# each header alone, plain and TLS

@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("key", KEYS)
def test_each_forward_header(sluice, recorder, id_pki, key, tls):
    fwd = dict(ALL_OFF)
    fwd[key] = "append" if key == "x_forwarded_for" else True
    s, be = start(sluice, recorder, forward=fwd, tls=tls_cfg(id_pki) if tls else None)
    q, p = one_request(s, be, tls, id_pki, path="/each-" + key)
    want = expected(fwd, tls=tls, ip=CLIENT_IP, cport=p, lport=s.port, host="example.com:8443",
                    der=id_pki.client.der())
    if key == "wl_proxy_client_cert" and not tls:
        assert want == []
    else:
        assert len(want) == 1, want
    assert_identity(q, want)
    assert q.header_all("host") == ["example.com:8443"]


def test_wl_proxy_client_cert_is_base64_der(sluice, recorder, id_pki):
    """Decoded, the header is byte for byte the DER of the certificate the
    client presented; without a client certificate it is absent."""
    fwd = dict(ALL_OFF, wl_proxy_client_cert=True, wl_proxy_ssl=True)
    s, be = start(sluice, recorder, forward=fwd, tls=tls_cfg(id_pki))
    q, _ = one_request(s, be, True, id_pki, path="/cc")
    (v,) = q.header_all("wl-proxy-client-cert")
    assert base64.b64decode(v, validate=True) == id_pki.client.der()
    assert q.header_all("wl-proxy-ssl") == ["true"]
    q, _ = one_request(s, be, True, id_pki, path="/no-cc", cert=False)
    assert q.header_all("wl-proxy-client-cert") == []
    assert_identity(q, [("WL-Proxy-SSL", "true")])


def test_wl_proxy_client_cert_not_sent_for_unverified_cert(sluice, recorder, id_pki):
    """client_auth optional and a certificate from another CA: the handshake
    completes, but the unverified certificate is not passed on."""
    fwd = dict(ALL_OFF, wl_proxy_client_cert=True, wl_proxy_ssl=True)
    s, be = start(sluice, recorder, forward=fwd, tls=tls_cfg(id_pki))
    with P.TlsClient(s.port, P.cctx(cert=id_pki.rogue), sni="a.test", source=(CLIENT_IP, 0)) as c:
        assert c.request("GET", "/rogue").status == 200
    be.wait_requests(1)
    q = be.all_requests()[0]
    assert_identity(q, [("WL-Proxy-SSL", "true")])
    e = s.wait_access_entry(lambda e: e["target"] == "/rogue")
    assert '"/CN=rogue"' in e["tls_rest"], e


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_all_headers_together(sluice, recorder, id_pki, tls):
    s, be = start(sluice, recorder, forward=ALL_ON, tls=tls_cfg(id_pki) if tls else None)
    q, p = one_request(s, be, tls, id_pki, path="/all", host="example.com")
    assert_identity(q, expected(ALL_ON, tls=tls, ip=CLIENT_IP, cport=p, lport=s.port, host="example.com",
                                der=id_pki.client.der()))
    assert q.header_all("forwarded") == ["for=%s;proto=%s;host=example.com"
                                         % (CLIENT_IP, "https" if tls else "http")]


def test_defaults_without_forward_mapping(sluice, recorder, id_pki):
    """No `forward`: exactly X-Forwarded-For and X-Forwarded-Proto."""
    s, be = start(sluice, recorder)
    q, _ = one_request(s, be, path="/dflt")
    assert_identity(q, [("X-Forwarded-For", CLIENT_IP), ("X-Forwarded-Proto", "http")])
    s2, be2 = start(sluice, recorder, tls=tls_cfg(id_pki))
    q, _ = one_request(s2, be2, True, id_pki, path="/dflt-tls")
    assert_identity(q, [("X-Forwarded-For", CLIENT_IP), ("X-Forwarded-Proto", "https")])
    s3, be3 = start(sluice, recorder, forward={})
    q, _ = one_request(s3, be3, path="/empty-map")
    assert_identity(q, [("X-Forwarded-For", CLIENT_IP), ("X-Forwarded-Proto", "http")])


# --------------------------------------------------------------------------
# X-Forwarded-For modes

XFF_CASES = [
    # mode, trusted, incoming XFF lines, expected XFF lines at the backend
    ("append", False, ["203.0.113.7"], [CLIENT_IP]),
    ("replace", False, ["203.0.113.7"], [CLIENT_IP]),
    ("off", False, ["203.0.113.7"], []),
    ("append", True, ["203.0.113.7"], ["203.0.113.7, " + CLIENT_IP]),
    ("replace", True, ["203.0.113.7"], [CLIENT_IP]),
    ("off", True, ["203.0.113.7"], ["203.0.113.7"]),
    ("append", True, ["203.0.113.7", "198.51.100.1, 198.51.100.2"],
     ["203.0.113.7, 198.51.100.1, 198.51.100.2, " + CLIENT_IP]),
    ("append", True, [], [CLIENT_IP]),
    ("append", False, [], [CLIENT_IP]),
]


@pytest.mark.parametrize("mode,trusted,incoming,want", XFF_CASES,
                         ids=["%s-%s-%d" % (m, "trusted" if t else "untrusted", len(i))
                              for m, t, i, _ in XFF_CASES])
def test_x_forwarded_for_modes(sluice, recorder, mode, trusted, incoming, want):
    li = {"trusted_forwarders": ["127.0.0.0/8"]} if trusted else None
    s, be = start(sluice, recorder, forward={"x_forwarded_for": mode}, listener=li)
    q, _ = one_request(s, be, path="/xff", headers=[("X-Forwarded-For", v) for v in incoming])
    assert q.header_all("x-forwarded-for") == want, q.headers


# --------------------------------------------------------------------------
# IPv6 clients

@pytest.mark.skipif(not ipv6_loopback(), reason="IPv6 loopback (::1) is not available here")
def test_ipv6_client_headers(sluice, recorder):
    s, be = start(sluice, recorder, forward=ALL_ON, listen_host="[::1]")
    with H.Client(s.port, host="::1") as c:
        p = cport(c)
        assert c.request("GET", "/six", host="example.com").status == 200
    be.wait_requests(1)
    q = be.all_requests()[0]
    assert_identity(q, expected(ALL_ON, tls=False, ip="::1", cport=p, lport=s.port, host="example.com"))
    assert q.header_all("forwarded") == ['for="[::1]";proto=http;host=example.com']
    assert q.header_all("wl-proxy-client-ip") == ["::1"]


# --------------------------------------------------------------------------
# Host

@pytest.mark.parametrize("host", ["example.com:8443", "Example.COM", "example.com", "[2001:db8::1]:8080",
                                  "10.1.2.3:80"])
def test_host_header_unchanged(sluice, recorder, host):
    fwd = dict(ALL_OFF, x_forwarded_host=True, forwarded=True)
    s, be = start(sluice, recorder, forward=fwd)
    q, p = one_request(s, be, path="/host", host=host)
    assert q.header_all("host") == [host]
    assert ("\r\nHost: %s\r\n" % host).encode() in q.head
    assert_identity(q, expected(fwd, tls=False, ip=CLIENT_IP, cport=p, lport=s.port, host=host))


# --------------------------------------------------------------------------
# spoofing

SPOOF = [
    ("x-FORWARDED-for", "6.6.6.1"),
    ("X-Forwarded-For", "6.6.6.2, 6.6.6.3"),
    ("X-Forwarded-Proto", "https"),
    ("x-forwarded-PROTO", "wss"),
    ("X-Forwarded-Host", "evil.test"),
    ("X-Forwarded-Port", "1"),
    ("X-Forwarded-Anything", "spoof-xfa"),
    ("x-forwarded-server", "spoof-xfs"),
    ("FORWARDED", "for=6.6.6.4;proto=https"),
    ("Forwarded", "for=6.6.6.5"),
    ("X-Real-IP", "6.6.6.6"),
    ("x-real-ip", "6.6.6.7"),
    ("Proxy-Client-IP", "6.6.6.8"),
    ("PROXY-CLIENT-IP", "6.6.6.9"),
    ("WL-Proxy-SSL", "true"),
    ("wl-proxy-client-ip", "6.6.6.10"),
    ("WL-PROXY-CLIENT-PORT", "1"),
    ("WL-Proxy-Client-Cert", "c3Bvb2Y="),
    ("WL-Proxy-Anything", "spoof-wla"),
    ("wl-proxy-client-keysize", "spoof-ks"),
    ("X-WebLogic-Anything", "spoof-xwa"),
    ("x-weblogic-KeepAliveSecs", "spoof-ka"),
    ("X-WEBLOGIC-REQUEST-CLUSTERINFO", "spoof-ci"),
]
KEEP = [("X-Custom", "keep-me"), ("X-Forwardedness", "not-an-identity-header"), ("Forwarded-Extra", "kept")]


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("switches", ["all-on", "all-off"])
def test_untrusted_identity_headers_removed(sluice, recorder, id_pki, tls, switches):
    fwd = ALL_ON if switches == "all-on" else ALL_OFF
    s, be = start(sluice, recorder, forward=fwd, tls=tls_cfg(id_pki) if tls else None)
    q, p = one_request(s, be, tls, id_pki, path="/spoof", headers=SPOOF + KEEP, host="example.com")
    want = expected(fwd, tls=tls, ip=CLIENT_IP, cport=p, lport=s.port, host="example.com",
                    der=id_pki.client.der())
    assert_identity(q, want)
    # sluice's own identity lines were checked exactly just above; the
    # spoofed values must be nowhere else (a random certificate's base64
    # may well contain "wss" by chance)
    head = q.head.decode("latin-1").lower()
    for k, v in want:
        head = head.replace(("%s: %s\r\n" % (k, v)).lower(), "")
    for needle in ("6.6.6.", "evil.test", "spoof-", "c3bvb2y=", "wss"):
        assert needle not in head, (needle, q.head)
    for k, v in KEEP:
        assert q.header_all(k) == [v], (k, q.headers)


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_connection_header_cannot_remove_sluice_headers(sluice, recorder, id_pki, tls):
    s, be = start(sluice, recorder, forward=ALL_ON, tls=tls_cfg(id_pki) if tls else None)
    hdrs = [("Connection", "X-Forwarded-For, WL-Proxy-Client-IP"),
            ("X-Forwarded-For", "6.6.6.1"), ("WL-Proxy-Client-IP", "6.6.6.2")]
    q, p = one_request(s, be, tls, id_pki, path="/conn-trick", headers=hdrs, host="example.com")
    assert_identity(q, expected(ALL_ON, tls=tls, ip=CLIENT_IP, cport=p, lport=s.port, host="example.com",
                                der=id_pki.client.der()))
    # every sluice header named in a Connection header still arrives
    hdrs = [("Connection", "keep-alive, X-Forwarded-For, X-Forwarded-Proto, Forwarded, X-Real-IP, "
                           "WL-Proxy-SSL, WL-Proxy-Client-IP, WL-Proxy-Client-Port, X-Forwarded-Host, "
                           "X-Forwarded-Port, WL-Proxy-Client-Cert")]
    q, p = one_request(s, be, tls, id_pki, path="/conn-trick-all", headers=hdrs, host="example.com")
    assert_identity(q, expected(ALL_ON, tls=tls, ip=CLIENT_IP, cport=p, lport=s.port, host="example.com",
                                der=id_pki.client.der()))


def test_connection_header_from_trusted_forwarder(sluice, recorder):
    """A trusted forwarder naming X-Forwarded-For in Connection drops its
    own copy (hop-by-hop), never sluice's element."""
    s, be = start(sluice, recorder, forward={"x_forwarded_for": "append"},
                  listener={"trusted_forwarders": ["127.0.0.0/8"]})
    q, _ = one_request(s, be, path="/trusted-conn",
                       headers=[("Connection", "X-Forwarded-For"), ("X-Forwarded-For", "203.0.113.7")])
    xff = q.header_all("x-forwarded-for")
    assert len(xff) == 1 and xff[0].split(", ")[-1] == CLIENT_IP, xff


# --------------------------------------------------------------------------
# trusted forwarders

TRUSTED = {"trusted_forwarders": ["127.0.0.0/8"]}


def test_trusted_chain_appended(sluice, recorder):
    fwd = {"x_forwarded_for": "append", "x_forwarded_proto": True, "forwarded": True}
    s, be = start(sluice, recorder, forward=fwd, listener=TRUSTED)
    q, _ = one_request(s, be, path="/chain", host="example.com",
                       headers=[("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https"),
                                ("Forwarded", "for=203.0.113.7")])
    assert q.header_all("x-forwarded-for") == ["203.0.113.7, " + CLIENT_IP]
    # the forwarder's proto is kept and sluice does not add a second one
    assert q.header_all("x-forwarded-proto") == ["https"]
    assert q.header_all("forwarded") == ["for=203.0.113.7, for=%s;proto=http;host=example.com" % CLIENT_IP]
    assert q.header_all("host") == ["example.com"]


def test_trusted_chain_replace(sluice, recorder):
    s, be = start(sluice, recorder, forward={"x_forwarded_for": "replace"}, listener=TRUSTED)
    q, _ = one_request(s, be, path="/replace", headers=[("X-Forwarded-For", "203.0.113.7")])
    assert q.header_all("x-forwarded-for") == [CLIENT_IP]


def test_trusted_single_valued_headers_kept_as_sent(sluice, recorder, id_pki):
    """From a trusted forwarder every identity header it sent is passed on
    as sent, and sluice adds only the ones it did not send."""
    s, be = start(sluice, recorder, forward=ALL_ON, listener=TRUSTED)
    sent = [("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", "orig.test"), ("X-Forwarded-Port", "443"),
            ("X-Real-IP", "203.0.113.7"), ("WL-Proxy-SSL", "true"), ("WL-Proxy-Client-IP", "203.0.113.7"),
            ("X-Forwarded-Anything", "from-lb"), ("X-WebLogic-Thing", "from-lb"), ("Proxy-Client-IP", "203.0.113.7")]
    q, p = one_request(s, be, path="/kept", headers=sent, host="example.com")
    want = sent + [("X-Forwarded-For", CLIENT_IP),
                   ("Forwarded", "for=%s;proto=http;host=example.com" % CLIENT_IP),
                   ("WL-Proxy-Client-Port", str(p))]
    assert sorted(identity(q)) == sorted(want), identity(q)


def test_trusted_is_the_proxy_header_address(sluice, recorder):
    """trusted_forwarders is matched against the address from the PROXY
    header: a trusted one keeps its chain, another one is stripped."""
    li = {"accept_proxy_from": ["127.0.0.0/8"], "trusted_forwarders": ["192.0.2.0/24"]}
    s, be = start(sluice, recorder, forward={"x_forwarded_for": "append", "x_real_ip": True}, listener=li)
    for src, path in (("192.0.2.10", "/t-yes"), ("198.51.100.10", "/t-no")):
        with H.Client(s.port) as c:
            c.send(P.v2(src, "192.0.2.99", 40000, 443)
                   + H.build_request("GET", path, headers=[("X-Forwarded-For", "203.0.113.7"),
                                                           ("X-Real-IP", "203.0.113.7")]))
            assert c.read_response().status == 200
    be.wait_requests(2)
    qs = {q.target: q for q in be.all_requests()}
    assert qs["/t-yes"].header_all("x-forwarded-for") == ["203.0.113.7, 192.0.2.10"]
    assert qs["/t-yes"].header_all("x-real-ip") == ["203.0.113.7"]
    assert qs["/t-no"].header_all("x-forwarded-for") == ["198.51.100.10"]
    assert qs["/t-no"].header_all("x-real-ip") == ["198.51.100.10"]


def test_untrusted_network_not_trusted(sluice, recorder):
    """trusted_forwarders that does not contain the client: stripped."""
    s, be = start(sluice, recorder, forward={"x_forwarded_for": "append"},
                  listener={"trusted_forwarders": ["10.0.0.0/8", "127.0.0.1"]})
    q, _ = one_request(s, be, path="/not-trusted", headers=[("X-Forwarded-For", "203.0.113.7"),
                                                            ("X-Forwarded-Proto", "https")])
    assert q.header_all("x-forwarded-for") == [CLIENT_IP]
    assert q.header_all("x-forwarded-proto") == ["http"]


def test_every_request_on_a_keepalive_connection(sluice, recorder):
    """Spoofed headers are removed from every request of a keepalive
    connection, not only the first; sluice's are added to each."""
    s, be = start(sluice, recorder, forward=ALL_ON)
    with client(s, False) as c:
        p = cport(c)
        for i in range(4):
            r = c.request("GET", "/ka-%d" % i, headers=SPOOF if i % 2 else None, host="example.com")
            assert r.status == 200
    be.wait_requests(4)
    for q in be.all_requests():
        assert_identity(q, expected(ALL_ON, tls=False, ip=CLIENT_IP, cport=p, lport=s.port, host="example.com"))


# --------------------------------------------------------------------------
# identity headers spelled with underscores (issue 17): servers and
# CGI-style frameworks that read '_' as '-' take them for the real ones

SPOOF_UNDERSCORE = [
    ("X_Forwarded_For", "6.6.6.21"),
    ("X-Forwarded_For", "6.6.6.22"),
    ("x_forwarded-FOR", "6.6.6.23"),
    ("X_Real_IP", "6.6.6.24"),
    ("Proxy_Client_IP", "6.6.6.25"),
    ("X_Forwarded_Proto", "https"),
    ("X_Forwarded_Host", "evil.test"),
    ("X_Forwarded_Port", "1"),
    ("WL_Proxy_SSL", "true"),
    ("WL_Proxy_Client_IP", "6.6.6.26"),
    ("wl_proxy_client_port", "1"),
    ("WL_Proxy_Client_Cert", "c3Bvb2Y="),
    ("WL-Proxy_Client_Keysize", "spoof-ks"),
    ("X_WebLogic_KeepAliveSecs", "spoof-ka"),
    ("x_forwarded_server", "spoof-xfs"),
]
KEEP_UNDERSCORE = [("X_Custom_Thing", "keep-me"), ("Forwarded_Extra", "kept")]
UNDERSCORE_NEEDLES = ("6.6.6.", "evil.test", "spoof-", "c3bvb2y=")


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("switches", ["all-on", "all-off"])
def test_untrusted_underscore_identity_headers_removed(sluice, recorder, id_pki, tls, switches):
    """Every underscore (or mixed) spelling of an identity header is removed
    from an untrusted client, with the WL-Proxy-* switches on and off; other
    headers with underscores pass, and sluice's own headers are the usual
    ones, last."""
    fwd = ALL_ON if switches == "all-on" else ALL_OFF
    s, be = start(sluice, recorder, forward=fwd, tls=tls_cfg(id_pki) if tls else None)
    q, p = one_request(s, be, tls, id_pki, path="/underscores", headers=SPOOF_UNDERSCORE + KEEP_UNDERSCORE,
                       host="example.com")
    head = q.head.decode("latin-1").lower()
    for needle in UNDERSCORE_NEEDLES:
        assert needle not in head, (needle, q.head)
    for k, _ in SPOOF_UNDERSCORE:
        assert k.lower() + ":" not in head, (k, q.head)
    for k, v in KEEP_UNDERSCORE:
        assert q.header_all(k) == [v], (k, q.headers)
    assert_identity(q, expected(fwd, tls=tls, ip=CLIENT_IP, cport=p, lport=s.port, host="example.com",
                                der=id_pki.client.der()))


def test_trusted_forwarder_underscore_headers_kept_as_sent(sluice, recorder):
    """Positive control: from a trusted forwarder the same spellings pass as
    sent (as its dashed ones do), and are not merged into sluice's chain."""
    s, be = start(sluice, recorder, forward={"x_forwarded_for": "append", "wl_proxy_client_ip": True},
                  listener=TRUSTED)
    q, _ = one_request(s, be, path="/trusted-us", headers=SPOOF_UNDERSCORE)
    for k, v in SPOOF_UNDERSCORE:
        assert q.header_all(k) == [v], (k, q.headers)
    assert q.header_all("x-forwarded-for") == [CLIENT_IP]
    assert q.header_all("wl-proxy-client-ip") == [CLIENT_IP]


def test_headers_with_underscores_drop(sluice, recorder):
    """headers_with_underscores: drop (nginx's default) forwards the request
    without any header whose name has an underscore, from any client."""
    s, be = start(sluice, recorder, forward={"x_forwarded_for": "append"},
                  listener=dict(TRUSTED, headers_with_underscores="drop"))
    q, _ = one_request(s, be, path="/drop-us", headers=SPOOF_UNDERSCORE + KEEP_UNDERSCORE + [("X-Keep", "yes")])
    assert "_" not in "".join(k for k, _ in q.headers), q.headers
    assert q.header_all("x-keep") == ["yes"]
    assert q.header_all("x-forwarded-for") == [CLIENT_IP]
    assert access_reason(s, "/drop-us") == "ok"


def access_reason(s, path):
    return s.wait_access_entry(lambda e: e["target"] == path)["reason"]


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_headers_with_underscores_reject(sluice, recorder, id_pki, tls):
    """headers_with_underscores: reject answers 400, logs the reason and
    forwards nothing; the same connection's earlier request and the next
    connection are served."""
    s, be = start(sluice, recorder, listener={"headers_with_underscores": "reject"},
                  tls=tls_cfg(id_pki) if tls else None)
    with client(s, tls, id_pki) as c:
        assert c.request("GET", "/before", headers=[("X-Dashed", "fine")]).status == 200
        r = c.request("GET", "/reject-us", headers=[("X_Custom_Thing", "1")])
        assert r.status == 400, r
    assert access_reason(s, "/reject-us") == "underscore_in_header_name"
    with client(s, tls, id_pki) as c:
        assert c.request("GET", "/after").status == 200
    be.wait_requests(2)
    assert [q.target for q in be.all_requests()] == ["/before", "/after"]


def test_sluice_headers_last_after_reemitted_framing(sluice, recorder):
    """docs/client-identity.md: sluice's identity headers are the last lines
    of the head, also after the Transfer-Encoding it re-emits for a chunked
    body."""
    s, be = start(sluice, recorder, forward=ALL_ON)
    body = b"x" * 100
    with client(s, False) as c:
        p = cport(c)
        c.send(H.build_request("POST", "/chunked", headers=[("Transfer-Encoding", "chunked")],
                               host="example.com") + H.chunk_encode(body, chunk=30))
        assert c.read_response().status == 200
    q = be.wait_requests(1)[0]
    assert q.body == body
    want = expected(ALL_ON, tls=False, ip=CLIENT_IP, cport=p, lport=s.port, host="example.com")
    assert_identity(q, want)
    names = [k.lower() for k, _ in q.headers]
    assert names[:-len(want)] == ["host", "transfer-encoding"], q.headers
