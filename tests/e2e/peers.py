"""Real PROXY-protocol receivers for the identity tests: HAProxy (`bind ...
accept-proxy`, HTTP mode) and nginx (`listen ... proxy_protocol`), each run
in the foreground on a free port with its own config and log files in the
test's directory, tracked by PID and killed on teardown.

Also the Python side of the PROXY protocol, written independently of
sluice's C code from the spec (haproxy.org/download/2.9/doc/proxy-protocol.txt):
a CRC-32C, a v1/v2 parser and a v2 builder, and a RecordingBackend handler
that takes the header off each connection before the HTTP requests.
"""

import os
import shutil
import socket
import struct
import subprocess

import pytest

import harness as H

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.access("/usr/sbin/haproxy", os.X_OK) else None)
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)

V2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"

PP2_TYPE_ALPN = 0x01
PP2_TYPE_AUTHORITY = 0x02
PP2_TYPE_CRC32C = 0x03
PP2_TYPE_NOOP = 0x04
PP2_TYPE_UNIQUE_ID = 0x05
PP2_TYPE_SSL = 0x20
PP2_SUBTYPE_SSL_VERSION = 0x21
PP2_SUBTYPE_SSL_CN = 0x22
PP2_SUBTYPE_SSL_CIPHER = 0x23
PP2_SUBTYPE_SSL_SIG_ALG = 0x24
PP2_SUBTYPE_SSL_KEY_ALG = 0x25


# --------------------------------------------------------------------------
# CRC-32C (Castagnoli), reflected polynomial 0x82F63B78

def _crc_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_CRC_TABLE = _crc_table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the standard check value


# --------------------------------------------------------------------------
# parsing

class PPHeader:
    """A parsed PROXY header. For v2: ver_cmd, fam, addresses, ports,
    tlvs = [(type, value_bytes)] in order, and the raw bytes."""

    def __init__(self):
        self.version = None
        self.raw = b""
        self.command = None     # "PROXY" / "LOCAL" (v2), "TCP4"/"TCP6"/"UNKNOWN" (v1)
        self.ver_cmd = None
        self.fam = None
        self.length = None
        self.src = self.dst = None
        self.sport = self.dport = None
        self.tlvs = []

    def tlv(self, t):
        vals = [v for k, v in self.tlvs if k == t]
        assert len(vals) <= 1, "TLV 0x%02x sent %d times" % (t, len(vals))
        return vals[0] if vals else None

    def tlv_types(self):
        return [k for k, _ in self.tlvs]

    def ssl(self):
        """The SSL TLV decoded: dict(client=, verify=, subs=[(type, bytes)])."""
        v = self.tlv(PP2_TYPE_SSL)
        if v is None:
            return None
        assert len(v) >= 5, v
        client = v[0]
        verify = struct.unpack("!I", v[1:5])[0]
        return dict(client=client, verify=verify, subs=parse_tlvs(v[5:]))

    def __repr__(self):
        return "<PP v%s %s %s:%s -> %s:%s tlvs=%r>" % (self.version, self.command, self.src, self.sport,
                                                      self.dst, self.dport, self.tlvs)


def parse_tlvs(b):
    out = []
    i = 0
    while i < len(b):
        assert len(b) - i >= 3, "truncated TLV header at %d in %r" % (i, b)
        t = b[i]
        n = struct.unpack("!H", b[i + 1:i + 3])[0]
        assert i + 3 + n <= len(b), "TLV 0x%02x overflows: %d bytes at %d of %d" % (t, n, i, len(b))
        out.append((t, bytes(b[i + 3:i + 3 + n])))
        i += 3 + n
    return out


def parse_v1(line):
    """LINE: the v1 header including CRLF."""
    assert line.startswith(b"PROXY ") and line.endswith(b"\r\n"), line
    h = PPHeader()
    h.version = 1
    h.raw = bytes(line)
    f = line[6:-2].decode("ascii").split(" ")
    h.command = f[0]
    if f[0] != "UNKNOWN":
        assert len(f) == 5, line
        h.src, h.dst = f[1], f[2]
        h.sport, h.dport = int(f[3]), int(f[4])
    return h


def parse_v2(b):
    """B: at least the whole v2 header; parses exactly one header."""
    assert b[:12] == V2_SIG, b[:16]
    h = PPHeader()
    h.version = 2
    h.ver_cmd, h.fam = b[12], b[13]
    h.length = struct.unpack("!H", b[14:16])[0]
    assert len(b) >= 16 + h.length
    h.raw = bytes(b[:16 + h.length])
    body = h.raw[16:]
    h.command = {0x20: "LOCAL", 0x21: "PROXY"}.get(h.ver_cmd, "0x%02x" % h.ver_cmd)
    if h.fam == 0x11:
        assert len(body) >= 12
        h.src = socket.inet_ntop(socket.AF_INET, body[0:4])
        h.dst = socket.inet_ntop(socket.AF_INET, body[4:8])
        h.sport, h.dport = struct.unpack("!HH", body[8:12])
        rest = body[12:]
    elif h.fam == 0x21:
        assert len(body) >= 36
        h.src = socket.inet_ntop(socket.AF_INET6, body[0:16])
        h.dst = socket.inet_ntop(socket.AF_INET6, body[16:32])
        h.sport, h.dport = struct.unpack("!HH", body[32:36])
        rest = body[36:]
    else:
        rest = body
    h.tlvs = parse_tlvs(rest)
    return h


def crc_ok(raw):
    """True when RAW (a v2 header with a CRC32C TLV) checks out: the CRC over
    the whole header with the checksum field zeroed."""
    h = parse_v2(raw)
    want = h.tlv(PP2_TYPE_CRC32C)
    assert want is not None and len(want) == 4
    at = crc_offset(raw)
    zeroed = raw[:at] + b"\0\0\0\0" + raw[at + 4:]
    return crc32c(zeroed) == struct.unpack("!I", want)[0]


def crc_offset(raw):
    """Byte offset of the CRC32C value inside the v2 header RAW."""
    fam = raw[13]
    i = 16 + {0x11: 12, 0x21: 36, 0x31: 216}.get(fam, 0)
    while i < len(raw):
        t = raw[i]
        n = struct.unpack("!H", raw[i + 1:i + 3])[0]
        if t == PP2_TYPE_CRC32C:
            return i + 3
        i += 3 + n
    raise AssertionError("no CRC32C TLV in %r" % raw)


def read_pp(st):
    """Read one PROXY header (v1 or v2) from harness Stream ST."""
    first = st.read_exact(1)
    if first == b"P":
        line = first + st.read_until(b"\r\n", limit=200)
        return parse_v1(line)
    rest = st.read_exact(15)
    hdr = first + rest
    n = struct.unpack("!H", hdr[14:16])[0]
    return parse_v2(hdr + st.read_exact(n))


# --------------------------------------------------------------------------
# building (for PROXY in)

def v1(src="192.0.2.10", dst="192.0.2.20", sport=40001, dport=443, proto="TCP4"):
    return ("PROXY %s %s %s %d %d\r\n" % (proto, src, dst, sport, dport)).encode()


def tlv(t, v):
    return struct.pack("!BH", t, len(v)) + v


def v2(src="192.0.2.10", dst="192.0.2.20", sport=40001, dport=443, command=0x21, fam=None,
       tlvs=b"", crc=False, length=None):
    """A v2 header. FAM defaults from the address family. With CRC a
    CRC32C TLV (computed over the result) is appended after TLVS. LENGTH
    overrides the length field (the body is left as is)."""
    if command == 0x20 and fam is None:
        fam = 0x00
        addrs = b""
    elif ":" in src:
        fam = 0x21 if fam is None else fam
        addrs = (socket.inet_pton(socket.AF_INET6, src) + socket.inet_pton(socket.AF_INET6, dst)
                 + struct.pack("!HH", sport, dport))
    else:
        fam = 0x11 if fam is None else fam
        addrs = (socket.inet_pton(socket.AF_INET, src) + socket.inet_pton(socket.AF_INET, dst)
                 + struct.pack("!HH", sport, dport))
    body = addrs + tlvs
    if crc:
        body += tlv(PP2_TYPE_CRC32C, b"\0\0\0\0")
    n = len(body) if length is None else length
    out = V2_SIG + bytes([command, fam]) + struct.pack("!H", n) + body
    if crc:
        c = crc32c(out)
        out = out[:-4] + struct.pack("!I", c)
    return out


# --------------------------------------------------------------------------
# a RecordingBackend handler for connections that start with a PROXY header

def pp_handler(conn):
    """Take the PROXY header off (conn.pp, a PPHeader; conn.pp_error if it
    did not parse), then answer every request with a keepalive 200 whose
    body names the connection and the request index."""
    try:
        conn.pp = read_pp(conn.st)
    except AssertionError as e:
        conn.pp_error = str(e)
        raise
    while True:
        conn.read_request()
        body = b"conn=%d req=%d" % (conn.index, len(conn.requests) - 1)
        conn.respond(body, headers=[("X-Conn", str(conn.index))])


# --------------------------------------------------------------------------
# HAProxy and nginx

class Peer:
    """A foreground process with its own files in DIR."""

    def __init__(self, binary, workdir, name):
        self.binary = binary
        self.dir = str(workdir)
        self.name = name
        self.port = H.free_port()
        self.proc = None
        self.out_path = os.path.join(self.dir, name + ".out")
        self.log_path = os.path.join(self.dir, name + ".log")
        self.conf_path = os.path.join(self.dir, name + ".conf")

    def _start(self, args, timeout=10.0):
        out = open(self.out_path, "ab")
        try:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, cwd=self.dir,
                                         start_new_session=True)
        finally:
            out.close()
        try:
            H.wait_port(self.port, timeout, proc=self.proc)
        except Exception as e:
            raise RuntimeError("%s did not start: %s\n%s" % (self.name, e, H.read_text(self.out_path)[-3000:]))
        return self

    def log_lines(self):
        return H.read_text(self.log_path).splitlines()

    def wait_log(self, pattern, timeout=5.0):
        return H.wait_log(self.log_path, pattern, timeout)

    def stop(self):
        if self.proc is not None:
            H.kill_popen(self.proc, grace=3.0)
            self.proc = None


class HAProxy(Peer):
    """HAProxy 2.x in HTTP mode behind `bind ... accept-proxy`. Every request
    is answered 200 by `http-request return`; each is logged as one line:
    `PP ci=<%ci>:<%cp> fi=<%fi>:<%fp> auth=<fc_pp_authority> uid=<fc_pp_unique_id> path=<%HP> st=<%ST>`
    (raw format, to LOG_PATH: HAProxy writes to its stdout)."""

    FORMAT = ("PP ci=%ci:%cp fi=%fi:%fp auth=%[fc_pp_authority] uid=%[fc_pp_unique_id] "
              "path=%HP st=%ST")

    def __init__(self, workdir, name="haproxy"):
        super().__init__(HAPROXY, workdir, name)
        # HAProxy's "log stdout" goes to the process's stdout: keep it apart
        self.out_path = self.log_path

    def start(self):
        with open(self.conf_path, "w") as f:
            f.write("""global
    log stdout format raw local0 info
    pidfile %(dir)s/haproxy.pid
defaults
    mode http
    log global
    option dontlognull
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout http-request 10s
frontend fe
    bind 127.0.0.1:%(port)d accept-proxy
    log-format "%(fmt)s"
    http-request return status 200 content-type text/plain string "haproxy-ok"
""" % {"dir": self.dir, "port": self.port, "fmt": self.FORMAT})
        r = subprocess.run([self.binary, "-c", "-f", self.conf_path], capture_output=True,
                           text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError("haproxy -c rejects the config:\n%s%s" % (r.stdout, r.stderr))
        return self._start([self.binary, "-db", "-f", self.conf_path])

    def entries(self):
        """Parsed log lines: dicts with ci, cport, fi, fport, auth, uid, path, st."""
        import re
        rx = re.compile(r"^PP ci=(?P<ci>\S+):(?P<cport>\d+) fi=(?P<fi>\S+):(?P<fport>\d+) "
                        r"auth=(?P<auth>\S*) uid=(?P<uid>\S*) path=(?P<path>\S*) st=(?P<st>-?\d+)$")
        out = []
        for l in self.log_lines():
            m = rx.match(l.strip())
            if m:
                out.append(m.groupdict())
        return out

    def wait_entry(self, pred, timeout=5.0):
        def find():
            for e in self.entries():
                if pred(e):
                    return e
            return None
        try:
            return H.wait_for(find, timeout, what="haproxy log entry")
        except TimeoutError:
            raise TimeoutError("no matching haproxy log entry; log:\n%s"
                               % H.read_text(self.log_path)[-3000:])


class TcpBalancer(Peer):
    """HAProxy in TCP mode (a layer-4 balancer) over SERVERS, a list of
    (name, address, port, check_port): roundrobin, `send-proxy-v2` when
    SEND_PROXY, an HTTP check `GET /ready` every 100 ms on the server's
    address at CHECK_PORT (its port when None; CHECK_OPTS adds server
    options such as `check-send-proxy check-ssl verify none`), FALL failures
    to mark it down, 1 success to mark it up. Its log has one line per state change
    ("Server be/<name> is DOWN") and `conn srv=<name> bytes=<n>` per
    connection."""

    def __init__(self, workdir, servers, name="haproxy-tcp", send_proxy=False, fall=1, check_opts=""):
        super().__init__(HAPROXY, workdir, name)
        self.out_path = self.log_path  # HAProxy's "log stdout" is the process's stdout
        self.servers, self.send_proxy, self.fall = servers, send_proxy, fall
        self.check_opts = check_opts

    def start(self):
        lines = "".join("    server %s %s:%d check port %d\n" % (n, a, p, cp or p)
                        for n, a, p, cp in self.servers)
        with open(self.conf_path, "w") as f:
            f.write("""global
    log stdout format raw local0 info
defaults
    mode tcp
    log global
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    timeout check 1s
frontend fe
    bind 127.0.0.1:%(port)d
    log-format "conn srv=%%s bytes=%%B"
    default_backend be
backend be
    balance roundrobin
    option httpchk GET /ready
    http-check expect status 200
    default-server%(pp)s inter 100ms fall %(fall)d rise 1 %(opts)s
%(servers)s""" % {"port": self.port, "servers": lines, "fall": self.fall, "opts": self.check_opts,
                  "pp": " send-proxy-v2" if self.send_proxy else ""})
        r = subprocess.run([self.binary, "-c", "-f", self.conf_path], capture_output=True,
                           text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError("haproxy -c rejects the config:\n%s%s" % (r.stdout, r.stderr))
        return self._start([self.binary, "-db", "-f", self.conf_path])

    def state_changes(self, name):
        """UP/DOWN changes of server NAME, in order (each is printed twice,
        as a warning and as a log line: the log lines are counted)."""
        import re
        return re.findall(r"^Server be/%s is (UP|DOWN)" % re.escape(name), H.read_text(self.log_path), re.M)

    def state_reasons(self):
        """Every state change with HAProxy's reason (the check's status,
        how long it took), for a failing assertion's message."""
        import re
        return re.findall(r"^Server be/\S+ is (?:UP|DOWN), reason: [^.]*", H.read_text(self.log_path), re.M)

    def state(self, name):
        """UP or DOWN now: a server starts UP (HAProxy 2.6 has no init-state)."""
        return (self.state_changes(name) or ["UP"])[-1]

    def wait_state(self, name, state, timeout=10.0):
        H.wait_for(lambda: self.state(name) == state, timeout, what="haproxy: %s %s" % (name, state))


class Nginx(Peer):
    """nginx with `listen ... proxy_protocol`: every request is answered
    200; each is logged as `PP <$proxy_protocol_addr>:<$proxy_protocol_port>
    ra=<$remote_addr> uri=<$request_uri> conn=<$connection> n=<$connection_requests>
    ssl=<$ssl_protocol> sni=<$ssl_server_name>`. With SSL_CERT/SSL_KEY the
    listener is `ssl proxy_protocol` (the header comes before the TLS
    handshake)."""

    def __init__(self, workdir, name="nginx", ssl_cert=None, ssl_key=None):
        super().__init__(NGINX, workdir, name)
        self.ssl_cert, self.ssl_key = ssl_cert, ssl_key

    def start(self):
        ssl_conf = ""
        if self.ssl_cert:
            ssl_conf = "ssl_certificate %s; ssl_certificate_key %s;" % (self.ssl_cert, self.ssl_key)
        prefix = os.path.join(self.dir, self.name + "-prefix")
        os.makedirs(os.path.join(prefix, "logs"), exist_ok=True)
        with open(self.conf_path, "w") as f:
            f.write("""worker_processes 1;
pid %(prefix)s/nginx.pid;
error_log %(dir)s/%(name)s-error.log info;
events { worker_connections 256; }
http {
    client_body_temp_path %(prefix)s/body;
    proxy_temp_path %(prefix)s/proxy;
    fastcgi_temp_path %(prefix)s/fastcgi;
    uwsgi_temp_path %(prefix)s/uwsgi;
    scgi_temp_path %(prefix)s/scgi;
    keepalive_requests 100000;
    log_format pp 'PP $proxy_protocol_addr:$proxy_protocol_port ra=$remote_addr uri=$request_uri conn=$connection n=$connection_requests ssl=$ssl_protocol sni=$ssl_server_name';
    access_log %(log)s pp;
    server {
        listen 127.0.0.1:%(port)d %(ssl)s proxy_protocol;
        %(ssl_conf)s
        location / { return 200 "nginx-ok"; }
    }
}
""" % {"prefix": prefix, "dir": self.dir, "name": self.name, "log": self.log_path,
       "port": self.port, "ssl": "ssl" if self.ssl_cert else "", "ssl_conf": ssl_conf})
        self.error_path = os.path.join(self.dir, self.name + "-error.log")
        return self._start([self.binary, "-p", prefix, "-c", self.conf_path, "-g", "daemon off;"])

    def entries(self):
        import re
        rx = re.compile(r"^PP (?P<addr>\S*):(?P<port>\S*) ra=(?P<ra>\S+) uri=(?P<uri>\S+) "
                        r"conn=(?P<conn>\d+) n=(?P<n>\d+) ssl=(?P<ssl>\S+) sni=(?P<sni>\S+)$")
        return [m.groupdict() for m in (rx.match(l.strip()) for l in self.log_lines()) if m]

    def wait_entry(self, pred, timeout=5.0):
        def find():
            for e in self.entries():
                if pred(e):
                    return e
            return None
        try:
            return H.wait_for(find, timeout, what="nginx log entry")
        except TimeoutError:
            raise TimeoutError("no matching nginx log entry; log:\n%s\nerror log:\n%s"
                               % (H.read_text(self.log_path)[-3000:],
                                  H.read_text(self.error_path)[-3000:]))


@pytest.fixture
def haproxy(tmp_path):
    """Factory: haproxy() -> started HAProxy (skips when not installed)."""
    if HAPROXY is None:
        pytest.skip("haproxy not installed")
    instances = []

    def make(name=None):
        p = HAProxy(tmp_path, name or "haproxy%d" % len(instances))
        instances.append(p)
        return p.start()
    yield make
    for p in instances:
        p.stop()


@pytest.fixture
def nginx(tmp_path):
    """Factory: nginx() -> started Nginx (skips when not installed)."""
    if NGINX is None:
        pytest.skip("nginx not installed")
    instances = []

    def make(name=None, **kw):
        p = Nginx(tmp_path, name or "nginx%d" % len(instances), **kw)
        instances.append(p)
        return p.start()
    yield make
    for p in instances:
        p.stop()


# --------------------------------------------------------------------------
# TLS clients (optionally after a PROXY header sent in the clear)

def cctx(cert=None, alpn=None, min_v=None, max_v=None):
    """A client SSLContext that accepts any server certificate."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.options |= getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", 0)
    if cert is not None:
        ctx.load_cert_chain(cert.cert, cert.key)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    if min_v:
        ctx.minimum_version = min_v
    if max_v:
        ctx.maximum_version = max_v
    return ctx


class TlsClient(H.Client):
    """H.Client over TLS. PREFIX (e.g. a PROXY header) is written on the
    TCP connection before the handshake. SOURCE binds the local address."""

    def __init__(self, port, ctx=None, sni=None, host=H.HOST, source=None, prefix=b"",
                 session=None, timeout=H.DEFAULT_TIMEOUT):
        raw = socket.create_connection((host, port), timeout=timeout, source_address=source)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cport = raw.getsockname()[1]
        try:
            if prefix:
                raw.sendall(prefix)
            self.sock = (ctx or cctx()).wrap_socket(raw, server_hostname=sni, session=session)
        except BaseException:
            raw.close()
            raise
        self.sock.settimeout(timeout)
        self.st = H.Stream(self.sock)
