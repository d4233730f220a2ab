"""Soak: one sluice (2 workers, waf.lua on every request) under 30 minutes
of mixed traffic, sampled every 5 s, to show whether memory, descriptors and
latency stay flat. Not part of `make bench` or `make test`: `make soak`.

Traffic, all at once for the whole run:
  keepalive   wrk, 8 connections, GET /?sleep_ms=5 (run in 60 s pieces)
  churn       2 threads, a new plain connection per request
  churn-tls   1 thread, a new TLS 1.3 connection (full handshake) per request
              (churn and churn-tls send one WAF attack from
              tests/e2e/waf_corpus/attacks.json in ten; it must get 403)
  slow-send   3 threads: the request head one byte every 50 ms
  slow-read   2 threads: a 2 MiB response read 8 KiB every 50 ms, small
              receive buffer
  probe       one keepalive connection, GET /?sleep_ms=0 every 50 ms: the
              latency figures
Backends: two demo_backend servers behind one backend with active health
checks; s2 is killed (SIGKILL) every FLAP seconds and restarted a third of a
FLAP later on the same port, so health checks, passive marking and retries
are exercised all along.

Every SAMPLE seconds: RSS of master + workers (VmRSS from /proc), their open
descriptors, the probe's p50/p99 over the interval, client-side errors per
load and per kind, sluice's own error counters (/metrics) and its open
client connections.

Knobs (environment): SOAK_SECONDS (1800), SOAK_SAMPLE (5), SOAK_FLAP (30),
BUILD, RESULTS, BENCH_TS.

Output: RESULTS/<ts>/soak.md (the report), soak.png (RSS, descriptors, p99
over time), soak/ (samples.tsv, events.tsv, config, logs, wrk output).
"""
import collections
import json
import os
import random
import re
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (BUILD, RESULTS, ROOT, descendants, env_float, env_int, free_port,  # noqa: E402
                      git_describe, log_lines_above_info, machine_facts, parse_wrk, refresh_latest,
                      results_dirs, run_main, start, stop, wait_children, wait_port, wrk_version,
                      write)
import tlslib  # noqa: E402

PROG = "bench/soak.py"
SECONDS = env_int("SOAK_SECONDS", 1800, lo=30, prog=PROG)
SAMPLE = env_float("SOAK_SAMPLE", 5.0, lo=0.5, prog=PROG)
FLAP = env_int("SOAK_FLAP", 30, lo=3, prog=PROG)
WORKERS = 2
WRK_PIECE = 60
# "Flat": over the last third of the run, the least-squares line rises or
# falls by less than 2% of the mean, or less than 1 MiB (RSS) / 5 (fds):
# what a leak of one byte per request would show at this request rate.
FLAT_SHARE = 0.02
FLAT_MIN_RSS_KB = 1024
FLAT_MIN_FDS = 5

STOP = threading.Event()


def log(msg):
    print(f"[soak] {msg}", flush=True)


# ---------------------------------------------------------------- configs

def conf_sluice(d, ports, certs):
    waf = os.path.join(ROOT, "lua/waf.lua")
    tls = tlslib.sluice_tls(certs, "ecdsa", "1.3", full=True)
    return f"""# bench/soak.py: 2 workers, waf.lua on both listeners, two servers with health checks
workers: {WORKERS}
error_log: {d}/sluice.error.log
user: nobody
access_log: off
inspection: on
admin:
  address: 127.0.0.1:{ports['admin']}
timeouts:
  drain: 5s
listeners:
  - name: http
    address: 127.0.0.1:{ports['http']}
    backend: app
    inspect:
      script: {waf}
  - name: https
    address: 127.0.0.1:{ports['https']}
    backend: app
    inspect:
      script: {waf}
{tls}backends:
  - name: app
    idle_max: 64
    queue_timeout: 5s
    health_check:
      path: /health
      interval: 1s
      timeout: 500ms
      rise: 2
      fall: 2
    servers:
      - name: s1
        address: 127.0.0.1:{ports['s1']}
        max_connections: 64
      - name: s2
        address: 127.0.0.1:{ports['s2']}
        max_connections: 64
"""


# ---------------------------------------------------------------- backends

class Backend:
    def __init__(self, d, name, port):
        self.name = name
        self.port = port
        self.out = os.path.join(d, f"{name}.out")
        self.cmd = [os.path.join(BUILD, "demo_backend"), "--listen", f"127.0.0.1:{port}",
                    "--threads", "96", "--backlog", "256", "--size", "1024",
                    "--keepalive-ms", "30000", "--quiet"]
        self.p = None

    def start(self):
        self.p = start(self.cmd, self.out)
        if not wait_port(self.port, self.p):
            raise RuntimeError(f"{self.name} did not start, see {self.out}")

    def kill(self):
        self.p.kill()
        self.p.wait()
        stop(self.p)  # forgets it


def flapper(b, events, elock):
    """Kill B every FLAP seconds, restart it FLAP/3 seconds later."""
    while not STOP.wait(FLAP):
        b.kill()
        with elock:
            events.append((time.monotonic(), "kill", b.name))
        if STOP.wait(FLAP / 3.0):
            break
        for attempt in range(20):
            try:
                b.start()
                break
            except RuntimeError:
                if STOP.wait(0.5):
                    return
        with elock:
            events.append((time.monotonic(), "restart", b.name))


# ---------------------------------------------------------------- clients

class Errors:
    """Client-side failures, counted per (load, kind)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.c = collections.Counter()
        self.ok = collections.Counter()
        self.examples = {}

    def fail(self, load, kind, detail=""):
        with self.lock:
            self.c[(load, kind)] += 1
            self.examples.setdefault((load, kind), detail[:200])

    def success(self, load):
        with self.lock:
            self.ok[load] += 1

    def snapshot(self):
        with self.lock:
            return collections.Counter(self.c), collections.Counter(self.ok)


ERR = Errors()
LOADS = ["keepalive", "churn", "churn-tls", "slow-send", "slow-read", "probe"]


def kind_of(e):
    if isinstance(e, ConnectionRefusedError):
        return "refused"
    if isinstance(e, (ConnectionResetError, BrokenPipeError)):
        return "reset"
    if isinstance(e, socket.timeout):
        return "timeout"
    if isinstance(e, EOFError):
        return "eof"
    if isinstance(e, ssl.SSLError):
        return "tls"
    return "other"


def read_response(f):
    """Status, headers, body from a file-like socket reader (Content-Length
    or chunked bodies only: the demo backend sends nothing else here)."""
    line = f.readline(65537)
    if not line:
        raise EOFError("EOF before the status line")
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise EOFError(f"bad status line {line[:80]!r}")
    status = int(parts[1])
    hdrs = {}
    while True:
        h = f.readline(65537)
        if not h:
            raise EOFError("EOF in the head")
        if h in (b"\r\n", b"\n"):
            break
        k, _, v = h.partition(b":")
        hdrs[k.strip().lower()] = v.strip()
    if b"chunked" in hdrs.get(b"transfer-encoding", b"").lower():
        body = bytearray()
        while True:
            n = int(f.readline(1024).split(b";")[0], 16)
            if n == 0:
                while f.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass
                break
            body += f.read(n)
            f.read(2)
    else:
        n = int(hdrs.get(b"content-length", b"0"))
        body = f.read(n)
        if len(body) < n:
            raise EOFError(f"EOF after {len(body)} of {n} body bytes")
    return status, hdrs, bytes(body)


def attacks():
    with open(os.path.join(ROOT, "tests/e2e/waf_corpus/attacks.json")) as f:
        return [a for a in json.load(f) if a["method"] == "GET" and not a.get("body")
                and all(ord(ch) < 128 for ch in a["target"])]


def request_bytes(target, headers=(), close=False):
    """A GET; Host and User-Agent are added unless HEADERS has them (an
    attack may be in its User-Agent, and a second one would hide it)."""
    headers = list(headers)
    names = {k.lower() for k, _ in headers}
    for k, v in (("Host", "soak"), ("User-Agent", "soak")):
        if k.lower() not in names:
            headers.insert(0, (k, v))
    if close:
        headers.append(("Connection", "close"))
    h = "".join(f"{k}: {v}\r\n" for k, v in headers)
    return f"GET {target} HTTP/1.1\r\n{h}\r\n".encode("latin-1")


def churn(port, load, ctx, atk, seed, pause):
    """A new connection per request (TLS when CTX); one in ten an attack."""
    rnd = random.Random(seed)
    n = 0
    while not STOP.is_set():
        n += 1
        attack = n % 10 == 0
        if attack:
            a = rnd.choice(atk)
            req = request_bytes(a["target"], [(k, v) for k, v in a["headers"].items()
                                              if k.lower() not in ("host", "connection")], close=True)
        else:
            req = request_bytes("/?sleep_ms=1", close=True)
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            try:
                if ctx is not None:
                    s = ctx.wrap_socket(s, server_hostname="localhost")
                s.sendall(req)
                status, _, body = read_response(s.makefile("rb"))
            finally:
                s.close()
            want = 403 if attack else 200
            if status != want:
                what = "attack" if attack else "benign"
                ERR.fail(load, f"{what} got {status}", f"{a['name'] if attack else ''} {req[:300]!r}")
            else:
                ERR.success(load)
        except Exception as e:  # every failure is data here
            ERR.fail(load, kind_of(e), repr(e))
        STOP.wait(pause)


def slow_send(port, i):
    """The head trickles in, one byte every 50 ms (~5 s per request)."""
    req = request_bytes(f"/?sleep_ms=0&slow={i}", [("X-Slow", "trickle")], close=True)
    while not STOP.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            try:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for b in req:
                    s.sendall(bytes([b]))
                    if STOP.wait(0.05):
                        return
                status, _, _ = read_response(s.makefile("rb"))
            finally:
                s.close()
            if status != 200:
                ERR.fail("slow-send", f"status {status}")
            else:
                ERR.success("slow-send")
        except Exception as e:
            ERR.fail("slow-send", kind_of(e), repr(e))


def slow_read(port, i, size=2 << 20):
    """A 2 MiB response read 8 KiB every 50 ms through a small receive buffer."""
    while not STOP.is_set():
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
            s.settimeout(30)
            s.connect(("127.0.0.1", port))
            try:
                s.sendall(request_bytes(f"/?sleep_ms=0&size={size}&slow={i}", close=True))
                got = b""
                while b"\r\n\r\n" not in got:
                    d = s.recv(8192)
                    if not d:
                        raise EOFError("EOF in the head")
                    got += d
                head, _, body = got.partition(b"\r\n\r\n")
                status = int(head.split()[1])
                n = len(body)
                while n < size:
                    if STOP.wait(0.05):
                        return
                    d = s.recv(8192)
                    if not d:
                        raise EOFError(f"EOF after {n} of {size} body bytes")
                    n += len(d)
            finally:
                s.close()
            if status != 200:
                ERR.fail("slow-read", f"status {status}")
            else:
                ERR.success("slow-read")
        except Exception as e:
            ERR.fail("slow-read", kind_of(e), repr(e))


class Probe:
    """One keepalive connection, GET every 50 ms; latencies in ms."""

    def __init__(self, port):
        self.port = port
        self.lock = threading.Lock()
        self.lat = []

    def take(self):
        with self.lock:
            out, self.lat = self.lat, []
        return out

    def run(self):
        s = f = None
        req = request_bytes("/?sleep_ms=0&probe=1")
        while not STOP.wait(0.05):
            try:
                if s is None:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    f = s.makefile("rb")
                t0 = time.perf_counter()
                s.sendall(req)
                status, hdrs, _ = read_response(f)
                ms = (time.perf_counter() - t0) * 1000
                if status != 200:
                    ERR.fail("probe", f"status {status}", f"at {time.monotonic():.1f} (monotonic)")
                else:
                    ERR.success("probe")
                    with self.lock:
                        self.lat.append(ms)
                if b"close" in hdrs.get(b"connection", b"").lower():
                    s.close()
                    s = None
            except Exception as e:
                ERR.fail("probe", kind_of(e), repr(e))
                if s is not None:
                    s.close()
                s = None
        if s is not None:
            s.close()


WRK_RESULTS = []


def wrk_loop(port, d, t_end):
    """wrk in WRK_PIECE-second pieces until T_END (one wrk per piece, so
    its errors can be placed in time)."""
    k = 0
    while not STOP.is_set():
        left = int(t_end - time.monotonic())
        if left < 5:
            break
        secs = min(WRK_PIECE, left)
        cmd = ["wrk", "-t1", "-c8", f"-d{secs}s", "--latency", f"http://127.0.0.1:{port}/?sleep_ms=5"]
        try:
            cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                timeout=secs + 60)
        except subprocess.TimeoutExpired:
            ERR.fail("keepalive", "wrk hung")
            continue
        k += 1
        write(os.path.join(d, "raw", f"wrk-{k:03d}.txt"), " ".join(cmd) + "\n" + cp.stdout)
        r = parse_wrk(cp.stdout)
        m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", cp.stdout)
        with ERR.lock:
            ERR.ok["keepalive"] += r["requests"] - r["non2xx"]
        if m:
            for kind, v in zip(("connect", "read", "write", "timeout"), m.groups()):
                if int(v):
                    with ERR.lock:
                        ERR.c[("keepalive", kind)] += int(v)
        if r["non2xx"]:
            with ERR.lock:
                ERR.c[("keepalive", "non-2xx")] += r["non2xx"]
        WRK_RESULTS.append((time.monotonic(), r))


# ---------------------------------------------------------------- sampling

def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def scrape(port):
    """(errors by reason, 5xx responses, open client connections, requests,
    s2 up) from /metrics, listener-level series only (no double count)."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n")
        status, _, body = read_response(s.makefile("rb"))
        s.close()
    except Exception:
        return None
    reasons = collections.Counter()
    xx5 = conns = reqs = 0
    s2up = None
    for line in body.decode("latin-1").splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        name, _, rest = line.partition("{")
        labels, _, val = rest.rpartition("} ")
        try:
            v = float(val.split()[0])
        except (ValueError, IndexError):
            continue
        if name == "sluice_server_up" and 'server="s2"' in labels:
            s2up = int(v)
        if 'listener="' not in labels:
            continue
        if name == "sluice_errors_total":
            m = re.search(r'reason="([^"]+)"', labels)
            if m:
                reasons[m.group(1)] += int(v)
        elif name == "sluice_responses_5xx_total":
            xx5 += int(v)
        elif name == "sluice_client_connections":
            conns += int(v)
        elif name == "sluice_requests_total":
            reqs += int(v)
    return reasons, xx5, conns, reqs, s2up


def pct(vals, q):
    if not vals:
        return float("nan")
    v = sorted(vals)
    return v[min(len(v) - 1, int(q * len(v)))]


def slope(points):
    """Least-squares slope (per second) of [(t, y)]; None with < 3 points."""
    if len(points) < 3:
        return None
    ts = [p[0] for p in points]
    ys = [p[1] for p in points]
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    den = sum((t - mt) ** 2 for t in ts)
    if den == 0:
        return None
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / den


# ---------------------------------------------------------------- report

COLS = ["t_s", "rss_kb", "rss_master_kb", "rss_workers_kb", "fds", "workers", "worker_pids",
        "client_conns", "req_per_s", "probe_n", "probe_p50_ms", "probe_p99_ms", "probe_max_ms",
        "s2_up", "sluice_5xx", "sluice_errors"] + [f"err_{x}" for x in LOADS]


def verdict(points, mean, floor):
    """(slope per hour, flat?) over POINTS [(t, y)]: flat when the fitted
    change across POINTS' span is under max(FLAT_SHARE * MEAN, FLOOR)."""
    sl = slope(points)
    if sl is None:
        return None, None
    span = points[-1][0] - points[0][0]
    return sl * 3600, abs(sl * span) < max(FLAT_SHARE * mean, floor)


def chart(path, rows, events):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t = [r["t_s"] / 60 for r in rows]
    fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    axes[0].plot(t, [r["rss_kb"] / 1024 for r in rows], label="master + workers")
    axes[0].plot(t, [r["rss_workers_kb"] / 1024 for r in rows], label="workers", alpha=0.6)
    axes[0].set_ylabel("RSS (MiB)")
    axes[0].set_ylim(bottom=0)
    axes[0].legend(loc="lower right", fontsize=8)
    axes[1].plot(t, [r["fds"] for r in rows], color="tab:purple")
    axes[1].set_ylabel("open fds")
    axes[1].set_ylim(0, 1.15 * max(r["fds"] for r in rows))
    axes[2].plot(t, [r["probe_p99_ms"] for r in rows], color="tab:red", label="p99")
    axes[2].plot(t, [r["probe_p50_ms"] for r in rows], color="tab:green", label="p50")
    axes[2].set_ylabel("probe latency (ms)")
    axes[2].set_yscale("log")
    axes[2].legend(loc="upper right", fontsize=8)
    axes[2].set_xlabel("minutes")
    for ax in axes:
        for (et, kind, _) in events:
            ax.axvline(et / 60, color="red" if kind == "kill" else "green", alpha=0.35, lw=0.8)
        ax.grid(alpha=0.3)
    axes[0].set_title("sluice soak: 2 workers, waf.lua, mixed traffic; "
                      "red/green lines: backend s2 killed/restarted", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fmt_rate(per_hour, unit):
    return "n/a" if per_hour is None else f"{per_hour:+,.1f} {unit}/hour"


def report(outdir, rows, events, started, conf_path, exit_rc, log_problems, errs, oks,
           reasons_total, facts):
    n = len(rows)
    L = ["# Soak: memory, descriptors and latency over time", ""]
    if n < 6:
        L += ["Too few samples for a report.", ""]
        write(os.path.join(outdir, "soak.md"), "\n".join(L))
        return
    dur = rows[-1]["t_s"]
    warm = next((r for r in rows if r["t_s"] >= min(60, dur / 6)), rows[1])
    last, first = rows[-1], rows[0]
    half = [r for r in rows if r["t_s"] >= dur / 2]
    third = [r for r in rows if r["t_s"] >= dur * 2 / 3]
    span3 = third[-1]["t_s"] - third[0]["t_s"]
    mean_rss = statistics.fmean(r["rss_kb"] for r in third)
    mean_fds = statistics.fmean(r["fds"] for r in third)
    rss_h3, rss_flat = verdict([(r["t_s"], r["rss_kb"]) for r in third], mean_rss, FLAT_MIN_RSS_KB)
    fds_h3, fds_flat = verdict([(r["t_s"], r["fds"]) for r in third], mean_fds, FLAT_MIN_FDS)
    rss_h2, _ = verdict([(r["t_s"], r["rss_kb"]) for r in half], mean_rss, FLAT_MIN_RSS_KB)
    fds_h2, _ = verdict([(r["t_s"], r["fds"]) for r in half], mean_fds, FLAT_MIN_FDS)
    pids = {r["worker_pids"] for r in rows}
    flat = rss_flat and fds_flat
    p99_first = statistics.median(r["probe_p99_ms"] for r in rows[: max(3, n // 3)]
                                  if r["probe_p99_ms"] == r["probe_p99_ms"])
    p99_last = statistics.median(r["probe_p99_ms"] for r in third
                                 if r["probe_p99_ms"] == r["probe_p99_ms"])
    kills = sum(1 for e in events if e[1] == "kill")
    L += [f"{started:%Y-%m-%d %H:%M} UTC, {dur / 60:.1f} minutes, {n} samples every {SAMPLE:g} s, "
          f"{git_describe()}.", "",
          f"**Verdict: {'flat' if flat else 'NOT flat'} at the end.** Over the last third "
          f"({span3 / 60:.1f} minutes) RSS {'is flat' if rss_flat else 'is not flat'}: its "
          f"least-squares line moves {rss_h3 * span3 / 3600 / 1024:+.2f} MiB "
          f"({100 * rss_h3 * span3 / 3600 / mean_rss:+.2f}% of its mean; "
          f"{fmt_rate(rss_h3, 'KiB')}); open descriptors {'are flat' if fds_flat else 'are not flat'}: "
          f"{fds_h3 * span3 / 3600:+.1f} ({fmt_rate(fds_h3, 'fds')}). Flat means a fitted change "
          f"across the last third under {100 * FLAT_SHARE:.0f}% of the mean, or under "
          f"{FLAT_MIN_RSS_KB // 1024} MiB (RSS) and {FLAT_MIN_FDS} descriptors.", "",
          "| | first sample | after warm-up | end | min | max |",
          "|---|---:|---:|---:|---:|---:|"]

    def line(label, key, conv, f="{:,.1f}"):
        vals = [conv(r[key]) for r in rows]
        L.append(f"| {label} | " + " | ".join(f.format(x) for x in (
            conv(first[key]), conv(warm[key]), conv(last[key]), min(vals), max(vals))) + " |")
    line("RSS, master + workers (MiB)", "rss_kb", lambda v: v / 1024)
    line("RSS, workers (MiB)", "rss_workers_kb", lambda v: v / 1024)
    line("open descriptors, master + workers", "fds", lambda v: v, "{:,.0f}")
    line("open client connections", "client_conns", lambda v: v, "{:,.0f}")
    line("requests/s (all listeners)", "req_per_s", lambda v: v, "{:,.0f}")
    L += ["", f"Warm-up is the first sample at or after {warm['t_s']:.0f} s.", "",
          "| slope | last half | last third |", "|---|---:|---:|",
          f"| RSS | {fmt_rate(rss_h2, 'KiB')} | {fmt_rate(rss_h3, 'KiB')} |",
          f"| open descriptors | {fmt_rate(fds_h2, 'fds')} | {fmt_rate(fds_h3, 'fds')} |", "",
          f"Probe latency (GET every 50 ms on one keepalive connection): median of the "
          f"per-sample p99 {p99_first:.2f} ms over the first third, {p99_last:.2f} ms over the "
          f"last third; p50 at the end {last['probe_p50_ms']:.2f} ms.", "",
          f"Worker processes: {len(pids)} distinct set(s) of PIDs "
          f"({'no worker was replaced' if len(pids) == 1 else 'a worker was replaced: see samples.tsv'}); "
          f"sluice exited {exit_rc} on SIGTERM.", "",
          "![soak](soak.png)", "",
          "## Errors", "",
          f"Backend s2 was killed {kills} times (every {FLAP} s, down for {FLAP / 3:.0f} s). "
          "Client-side outcomes per load (successes, then failures by kind):", "",
          "| load | ok | failures |", "|---|---:|---|"]
    for load in LOADS:
        fails = ", ".join(f"{k}: {v:,}" for (ld, k), v in sorted(errs.items()) if ld == load) or "none"
        L.append(f"| {load} | {oks.get(load, 0):,} | {fails} |")
    L += ["", "sluice's own `sluice_errors_total` by reason (listener series, whole run):", ""]
    if reasons_total:
        L += ["| reason | count |", "|---|---:|"]
        L += [f"| {k} | {v:,} |" for k, v in reasons_total.most_common()]
    else:
        L.append("none")
    L += ["", "Examples of client-side failures:", ""]
    L += [f"- {ld}/{k}: `{ex}`" for (ld, k), ex in sorted(ERR.examples.items())] or ["- none"]
    L += ["", "sluice's log lines above info (counted by message, numbers and addresses masked):", ""]
    L += [f"- {c} × `{m}`" for m, c in log_problems.most_common(20)] or ["- none"]
    L += ["", "## What ran", "", "```text", __doc__.split("\n\n", 1)[1].split("\n\nKnobs")[0],
          "```", "",
          f"Samples: [soak/samples.tsv](soak/samples.tsv), backend events: "
          f"[soak/events.tsv](soak/events.tsv), wrk output: soak/raw/.", "",
          f"`{os.path.basename(conf_path)}`:", "", "```yaml", open(conf_path).read().rstrip(), "```", ""]
    L += ["## Machine", "", "| | |", "|---|---|"]
    L += [f"| {k} | {v.replace('|', '/')} |" for k, v in facts]
    L += ["", f"Reproduce: `SOAK_SECONDS={SECONDS} make soak`", ""]
    write(os.path.join(outdir, "soak.md"), "\n".join(L))


def mask(line):
    line = re.sub(r"^\S+ ", "", line)
    line = re.sub(r"\d+\.\d+\.\d+\.\d+:\d+", "ADDR", line)
    return re.sub(r"\d+", "N", line)


# ---------------------------------------------------------------- main

def main():
    started, outdir, d = results_dirs("soak")
    sluice_bin = os.path.join(BUILD, "sluice")
    for b in (sluice_bin, os.path.join(BUILD, "demo_backend")):
        if not os.access(b, os.X_OK):
            sys.exit(f"{PROG}: {b} missing (bench/soak.sh builds it)")
    log(f"{SECONDS} s, sample every {SAMPLE:g} s, backend s2 flaps every {FLAP} s; results in {d}")
    facts = machine_facts([("wrk", wrk_version())])
    certs, _ = tlslib.make_certs(d)
    ports = {k: free_port() for k in ("http", "https", "admin", "s1", "s2")}
    backends = {n: Backend(d, n, ports[n]) for n in ("s1", "s2")}
    for b in backends.values():
        b.start()
    conf = os.path.join(d, "sluice.yaml")
    write(conf, conf_sluice(d, ports, certs))
    sp = start([sluice_bin, "-c", conf], os.path.join(d, "sluice.out"))
    if not wait_port(ports["http"], sp) or not wait_port(ports["admin"], sp):
        sys.exit(f"{PROG}: sluice did not start, see {d}/sluice.out and sluice.error.log")
    wait_children(sp, n=WORKERS)

    t0 = time.monotonic()
    t_end = t0 + SECONDS
    events, elock = [], threading.Lock()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    atk = attacks()
    probe = Probe(ports["http"])
    threads = [threading.Thread(target=flapper, args=(backends["s2"], events, elock)),
               threading.Thread(target=wrk_loop, args=(ports["http"], d, t_end)),
               threading.Thread(target=probe.run)]
    threads += [threading.Thread(target=churn, args=(ports["http"], "churn", None, atk, i, 0.01))
                for i in range(2)]
    threads += [threading.Thread(target=churn, args=(ports["https"], "churn-tls", ctx, atk, 7, 0.02))]
    threads += [threading.Thread(target=slow_send, args=(ports["http"], i)) for i in range(3)]
    threads += [threading.Thread(target=slow_read, args=(ports["http"], i)) for i in range(2)]
    for t in threads:
        t.daemon = True
        t.start()

    tsv = open(os.path.join(d, "samples.tsv"), "w")
    tsv.write("\t".join(COLS) + "\n")
    rows = []
    prev_err = collections.Counter()
    prev_m = scrape(ports["admin"])
    prev_t = time.monotonic()
    next_t = t0 + SAMPLE
    try:
        while time.monotonic() < t_end:
            if STOP.wait(max(0.0, next_t - time.monotonic())):
                break
            next_t += SAMPLE
            now = time.monotonic()
            if sp.poll() is not None:
                log(f"sluice exited {sp.returncode} during the run")
                break
            workers = descendants(sp.pid)
            rss_m, rss_w = rss_kb(sp.pid), sum(rss_kb(w) for w in workers)
            fds = fd_count(sp.pid) + sum(fd_count(w) for w in workers)
            lat = probe.take()
            m = scrape(ports["admin"])
            errs, _ = ERR.snapshot()
            per_load = collections.Counter()
            for (ld, _k), v in (errs - prev_err).items():
                per_load[ld] += v
            prev_err = errs
            row = {"t_s": round(now - t0, 1), "rss_kb": rss_m + rss_w, "rss_master_kb": rss_m,
                   "rss_workers_kb": rss_w, "fds": fds, "workers": len(workers),
                   "worker_pids": ",".join(map(str, sorted(workers))),
                   "probe_n": len(lat), "probe_p50_ms": round(pct(lat, 0.5), 3),
                   "probe_p99_ms": round(pct(lat, 0.99), 3),
                   "probe_max_ms": round(max(lat), 3) if lat else float("nan"),
                   "client_conns": m[2] if m else -1, "s2_up": m[4] if m else -1,
                   "req_per_s": round((m[3] - prev_m[3]) / (now - prev_t)) if m and prev_m else -1,
                   "sluice_5xx": (m[1] - prev_m[1]) if m and prev_m else -1,
                   "sluice_errors": (sum(m[0].values()) - sum(prev_m[0].values())) if m and prev_m else -1}
            for ld in LOADS:
                row[f"err_{ld}"] = per_load.get(ld, 0)
            if m:
                prev_m, prev_t = m, now
            rows.append(row)
            tsv.write("\t".join(str(row[c]) for c in COLS) + "\n")
            tsv.flush()
            if len(rows) % max(1, int(60 / SAMPLE)) == 0:
                log(f"{row['t_s'] / 60:5.1f} min: RSS {row['rss_kb'] / 1024:.1f} MiB, fds {fds}, "
                    f"{row['req_per_s']} req/s, probe p99 {row['probe_p99_ms']:.2f} ms, "
                    f"client errors so far {sum(errs.values())}")
    finally:
        STOP.set()
        tsv.close()
        for t in threads:
            t.join(90)
        final_m = scrape(ports["admin"])
        exit_rc = stop(sp, grace=15)
        for b in backends.values():
            if b.p is not None:
                stop(b.p)
    with open(os.path.join(d, "events.tsv"), "w") as f:
        f.write("t_s\tevent\tserver\n")
        for et, kind, name in events:
            f.write(f"{et - t0:.1f}\t{kind}\t{name}\n")
    rel_events = [(et - t0, kind, name) for et, kind, name in events]
    errlog = open(os.path.join(d, "sluice.error.log"), errors="replace").read()
    problems = collections.Counter(mask(ln) for ln in log_lines_above_info(errlog))
    errs, oks = ERR.snapshot()
    reasons_total = final_m[0] if final_m else collections.Counter()
    chart(os.path.join(outdir, "soak.png"), rows, rel_events)
    report(outdir, rows, rel_events, started, conf, exit_rc, problems, errs, oks, reasons_total, facts)
    refresh_latest(RESULTS, outdir, "soak")
    with open(os.path.join(outdir, "soak.md")) as f:
        print()
        print(f.read().split("## What ran")[0].rstrip())
    log(f"report: {os.path.join(outdir, 'soak.md')}")
    return 0


if __name__ == "__main__":
    run_main(main, PROG)
