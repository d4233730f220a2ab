"""TLS pieces shared by the bench/ scenarios that terminate TLS (tls.py,
churn.py, throughput.py).

Certificates: one ECDSA P-256 and one RSA-2048 self-signed certificate for
localhost, loaded by all three proxies from the same files. Config pieces:
the TLS part of a sluice listener, of an HAProxy bind line (plus its global
line), of an nginx server block, for one certificate and one TLS version
(min = max), with tickets and session caches off ("full": every handshake
is a full one) or on. Probe: HTTPS GETs with Python's ssl module, on new
connections, optionally offering the previous session. sluice binaries:
which TLS library a build uses (`sluice -V`), and the TLS failures sluice
logs at info level.
"""
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys

from benchlib import ROOT, cmd_out, log_lines_above_info, read_tail, stop_proxy

VERSIONS = {"1.2": "TLSv1.2", "1.3": "TLSv1.3"}
CERT_NAME = {"ecdsa": "ECDSA P-256", "rsa": "RSA-2048"}


# ---------------------------------------------------------------- certificates

def make_certs(d):
    """ECDSA P-256 and RSA-2048 self-signed certificates for localhost in
    d/certs. X.pem = certificate then key (HAProxy's crt), X.key = the key
    alone; all three proxies load these same files. Returns (certs dir,
    [the commands that made them])."""
    cd = os.path.join(d, "certs")
    os.makedirs(cd, exist_ok=True)
    cmds = []
    for name, newkey in (("ecdsa", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]),
                         ("rsa", ["-newkey", "rsa:2048"])):
        key, crt = os.path.join(cd, f"{name}.key"), os.path.join(cd, f"{name}.crt")
        cmd = (["openssl", "req", "-x509"] + newkey + ["-nodes", "-keyout", key, "-out", crt,
               "-days", "30", "-subj", "/CN=localhost",
               "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(cd, f"{name}.pem"), "w") as f:
            f.write(open(crt).read() + open(key).read())
        cmds.append(" ".join(cmd) + f"; cat {name}.crt {name}.key > {name}.pem")
    return cd, cmds


# ---------------------------------------------------------------- config pieces

def sluice_tls(certs, cert, ver, full):
    """The `tls:` mapping of a sluice listener (indented for listeners[0]).
    full: tickets off (the session cache is off in both cases)."""
    v = VERSIONS[ver]
    return f"""    tls:
      certificates:
        - cert: {certs}/{cert}.pem
          key: {certs}/{cert}.key
      min_version: {v}
      max_version: {v}
      tickets: {"off" if full else "on"}
      session_cache: 0
"""


def haproxy_bind_ssl(certs, cert, ver, full):
    """What follows `bind ADDR` for TLS (full: no tickets)."""
    v = VERSIONS[ver]
    return (f" ssl crt {certs}/{cert}.pem ssl-min-ver {v} ssl-max-ver {v}"
            + (" no-tls-tickets" if full else ""))


def haproxy_global_ssl(full):
    """Lines for HAProxy's global section (full: session cache off)."""
    return "    tune.ssl.cachesize 0\n" if full else ""


def nginx_ssl(certs, cert, ver, full, indent="        "):
    """ssl_* lines of an nginx server block (full: tickets and cache off)."""
    sess = (["ssl_session_tickets off;", "ssl_session_cache off;"] if full
            else ["ssl_session_tickets on;   # default; ssl_session_cache: default (none)"])
    lines = [f"ssl_certificate {certs}/{cert}.pem;", f"ssl_certificate_key {certs}/{cert}.key;",
             f"ssl_protocols {VERSIONS[ver]};"] + sess
    return "".join(f"{indent}{ln}\n" for ln in lines)


# ---------------------------------------------------------------- probe

def client_ctx(ver):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ctx.maximum_version = getattr(ssl.TLSVersion, VERSIONS[ver].replace(".", "_"))
    return ctx


def get(port, ver, path="/", session=None, ctx=None, timeout=5):
    """One GET on a new connection, reading until the server closes
    (Connection: close). ver "none": plain HTTP. Returns a dict: status
    (bytes, e.g. b"200"), headers ({lowercase name: value}), body, local_port,
    and for TLS version, cipher, reused, session."""
    if ver in VERSIONS and ctx is None:
        ctx = client_ctx(ver)
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    out = {"local_port": s.getsockname()[1]}
    ss = ctx.wrap_socket(s, server_hostname="localhost", session=session) if ctx else s
    try:
        ss.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        data = bytearray()
        while True:
            chunk = ss.recv(1 << 20)
            if not chunk:
                break
            data += chunk
        if ctx:
            out.update(version=ss.version(), cipher=ss.cipher()[0], reused=ss.session_reused,
                       session=ss.session)
    finally:
        ss.close()
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    out["status"] = (lines[0].split(b" ", 2)[1:2] or [b""])[0]
    out["head"] = head
    out["headers"] = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(b":")
        out["headers"][k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
    out["body"] = body
    return out


def probe(port, ver, tries=3, size=None, path="/"):
    """`tries` GETs, each on a new connection offering the previous
    connection's session (ver "none": plain HTTP). Every answer must be 200
    with a body of `size` bytes (when given). Returns (error or None, facts:
    version, cipher, reused / reuse_tries (TLS), and last: the last answer)."""
    ctx = client_ctx(ver) if ver in VERSIONS else None
    sess, reused, facts = None, [], {}
    for i in range(tries):
        try:
            r = get(port, ver, path, session=sess, ctx=ctx)
        except (OSError, ssl.SSLError) as e:
            return f"GET {path} failed: {e!r}", facts
        if ctx:
            if i == 0:
                facts.update(version=r["version"], cipher=r["cipher"])
            else:
                reused.append(r["reused"])
            sess = r["session"]
        facts["last"] = r
        if r["status"] != b"200" or (size is not None and len(r["body"]) != size):
            return f"GET {path} -> {r['head'][:60]!r}, {len(r['body'])} body bytes", facts
    if ctx:
        facts["reused"] = sum(reused)
        facts["reuse_tries"] = len(reused)
    return None, facts


# ---------------------------------------------------------------- sluice binaries

# The TLS libraries sluice builds with (make TLS=<key>; awslc is the default):
# the name `sluice -V` gives each on its "tls" line, and the variable that
# names its binary. A binary whose "tls" line names neither (an old build
# against another library) belongs to no target.
SLUICE_LIBS = {"awslc": ("AWS-LC", "SLUICE_AWSLC"), "openssl": ("OpenSSL", "SLUICE_OPENSSL")}
LIB_NAME = {lib: name for lib, (name, _) in SLUICE_LIBS.items()}


def sluice_lib(path):
    """('awslc' | 'openssl' | None, the TLS line of `sluice -V`)."""
    v = cmd_out([path, "-V"])
    tls_line = next((ln for ln in v.splitlines() if ln[:4].lower() == "tls "), "")   # -V says "tls ..."
    lib = next((k for k, (name, _) in SLUICE_LIBS.items() if tls_line[4:].startswith(name)), None)
    return lib, tls_line[4:]


def find_sluice(prog, builds=("build", "build-openssl", "build-awslc")):
    """{'awslc': (path, TLS line), 'openssl': (...)}: SLUICE_AWSLC /
    SLUICE_OPENSSL if set, else the newest binary built with each library
    among `builds` (the Makefile puts the default library, AWS-LC, in build/
    and OpenSSL in build-openssl/; build-awslc/ is where AWS-LC went before
    it became the default, and counts when it holds the newer AWS-LC build)."""
    found = {}
    for lib, (_, var) in SLUICE_LIBS.items():
        path = os.environ.get(var)
        if path:
            got, tls_line = sluice_lib(path) if os.access(path, os.X_OK) else (None, "")
            if got != lib:
                sys.exit(f"{prog}: {var}={path} is not a sluice built with {lib}")
            found[lib] = (os.path.abspath(path), tls_line)
    cands = []
    for b in builds:
        path = os.path.join(ROOT, b, "sluice")
        if os.access(path, os.X_OK):
            lib, tls_line = sluice_lib(path)
            if lib and lib not in found:
                cands.append((os.path.getmtime(path), lib, path, tls_line))
    for _, lib, path, tls_line in sorted(cands, reverse=True):
        found.setdefault(lib, (os.path.abspath(path), tls_line))
    return found


def copy_sluice(src, d, name="sluice"):
    """Copy the sluice binary SRC to D/bin/NAME and run the copy: others may
    rebuild build*/ while a benchmark runs. Returns (copy, its TLS library,
    its TLS line)."""
    os.makedirs(os.path.join(d, "bin"), exist_ok=True)
    dst = os.path.join(d, "bin", name)
    shutil.copy2(src, dst)
    lib, tls_line = sluice_lib(dst)
    return dst, lib, tls_line


def sluice_tls_failures(text):
    """sluice logs handshake failures and TLS errors at info level."""
    return [ln for ln in text.splitlines()
            if re.search(r"TLS (handshake failed|error|handshake timeout)", ln)]


def stop_tls_proxy(kind, proxy, errlog, pos, r):
    """Stop a proxy after run R; note in r["problems"] a bad exit status and
    the TLS failures sluice logged since POS of ERRLOG (their count in
    r["tls_fail"]). Returns the log lines to report: those above info level,
    then the TLS failures."""
    bad_exit = stop_proxy(kind, proxy)
    if bad_exit:
        r["problems"].append(bad_exit)
    new = read_tail(errlog, pos)
    fails = sluice_tls_failures(new) if kind == "sluice" else []
    r["tls_fail"] = len(fails)
    if fails:
        r["problems"].append(f"{len(fails)} TLS failures in sluice's log, first: {fails[0].strip()}")
    return log_lines_above_info(new) + fails
