"""End-to-end harness for sluice: processes, a scriptable recording origin,
raw-socket HTTP/1.1 clients and a minimal WebSocket codec.

Rules this file follows (see docs/conventions): ports come from the OS, every
process is tracked by PID and killed on teardown, readiness is polled with a
deadline, every socket operation has a timeout. Only the standard library.
"""

import base64
import glob
import hashlib
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import threading
import time

HOST = "127.0.0.1"
# make valgrind: sluice runs on memcheck, 10-50x slower; readiness and log
# waits stretch by SLOW (a test's own assertions do not change).
VALGRIND = os.environ.get("SLUICE_VALGRIND") == "1"
SLOW = 4.0 if VALGRIND else 1.0
DEFAULT_TIMEOUT = 5.0 * SLOW


# --------------------------------------------------------------------------
# small utilities

_HANDED_OUT = set()


def free_port():
    """A port the OS just handed out on 127.0.0.1 (bound, read, closed),
    never one this process was given before: the socket is closed before the
    caller binds the port, so two calls in a row (a listener and the admin
    port of one config) could otherwise get the same number."""
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        finally:
            s.close()
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def wait_for(pred, timeout=5.0, interval=0.02, what="condition"):
    """Poll PRED until it returns a truthy value; return it. Raise
    TimeoutError after TIMEOUT seconds."""
    timeout *= SLOW
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise TimeoutError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def port_accepts(port, host=HOST, timeout=0.2):
    try:
        s = socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return False
    s.close()
    return True


def wait_port(port, timeout=5.0, host=HOST, proc=None):
    """Connect loop until HOST:PORT accepts. If PROC (a Popen) exits first,
    raise at once."""
    def ok():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("process %d exited with %s before port %d was ready"
                               % (proc.pid, proc.returncode, port))
        return port_accepts(port, host)
    wait_for(ok, timeout, what="port %d to accept" % port)


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def pattern_bytes(n, seed=0):
    """N deterministic pseudo-random-looking bytes (fast)."""
    block = hashlib.sha256(b"sluice-%d" % seed).digest() * 64  # 2 KiB
    block = bytes((b + i) & 0xFF for i, b in enumerate(block))
    reps = n // len(block) + 1
    return (block * reps)[:n]


def children_of(pid):
    """PIDs whose parent is PID (scans /proc; /proc/PID/task/*/children is
    not available on every kernel)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                st = f.read().decode("ascii", "replace")
        except OSError:
            continue
        # comm may contain spaces/parens: fields after the last ')'
        rest = st[st.rfind(")") + 2:].split()
        if len(rest) >= 2 and rest[0] != "Z" and int(rest[1]) == pid:
            out.append(int(name))
    return sorted(out)


def proc_status(pid):
    """/proc/PID/status as {field: value} (Uid, Gid, Groups, CapEff, ...)."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            st = f.read().decode("ascii", "replace")
    except OSError:
        return False
    state = st[st.rfind(")") + 2:].split()[0]
    return state not in ("Z", "X")


def kill_popen(proc, grace=5.0, group=True):
    """SIGTERM, wait up to GRACE, SIGKILL, wait. With GROUP, leftovers in the
    process group led by PROC (started with start_new_session) are killed
    too. Returns the exit status."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
    if group:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return proc.returncode


# --------------------------------------------------------------------------
# YAML writer (block style; JSON-quoted scalars are valid YAML)

def _scalar(v):
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return str(v)
    return json.dumps(str(v))


def to_yaml(obj, indent=0):
    """Serialise dicts/lists/scalars to block YAML. Strings are always
    double-quoted (JSON escaping), so "10s" stays a string."""
    pad = "  " * indent
    lines = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                lines.append("%s%s:" % (pad, k))
                lines.append(to_yaml(v, indent + 1))
            elif isinstance(v, dict):
                lines.append("%s%s: {}" % (pad, k))
            elif isinstance(v, list):
                lines.append("%s%s: []" % (pad, k))
            else:
                lines.append("%s%s: %s" % (pad, k, _scalar(v)))
    elif isinstance(obj, list):
        for item in obj:
            if isinstance(item, dict) and item:
                sub = to_yaml(item, indent + 1).split("\n")
                first = sub[0].lstrip()
                lines.append("%s- %s" % (pad, first))
                lines.extend(sub[1:])
            elif isinstance(item, (dict, list)):
                lines.append("%s- %s" % (pad, json.dumps(item)))
            else:
                lines.append("%s- %s" % (pad, _scalar(item)))
    else:
        lines.append(pad + _scalar(obj))
    return "\n".join(lines)


def server(port, name="s1", max_connections=64, host=HOST, **extra):
    """A servers[] entry. EXTRA: more keys for it (proxy_protocol="v2",
    proxy_tlvs=[...], ...)."""
    s = {"name": name, "address": "%s:%d" % (host, port), "max_connections": max_connections}
    s.update(extra)
    return s


# The suite runs as root, where sluice refuses to start workers without a
# `user:`; tests opt in to root workers unless they name a user themselves
# (test_privs.py tests the switch and the refusal).
ROOT_OPT_IN = "root" if os.geteuid() == 0 else None


def with_user(text):
    """Raw config TEXT with `user: root` appended (at the end, so the line
    numbers that error tests assert do not move) when running as root and
    TEXT has no top-level user key."""
    if ROOT_OPT_IN is None or re.search(r"^user\s*:", text, re.M):
        return text
    return text + ("" if text.endswith("\n") or not text else "\n") + "user: root\n"


def make_config(listen_port, servers, *, workers=1, backend_name="app", error_log=None,
                access_log=None, timeouts=None, limits=None, backend=None, health=None,
                listener=None, forward=None, listen_host=HOST, admin=None,
                access_log_format=None):
    """A full sluice config dict. SERVERS: list of server dicts (see
    server()). BACKEND: extra keys for the backend; HEALTH: the
    health_check mapping (omitted when None). LISTENER: extra keys for the
    listener (accept_proxy_from, trusted_forwarders, tls, ...); FORWARD: the
    backend's forward mapping (omitted when None); LISTEN_HOST: the
    listener's host ("[::1]" for IPv6 loopback). ADMIN: the admin mapping
    ({"address": "127.0.0.1:PORT", "token": ...}; {} for the defaults),
    omitted when None; ACCESS_LOG_FORMAT: "text" or "json" (omitted when
    None)."""
    t = {"client_header": "10s", "client_keepalive": "60s", "client_body": "30s", "drain": "10s"}
    t.update(timeouts or {})
    lim = {"max_request_line": "8k", "max_header_size": "32k", "max_headers": 100,
           "max_body_size": 0}
    lim.update(limits or {})
    be = {"name": backend_name, "balance": "roundrobin", "queue_timeout": "5s",
          "queue_max": 10000, "idle_max": 64, "idle_timeout": "30s",
          "connect_timeout": "3s", "response_timeout": "30s"}
    be.update(backend or {})
    if health is not None:
        be["health_check"] = health
    if forward is not None:
        be["forward"] = forward
    be["servers"] = servers
    li = {"name": "http", "address": "%s:%d" % (listen_host, listen_port), "backend": backend_name}
    li.update(listener or {})
    cfg = {
        "workers": workers,
        "error_log": error_log or "stderr",
        "access_log": access_log or "stderr",
        "timeouts": t,
        "limits": lim,
        "listeners": [li],
        "backends": [be],
    }
    if access_log_format is not None:
        cfg["access_log_format"] = access_log_format
    if admin is not None:
        cfg["admin"] = admin
    return cfg


def admin_config(port=None, token=None):
    """An admin mapping on 127.0.0.1:PORT (a free port when None)."""
    a = {"address": "%s:%d" % (HOST, port or free_port())}
    if token is not None:
        a["token"] = token
    return a


ADMIN_DEFAULT_ADDRESS = "127.0.0.1:9901"


def socket_pids(local_port, remote_port=None, pids=()):
    """PIDs among PIDS holding a TCP socket (IPv4) whose local port is
    LOCAL_PORT and, when REMOTE_PORT is given, whose remote port is
    REMOTE_PORT (with REMOTE_PORT None: listening sockets only). Looked up
    in /proc/net/tcp and the processes' fd tables."""
    inodes = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fl = line.split()
            lport = int(fl[1].split(":")[1], 16)
            rport = int(fl[2].split(":")[1], 16)
            if lport != local_port:
                continue
            if remote_port is None and fl[3] == "0A":       # LISTEN
                inodes.add("socket:[%s]" % fl[9])
            elif remote_port is not None and rport == remote_port:
                inodes.add("socket:[%s]" % fl[9])
    out = []
    for pid in pids:
        d = "/proc/%d/fd" % pid
        try:
            fds = os.listdir(d)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(os.path.join(d, fd)) in inodes:
                    out.append(pid)
                    break
            except OSError:
                pass
    return out


# --------------------------------------------------------------------------
# log files

def read_text(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def wait_log(path, pattern, timeout=3.0, start=0):
    """Poll file PATH until regex PATTERN matches a line (at or after byte
    offset START). Returns the match object."""
    rx = re.compile(pattern)

    def find():
        text = read_text(path)[start:]
        for line in text.splitlines():
            m = rx.search(line)
            if m:
                return m
        return None
    try:
        return wait_for(find, timeout, what="log line /%s/ in %s" % (pattern, path))
    except TimeoutError:
        raise TimeoutError("no line matching /%s/ in %s within %.1fs; content:\n%s"
                           % (pattern, path, timeout, read_text(path)[-4000:]))


ACCESS_RE = re.compile(
    r"^(?P<ts>\S+) (?P<client>\S+):(?P<cport>\d+) (?P<method>\S+) (?P<target>\S+) "
    r"(?P<status>\d{3}) (?P<bytes>\d+) (?P<server>\S+) total_us=(?P<total_us>\d+) "
    r"queue_us=(?P<queue_us>\d+|-) connect_us=(?P<connect_us>\d+|-) "
    r"backend_us=(?P<backend_us>\d+|-) be_conn_req=(?P<be_conn_req>\d+|-) inspect_us=(?P<inspect_us>\S+) inspect=(?P<inspect>\S+)(?: tags=(?P<tags>\S+))?(?: route=(?P<route>\S+))?(?: persistence=(?P<persistence>\S+))? reason=(?P<reason>\S+)(?: proto=(?P<proto>\S+))?"
    # TLS connections append: tls= cipher= sni= alpn= resumed= cert= ccert="..." [verify=]
    r"(?: tls=(?P<tls>\S+)(?P<tls_rest>.*))?$")


def parse_access_line(line):
    m = ACCESS_RE.match(line.strip())
    return m.groupdict() if m else None


# --------------------------------------------------------------------------
# sluice

class Sluice:
    """One sluice instance under test. Created by the `sluice` fixture
    factory; config is a dict (written as YAML) or raw text."""

    def __init__(self, binary, workdir, config, name="sluice"):
        self.binary = binary
        self.dir = str(workdir)
        self.name = name
        self.config_path = os.path.join(self.dir, name + ".yaml")
        self.error_log = os.path.join(self.dir, name + "-error.log")
        self.access_log = os.path.join(self.dir, name + "-access.log")
        self.stdout_path = os.path.join(self.dir, name + ".stdout")
        self.stderr_path = os.path.join(self.dir, name + ".stderr")
        self.proc = None
        self.config = None
        self.write_config(config)

    # -- config
    def write_config(self, config):
        """Write CONFIG (dict or str). For dicts, error_log/access_log
        default to files in the test directory."""
        if isinstance(config, dict):
            config = dict(config)
            if config.get("error_log") in (None, "stderr"):
                config["error_log"] = self.error_log
            if config.get("access_log") in (None, "stderr"):
                config["access_log"] = self.access_log
            if ROOT_OPT_IN and "user" not in config:
                config["user"] = ROOT_OPT_IN
            self.config = config
            text = to_yaml(config) + "\n"
        else:
            text = with_user(config)
        tmp = self.config_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.config_path)

    @property
    def port(self):
        return self.ports[0]

    @property
    def ports(self):
        return [int(l["address"].rsplit(":", 1)[1]) for l in self.config["listeners"]]

    @property
    def admin_port(self):
        """The admin listener's port (None without an admin mapping)."""
        a = self.config.get("admin") if isinstance(self.config, dict) else None
        if a is None:
            return None
        return int(a.get("address", ADMIN_DEFAULT_ADDRESS).rsplit(":", 1)[1])

    @property
    def admin_token(self):
        a = self.config.get("admin") if isinstance(self.config, dict) else None
        return (a or {}).get("token")

    def admin_request(self, method, path, body=None, token=True, headers=None,
                      timeout=DEFAULT_TIMEOUT):
        """One request to the admin listener (new connection). TOKEN: True
        sends the configured token (if any), a string sends that one, None
        sends no Authorization header."""
        hs = list(headers or [])
        if token is True:
            token = self.admin_token
        if token is not None:
            hs.append(("Authorization", "Bearer " + token))
        if method == "POST" and body is None:
            body = b""
        if isinstance(body, str):
            body = body.encode()
        with Client(self.admin_port, host=self.admin_host, timeout=timeout) as c:
            return c.request(method, path, hs, body)

    def admin_get(self, path, **kw):
        return self.admin_request("GET", path, **kw)

    def admin_post(self, path, body=b"", **kw):
        return self.admin_request("POST", path, body=body, **kw)

    def status(self):
        """GET /status, parsed."""
        r = self.admin_get("/status")
        assert r.status == 200, r
        return json.loads(r.body.decode())

    def metrics_text(self):
        r = self.admin_get("/metrics")
        assert r.status == 200, r
        return r.body.decode()

    def admin_owner(self):
        """PIDs of the workers listening on the admin port."""
        return socket_pids(self.admin_port, None, self.worker_pids())

    def socket_owner(self, cport, port=None):
        """PID of the worker holding the server side of the client
        connection from local port CPORT to listener PORT (default: the
        first listener), or None."""
        pids = socket_pids(port or self.port, cport, self.worker_pids())
        return pids[0] if pids else None

    @property
    def hosts(self):
        """Where to probe each listener: its host for a bracketed IPv6
        address ("[::1]:8080" -> "::1"), else 127.0.0.1."""
        out = []
        for l in self.config["listeners"]:
            a = l["address"]
            if a.startswith("["):
                out.append(a[1:a.index("]")])
            else:
                h = a.rsplit(":", 1)[0]
                out.append(h if re.match(r"^127\.\d+\.\d+\.\d+$", h) else HOST)
        return out

    @property
    def admin_host(self):
        """The admin listener's host when it is a loopback address other
        than 127.0.0.1 (a tier's instances each have their own), else
        127.0.0.1."""
        a = self.config.get("admin") if isinstance(self.config, dict) else None
        h = (a or {}).get("address", ADMIN_DEFAULT_ADDRESS).rsplit(":", 1)[0]
        return h if re.match(r"^127\.\d+\.\d+\.\d+$", h) else HOST

    # -- lifecycle
    def command(self):
        """The argv prefix that runs sluice: under SLUICE_VALGRIND=1 (make
        valgrind) every process, the forked workers included, runs on
        valgrind memcheck with one log per PID in the test directory."""
        if not VALGRIND:
            return [self.binary]
        return ["valgrind", "--quiet", "--leak-check=full", "--show-leak-kinds=definite,indirect",
                "--errors-for-leak-kinds=definite,indirect", "--track-origins=no",
                "--child-silent-after-fork=no",
                "--log-file=" + os.path.join(self.dir, self.name + ".vg.%p"), self.binary]

    def valgrind_reports(self):
        """Errors and leaks valgrind logged for this instance (empty when
        clean or not under valgrind)."""
        out = []
        for f in sorted(glob.glob(os.path.join(self.dir, self.name + ".vg.*"))):
            text = read_text(f)
            if text.strip():
                out.append("%s:\n%s" % (os.path.basename(f), text[-4000:]))
        return out

    def start(self, timeout=10.0, wait_workers=True):
        assert self.proc is None or self.proc.poll() is not None
        timeout *= SLOW
        out = open(self.stdout_path, "ab")
        err = open(self.stderr_path, "ab")
        try:
            self.proc = subprocess.Popen(self.command() + ["-c", self.config_path],
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         cwd=self.dir, start_new_session=True)
        finally:
            out.close()
            err.close()
        try:
            for p, h in zip(self.ports, self.hosts):
                wait_port(p, timeout, host=h, proc=self.proc)
            if wait_workers:
                n = self.config.get("workers", 1)
                wait_for(lambda: len(self.worker_pids()) >= n, timeout,
                         what="%d workers" % n)
                if self.admin_port is not None:
                    wait_port(self.admin_port, timeout, host=self.admin_host, proc=self.proc)
        except Exception:
            raise RuntimeError("sluice did not become ready: %s\n--- stderr:\n%s\n--- error log:\n%s"
                               % (self._exc_text(), read_text(self.stderr_path)[-3000:],
                                  read_text(self.error_log)[-3000:]))
        return self

    @staticmethod
    def _exc_text():
        import sys
        e = sys.exc_info()[1]
        return "%s: %s" % (type(e).__name__, e)

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def worker_pids(self):
        if not self.alive():
            return []
        return children_of(self.proc.pid)

    def signal(self, sig):
        self.proc.send_signal(sig)

    def reload(self, config=None, wait=True, timeout=10.0):
        """Optionally write a new CONFIG, send SIGHUP; with WAIT, poll until
        none of the old worker PIDs remain and the new set is complete."""
        old = set(self.worker_pids())
        if config is not None:
            self.write_config(config)
        self.signal(signal.SIGHUP)
        if wait:
            n = self.config.get("workers", 1)

            def done():
                cur = set(self.worker_pids())
                return not (cur & old) and len(cur) >= n
            wait_for(done, timeout, what="reload: old workers %s replaced" % sorted(old))
        return old

    def stop(self, timeout=15.0):
        """Graceful stop (SIGTERM), wait up to TIMEOUT; returns exit status or
        None if it had to be killed."""
        if not self.alive():
            return self.proc.returncode if self.proc else None
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_popen(self.proc, grace=0.1)
            return None

    def kill(self):
        if self.proc is not None:
            workers = self.worker_pids()
            kill_popen(self.proc, grace=3.0 * SLOW)
            for w in workers:  # in case a worker changed process group
                try:
                    os.kill(w, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def check(self, timeout=10.0):
        """Run `sluice -t -c CONFIG`; returns CompletedProcess."""
        return subprocess.run([self.binary, "-t", "-c", self.config_path],
                              capture_output=True, timeout=timeout, text=True)

    # -- logs
    def wait_error_log(self, pattern, timeout=3.0, start=0):
        return wait_log(self.error_log, pattern, timeout, start)

    def wait_access_log(self, pattern, timeout=3.0, start=0):
        return wait_log(self.access_log, pattern, timeout, start)

    def access_entries(self):
        return [e for e in (parse_access_line(l) for l in read_text(self.access_log).splitlines()) if e]

    def access_json(self):
        """The access log as JSON lines (access_log_format: json): a list of
        dicts; a line that is not valid JSON raises ValueError naming it.
        The file is decoded strictly as UTF-8 (JSON text must be UTF-8)."""
        try:
            with open(self.access_log, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return []
        out = []
        for line in raw.split(b"\n"):
            if not line:
                continue
            try:
                out.append(json.loads(line.decode("utf-8")))
            except ValueError as e:
                raise ValueError("access log line is not JSON (%s): %r" % (e, line))
        return out

    def wait_access_entry(self, pred, timeout=3.0):
        """Poll the access log until an entry (dict) satisfies PRED."""
        def find():
            for e in self.access_entries():
                if pred(e):
                    return e
            return None
        try:
            return wait_for(find, timeout, what="access log entry")
        except TimeoutError:
            raise TimeoutError("no matching access log entry; log:\n" + read_text(self.access_log)[-4000:])

    def log_offsets(self):
        return len(read_text(self.error_log)), len(read_text(self.access_log))

    def diagnostics(self):
        return ("--- sluice stderr:\n%s\n--- error log:\n%s\n--- access log (tail):\n%s"
                % (read_text(self.stderr_path)[-3000:], read_text(self.error_log)[-3000:],
                   read_text(self.access_log)[-2000:]))


# --------------------------------------------------------------------------
# demo backend

class DemoBackend:
    """build/demo_backend on a free port."""

    def __init__(self, binary, workdir, threads=16, backlog=128, service_ms=0, cpu_ms=0,
                 size=100, keepalive_ms=None, max_requests=None, port=None, name="demo"):
        self.binary = binary
        self.dir = str(workdir)
        self.port = port or free_port()
        self.name = name
        self.args = [binary, "--listen", "%s:%d" % (HOST, self.port), "--threads", str(threads),
                     "--backlog", str(backlog), "--service-ms", str(service_ms),
                     "--cpu-ms", str(cpu_ms), "--size", str(size), "--quiet"]
        if keepalive_ms is not None:
            self.args += ["--keepalive-ms", str(keepalive_ms)]
        if max_requests is not None:
            self.args += ["--max-requests", str(max_requests)]
        self.size = size
        self.out_path = os.path.join(self.dir, "%s-%d.out" % (name, self.port))
        self.proc = None
        self._ctl = None
        self.control_reconnects = 0

    @property
    def address(self):
        return "%s:%d" % (HOST, self.port)

    def start(self, timeout=5.0):
        out = open(self.out_path, "ab")
        try:
            self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            out.close()
        # Prefer the readiness line (no connection, so /stats stays clean);
        # after 2 s fall back to a connect probe in case stdout is buffered.
        t0 = time.monotonic()

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("demo_backend exited %s: %s"
                                   % (self.proc.returncode, read_text(self.out_path)))
            if "listening on" in read_text(self.out_path):
                return True
            return time.monotonic() - t0 > 2.0 and port_accepts(self.port)
        wait_for(ready, timeout, what="demo_backend on %d" % self.port)
        return self

    def stop(self):
        if self._ctl is not None:
            self._ctl.close()
            self._ctl = None
        if self.proc is not None:
            kill_popen(self.proc, grace=3.0 * SLOW)

    def kill9(self):
        if self._ctl is not None:
            self._ctl.close()
            self._ctl = None
        self.proc.kill()
        self.proc.wait(timeout=5)

    def get(self, path, method="GET", body=None, timeout=5.0):
        return http_request(self.port, method, path, body=body, timeout=timeout)

    # /stats and /stats/reset go over one persistent control connection, so
    # the test's own probes do not inflate the counters: after reset_stats(),
    # "accepted" counts only other connections and "max_active" includes
    # exactly one (the control connection) -- see proxy_max_active.
    # The demo closes idle connections after --keepalive-ms (default 5 s):
    # pass keepalive_ms large enough for tests that read stats.
    def _control(self, method, path):
        for attempt in (0, 1):
            if self._ctl is None:
                self._ctl = Client(self.port)
                self.control_reconnects += attempt
            try:
                r = self._ctl.request(method, path, body=b"" if method == "POST" else None)
            except (ConnClosed, ConnectionError, BrokenPipeError):
                self._ctl.close()
                self._ctl = None
                continue
            if r.has_token("connection", "close"):
                self._ctl.close()
                self._ctl = None
            return r
        raise RuntimeError("demo control connection keeps failing")

    def stats(self):
        r = self._control("GET", "/stats")
        assert r.status == 200, r
        st = json.loads(r.body.decode())
        st["proxy_max_active"] = st["max_active"] - 1  # minus the control connection
        return st

    def reset_stats(self):
        r = self._control("POST", "/stats/reset")
        assert r.status == 200, r

    def health_down(self):
        assert self.get("/admin/health/down", method="POST", body=b"").status == 200

    def health_up(self):
        assert self.get("/admin/health/up", method="POST", body=b"").status == 200


# --------------------------------------------------------------------------
# HTTP messages

class Response:
    def __init__(self):
        self.version = None
        self.status = None
        self.reason = None
        self.headers = []       # [(name, value)] in order, as received
        self.body = b""
        self.raw = b""          # bytes of this response (head + body framing)
        self.chunked = False
        self.closed = False     # body delimited by connection close

    def header(self, name, default=None):
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return default

    def header_all(self, name):
        name = name.lower()
        return [v for k, v in self.headers if k.lower() == name]

    def has_token(self, name, token):
        toks = []
        for v in self.header_all(name):
            toks += [t.strip().lower() for t in v.split(",")]
        return token.lower() in toks

    def __repr__(self):
        return "<Response %s %s hdrs=%r body=%r>" % (self.status, self.reason, self.headers,
                                                     self.body[:200])


class Request:
    """A request as parsed by RecordingBackend."""

    def __init__(self):
        self.method = None
        self.target = None
        self.version = None
        self.headers = []
        self.head = b""          # request line + headers + blank line, exact bytes
        self.body = b""          # decoded payload
        self.raw_body = b""      # body bytes exactly as framed on the wire
        self.chunked = False
        self.trailers = []

    def header(self, name, default=None):
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return default

    def header_all(self, name):
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def names(self):
        return [k.lower() for k, _ in self.headers]

    def __repr__(self):
        return "<Request %s %s %s %r>" % (self.method, self.target, self.version, self.headers)


class ConnClosed(Exception):
    """Peer closed (or reset) before a complete message."""

    def __init__(self, msg, partial=b""):
        super().__init__(msg)
        self.partial = partial


class Stream:
    """Buffered reader over a socket with a per-operation timeout."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.eof = False
        self.consumed = b""   # everything handed out since last mark()

    def _fill(self):
        if self.eof:
            return False
        try:
            d = self.sock.recv(65536)
        except ConnectionResetError:
            self.eof = True
            return False
        if not d:
            self.eof = True
            return False
        self.buf += d
        return True

    def mark(self):
        self.consumed = b""

    def _take(self, n):
        out, self.buf = self.buf[:n], self.buf[n:]
        self.consumed += out
        return out

    def read_until(self, delim, limit=1 << 20):
        while True:
            i = self.buf.find(delim)
            if i >= 0:
                return self._take(i + len(delim))
            if len(self.buf) > limit:
                raise ValueError("no %r within %d bytes" % (delim, limit))
            if not self._fill():
                raise ConnClosed("EOF before %r" % delim, self.consumed + self.buf)

    def read_exact(self, n):
        while len(self.buf) < n:
            if not self._fill():
                raise ConnClosed("EOF after %d of %d bytes" % (len(self.buf), n),
                                 self.consumed + self.buf)
        return self._take(n)

    def read_to_eof(self):
        while self._fill():
            pass
        return self._take(len(self.buf))


def _parse_headers(lines):
    hdrs = []
    for line in lines:
        if not line:
            continue
        k, _, v = line.partition(b":")
        hdrs.append((k.decode("latin-1"), v.strip().decode("latin-1")))
    return hdrs


def _read_chunked(st):
    """Read a chunked body; returns (payload, trailers)."""
    payload = []
    while True:
        line = st.read_until(b"\r\n")
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            break
        payload.append(st.read_exact(size))
        if st.read_exact(2) != b"\r\n":
            raise ValueError("bad chunk terminator")
    trailers = []
    while True:
        line = st.read_until(b"\r\n")
        if line == b"\r\n":
            break
        trailers.append(line[:-2])
    return b"".join(payload), _parse_headers(trailers)


def read_response(st, method="GET", skip_1xx=True):
    """Read one response from Stream ST. Interim 1xx responses are skipped
    (returned in .interim) unless SKIP_1XX is false."""
    interim = []
    while True:
        st.mark()
        head = st.read_until(b"\r\n\r\n")
        lines = head[:-4].split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        r = Response()
        r.version = parts[0].decode("latin-1")
        r.status = int(parts[1])
        r.reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
        r.headers = _parse_headers(lines[1:])
        if 100 <= r.status < 200 and r.status != 101:
            r.raw = st.consumed
            if not skip_1xx:
                return r
            interim.append(r)
            continue
        break
    r.interim = interim
    if method == "HEAD" or r.status in (204, 304) or 100 <= r.status < 200:
        pass
    elif r.has_token("transfer-encoding", "chunked"):
        r.chunked = True
        r.body, r.trailers = _read_chunked(st)
    elif r.header("content-length") is not None:
        r.body = st.read_exact(int(r.header("content-length")))
    else:
        r.closed = True
        r.body = st.read_to_eof()
    r.raw = st.consumed
    return r


def read_request(st):
    """Read one request from Stream ST (server side)."""
    st.mark()
    head = st.read_until(b"\r\n\r\n")
    q = Request()
    q.head = head
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    q.method = parts[0].decode("latin-1")
    q.target = parts[1].decode("latin-1") if len(parts) > 1 else ""
    q.version = parts[2].decode("latin-1") if len(parts) > 2 else ""
    q.headers = _parse_headers(lines[1:])
    te = ",".join(q.header_all("transfer-encoding")).lower()
    if "chunked" in te:
        q.chunked = True
        start = len(st.consumed)
        q.body, q.trailers = _read_chunked(st)
        q.raw_body = st.consumed[start:]
    elif q.header("content-length") is not None:
        q.body = q.raw_body = st.read_exact(int(q.header("content-length")))
    return q


def build_request(method="GET", path="/", headers=None, body=None, version="HTTP/1.1",
                  host="test.local"):
    """Serialise a request. HEADERS: list of (name, value) or dict. A Host
    header is added for HTTP/1.1 unless HOST is None or one is given.
    Content-Length is added for a bytes BODY unless a framing header is
    given."""
    if isinstance(headers, dict):
        headers = list(headers.items())
    headers = list(headers or [])
    names = [k.lower() for k, _ in headers]
    if host is not None and "host" not in names:
        headers.insert(0, ("Host", host))
    if body is not None and "content-length" not in names and "transfer-encoding" not in names:
        headers.append(("Content-Length", str(len(body))))
    out = "%s %s %s\r\n" % (method, path, version)
    out += "".join("%s: %s\r\n" % (k, v) for k, v in headers)
    out += "\r\n"
    return out.encode("latin-1") + (body or b"")


def chunk_encode(payload, chunk=4096, ext=None, trailers=None):
    out = []
    for i in range(0, len(payload), chunk):
        part = payload[i:i + chunk]
        out.append(b"%x%s\r\n" % (len(part), (b";" + ext) if ext else b""))
        out.append(part + b"\r\n")
    out.append(b"0\r\n")
    for k, v in (trailers or []):
        out.append(("%s: %s\r\n" % (k, v)).encode())
    out.append(b"\r\n")
    return b"".join(out)


class Client:
    """A raw client connection. Every operation is bounded by TIMEOUT."""

    def __init__(self, port, host=HOST, timeout=DEFAULT_TIMEOUT, source=None):
        # SOURCE: (ip, port) to bind before connecting, e.g. ("127.0.0.2", 0)
        self.sock = socket.create_connection((host, port), timeout=timeout,
                                             source_address=source)
        self.sock.settimeout(timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.st = Stream(self.sock)

    def settimeout(self, t):
        self.sock.settimeout(t)

    def send(self, data):
        self.sock.sendall(data)

    def request(self, method="GET", path="/", headers=None, body=None, **kw):
        self.send(build_request(method, path, headers, body, **kw))
        return self.read_response(method)

    def read_response(self, method="GET", skip_1xx=True):
        return read_response(self.st, method, skip_1xx)

    def read_to_eof(self):
        return self.st.read_to_eof()

    def read_some(self, n=65536):
        if self.st.buf:
            return self.st._take(min(n, len(self.st.buf)))
        return self.sock.recv(n)

    def wait_closed(self, timeout=DEFAULT_TIMEOUT):
        """Return the bytes received until EOF (raise socket.timeout if the
        peer keeps the connection open longer than TIMEOUT)."""
        old = self.sock.gettimeout()
        self.sock.settimeout(timeout)
        try:
            return self.st.read_to_eof()
        finally:
            self.sock.settimeout(old)

    def is_closed(self, timeout=2.0):
        try:
            self.wait_closed(timeout)
            return True
        except socket.timeout:
            return False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def http_request(port, method="GET", path="/", headers=None, body=None, timeout=DEFAULT_TIMEOUT,
                 **kw):
    """One request on a new connection (closed afterwards)."""
    with Client(port, timeout=timeout) as c:
        return c.request(method, path, headers, body, **kw)


def raw_exchange(port, data, timeout=DEFAULT_TIMEOUT):
    """Send DATA on a new connection; read one response. Returns
    (Response, rest_until_eof_or_None). rest is None if the connection was
    still open after TIMEOUT."""
    with Client(port, timeout=timeout) as c:
        c.send(data)
        r = c.read_response()
        try:
            rest = c.wait_closed(timeout)
        except socket.timeout:
            rest = None
        return r, rest


# --------------------------------------------------------------------------
# WebSocket (RFC 6455), just enough to echo frames

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def ws_accept(key):
    return base64.b64encode(hashlib.sha1(key.encode() + WS_GUID).digest()).decode()


def ws_frame(payload, opcode=2, mask=True, fin=True):
    b0 = (0x80 if fin else 0) | opcode
    n = len(payload)
    mbit = 0x80 if mask else 0
    if n < 126:
        hdr = struct.pack("!BB", b0, mbit | n)
    elif n < 65536:
        hdr = struct.pack("!BBH", b0, mbit | 126, n)
    else:
        hdr = struct.pack("!BBQ", b0, mbit | 127, n)
    if not mask:
        return hdr + payload
    key = os.urandom(4)
    return hdr + key + _ws_mask(payload, key)


def _ws_mask(data, key):
    if not data:
        return b""
    k = (key * (len(data) // 4 + 1))[:len(data)]
    return (int.from_bytes(data, "big") ^ int.from_bytes(k, "big")).to_bytes(len(data), "big")


def ws_read_frame(st):
    """Returns (fin, opcode, payload) from Stream ST."""
    b0, b1 = st.read_exact(2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", st.read_exact(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", st.read_exact(8))[0]
    key = st.read_exact(4) if b1 & 0x80 else None
    payload = st.read_exact(n)
    if key:
        payload = _ws_mask(payload, key)
    return bool(b0 & 0x80), b0 & 0x0F, payload


# --------------------------------------------------------------------------
# Recording origin

def canned_response(body=b"ok", status=200, headers=None, reason=None):
    reasons = {200: "OK", 201: "Created", 204: "No Content", 304: "Not Modified",
               404: "Not Found", 500: "Internal Server Error"}
    hs = list(headers or [])
    if status not in (204, 304) and not any(k.lower() in ("content-length", "transfer-encoding")
                                            for k, _ in hs):
        hs.append(("Content-Length", str(len(body))))
    out = "HTTP/1.1 %d %s\r\n" % (status, reason or reasons.get(status, "Status"))
    out += "".join("%s: %s\r\n" % (k, v) for k, v in hs)
    out += "\r\n"
    return out.encode("latin-1") + (body if status not in (204, 304) else b"")


class RecConn:
    """One accepted connection, as seen by RecordingBackend. Handlers use
    the helpers; the record (data, requests, closed) is read by tests."""

    def __init__(self, backend, sock, index):
        self.backend = backend
        self.sock = sock
        self.index = index            # 0-based accept order
        self.data = bytearray()       # every byte received, in order
        self.requests = []            # parsed requests, in order
        self.responses = 0
        self.closed_by_peer = False   # we saw EOF/reset from sluice
        self.closed = False           # connection is finished (either side)
        self.lock = threading.Lock()
        self.st = Stream(_RecordingSock(self))

    # helpers for handlers
    def read_request(self):
        q = read_request(self.st)
        with self.lock:
            self.requests.append(q)
        return q

    def send(self, data):
        self.sock.sendall(data)

    def respond(self, body=b"ok", status=200, headers=None):
        self.send(canned_response(body, status, headers))
        self.responses += 1

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        # record whatever is still coming until the peer's FIN (bounded)
        try:
            self.sock.settimeout(0.5)
            self.st.read_to_eof()
        except OSError:
            pass
        self.sock.close()

    def reset(self):
        """Abortive close: RST instead of FIN."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.sock.close()

    def hang(self, seconds=30.0):
        """Keep the connection open without replying, recording input, until
        the peer closes or the backend stops."""
        deadline = time.monotonic() + seconds
        self.sock.settimeout(0.1)
        while time.monotonic() < deadline and not self.backend.stopping:
            try:
                d = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not d:
                break
            with self.lock:
                self.data += d

    def drain_until_eof(self):
        """Record input until the peer closes."""
        try:
            self.st.read_to_eof()
        except OSError:
            pass


class _RecordingSock:
    """Socket facade that records received bytes into the RecConn."""

    def __init__(self, conn):
        self.conn = conn

    def recv(self, n):
        c = self.conn
        try:
            d = c.sock.recv(n)
        except ConnectionResetError:
            d = b""
        if not d:
            c.closed_by_peer = True
        with c.lock:
            c.data += d
        return d


def default_handler(conn):
    """Answer every request with a small keepalive 200 whose body names the
    connection and the request index."""
    while True:
        q = conn.read_request()
        body = b"conn=%d req=%d" % (conn.index, len(conn.requests) - 1)
        conn.respond(body, headers=[("X-Conn", str(conn.index))])


def _peer_gone(sock):
    """True if the peer's FIN or RST has already arrived on SOCK (checked
    with a zero-timeout poll; never blocks, never consumes data)."""
    try:
        p = select.poll()
        p.register(sock.fileno(), select.POLLIN | select.POLLRDHUP)
        ev = p.poll(0)
    except (OSError, ValueError):
        return True
    return any(e & (select.POLLRDHUP | select.POLLHUP | select.POLLERR) for _, e in ev)


class RecordingBackend:
    """A threaded origin on a free port that records, per connection, the
    exact bytes it receives and runs a scriptable HANDLER(conn) for each
    connection (default: keepalive 200 for every request). A handler ends
    the connection by returning (closed gracefully), conn.reset(),
    conn.hang(), or by the peer closing (ConnClosed is swallowed)."""

    def __init__(self, handler=None, idle_timeout=30.0):
        self.handler = handler or default_handler
        self.idle_timeout = idle_timeout
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind((HOST, 0))
        self.lsock.listen(128)
        self.lsock.settimeout(0.1)
        self.port = self.lsock.getsockname()[1]
        self.conns = []
        self.lock = threading.Lock()
        self.stopping = False
        self.errors = []
        self.active = 0
        self.max_active = 0
        self.threads = []
        self.acceptor = threading.Thread(target=self._accept_loop, daemon=True)
        self.acceptor.start()

    @property
    def address(self):
        return "%s:%d" % (HOST, self.port)

    def _accept_loop(self):
        while not self.stopping:
            try:
                s, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                c = RecConn(self, s, len(self.conns))
                # Concurrency as the kernel sees it at this accept: a
                # connection whose FIN/RST already arrived is not counted
                # even if its thread has not woken up yet (otherwise thread
                # scheduling would show phantom overlap).
                live = sum(1 for o in self.conns if not o.closed and not _peer_gone(o.sock))
                self.conns.append(c)
                self.active += 1
                self.max_active = max(self.max_active, live + 1)
            t = threading.Thread(target=self._serve, args=(c,), daemon=True)
            t.start()
            self.threads.append(t)

    def _serve(self, c):
        c.sock.settimeout(self.idle_timeout)
        try:
            self.handler(c)
        except (ConnClosed, ConnectionError, BrokenPipeError):
            pass
        except socket.timeout:
            pass
        except OSError:
            pass
        except Exception as e:  # a handler bug: record it, tests check .errors
            self.errors.append(repr(e))
        finally:
            try:
                c.sock.close()
            except OSError:
                pass
            c.closed = True
            with self.lock:
                self.active -= 1

    # -- queries for tests
    def conn_count(self):
        with self.lock:
            return len(self.conns)

    def total_bytes(self):
        with self.lock:
            return sum(len(c.data) for c in self.conns)

    def all_requests(self):
        with self.lock:
            conns = list(self.conns)
        out = []
        for c in conns:
            with c.lock:
                out += list(c.requests)
        return out

    def wait_requests(self, n, timeout=5.0):
        return wait_for(lambda: len(self.all_requests()) >= n and self.all_requests(), timeout,
                        what="%d requests at the recording backend" % n)

    def wait_conns(self, n, timeout=5.0):
        wait_for(lambda: self.conn_count() >= n, timeout, what="%d backend connections" % n)
        return self.conns

    def stop(self):
        self.stopping = True
        try:
            self.lsock.close()
        except OSError:
            pass
        self.acceptor.join(timeout=2)
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv
            except OSError:
                pass
        for t in self.threads:
            t.join(timeout=2)


def websocket_handler(conn):
    """Recording-backend handler: WebSocket handshake then echo every frame
    back unmasked (close frame echoed then connection closed)."""
    q = conn.read_request()
    key = q.header("sec-websocket-key")
    if key is None or (q.header("upgrade") or "").lower() != "websocket":
        conn.respond(b"not a websocket request", status=400)
        return
    conn.send(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % ws_accept(key)).encode())
    while True:
        fin, op, payload = ws_read_frame(conn.st)
        conn.send(ws_frame(payload, opcode=op, mask=False, fin=fin))
        if op == 8:
            return


class BlackholeServer:
    """A listening socket whose accept queue is full, so new SYNs are dropped
    and connect() hangs: provokes a backend connect timeout."""

    def __init__(self):
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.bind((HOST, 0))
        self.lsock.listen(0)
        self.port = self.lsock.getsockname()[1]
        self.fillers = []
        # Fill the accept queue (capacity backlog+1) with handshakes that
        # complete; later SYNs are dropped by the kernel.
        for _ in range(2):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect((HOST, self.port))
            except BlockingIOError:
                pass
            self.fillers.append(s)
        time.sleep(0.05)  # let the two loopback handshakes settle (not readiness)

    @property
    def address(self):
        return "%s:%d" % (HOST, self.port)

    def stop(self):
        for s in self.fillers:
            s.close()
        self.lsock.close()
