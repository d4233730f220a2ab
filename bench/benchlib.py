"""Helpers shared by the bench/ scenarios (core.py, tls.py).

Processes: every process a scenario starts goes through start() and is
stopped by its PID with stop()/stop_all(), children included (found through
/proc, never by name). CPU: utime+stime of a process tree from /proc/PID/stat,
the machine's busy time from /proc/stat, and "others' CPU" (what processes we
did not start took) for noise detection. Memory: VmRSS of a process tree.
wrk: output parsing. Reports: the static nginx origin, machine facts, and
bench/results/latest/ (one <name>.md/.png/.src per scenario + report.md).
"""
import datetime
import json
import os
import platform
import re
import resource
import shutil
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLK_TCK = os.sysconf("SC_CLK_TCK")


def env_int(name, default, lo=0, prog="bench"):
    v = os.environ.get(name, "")
    if v == "":
        return default
    try:
        n = int(v)
    except ValueError:
        sys.exit(f"{prog}: {name}={v!r} is not an integer")
    if n < lo:
        sys.exit(f"{prog}: {name} must be >= {lo}")
    return n


def env_float(name, default, lo=0.0, prog="bench"):
    v = os.environ.get(name, "")
    if v == "":
        return float(default)
    try:
        x = float(v)
    except ValueError:
        sys.exit(f"{prog}: {name}={v!r} is not a number")
    if x < lo:
        sys.exit(f"{prog}: {name} must be >= {lo}")
    return x


def env_list(name, default, conv=str, prog="bench"):
    """NAME (or default when unset or empty) split at commas, blanks dropped."""
    v = os.environ.get(name, "")
    items = [x.strip() for x in (v or default).split(",") if x.strip()]
    try:
        return [conv(x) for x in items]
    except ValueError:
        sys.exit(f"{prog}: {name}={v!r}: bad value")


def env_names(name, known, default=None, what="name", prog="bench"):
    """A comma-separated subset of KNOWN from NAME (default: all of KNOWN, in
    order); exits naming the first unknown one."""
    v = os.environ.get(name, ",".join(known) if default is None else default)
    out = [x for x in v.split(",") if x]
    for x in out:
        if x not in known:
            sys.exit(f"{prog}: unknown {what} {x!r} (known: {','.join(known)})")
    return out


# The knobs every scenario reads the same way.
QUICK = os.environ.get("QUICK", "") not in ("", "0")      # QUICK=1: short runs, fewer cases
PIN = os.environ.get("PIN", "1") != "0"                   # PIN=0: no taskset
RESULTS = os.path.abspath(os.environ.get("RESULTS", os.path.join(ROOT, "bench", "results")))
BUILD = os.path.abspath(os.path.join(ROOT, os.environ.get("BUILD", "build") or "build"))
# Which sluice binaries (bench/core.py, churn.py and memory.py): SLUICE=path
# is the one measured as target "sluice" (default BUILD/sluice); BASELINE=path
# adds target "sluice-base": the same config run by that other binary, in the
# same rounds, for an old-vs-new comparison in one report. Relative paths are
# taken from the repository root, as BUILD is.
SLUICE_BIN = os.path.abspath(os.path.join(ROOT, os.environ.get("SLUICE") or os.path.join(BUILD, "sluice")))
BASELINE = os.environ.get("BASELINE", "")
BASELINE = os.path.abspath(os.path.join(ROOT, BASELINE)) if BASELINE else ""


# ---------------------------------------------------------------- processes

STARTED = []                  # Popen objects we own; stopped by PID at exit


def start(cmd, logfile, cwd=None):
    f = open(logfile, "ab")
    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd)
    f.close()
    STARTED.append(p)
    return p


def descendants(pid):
    """PIDs of every live descendant of pid (children via /proc/PID/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        cur = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{cur}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{cur}/task/{t}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def stop(p, grace=10.0):
    """SIGTERM the process (it stops its own children), SIGKILL after grace;
    then make sure no child it had is left behind (by PID). Returns exit code."""
    if p.poll() is None:
        kids = descendants(p.pid)
        try:
            p.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if p in STARTED:
        STARTED.remove(p)
    return p.returncode


def fortio_result(path, r, out):
    """fortio's -json output at PATH into the run record R: p50/p90/p99, avg and
    max (ms), count, ok (200s), errors, actual_qps; a missing or unreadable
    result, or answers other than 200, as R's problems (OUT: fortio's output,
    for the message)."""
    try:
        with open(path) as f:
            j = json.load(f)
        h = j["DurationHistogram"]
        pct = {p["Percentile"]: p["Value"] * 1e3 for p in h.get("Percentiles") or []}
        codes = j.get("RetCodes") or {}
        ok = int(codes.get("200", 0))
        r.update(p50=pct.get(50), p90=pct.get(90), p99=pct.get(99), avg=h.get("Avg", 0) * 1e3,
                 max=h.get("Max", 0) * 1e3, count=h.get("Count", 0), ok=ok, errors=h.get("Count", 0) - ok,
                 actual_qps=j.get("ActualQPS"))
        if not ok:
            r["problems"].append("fortio got no 200 answer")
        elif r["errors"]:
            r["problems"].append(f"{r['errors']} answers other than 200: {codes}")
    except (OSError, ValueError, KeyError) as e:
        r["problems"].append(f"no fortio result ({e!r}): {out.strip()[-200:]}")


def run_main(main, prog):
    """Run a scenario's main(): SIGTERM and Ctrl-C stop it cleanly, and
    every process it started is stopped by PID whatever happens."""
    def _term(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, _term)
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print(f"{prog}: interrupted, stopping everything", file=sys.stderr)
        sys.exit(130)
    finally:
        stop_all()


def stop_all():
    for p in list(reversed(STARTED)):
        stop(p, grace=5.0)


def proc_times(pid):
    """(utime, stime) of one process (all its threads), in clock ticks; None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()
    return int(rest[11]), int(rest[12])   # fields 14 and 15 of proc(5)


def proc_ticks(pid):
    """utime+stime of one process, in clock ticks; None if gone."""
    t = proc_times(pid)
    return None if t is None else t[0] + t[1]


def tree_times(pid):
    """{pid: (utime, stime)} for pid and all of its descendants."""
    out = {}
    for q in [pid] + descendants(pid):
        t = proc_times(q)
        if t is not None:
            out[q] = t
    return out


def tree_ticks(pid):
    """{pid: ticks} for pid and all of its descendants."""
    return {q: u + k for q, (u, k) in tree_times(pid).items()}


def proc_rss_kb(pid):
    """VmRSS of one process in KiB (from /proc/PID/status); None if gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return 0


def tree_rss_kb(pid):
    """{pid: VmRSS KiB} for pid and all of its descendants."""
    out = {}
    for q in [pid] + descendants(pid):
        v = proc_rss_kb(q)
        if v is not None:
            out[q] = v
    return out


def proc_pss_kb(pid):
    """Pss of one process in KiB (/proc/PID/smaps_rollup: shared pages split
    between the processes that map them); None if gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def system_busy_ticks():
    """Busy ticks of all CPUs together: user+nice+system+irq+softirq from
    /proc/stat's cpu line (guest time is inside user; steal is not ours)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[0] + v[1] + v[2] + v[5] + v[6]


def cpuidle_us(cpus):
    """Microseconds CPUS (a set of CPU numbers) have spent idle, from the cpuidle
    states' counters in sysfs (all states summed), or None where the kernel has no
    cpuidle driver. Wall time minus this is everything the CPUs ran: the processes
    pinned there, and the kernel work (interrupts, softirq) done on them whoever's
    account it lands in. A counter grows when its CPU leaves idle, so each CPU's is
    read from that CPU (this process moved there for the read): the idle stretch the
    move ended is then in it."""
    total = 0
    before = os.sched_getaffinity(0)
    try:
        for c in sorted(cpus):
            d = f"/sys/devices/system/cpu/cpu{c}/cpuidle"
            os.sched_setaffinity(0, {c})
            states = [e for e in os.listdir(d) if e.startswith("state")]
            if not states:
                return None
            for st in states:
                with open(os.path.join(d, st, "time")) as f:
                    total += int(f.read())
    except (OSError, ValueError):
        return None
    finally:
        os.sched_setaffinity(0, before)
    return total


def children_cpu():
    """CPU seconds of our reaped children (wrk runs are reaped by subprocess.run)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def background_pct(seconds=1.0):
    """% of one CPU busy while we do nothing: other people's processes."""
    s0, t0 = system_busy_ticks(), time.monotonic()
    time.sleep(seconds)
    return (system_busy_ticks() - s0) / CLK_TCK / (time.monotonic() - t0) * 100


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, p, deadline=10.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if p.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def wait_children(p, deadline=5.0, n=1):
    """Wait until p has forked n children (sluice and nginx fork their
    workers after binding)."""
    end = time.monotonic() + deadline
    while len(descendants(p.pid)) < n and time.monotonic() < end:
        time.sleep(0.02)


def need_tools(prog, tools, installer):
    """Exit unless every tool is on PATH (installer: the .sh that installs them)."""
    for tool in tools:
        if not shutil.which(tool):
            sys.exit(f"{prog}: {tool} not found ({installer} installs it)")


def start_demo_backend(cmd, outf, prog="bench"):
    """Start build/demo_backend (cmd listens on 127.0.0.1:0) and read the
    port it picked from its log. Returns (Popen, port, command line shown
    with a note on the port)."""
    p = start(cmd, outf)
    end = time.monotonic() + 10
    port = None
    while time.monotonic() < end and port is None and p.poll() is None:
        with open(outf) as f:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", f.read())
        if m:
            port = int(m.group(1))
        else:
            time.sleep(0.05)
    if port is None or not wait_port(port, p):
        sys.exit(f"{prog}: demo_backend did not start, see {outf}")
    return p, port, " ".join(c if c != "127.0.0.1:0" else "127.0.0.1:0  # (any free port)" for c in cmd)


# ---------------------------------------------------------------- proxies

CONF_EXT = {"sluice": "yaml", "haproxy": "cfg", "nginx": "conf"}


def proxy_errlog(kind, d, name=None):
    """Where a proxy's own error/alert messages go: NAME.error.log for
    sluice (name: sluice by default), haproxy.out (HAProxy -db writes them
    to its output), nginx.error.log."""
    return os.path.join(d, {"sluice": f"{name or 'sluice'}.error.log", "haproxy": "haproxy.out",
                            "nginx": "nginx.error.log"}[kind])


def launch_proxy(kind, d, port, conf, pin, sluice_bin=None, name=None, out=None, workers=1):
    """Start one proxy on its written config CONF: sluice (SLUICE_BIN -c),
    HAProxy (-db, its output in OUT or its error log) or nginx (prefix D);
    wait for PORT, then for sluice's and nginx's WORKERS worker processes.
    NAME: the sluice target's name (its NAME.out and NAME.error.log).
    Returns (Popen, or None if it did not listen, command line)."""
    if kind == "sluice":
        cmd = pin + [sluice_bin, "-c", conf]
        p = start(cmd, os.path.join(d, f"{name or 'sluice'}.out"))
    elif kind == "haproxy":
        cmd = pin + ["haproxy", "-f", conf, "-db"]
        p = start(cmd, out or proxy_errlog(kind, d))
    else:
        os.makedirs(os.path.join(d, "tmp-nginx"), exist_ok=True)
        cmd = pin + ["nginx", "-p", d, "-e", proxy_errlog(kind, d), "-c", conf]
        p = start(cmd, os.path.join(d, "nginx.out"))
    if not wait_port(port, p):
        stop(p)
        return None, " ".join(cmd)
    if kind != "haproxy":
        wait_children(p, n=workers)
    return p, " ".join(cmd)


def stop_proxy(kind, p):
    """Stop a proxy; a problem text if it exited badly, else None (HAProxy
    exits 143 on SIGTERM)."""
    rc = stop(p)
    if rc not in (0, None) and not (kind.startswith("haproxy") and rc in (143, -15)):
        return f"exit status {rc} after SIGTERM"
    return None


def log_lines_above_info(text):
    """The lines of a proxy's log that are not info/notice chatter."""
    return [ln for ln in text.splitlines()
            if ln.strip() and "[info]" not in ln and "[notice]" not in ln and "[NOTICE]" not in ln
            and not re.search(r"Proxy (fe|be) started", ln)]


# ---------------------------------------------------------------- config pieces

def sluice_conf(d, comment, port, bport, pool, listener="front", tls="", workers=1, name="sluice",
                access_log="off", admin="", server_extra="", listener_extra=""):
    """A sluice config: one listener (TLS: sluice_tls()) -> backend app with
    one server s1, keepalive pool of POOL connections."""
    return f"""# {comment}
workers: {workers}
error_log: {d}/{name}.error.log
user: nobody
access_log: {access_log}
{admin}timeouts:
  drain: 0
listeners:
  - name: {listener}
    address: 127.0.0.1:{port}
    backend: app
{tls}{listener_extra}backends:
  - name: app
    idle_max: {pool}
    servers:
      - name: s1
        address: 127.0.0.1:{bport}
        max_connections: {pool}
{server_extra}"""


HAPROXY_DEFAULTS = """defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 3s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
"""


def haproxy_conf(d, comment, port, bport, pool, nbthread=1, maxconn=8192, global_extra="",
                 bind_extra="", frontend_extra="", server_extra=""):
    """An HAProxy config: keepalive on both sides, backend connections
    reused (http-reuse always), frontend fe -> backend be with server s1."""
    return f"""# {comment}
global
    nbthread {nbthread}
    maxconn {maxconn}
    pidfile {d}/haproxy.pid
{global_extra}
{HAPROXY_DEFAULTS}
frontend fe
    bind 127.0.0.1:{port}{bind_extra}
{frontend_extra}    default_backend be

backend be
    server s1 127.0.0.1:{bport} maxconn {pool}{server_extra}
"""


def nginx_main(d, name, workers=1, rlimit=16384, conns=8192):
    """The top of an nginx config, up to and including `http {`: NAME.pid,
    NAME.error.log (warn) in D; no worker_rlimit_nofile if RLIMIT is None."""
    return (f"worker_processes {workers};\n"
            + (f"worker_rlimit_nofile {rlimit};\n" if rlimit else "")
            + f"daemon off;\nmaster_process on;\npid {d}/{name}.pid;\n"
            f"error_log {d}/{name}.error.log warn;\n"
            f"events {{ worker_connections {conns}; }}\nhttp {{\n")


def nginx_temp_paths(d, tmp):
    """nginx's *_temp_path lines (http level), all under D/TMP."""
    return "".join(f"    {k}_temp_path {d}/{tmp}/{v};\n" for k, v in (
        ("client_body", "body"), ("proxy", "proxy"), ("fastcgi", "fastcgi"), ("uwsgi", "uwsgi"),
        ("scgi", "scgi")))


def nginx_upstream(bport, pool, timeout="60s"):
    """upstream be: one server, a keepalive pool of POOL connections."""
    return f"""    upstream be {{
        server 127.0.0.1:{bport};
        keepalive {pool};
        keepalive_requests 1000000;
        keepalive_timeout {timeout};
    }}
"""


# ---------------------------------------------------------------- pinning

def pinning(pin):
    """(proxy_pin, load_pin, text): taskset prefixes putting the proxy on the
    first CPU we may use and the load side (wrk, backend) on the others."""
    cpus = sorted(os.sched_getaffinity(0))
    if pin and len(cpus) >= 2:
        proxy_cpus = str(cpus[0])
        load_cpus = ",".join(str(c) for c in cpus[1:])
        return (["taskset", "-c", proxy_cpus], ["taskset", "-c", load_cpus],
                f"proxy (all its processes) on CPU {proxy_cpus}; the load client and the backend "
                f"on CPU {load_cpus} (taskset -c)")
    return [], [], ("nothing pinned" + ("" if pin else " (PIN=0)")
                    + (f" (only {len(cpus)} CPU)" if len(cpus) < 2 else ""))


# ---------------------------------------------------------------- the static origin

BODY_SIZE = 128
# Same 128 bytes as demo_backend's default body (its 64-byte pattern twice,
# with '.' for the newline so it fits an nginx `return` string).
STATIC_BODY = ("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-." * 2)[:BODY_SIZE]


def conf_backend_nginx(d, port):
    return (f"# static origin: nginx answering every request with {BODY_SIZE} bytes\n"
            + nginx_main(d, "backend-nginx", rlimit=None, conns=4096)
            + "    access_log off;\n    keepalive_requests 1000000;\n    keepalive_timeout 60s;\n"
            + nginx_temp_paths(d, "tmp-backend")
            + f"""    server {{
        listen 127.0.0.1:{port} backlog=256;
        location / {{
            default_type text/plain;
            return 200 "{STATIC_BODY}";
        }}
    }}
}}
""")


def start_backend_nginx(d, load_pin, prog="bench"):
    """The static nginx origin, on a free port. Returns (Popen, port, command line)."""
    port = free_port()
    os.makedirs(os.path.join(d, "tmp-backend"), exist_ok=True)
    conf = write(os.path.join(d, "backend-nginx.conf"), conf_backend_nginx(d, port))
    cmd = load_pin + ["nginx", "-p", d, "-e", os.path.join(d, "backend-nginx.error.log"), "-c", conf]
    p = start(cmd, os.path.join(d, "backend-nginx.out"))
    if not wait_port(port, p):
        sys.exit(f"{prog}: nginx backend did not start, see {d}/backend-nginx.error.log")
    return p, port, " ".join(cmd)


# ---------------------------------------------------------------- wrk

UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def parse_wrk(out):
    r = {"requests": 0, "rps": 0.0, "p50": None, "p99": None, "sock_errors": 0,
         "sock_detail": "", "non2xx": 0}
    m = re.search(r"(\d+) requests in ([\d.]+)(\w+)", out)
    if m:
        r["requests"] = int(m.group(1))
        r["wrk_secs"] = float(m.group(2)) * {"ms": 0.001, "s": 1.0, "m": 60.0}.get(m.group(3), 1.0)
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m:
        r["rps"] = float(m.group(1))
    for pct, val, unit in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M):
        r["p" + pct] = float(val) * UNIT_MS[unit]
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        r["sock_errors"] = sum(int(x) for x in m.groups())
        r["sock_detail"] = m.group(0)
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        r["non2xx"] = int(m.group(1))
    return r


def wrk_cmd(pin, threads, conns, seconds, url, extra=()):
    """The wrk command line every scenario uses (--latency; EXTRA before the URL)."""
    return pin + ["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--latency", *extra, url]


# bench/tlsload.c: one thread, epoll, AWS-LC, a new connection (and, over
# https, a full or resumed handshake) per request. It costs 2-3x less CPU per
# TLS connection than wrk, so on two cores the proxy, not the client, is what
# saturates. The .sh wrappers build it (make build/tlsload).
TLSLOAD = os.environ.get("TLSLOAD") or os.path.join(ROOT, "build", "tlsload")


def have_tlsload():
    return os.access(TLSLOAD, os.X_OK)


def tlsload_cmd(pin, conns, seconds, url, version="1.3", resume=False, verify=False, rate=None, count=None,
                timeout_s=None):
    """The tlsload command line: CONNS connections for SECONDS against URL
    (http:// = no TLS), TLS VERSION only, offering each slot's last session
    when RESUME. Unless VERIFY, -x: the server's handshake signature is not
    checked (the server's work is the same; the client saves an ECDSA verify,
    about a third of its CPU). RATE: open loop, RATE connections started a
    second, at most CONNS at once; COUNT: stop after that many connections
    instead of SECONDS; TIMEOUT_S: per connection."""
    cmd = pin + [TLSLOAD, "-c", str(conns)] + (["-n", str(count)] if count else ["-d", str(seconds)])
    if rate:
        cmd += ["-R", str(rate)]
    if timeout_s:
        cmd += ["-t", str(int(timeout_s * 1000))]
    if url.startswith("https://"):
        cmd += ["-V", version] + (["-r"] if resume else []) + ([] if verify else ["-x"])
    return cmd + [url]


def tlsload_dist(out, title):
    """tlsload's distribution whose title starts with TITLE ("Latency
    Distribution": request write to response end; "Connection time":
    connect() to EOF; "Handshake time": connect() to handshake done), in ms:
    {"mean", "p50", "p75", "p90", "p99", "max"}; {} when absent."""
    lines = out.splitlines()
    for i, ln in enumerate(lines):
        m = re.match(rf"^\s+{re.escape(title)}.*\(mean ([\d.]+)(us|ms|s)\)\s*$", ln)
        if not m:
            continue
        d = {"mean": float(m.group(1)) * UNIT_MS[m.group(2)]}
        for nxt in lines[i + 1:]:
            q = re.match(r"^\s+(\d+%|max)\s+([\d.]+)(us|ms|s)\s*$", nxt)
            if not q:
                break
            d["max" if q.group(1) == "max" else "p" + q.group(1)[:-1]] = float(q.group(2)) * UNIT_MS[q.group(3)]
        return d
    return {}


def parse_tlsload(out):
    """parse_wrk() of tlsload's wrk-compatible part (its request latency,
    before the other distributions), plus resumed (count of resumed
    handshakes), client_us (its own CPU per connection), conn_p50/conn_p99
    (ms from connect() to EOF), hs_mean/hs_p50/hs_p99/hs_max (ms from
    connect() to handshake done), req_mean (ms), completions (responses
    ended per second, first to last) and, with -R, late and max_late_ms."""
    head, _, _ = out.partition("Connection time")
    r = parse_wrk(head)
    m = re.search(r"tlsload: connections (\d+), resumed (\d+)", out)
    r["resumed"] = int(m.group(2)) if m else None
    m = re.search(r"client cpu [\d.]+ s \([\d.]+% of a core\), ([\d.]+) us/conn", out)
    r["client_us"] = float(m.group(1)) if m else None
    conn, hs = tlsload_dist(out, "Connection time"), tlsload_dist(out, "Handshake time")
    r["conn_p50"], r["conn_p99"] = conn.get("p50"), conn.get("p99")
    r.update(hs_mean=hs.get("mean"), hs_p50=hs.get("p50"), hs_p99=hs.get("p99"), hs_max=hs.get("max"),
             req_mean=tlsload_dist(out, "Latency Distribution").get("mean"))
    m = re.search(r"tlsload: completions ([\d.]+)/s", out)
    r["completions"] = float(m.group(1)) if m else None
    m = re.search(r"tlsload: offered [\d.]+/s, started (\d+), late (\d+) .*max lateness ([\d.]+) ms", out)
    r["late"], r["max_late_ms"] = (int(m.group(2)), float(m.group(3))) if m else (None, None)
    m = re.search(r"errors connect (\d+) handshake (\d+) write (\d+) read (\d+) timeout (\d+) status (\d+)", out)
    r["errors_total"] = sum(int(x) for x in m.groups()) if m else None
    return r


def run_wrk(cmd, seconds, outfile=None):
    """Run a wrk command of SECONDS; its output (also written to OUTFILE,
    after the command line, when given)."""
    cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        timeout=seconds + 60)
    if outfile:
        write(outfile, " ".join(cmd) + "\n" + cp.stdout)
    return cp.stdout


H2_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def parse_h2load_wrk(out):
    """h2load's summary in parse_wrk()'s shape: requests = 2xx answers,
    sock_errors = requests without an answer, non2xx, rps over the time it
    took; req_mean (ms): its mean time for request; wrk_secs: that time."""
    r = {"requests": 0, "rps": 0.0, "p50": None, "p99": None, "sock_errors": 0, "sock_detail": "",
         "non2xx": 0, "req_mean": None}
    m = re.search(r"finished in ([\d.]+)(us|ms|s), ", out)
    secs = float(m.group(1)) * H2_UNIT_MS[m.group(2)] / 1000 if m else None
    m = re.search(r"requests: (\d+) total, \d+ started, \d+ done, \d+ succeeded, (\d+) failed, (\d+) errored, "
                  r"(\d+) timeout", out)
    st = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if m and st:
        total = int(m.group(1))
        codes = [int(x) for x in st.groups()]
        r.update(requests=codes[0], non2xx=sum(codes[1:]), sock_errors=total - sum(codes))
        if r["sock_errors"]:
            r["sock_detail"] = f"h2load: {m.group(2)} failed, {m.group(3)} errored, {m.group(4)} timeout of {total}"
    if secs:
        r["rps"], r["wrk_secs"] = r["requests"] / secs, secs
    m = re.search(r"^time for request:\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)", out, re.M)
    if m:
        r["req_mean"] = float(m.group(1)) * H2_UNIT_MS[m.group(2)]
    return r


def run_h2load(cmd, seconds, outfile):
    cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=seconds + 60)
    # h2load says this for every connection when the server picks no ALPN protocol.
    out = "\n".join(ln for ln in cp.stdout.splitlines()
                    if not ln.startswith(("No protocol negotiated", "Server does not support NPN/ALPN")))
    write(outfile, shlex.join(cmd) + "\n" + out)
    return out


def h2load_rate_cmd(pin, conns, rate, seconds, url, extra=(), logf=None):
    """h2load's HTTP/1.1 open loop: CONNS keepalive connections sending
    RATE requests a second in all (RATE/CONNS each, --rps), one at a time,
    whatever the server's speed; LOGF: its per-request log."""
    return (pin + ["h2load", "--h1", "-t1", f"-c{conns}", f"--rps={rate / conns:g}", f"-D{seconds}", *extra]
            + ([f"--log-file={logf}"] if logf else []) + [url])


def flag_saturated(r, offered, unit="req/s"):
    """An open-loop run that achieved under 97% of the OFFERED rate is a
    problem: its CPU per request was not measured at the others' load."""
    if r["rps"] < 0.97 * offered:
        r["problems"].append(f"achieved {r['rps']:,.0f} {unit}, under 97% of the {offered:,} offered: saturated")


def h2load_log_percentiles(logf, qs=(50, 99)):
    """Latency percentiles (ms, nearest rank) of h2load's --log-file (start
    µs, status, µs to the response's end per request; failed ones, status
    -1, left out): {q: ms or None}."""
    times = []
    try:
        with open(logf) as f:
            for line in f:
                parts = line.split("\t")
                if len(parts) >= 3 and parts[1] != "-1":
                    times.append(int(parts[2]))
    except OSError:
        pass
    times.sort()
    return {q: times[max(0, -(-q * len(times) // 100) - 1)] / 1000 if times else None for q in qs}


def measure_wrk(run, proxy, backend, log_ticks=None, parse=parse_wrk):
    """One measured wrk run, run() returning wrk's output, and the CPU it
    cost: utime+stime of the proxy's process tree (proxy: Popen, or None for
    a direct run) and of the backend's, read just before and after, the
    machine's busy time and wrk's own CPU. Returns parse_wrk()'s dict plus
    wall, cpu_us (proxy CPU µs per completed request; None when direct),
    cpu_user_us and cpu_sys_us (its user and system parts),
    cpu_pct, backend_cpu_us, wrk_cpu_pct, other_pct (others' CPU: whatever
    else kept the CPUs busy, in % of one CPU) and problems. log_ticks: gets
    a line with the raw tick counts. parse: parse_wrk, or one that adds to
    what it finds."""
    pids_before = sorted(tree_ticks(proxy.pid)) if proxy else []
    b0, ct0 = tree_ticks(backend.pid), tree_times(proxy.pid) if proxy else {}
    w0, s0, t0 = children_cpu(), system_busy_ticks(), time.monotonic()
    out = run()
    wall = time.monotonic() - t0
    s1, ct1, b1 = system_busy_ticks(), tree_times(proxy.pid) if proxy else {}, tree_ticks(backend.pid)
    c0 = {q: u + k for q, (u, k) in ct0.items()}
    c1 = {q: u + k for q, (u, k) in ct1.items()}
    wrk_s = children_cpu() - w0
    r = parse(out)
    r["wall"] = wall
    # CPU deltas only over processes alive at both reads; a process that died
    # mid-run (crash) shows up in 'problems' below instead.
    dt = sum(c1[q] - c0[q] for q in c1 if q in c0)
    db = sum(b1[q] - b0[q] for q in b1 if q in b0)
    req = max(r["requests"], 1)
    r["cpu_us"] = dt / CLK_TCK * 1e6 / req if proxy else None
    # The same split into user and system time: what the proxy's own code
    # costs, and what the kernel spends on its behalf.
    du = sum(ct1[q][0] - ct0[q][0] for q in ct1 if q in ct0)
    r["cpu_user_us"] = du / CLK_TCK * 1e6 / req if proxy else None
    r["cpu_sys_us"] = (dt - du) / CLK_TCK * 1e6 / req if proxy else None
    r["cpu_pct"] = dt / CLK_TCK / wall * 100 if proxy else None
    r["backend_cpu_us"] = db / CLK_TCK * 1e6 / req
    r["wrk_cpu_pct"] = wrk_s / wall * 100
    # Other processes, and kernel softirq work (loopback TCP) that
    # /proc/PID/stat does not charge to any process.
    r["other_pct"] = ((s1 - s0) - dt - db) / CLK_TCK / wall * 100 - wrk_s / wall * 100
    problems = []
    if proxy:
        pids_after = sorted(tree_ticks(proxy.pid))
        if proxy.poll() is not None:
            problems.append(f"proxy exited during the run (status {proxy.returncode})")
        elif pids_after != pids_before:
            problems.append(f"proxy processes changed during the run: {pids_before} -> {pids_after}")
    if r["requests"] == 0:
        problems.append("wrk completed no request")
    if r["sock_errors"]:
        problems.append(r["sock_detail"])
    if r["non2xx"]:
        problems.append(f"Non-2xx or 3xx responses: {r['non2xx']}")
    r["problems"] = problems
    if log_ticks:
        log_ticks(f"   (cpu ticks: proxy {dt} backend {db} wrk {wrk_s * CLK_TCK:.0f} machine {s1 - s0}, "
                  f"other {r['other_pct']:.0f}% of a CPU)")
    return r


# ---------------------------------------------------------------- noise

class Quiet:
    """Runs a measurement when the machine is quiet, and again (up to
    attempts times, within budget seconds in all for waiting and re-running)
    when other processes interfered with it.

    measure_fn() must return a dict with at least other_pct (others' CPU in %
    of one CPU during the run) and, when wrk ran, wrk_secs; run() adds noise
    (list of reasons) and noisy."""

    def __init__(self, noise_pct, budget, attempts=3, log=print):
        self.noise_pct, self.budget, self.attempts, self.log = noise_pct, budget, attempts, log
        self.spent = 0.0

    def wait(self):
        t0 = time.monotonic()
        bg = background_pct(0.5)
        while bg >= self.noise_pct and self.spent + (time.monotonic() - t0) < self.budget:
            bg = background_pct(0.5)
        self.spent += max(0.0, time.monotonic() - t0 - 0.5)

    def reasons(self, r, duration):
        out = []
        if r["other_pct"] >= self.noise_pct:
            out.append(f"other processes used {r['other_pct']:.0f}% of a CPU")
        if duration and r.get("wrk_secs", duration) > duration * 1.1 + 0.5:
            out.append(f"the {duration} s wrk run took {r['wrk_secs']:.1f} s "
                       "(wrk was not scheduled for a while)")
        return out

    def run(self, measure_fn, what, duration, notes, describe=lambda r: ""):
        """what: 'round 2, sluice' (for notes); describe(r): the discarded
        run's figures, for the note that says it was discarded."""
        r = None
        for attempt in range(1, self.attempts + 1):
            self.wait()
            t1 = time.monotonic()
            prev = r
            r = measure_fn()
            r["noise"] = self.reasons(r, duration)
            r["noisy"] = bool(r["noise"])
            if prev is not None:
                notes.append(f"{what}: attempt {attempt - 1} discarded: {'; '.join(prev['noise'])}"
                             + (f" ({describe(prev)})" if describe(prev) else ""))
            if not r["noisy"] or attempt == self.attempts or self.spent >= self.budget:
                break
            self.spent += time.monotonic() - t1
            self.log(f"{what}: {'; '.join(r['noise'])}; re-running")
        if r["noisy"]:
            notes.append(f"{what}: noisy run kept ({'; '.join(r['noise'])}; {self.attempts} attempts "
                         f"or the {self.budget} s budget for waiting/re-running spent)")
        return r


    def run_if_budget(self, measure_fn, what, duration, notes, describe=lambda r: ""):
        """run() while budget is left; after that (or with a budget of 0)
        just run once and flag noise, without the 0.5 s sample of the
        machine that wait() takes before every run."""
        if self.budget > 0 and self.spent < self.budget:
            return self.run(measure_fn, what, duration, notes, describe)
        r = measure_fn()
        r["noise"] = self.reasons(r, duration)
        r["noisy"] = bool(r["noise"])
        if r["noisy"]:
            why = f"the {self.budget} s QUIET_BUDGET spent" if self.budget else "QUIET_BUDGET=0"
            notes.append(f"{what}: noisy run kept ({'; '.join(r['noise'])}; {why})")
        return r


def noise_note(noise_pct, attempts, budget):
    """The report's "What was measured" line on noise (Quiet's rules)."""
    return (f"- Noise: others' CPU at or above {noise_pct}% of a CPU, or a wrk run lasting over "
            f"10% longer than asked, makes a run noisy; the script waits for quiet before each run "
            f"and re-runs a noisy one (at most {attempts} attempts) within {budget} s in all; "
            "medians use the clean runs. Trust ratios from the same run over absolute numbers on "
            "a shared machine.")


# ---------------------------------------------------------------- figures across runs

def runs_of(runs, label, case=None):
    return [r for r in runs if r["label"] == label and (case is None or r["case"] == case)]


def summarize(runs, label, metrics, case=None):
    """{n: runs used, total, each metric: (median, min, max), errors} over
    LABEL's (and CASE's) clean runs, or all of them if none is clean;
    errors = socket errors + non-2xx over all runs. None without runs."""
    allr = runs_of(runs, label, case)
    if not allr:
        return None
    rs = [r for r in allr if not r["noisy"]] or allr
    return {"n": len(rs), "total": len(allr), **{k: mmm([r[k] for r in rs]) for k in metrics},
            "errors": sum(r["sock_errors"] + r["non2xx"] for r in allr)}


def paired(runs, a, b, key, metric, key_b=None, clean=True):
    """(median, min, max) over rounds of a's metric in case KEY ÷ b's in case
    KEY_B (default KEY), both of the same round: rounds where both runs were
    clean, all rounds if there is none (clean=False: always all rounds)."""
    key_b = key_b or key

    def ratios(only_clean):
        va = {r["round"]: r[metric] for r in runs if r["label"] == a and r["case"] == key
              and r.get(metric) and not (only_clean and r["noisy"])}
        vb = {r["round"]: r[metric] for r in runs if r["label"] == b and r["case"] == key_b
              and r.get(metric) and not (only_clean and r["noisy"])}
        return [va[k] / vb[k] for k in va if k in vb]
    return mmm((clean and ratios(True)) or ratios(False))


def lsq_slope(xs, ys):
    """Least-squares slope of ys over xs, and R²."""
    n = len(xs)
    if n < 2:
        return None, None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None, None
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    b = sxy / sxx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - my - b * (x - mx)) ** 2 for x, y in zip(xs, ys))
    return b, (1 - ss_res / ss_tot) if ss_tot else 1.0


def fmt_mmm(t, nd=2, collapse=False):
    """'median (min–max)'; collapse: just the median when min == max."""
    if t[0] is None:
        return "—"
    if collapse and t[1] == t[2]:
        return f"{t[0]:.{nd}f}"
    return f"{t[0]:.{nd}f} ({t[1]:.{nd}f}–{t[2]:.{nd}f})"


def ratio(a, b, nd=2):
    if a is None or b is None or not b:
        return "—"
    return f"{a / b:.{nd}f}"


def grouped_bars(ax, keys, targets, value, colors, skip_zero=False, fontsize=7, label=None):
    """Bars of median with min–max error bars, one group per key, one bar per
    target in each group; value(target, key) -> (median, min, max). Returns
    whether anything was drawn."""
    label = label or (lambda v: f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2f}")
    width = 0.8 / max(1, len(targets))
    drawn = False
    for i, t in enumerate(targets):
        xs, med, lo, hi = [], [], [], []
        for j, k in enumerate(keys):
            v = value(t, k)
            if v[0] is None or (skip_zero and not v[0]):
                continue
            xs.append(j + (i - (len(targets) - 1) / 2) * width)
            med.append(v[0])
            lo.append(v[0] - v[1])
            hi.append(v[2] - v[0])
        if not xs:
            continue
        drawn = True
        bars = ax.bar(xs, med, width, yerr=[lo, hi], capsize=3, color=colors.get(t, "#777"), label=t)
        for b, v in zip(bars, med):
            ax.annotate(label(v), (b.get_x() + b.get_width() / 2, b.get_height()), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=fontsize)
    return drawn


# ---------------------------------------------------------------- files, text

def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def read_tail(path, start_at):
    try:
        with open(path, "rb") as f:
            f.seek(start_at)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def fsize(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def recv_all(s):
    """Read from socket s until the peer closes; the bytes read."""
    data = b""
    while True:
        b = s.recv(4096)
        if not b:
            return data
        data += b


def cmd_out(cmd, timeout=10):
    try:
        cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=timeout)
        return cp.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def fmt(x, nd=0):
    if x is None:
        return "—"
    return f"{x:,.{nd}f}"


def mmm(values):
    """(median, min, max) of the non-None values, or (None, None, None)."""
    v = [x for x in values if x is not None]
    return (statistics.median(v), min(v), max(v)) if v else (None, None, None)


def machine_facts(software):
    """[(name, value)] describing the machine; software: [(name, version)] to
    put after the OS line."""
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return ([("nproc", str(os.cpu_count())),
             ("CPU", model),
             ("virtualization", cmd_out(["systemd-detect-virt"]) or "?"),
             ("kernel", platform.release()),
             ("os", cmd_out(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]))]
            + list(software)
            + [("load average at start", " ".join(open("/proc/loadavg").read().split()[:3])),
               ("others' CPU at start", f"{background_pct(1.0):.0f}% of one CPU (1 s sample)")])


def git_describe():
    """'git abc1234' plus ', src/ modified' when src/ has uncommitted changes."""
    commit = cmd_out(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    dirty = cmd_out(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no", "src"])
    return f"git {commit}{', src/ modified' if dirty else ''}"


def with_baseline(targets, prog, var):
    """TARGETS (a list of names read from the environment variable VAR) with
    "sluice-base" added right after "sluice" (or first) when BASELINE is set
    and VAR did not name it; exits if VAR names it without BASELINE."""
    if not BASELINE:
        if "sluice-base" in targets:
            sys.exit(f"{prog}: target sluice-base in {var} needs BASELINE=/path/to/another/sluice")
        return list(targets)
    if "sluice-base" in targets:
        return list(targets)
    out = list(targets)
    out.insert(out.index("sluice") + 1 if "sluice" in out else 0, "sluice-base")
    return out


def kind_of(target):
    """The proxy software behind a target name: sluice-base (and any
    sluice-*) is a sluice, haproxy-* an HAProxy."""
    for k in ("sluice", "haproxy", "nginx"):
        if target == k or target.startswith(k + "-"):
            return k
    return target


def need_sluice_bins(prog, targets):
    """Exit unless the binaries of the sluice targets among TARGETS (sluice:
    SLUICE_BIN, sluice-base: BASELINE) are executable."""
    for t, path, how in (("sluice", SLUICE_BIN, "make, or set BUILD=dir or SLUICE=path"),
                         ("sluice-base", BASELINE, "BASELINE=path")):
        if t in targets and not os.access(path, os.X_OK):
            sys.exit(f"{prog}: {path or '(unset)'} is not an executable sluice ({how})")


def sluice_describe(path, detail=False):
    """'sluice 0.1.0, git 969a7c8' from PATH -V (the commit it was built
    from, '-dirty' when its tree had changes); git_describe() of this
    checkout if the binary does not say. detail: its tls, jemalloc and
    build lines too."""
    lines = cmd_out([path, "-V"]).splitlines() or ["?"]
    git = next((ln for ln in lines if ln.startswith("git ")), None)
    more = [ln for ln in lines if detail and ln.split(" ")[0] in ("tls", "jemalloc", "build")]
    return ", ".join([lines[0], git or git_describe()] + more)


def baseline_ratio_line(what, a, b, extra=""):
    """The report's headline comparison line of sluice against sluice-base:
    A and B are (median, min, max) of the headline figure."""
    if not a or not b or a[0] is None or b[0] is None or not b[0]:
        return f"**sluice ÷ sluice-base, {what}: —** (no figure for one of them)"
    return (f"**sluice ÷ sluice-base, {what}: {a[0] / b[0]:.3f}** ({a[0]:,.2f} vs {b[0]:,.2f}{extra}; "
            f"below 1 = sluice needs less). {baseline_binaries()}")


def baseline_binaries():
    """Which binaries sluice and sluice-base are, for a report."""
    return (f"sluice: `{SLUICE_BIN}` ({sluice_describe(SLUICE_BIN)}); "
            f"sluice-base: `{BASELINE}` ({sluice_describe(BASELINE)}).")


# ---------------------------------------------------------------- results/latest

def results_dirs(name):
    """(start time, UTC; RESULTS/<BENCH_TS, or the start time>/; its NAME/
    subdirectory, made with NAME/raw/ in it)."""
    started = datetime.datetime.now(datetime.timezone.utc)
    outdir = os.path.join(RESULTS, os.environ.get("BENCH_TS") or started.strftime("%Y%m%dT%H%M%SZ"))
    d = os.path.join(outdir, name)
    os.makedirs(os.path.join(d, "raw"), exist_ok=True)
    return started, outdir, d


def refresh_latest(results, outdir, name, files=None):
    """Copy outdir/<name>.md (+ .png and any other files) into results/latest/,
    point latest/<name> at outdir/<name>/ (configs, raw output), note where it
    came from in latest/<name>.src, and rewrite latest/report.md, which links
    the newest report of every scenario found in latest/."""
    latest = os.path.join(results, "latest")
    if os.path.islink(latest) or os.path.isfile(latest):
        os.unlink(latest)
    os.makedirs(latest, exist_ok=True)
    for f in files or (f"{name}.md", f"{name}.png"):
        src = os.path.join(outdir, f)
        if os.path.exists(src):
            shutil.copy2(src, os.path.join(latest, f))
    ts = os.path.basename(outdir)
    write(os.path.join(latest, f"{name}.src"), ts + "\n")
    link = os.path.join(latest, name)
    if os.path.islink(link) or os.path.isfile(link):
        os.unlink(link)
    elif os.path.isdir(link):
        shutil.rmtree(link)
    if os.path.isdir(os.path.join(outdir, name)):
        os.symlink(os.path.join("..", ts, name), link)
    L = ["# sluice bench — latest results", ""]
    for md in sorted(x for x in os.listdir(latest) if x.endswith(".md") and x != "report.md"):
        scen = md[:-3]
        title = scen
        with open(os.path.join(latest, md)) as f:
            for line in f:
                if line.startswith("# "):
                    title = line[2:].strip()
                    break
        src = ""
        if os.path.exists(os.path.join(latest, scen + ".src")):
            s = open(os.path.join(latest, scen + ".src")).read().strip()
            src = f" — from [{s}](../{s}/{md})"
        L.append(f"## {scen}: {title}")
        L.append("")
        L.append(f"Full report: [{md}]({md}){src}")
        L.append("")
        for png in sorted(x for x in os.listdir(latest)
                          if x.endswith(".png") and (x == scen + ".png" or x.startswith(scen + "-"))):
            L.append(f"![{png[:-4]}]({png})")
            L.append("")
    write(os.path.join(latest, "report.md"), "\n".join(L))


def report_configs_and_machine(lines, confs, facts):
    """Append to a report's LINES every config file used (CONFS: name ->
    path, shown verbatim) and the machine facts table (FACTS: (key, value))."""
    for name, path in confs.items():
        lang = "yaml" if path.endswith(".yaml") else "nginx" if path.endswith(".conf") else ""
        lines += [f"`{os.path.basename(path)}` ({name}):", "", f"```{lang}",
                  open(path).read().rstrip(), "```", ""]
    lines += ["## Machine", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v.replace('|', '/')} |" for k, v in facts]
    lines.append("")


def report_list(lines, title, items):
    """Append a '## TITLE' section listing ITEMS (or 'none')."""
    lines += [f"## {title}", ""] + [f"- {x}" for x in items or ["none"]] + [""]


def haproxy_version(with_ssl=False):
    hv = cmd_out(["haproxy", "-v"]).splitlines()[0]
    if with_ssl:
        m = re.search(r"Running on OpenSSL version : (.*)", cmd_out(["haproxy", "-vv"]))
        hv += f", running on {m.group(1).strip()}" if m else ""
    return hv


def wrk_version():
    v = cmd_out(["wrk", "--version"]).splitlines()
    return v[0] if v else "?"


def peer_versions(haproxy_ssl=False):
    """[(name, version)] of haproxy, nginx and wrk, for machine_facts()."""
    return [("haproxy", haproxy_version(haproxy_ssl)),
            ("nginx", cmd_out(["nginx", "-v"]).replace("nginx version: ", "")),
            ("wrk", wrk_version())]


def report_end(lines, outdir, name, confs, facts, reproduce):
    """Finish a report: every config used and the machine facts
    (report_configs_and_machine), the Reproduce line; write outdir/NAME.md."""
    report_configs_and_machine(lines, confs, facts)
    lines += [f"Reproduce: {reproduce}", ""]
    write(os.path.join(outdir, f"{name}.md"), "\n".join(lines))


def show_report(outdir, name, cuts, log):
    """Print outdir/NAME.md up to the first of the CUTS markers (its
    summary), then log where the report and results/latest are."""
    path = os.path.join(outdir, f"{name}.md")
    with open(path) as f:
        text = f.read()
    for c in cuts:
        text = text.split(c)[0]
    print()
    print(text.rstrip())
    print()
    log(f"report: {path}  (latest: {os.path.join(RESULTS, 'latest', 'report.md')})")


def exit_status(missing, log):
    """A scenario's exit status: 1, after naming them, when targets in
    MISSING produced no figure; else 0."""
    if missing:
        log(f"no figures for: {', '.join(missing)}")
        return 1
    return 0
