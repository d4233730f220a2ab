#!/usr/bin/env python3
"""Capture real PROXY protocol headers from HAProxy for test_proxy_proto.c.

Not run by `make test`: the bytes it printed once are pasted into
tests/unit/test_proxy_proto.c as the hap_* golden arrays, so the unit test
needs neither haproxy nor openssl. Rerun it (Debian haproxy 2.6 in PATH or
at /usr/sbin/haproxy, openssl CLI) to refresh them; the ports and the TLS
cipher it observes go into the test along with the bytes.

`--spec` instead prints the spec-derived golden arrays (the g_* arrays of
the test) from the independent encoder below.

Each case: a python socket server plays the backend, haproxy listens on a
free loopback port with `server s <backend> send-proxy[-v2] ...`, a client
connects through haproxy, and the server records exactly the bytes of the
PROXY header it received (v2: 16 + length; v1: up to CRLF).

It also re-checks every captured v2 header independently of sluice: the
CRC32C TLV (bitwise Castagnoli below, checked against the RFC 3720 value
0xE3069283 for "123456789") and the TLV framing.
"""
import ipaddress
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time

SIG = b"\r\n\r\n\x00\r\nQUIT\n"
UNIQUE_ID = "sluice-golden-0001"


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def free_port(family=socket.AF_INET, host="127.0.0.1"):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.bind((host, 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Backend:
    """Accepts connections, records each one's PROXY header."""

    def __init__(self, v1):
        self.v1 = v1
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.headers = []
        self.cond = threading.Condition()
        threading.Thread(target=self.run, daemon=True).start()

    def recv_exact(self, c, n):
        b = b""
        while len(b) < n:
            d = c.recv(n - len(b))
            if not d:
                raise EOFError("short header: %r" % b)
            b += d
        return b

    def run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                if self.v1:
                    h = b""
                    while not h.endswith(b"\r\n"):
                        h += self.recv_exact(c, 1)
                else:
                    h = self.recv_exact(c, 16)
                    assert h[:12] == SIG, h
                    h += self.recv_exact(c, struct.unpack("!H", h[14:16])[0])
                with self.cond:
                    self.headers.append(h)
                    self.cond.notify_all()
            except Exception as e:  # noqa: BLE001 - report, keep serving
                print("backend:", e, file=sys.stderr)
            finally:
                c.close()

    def wait(self, n, deadline):
        with self.cond:
            while len(self.headers) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no PROXY header reached the backend")
                self.cond.wait(left)
            return self.headers[n - 1]


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def make_pki(d):
    """A CA, a server certificate (RSA 2048, SHA-256) and a client one (CN client.example)."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "2",
            "-subj", "/CN=golden-ca", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    for name, cn in (("srv", "example.com"), ("cli", "client.example")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-sha256", "-subj", "/CN=" + cn,
                "-keyout", name + ".key", "-out", name + ".csr", cwd=d)
        openssl("x509", "-req", "-sha256", "-days", "2", "-in", name + ".csr", "-CA", "ca.pem",
                "-CAkey", "ca.key", "-CAcreateserial", "-out", name + ".crt", cwd=d)
    with open(os.path.join(d, "srv.pem"), "w") as out:
        for f in ("srv.crt", "srv.key"):
            out.write(open(os.path.join(d, f)).read())


def connect_until_up(family, addr, deadline, wrap=None):
    """Connect (and handshake) through haproxy, polling until it listens."""
    while True:
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(2)
        try:
            s.connect(addr)
            if wrap:
                s = wrap(s)
            return s
        except (ConnectionRefusedError, ssl.SSLError, ConnectionResetError):
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def c_array(name, b):
    rows = []
    for i in range(0, len(b), 12):
        rows.append("\t" + " ".join("0x%02x," % x for x in b[i:i + 12]))
    return "static const uint8_t %s[%d] = {\n%s\n};" % (name, len(b), "\n".join(rows))


def walk_tlvs(b, off, end):
    out = []
    while off < end:
        t, ln = b[off], struct.unpack("!H", b[off + 1:off + 3])[0]
        out.append((t, b[off + 3:off + 3 + ln]))
        off += 3 + ln
    assert off == end, "TLVs overflow the header"
    return out


def describe_v2(b):
    alen = {0x11: 12, 0x21: 36}.get(b[13], 0)
    tlvs = walk_tlvs(b, 16 + alen, len(b))
    for t, v in tlvs:
        line = "  TLV 0x%02x len %d: %r" % (t, len(v), v)
        if t == 0x03:
            z = bytearray(b)
            i = b.index(bytes([3, 0, 4]) + v, 16 + alen)
            z[i + 3:i + 7] = b"\0\0\0\0"
            ok = crc32c(bytes(z)) == struct.unpack("!I", v)[0]
            line += "  (crc32c %s)" % ("verifies" if ok else "DOES NOT VERIFY")
            assert ok
        if t == 0x20:
            line += "  client=0x%02x verify=%d" % (v[0], struct.unpack("!I", v[1:5])[0])
            for st, sv in walk_tlvs(v, 5, len(v)):
                line += "\n      sub 0x%02x: %r" % (st, sv)
        print(line)


# ---- an independent encoder, written from the spec, used two ways ----
# 1. In HAProxy's TLV order it must reproduce every captured header byte for
#    byte (checked below): that validates this encoder against real bytes.
# 2. In sluice's order it prints the spec golden arrays of the unit test and
#    the "sluice order" twin of each capture.
ORDER_SLUICE = ("alpn", "authority", "unique_id", "ssl", "crc32c")
SSL_SLUICE = ("version", "cn", "cipher", "sig_alg", "key_alg")
ORDER_HAPROXY = ("crc32c", "alpn", "authority", "unique_id", "ssl")
SSL_HAPROXY = ("version", "cn", "key_alg", "sig_alg", "cipher")
TLV_TYPE = {"alpn": 0x01, "authority": 0x02, "crc32c": 0x03, "unique_id": 0x05, "ssl": 0x20}
SUB_TYPE = {"version": 0x21, "cn": 0x22, "cipher": 0x23, "sig_alg": 0x24, "key_alg": 0x25}


def c_escape(b):
    return "".join(chr(x) if 32 <= x < 127 and x not in b'"\\' else "\\x%02x" % x for x in b)


def _ip(text):
    return ipaddress.ip_address(text)


def encode_v2(src, dst, tlv, order=ORDER_SLUICE, ssl_order=SSL_SLUICE):
    """src/dst: (ip text, port) or None for LOCAL. tlv: name -> bytes, True
    (crc32c) or a dict (ssl). Returns [(bytes, comment)] and the header."""
    parts = [(SIG, None)]
    if src is None:
        parts.append((b"\x20\x00", "v2 LOCAL, UNSPEC"))
        addr = []
    else:
        a, b = _ip(src[0]), _ip(dst[0])
        a4 = a.version == 4 or a.ipv4_mapped is not None
        b4 = b.version == 4 or b.ipv4_mapped is not None
        if a4 and b4:
            fam = b"\x21\x11", "v2 PROXY, TCP over IPv4"
            conv = lambda x: (x if x.version == 4 else x.ipv4_mapped).packed  # noqa: E731
        else:
            fam = b"\x21\x21", "v2 PROXY, TCP over IPv6"
            conv = lambda x: (x if x.version == 6 else  # noqa: E731
                              ipaddress.IPv6Address("::ffff:" + str(x))).packed
        parts.append(fam)
        def name(x, text):
            wire = ipaddress.ip_address(conv(x))
            if wire.version == 6 and wire.ipv4_mapped:
                wire = "::ffff:%s" % wire.ipv4_mapped
            return text if str(wire) == text else "%s as %s" % (text, wire)
        addr = [(conv(a), "src " + name(a, src[0])), (conv(b), "dst " + name(b, dst[0])),
                (struct.pack("!H", src[1]), "src port %d" % src[1]),
                (struct.pack("!H", dst[1]), "dst port %d" % dst[1])]
    body = list(addr)
    crc_at = None
    for name in order:
        v = tlv.get(name)
        if v is None or v == b"":
            continue
        if name == "crc32c":
            crc_at = sum(len(x) for x, _ in body)
            body.append((b"\x03\x00\x04\x00\x00\x00\x00", "CRC32C"))
            continue
        if name == "ssl":
            subs = []
            for sn in ssl_order:
                sv = v.get(sn)
                if sv:
                    subs.append((bytes([SUB_TYPE[sn]]) + struct.pack("!H", len(sv)) + sv,
                                 "  SSL %s \"%s\"" % (sn.upper(), c_escape(sv))))
            val = 5 + sum(len(x) for x, _ in subs)
            body.append((b"\x20" + struct.pack("!H", val), "SSL, %d bytes" % val))
            body.append((bytes([v["client"]]) + struct.pack("!I", v["verify"]),
                         "  client 0x%02x, verify %d" % (v["client"], v["verify"])))
            body += subs
            continue
        body.append((bytes([TLV_TYPE[name]]) + struct.pack("!H", len(v)) + v,
                     "%s \"%s\"" % (name.upper(), c_escape(v))))
    blen = sum(len(x) for x, _ in body)
    parts.append((struct.pack("!H", blen), "%d bytes follow" % blen))
    parts += body
    hdr = bytearray(b"".join(x for x, _ in parts))
    if crc_at is not None:
        off = 16 + crc_at
        crc = crc32c(bytes(hdr))
        hdr[off + 3:off + 7] = struct.pack("!I", crc)
        for i, (x, c) in enumerate(parts):
            if c == "CRC32C":
                parts[i] = (bytes(hdr[off:off + 7]), "CRC32C 0x%08x" % crc)
    return parts, bytes(hdr)


def c_fields(name, parts):
    """A C array, one field per line, commented."""
    lines = []
    for b, comment in parts:
        if b == SIG:
            lines.append("\tPP2_SIG_BYTES,")
            continue
        for i in range(0, len(b), 12):
            text = "\t" + " ".join("0x%02x," % x for x in b[i:i + 12])
            if i == 0 and comment:
                text = text.ljust(76) + " /* %s */" % comment.replace("*/", "* /")
            lines.append(text)
    return "static const uint8_t %s[] = {\n%s\n};" % (name, "\n".join(lines))


S4, D4 = ("192.0.2.1", 56324), ("198.51.100.2", 443)
S6, D6 = ("2001:db8::1", 56324), ("2001:db8:0:1::a", 443)
M4 = ("::ffff:192.0.2.1", 56324)
ALPN, AUTH, UID = b"http/1.1", b"example.com", b"uid\x00\xfe\xff42"
SSL_FULL = {"client": 0x07, "verify": 0, "version": b"TLSv1.3", "cn": b"client.example",
            "cipher": b"TLS_AES_128_GCM_SHA256", "sig_alg": b"ECDSA-SHA256", "key_alg": b"EC256"}
SSL_PART = {"client": 0x01, "verify": 0x01020304, "version": b"TLSv1.3", "cn": None,
            "cipher": b"TLS_AES_256_GCM_SHA384", "sig_alg": b"", "key_alg": b"RSA2048"}
SSL_BARE = {"client": 0x00, "verify": 0, "version": None, "cn": None,
            "cipher": None, "sig_alg": None, "key_alg": None}
ALL = {"alpn": ALPN, "authority": AUTH, "unique_id": UID, "ssl": SSL_FULL, "crc32c": True}
SPEC_CASES = [
    ("g_tcp4", S4, D4, {}),
    ("g_tcp6", S6, D6, {}),
    ("g_mixed", S4, D6, {}),
    ("g_mapped4", M4, D4, {}),
    ("g_local", None, None, {}),
    ("g_local_crc", None, None, {"crc32c": True}),
    ("g_alpn", S4, D4, {"alpn": ALPN}),
    ("g_authority", S4, D4, {"authority": AUTH}),
    ("g_unique_id", S4, D4, {"unique_id": UID}),
    ("g_ssl_full", S4, D4, {"ssl": SSL_FULL}),
    ("g_ssl_partial", S4, D4, {"ssl": SSL_PART}),
    ("g_ssl_bare", S4, D4, {"ssl": SSL_BARE}),
    ("g_crc32c", S4, D4, {"crc32c": True}),
    ("g_all4", S4, D4, ALL),
    ("g_all6", S6, D6, ALL),
]


def print_spec():
    for name, s, d, t in SPEC_CASES:
        parts, _ = encode_v2(s, d, t)
        print(c_fields(name, parts))
        print()


def hap_inputs(h, local, peer, tls):
    """The encoder inputs a capture corresponds to (its TLV values read back)."""
    alen = {0x11: 12, 0x21: 36}[h[13]]
    tl = dict(walk_tlvs(h, 16 + alen, len(h)))
    t = {"crc32c": True, "unique_id": tl[0x05]}
    if tls:
        t["alpn"], t["authority"] = tl[0x01], tl[0x02]
        v = tl[0x20]
        ssl_d = {"client": v[0], "verify": struct.unpack("!I", v[1:5])[0]}
        inv = {b: a for a, b in SUB_TYPE.items()}
        for st, sv in walk_tlvs(v, 5, len(v)):
            ssl_d[inv[st]] = sv
        t["ssl"] = ssl_d
    return (local[0], local[1]), (peer[0], peer[1]), t


def main():
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    print("/*", subprocess.run([haproxy, "-v"], capture_output=True, text=True).stdout.splitlines()[0], "*/")
    d = tempfile.mkdtemp(prefix="pp-golden-")
    make_pki(d)
    v2 = Backend(v1=False)
    v1 = Backend(v1=True)
    fe = {k: free_port(*a) for k, a in {
        "v2_4": (), "v2_6": (socket.AF_INET6, "::1"), "v1_4": (), "v1_6": (socket.AF_INET6, "::1"),
        "tls": ()}.items()}
    cfg = """
global
    maxconn 100
defaults
    mode tcp
    timeout connect 2s
    timeout client 5s
    timeout server 5s
frontend v2_4
    bind 127.0.0.1:{v2_4}
    unique-id-format {uid}
    default_backend b_v2
frontend v2_6
    bind [::1]:{v2_6}
    unique-id-format {uid}
    default_backend b_v2
frontend v1_4
    bind 127.0.0.1:{v1_4}
    default_backend b_v1
frontend v1_6
    bind [::1]:{v1_6}
    default_backend b_v1
frontend tls
    bind 127.0.0.1:{tls} ssl crt {d}/srv.pem ca-file {d}/ca.pem verify optional alpn http/1.1
    unique-id-format {uid}
    default_backend b_tls
backend b_v2
    server s 127.0.0.1:{p2} send-proxy-v2 proxy-v2-options crc32c,unique-id
backend b_v1
    server s 127.0.0.1:{p1} send-proxy
backend b_tls
    server s 127.0.0.1:{p2} send-proxy-v2 proxy-v2-options ssl,cert-cn,ssl-cipher,cert-sig,cert-key,authority,crc32c,unique-id
""".format(d=d, uid=UNIQUE_ID, p1=v1.port, p2=v2.port, **fe)
    with open(os.path.join(d, "haproxy.cfg"), "w") as f:
        f.write(cfg)
    hap = subprocess.Popen([haproxy, "-db", "-f", os.path.join(d, "haproxy.cfg")])
    try:
        deadline = time.monotonic() + 10
        n2 = 0
        cases = []

        def run(name, family, host, port, backend, wrap=None):
            nonlocal n2
            s = connect_until_up(family, (host, port), deadline, wrap)
            local, peer = s.getsockname(), s.getpeername()
            n2 += backend is v2
            idx = n2 if backend is v2 else len(v1.headers) + 1
            h = backend.wait(idx, deadline)
            s.close()
            cases.append((name, local, peer, h, s))

        run("hap_v2_tcp4", socket.AF_INET, "127.0.0.1", fe["v2_4"], v2)
        run("hap_v2_tcp6", socket.AF_INET6, "::1", fe["v2_6"], v2)
        run("hap_v1_tcp4", socket.AF_INET, "127.0.0.1", fe["v1_4"], v1)
        run("hap_v1_tcp6", socket.AF_INET6, "::1", fe["v1_6"], v1)

        ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.pem"))
        ctx.load_cert_chain(os.path.join(d, "cli.crt"), os.path.join(d, "cli.key"))
        ctx.set_alpn_protocols(["http/1.1"])
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2   # a cipher name both sides spell alike
        ctx.set_ciphers("ECDHE-RSA-AES128-GCM-SHA256")
        run("hap_v2_tls", socket.AF_INET, "127.0.0.1", fe["tls"], v2,
            wrap=lambda s: ctx.wrap_socket(s, server_hostname="example.com"))

        for name, local, peer, h, s in cases:
            print("\n/* %s: client %s port %d -> haproxy %s port %d */" % (
                name, local[0], local[1], peer[0], peer[1]))
            if h.startswith(b"PROXY"):
                print("/* %r */" % h)
                print(c_array(name, h))
                continue
            describe_v2(h)
            src, dst, t = hap_inputs(h, local, peer, name.endswith("tls"))
            parts, mine = encode_v2(src, dst, t, ORDER_HAPROXY, SSL_HAPROXY)
            if mine != h:
                print(c_array(name, h))
                raise SystemExit("the spec encoder in HAProxy's order differs from HAProxy")
            print("/* as received (commented by the spec encoder, which reproduces it) */")
            print(c_fields(name, parts))
            print("/* the same inputs in sluice's TLV order (spec encoder above, CRC recomputed) */")
            print(c_fields(name + "_sluice", encode_v2(src, dst, t)[0]))
    finally:
        hap.terminate()
        hap.wait()
        shutil.rmtree(d)


if __name__ == "__main__":
    if sys.argv[1:] == ["--spec"]:
        print_spec()
    else:
        main()
