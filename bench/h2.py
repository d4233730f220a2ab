#!/usr/bin/env python3
"""HTTP/2 benchmark: h2 over TLS to ONE proxy worker, HTTP/1.1 keepalive to
the origin (issue 20).

sluice (workers: 1) vs HAProxy 2.6 (nbthread 1) vs nginx 1.22
(worker_processes 1), each terminating TLS 1.3 (ECDSA P-256, the same
certificate files) with h2 chosen by ALPN, in front of the same origin (nginx
answering every request with a static 128-byte body) over pooled HTTP/1.1
keepalive connections: at most 64 per proxy (sluice servers[].max_connections
64, HAProxy server maxconn 64 + http-reuse always, nginx upstream keepalive 64
with proxy_http_version 1.1 — nginx has no connection cap with a queue, so 64
is the idle pool it keeps, not a limit on what it opens).

Part "load": h2load in two shapes, target by target, the order rotating
round after round, every run on a freshly started proxy:
  c100m10   100 connections x 10 concurrent streams each (h2load -c100 -m10)
  c1000m1   1,000 connections x 1 stream each (h2load -c1000 -m1)
Per run: req/s (h2load, measured window only), p50/p99 (from h2load's
per-request log, --log-file: exact per-request times), the proxy's CPU µs
per request (utime+stime of its process tree from /proc over the measured
window ÷ requests completed in it; the warm-up, with every TLS handshake, is
outside the window), and backend connections: accepted at the origin (its
nginx stub_status `accepts`, read over one keepalive connection of our own,
which is subtracted) from the proxy's start to the end of the measured
window and within the window, and the most open at once (stub_status
`Active connections`, sampled every SAMPLE_MS during the run).

Part "memory": RSS (and PSS) of the proxy's process tree as idle h2
connections are added step by step, each one with a TLS handshake, the h2
preface and SETTINGS and one GET / answered, then left idle (bench/h2hold.py;
h2load cannot leave connections idle); bytes per idle h2 connection = the
least-squares slope over the steps (as bench/memory.py does for HTTP/1.1).

Usage: sh bench/h2.sh  (or `make bench-h2`). Environment knobs:
  QUICK=1          3 s runs, 1 s warm-up, memory steps 0,300
  DURATION=N       seconds per measured h2load window (10; QUICK 3)
  WARMUP=N         h2load --warm-up-time: seconds before the window, with
                   every connection opened (2; QUICK 1)
  ROUNDS=N         rounds; each runs every shape on every target once (3)
  SHAPES=a,b       subset of c100m10,c1000m1 (both); any cNmM works
  TARGETS=a,b      subset/order of sluice,haproxy,nginx
  PARTS=a,b        subset of load,memory
  STEPS=a,b,...    idle h2 connections of the memory ramp (0,1000,2000,3000;
                   QUICK 0,300)
  MEM_ROUNDS=N     rounds of the memory part (ROUNDS)
  SETTLE=S         most seconds to wait for RSS to settle at a step (3; QUICK 1)
  SAMPLE_MS=N      ms between two reads of the origin's open connections (200)
  KEEP_LOGS=1      keep h2load's per-request logs (tens of MB per run) in
                   h2/raw/; by default they are deleted once read
  SLUICE=path      the sluice binary measured (BUILD/sluice)
  PIN=0            do not pin with taskset
  NOISE_PCT=N      others' CPU (% of one CPU) that makes a run noisy (25)
  QUIET_BUDGET=N   seconds in all for waiting for quiet / re-running (60; QUICK 15)
  BUILD=dir        where sluice is (build); relative BUILD, SLUICE: from the
                   repository root
  RESULTS=dir      results root (bench/results); BENCH_TS=name: the
                   results directory's name (default: UTC timestamp)

Output: RESULTS/<ts>/h2.md, h2.png (req/s, CPU µs/req, p99 by shape),
h2-memory.png (RSS vs idle h2 connections), h2/ (certificates, configs,
h2load output, logs, runs.json); RESULTS/latest/ gets a copy and report.md
links it. Every process started here is stopped by its PID. Exit status 1
if a target produced no figure.
"""
import functools
import http.client
import json
import math
import os
import re
import resource
import select
import subprocess
import sys
import threading
import time

# This script is bench/h2.py and its directory comes first on sys.path: the
# h2 library (which bench/h2hold.py imports) must be found before it.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [x for x in sys.path if os.path.abspath(x or ".") != _HERE] + [_HERE]

import benchlib  # noqa: E402
from benchlib import (BODY_SIZE, CLK_TCK,  # noqa: E402
                       PIN, QUICK, RESULTS, ROOT, SLUICE_BIN, STARTED, STATIC_BODY,
                      cmd_out, exit_status, fmt, fmt_mmm, free_port, fsize, grouped_bars,
                      haproxy_version, log_lines_above_info, lsq_slope, machine_facts, mmm, need_tools,
                      nginx_main, nginx_temp_paths, nginx_upstream, noise_note, paired, pinning, proc_pss_kb,
                      proc_ticks, Quiet, read_tail, refresh_latest, report_end, report_list, results_dirs,
                      run_main, show_report, sluice_describe, start, stop, stop_proxy, system_busy_ticks,
                      tree_rss_kb, tree_ticks, tree_times, wait_children, wait_port, write)
from tlslib import copy_sluice, haproxy_bind_ssl, make_certs, nginx_ssl, sluice_tls  # noqa: E402
import h2hold  # noqa: E402

PROG = "bench/h2.py"
env_int = functools.partial(benchlib.env_int, prog=PROG)
env_float = functools.partial(benchlib.env_float, prog=PROG)
env_list = functools.partial(benchlib.env_list, prog=PROG)
env_names = functools.partial(benchlib.env_names, prog=PROG)

DURATION = env_int("DURATION", 3 if QUICK else 10, 1)
WARMUP = env_int("WARMUP", 1 if QUICK else 2, 1)
ROUNDS = env_int("ROUNDS", 3, 1)
SHAPES = env_list("SHAPES", "c100m10,c1000m1")
TARGETS = env_names("TARGETS", ["sluice", "haproxy", "nginx"], what="target")
PARTS = env_names("PARTS", ["load", "memory"], what="part")
STEPS = sorted(set(env_list("STEPS", "0,300" if QUICK else "0,1000,2000,3000", int)))
MEM_ROUNDS = env_int("MEM_ROUNDS", ROUNDS, 1)
SETTLE = env_float("SETTLE", 1 if QUICK else 3)
SAMPLE_MS = env_int("SAMPLE_MS", 200, 10)
KEEP_LOGS = os.environ.get("KEEP_LOGS", "") not in ("", "0")
NOISE_PCT = env_int("NOISE_PCT", 25)
QUIET_BUDGET = env_int("QUIET_BUDGET", 15 if QUICK else 60)
ATTEMPTS = 3
POOL = 64                     # backend connections: sluice/HAProxy cap, nginx idle pool
CERT, VER = "ecdsa", "1.3"    # the TLS listeners' certificate and version
IDLE_TIMEOUT = "30m"          # client idle timeouts: far longer than any run
IDLE_MIN_S = 1.0              # seconds idle connections sit before a step's first reading
HOLD_CONCURRENCY = 50         # handshakes in flight while h2hold opens connections
BACKLOG = 4096                # listen backlog of the proxies and the origin (1,000 connect at once)

SHAPE = {}
for s in SHAPES:
    m = re.fullmatch(r"c(\d+)m(\d+)", s)
    if not m or not int(m.group(1)) or not int(m.group(2)):
        sys.exit(f"{PROG}: SHAPES: {s!r} is not cNmM (N connections, M streams each)")
    SHAPE[s] = (int(m.group(1)), int(m.group(2)))
if not TARGETS or not PARTS or ("load" in PARTS and not SHAPES) or ("memory" in PARTS and len(STEPS) < 2):
    sys.exit(f"{PROG}: nothing to measure (the memory part needs two STEPS or more)")

# Client connections each proxy must take: the biggest shape or memory step,
# with room; nginx also opens a backend connection per stream in flight.
MAX_CLIENTS = max([c for c, _ in SHAPE.values()] * ("load" in PARTS) + [max(STEPS)] * ("memory" in PARTS))
MAXCONN = MAX_CLIENTS + 1000
NOFILE_NEED = 2 * MAXCONN + 200

PROXY_PIN, LOAD_PIN, PIN_TEXT = pinning(PIN)
PIN_TEXT = PIN_TEXT.replace("wrk and the backend", "h2load (or h2hold) and the origin")
COLORS = {"sluice": "#2b7bba", "haproxy": "#e07b39", "nginx": "#3a9e4f"}
SLUICE = {}


def log(msg):
    print(f"[h2] {msg}", flush=True)


def shape_name(s):
    c, m = SHAPE[s]
    return f"{c:,} conns × {m} stream{'s' if m > 1 else ''}"


# ---------------------------------------------------------------- configs

def conf_origin(d, port, sport):
    """The static origin of the other scenarios (nginx, one worker, 128 bytes
    to every request), plus a stub_status listener to count its connections."""
    return (f"# origin: nginx answering every request with {BODY_SIZE} bytes; stub_status on a second\n"
            "# port counts the connections it accepts (the proxies' backend connections)\n"
            + nginx_main(d, "origin", rlimit=None, conns=MAXCONN * 2)
            + "    access_log off;\n    keepalive_requests 1000000;\n    keepalive_timeout 60s;\n"
            + nginx_temp_paths(d, "tmp-origin")
            + f"""    server {{
        listen 127.0.0.1:{port} backlog={BACKLOG};
        location / {{
            default_type text/plain;
            return 200 "{STATIC_BODY}";
        }}
    }}
    server {{
        listen 127.0.0.1:{sport};
        location / {{
            stub_status;
        }}
    }}
}}
""")


def conf_sluice(d, port, bport, certs):
    return f"""# sluice, one worker: a TLS listener offering h2 by ALPN -> one backend with one server,
# a keepalive pool of at most {POOL} connections (requests beyond wait in the backend's queue)
workers: 1
error_log: {d}/sluice.error.log
user: nobody
access_log: off
timeouts:
  client_header: {IDLE_TIMEOUT}
  client_keepalive: {IDLE_TIMEOUT}
  client_send: {IDLE_TIMEOUT}
  drain: 0
listeners:
  - name: h2
    address: 127.0.0.1:{port}
    backlog: {BACKLOG}
    backend: app
    protocols: [h2, http/1.1]
{sluice_tls(certs, CERT, VER, False)}backends:
  - name: app
    idle_max: {POOL}
    queue_timeout: 30s
    servers:
      - name: s1
        address: 127.0.0.1:{bport}
        max_connections: {POOL}
"""


def conf_haproxy(d, port, bport, certs):
    return f"""# HAProxy, one thread: TLS with ALPN h2,http/1.1 -> server s1, at most {POOL} connections
# (server maxconn; requests beyond wait in its queue), reused across streams (http-reuse always)
global
    nbthread 1
    maxconn {MAXCONN}
    pidfile {d}/haproxy.pid
    # HAProxy stops keeping idle server connections once a quarter of its
    # descriptors are in use (tune.pool-high-fd-ratio 25): with 1,000 h2
    # clients and a smaller MAXCONN it then opens a server connection per
    # stream. The other proxies keep their pool whatever the client count.
    tune.pool-low-fd-ratio 90
    tune.pool-high-fd-ratio 95

defaults
    mode http
    maxconn {MAXCONN}
    option http-keep-alive
    http-reuse always
    timeout connect 3s
    timeout client {IDLE_TIMEOUT}
    timeout server 60s
    timeout http-request {IDLE_TIMEOUT}
    timeout http-keep-alive {IDLE_TIMEOUT}
    timeout queue 30s

frontend fe
    bind 127.0.0.1:{port}{haproxy_bind_ssl(certs, CERT, VER, False)} alpn h2,http/1.1 backlog {BACKLOG}
    default_backend be

backend be
    server s1 127.0.0.1:{bport} maxconn {POOL}
"""


def conf_nginx(d, port, bport, certs):
    return (f"# nginx, one worker: TLS + http2 -> upstream with a keepalive pool of {POOL} idle connections\n"
            "# (OSS nginx cannot queue at a connection cap: it opens what the streams in flight need)\n"
            + nginx_main(d, "nginx", rlimit=NOFILE_NEED, conns=MAXCONN * 2) + f"""    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout {IDLE_TIMEOUT};
    client_header_timeout {IDLE_TIMEOUT};
""" + nginx_temp_paths(d, "tmp-nginx") + nginx_upstream(bport, POOL) + f"""    server {{
        listen 127.0.0.1:{port} ssl http2 backlog={BACKLOG};
{nginx_ssl(certs, CERT, VER, False)}        location / {{
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
""")


CONF = {"sluice": (conf_sluice, "yaml"), "haproxy": (conf_haproxy, "cfg"), "nginx": (conf_nginx, "conf")}
ERRLOG = {"sluice": "sluice.error.log", "haproxy": "haproxy.out", "nginx": "nginx.error.log"}


def start_proxy(tgt, d, bport, certs):
    """Start one proxy on a free port (pinned), wait until it listens (and
    has forked its worker). Returns dict(p (None if it did not start), port,
    cmd, conf, errlog, pos)."""
    port = free_port()
    os.makedirs(os.path.join(d, "configs"), exist_ok=True)
    make, ext = CONF[tgt]
    conf = write(os.path.join(d, "configs", f"{tgt}.{ext}"), make(d, port, bport, certs))
    errlog = os.path.join(d, ERRLOG[tgt])
    pos = fsize(errlog)
    if tgt == "sluice":
        cmd = PROXY_PIN + [SLUICE["path"], "-c", conf]
        p = start(cmd, os.path.join(d, "sluice.out"))
    elif tgt == "haproxy":
        cmd = PROXY_PIN + ["haproxy", "-f", conf, "-db"]
        p = start(cmd, errlog)
    else:
        os.makedirs(os.path.join(d, "tmp-nginx"), exist_ok=True)
        cmd = PROXY_PIN + ["nginx", "-p", d, "-e", errlog, "-c", conf]
        p = start(cmd, os.path.join(d, "nginx.out"))
    px = {"p": p, "port": port, "cmd": " ".join(cmd), "conf": conf, "errlog": errlog, "pos": pos}
    if not wait_port(port, p):
        stop(p)
        px["p"] = None
    elif tgt != "haproxy":
        wait_children(p)
    return px


def start_origin(d):
    port, sport = free_port(), free_port()
    os.makedirs(os.path.join(d, "tmp-origin"), exist_ok=True)
    conf = write(os.path.join(d, "origin.conf"), conf_origin(d, port, sport))
    cmd = LOAD_PIN + ["nginx", "-p", d, "-e", os.path.join(d, "origin.error.log"), "-c", conf]
    p = start(cmd, os.path.join(d, "origin.out"))
    if not wait_port(port, p) or not wait_port(sport, p):
        sys.exit(f"{PROG}: the nginx origin did not start, see {d}/origin.error.log")
    return p, port, sport, " ".join(cmd), conf


def check(port):
    """One GET / over h2 on a new TLS connection: None if h2 was negotiated
    and the answer is 200 with BODY_SIZE bytes, else what went wrong."""
    r = h2hold.probe(port)
    if r["error"]:
        return r["error"]
    if r["status"] != "200" or r["body"] != BODY_SIZE:
        return f"status {r['status']}, {r['body']} body bytes"
    return None


# ---------------------------------------------------------------- the origin's counters

class Stub:
    """The origin's stub_status, read over one keepalive connection of our
    own (a reconnect is counted), so that what the proxy opened and sent is
    the counters' difference minus our own connections and requests."""

    def __init__(self, port):
        self.port, self.conn, self.own_conns, self.own_reqs = port, None, 0, 0
        self.lock = threading.Lock()

    def read(self):
        with self.lock:
            body = None
            for _ in range(3):
                try:
                    if self.conn is None:
                        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                        self.conn.connect()
                        self.own_conns += 1
                    self.own_reqs += 1
                    self.conn.request("GET", "/")
                    body = self.conn.getresponse().read().decode()
                    break
                except (OSError, http.client.HTTPException):
                    if self.conn is not None:
                        self.conn.close()
                    self.conn = None
            m = body and re.search(r"Active connections:\s*(\d+).*?\n\s*(\d+)\s+(\d+)\s+(\d+)", body, re.S)
            if not m:
                return None
            return {"active": int(m.group(1)), "accepts": int(m.group(2)), "requests": int(m.group(4)),
                    "own_conns": self.own_conns, "own_reqs": self.own_reqs}

    def close(self):
        with self.lock:
            if self.conn is not None:
                self.conn.close()
            self.conn = None


def opened(a, b):
    """Connections the origin accepted between stub readings a and b, ours
    left out; None if a reading failed."""
    if not a or not b:
        return None
    return (b["accepts"] - a["accepts"]) - (b["own_conns"] - a["own_conns"])


def origin_requests(a, b):
    if not a or not b:
        return None
    return (b["requests"] - a["requests"]) - (b["own_reqs"] - a["own_reqs"])


class Sampler(threading.Thread):
    """Reads the origin's open connections every SAMPLE_MS; peak = the most
    seen at once, ours left out."""

    def __init__(self, stub):
        super().__init__(daemon=True)
        self.stub, self.peak, self.n = stub, 0, 0
        self.halt = threading.Event()

    def see(self, s):
        if s:
            self.peak = max(self.peak, s["active"] - 1)     # our own connection is one of them
            self.n += 1

    def run(self):
        while not self.halt.wait(SAMPLE_MS / 1000):
            self.see(self.stub.read())

    def finish(self):
        self.halt.set()
        self.join(5)


# ---------------------------------------------------------------- h2load

def h2load_cmd(port, shape, logf):
    c, m = SHAPE[shape]
    return LOAD_PIN + ["h2load", "-t1", f"-c{c}", f"-m{m}", f"-D{DURATION}", f"--warm-up-time={WARMUP}",
                       f"--log-file={logf}", f"https://127.0.0.1:{port}/"]


def parse_h2load(out):
    r = {"requests": 0, "rps": None, "failed": 0, "errored": 0, "timeout": 0, "non2xx": 0, "proto": None}
    m = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    if m:
        r["rps"] = float(m.group(1))
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                  r"(\d+) errored, (\d+) timeout", out)
    if m:
        r["requests"] = int(m.group(4))
        r["failed"], r["errored"], r["timeout"] = int(m.group(5)), int(m.group(6)), int(m.group(7))
    m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if m:
        r["non2xx"] = int(m.group(3)) + int(m.group(4))
    m = re.search(r"Application protocol: (\S+)", out)
    if m:
        r["proto"] = m.group(1)
    return r


def percentile(sorted_v, q):
    """Nearest-rank percentile of an ascending list."""
    if not sorted_v:
        return None
    return sorted_v[max(0, math.ceil(q / 100 * len(sorted_v)) - 1)]


def latencies(logf):
    """Percentiles (ms) of h2load's per-request log: start (µs since the
    epoch), status, µs to the end of the response; failed streams (-1)
    left out. Returns (dict, rows, failed rows)."""
    times, bad = [], 0
    try:
        with open(logf) as f:
            for line in f:
                parts = line.split("\t")
                if len(parts) < 3:
                    continue
                if parts[1] == "-1":
                    bad += 1
                    continue
                times.append(int(parts[2]))
    except OSError:
        return {}, 0, 0
    times.sort()
    return ({f"p{q}".replace(".", "_"): (percentile(times, q) / 1000 if times else None)
             for q in (50, 90, 99, 99.9)} | {"max": times[-1] / 1000 if times else None},
            len(times), bad)


def snapshot(proxy, origin, h2l, stub):
    return {"t": time.monotonic(), "proxy": tree_times(proxy.pid), "origin": tree_ticks(origin.pid),
            "h2load": proc_ticks(h2l.pid) or 0, "busy": system_busy_ticks(), "stub": stub.read()}


def delta(a, b):
    """Ticks of the processes alive at both readings."""
    return sum(b[q] - a[q] for q in b if q in a)


def measure(tgt, shape, rnd, d, bport, certs, origin, stub, commands, confs):
    """One attempt: a fresh proxy, checked, then one h2load run (warm-up,
    measured window), stopped. Returns the run dict."""
    key = f"{shape}-{tgt}"
    r = {**{m: None for m in METRICS}, "label": tgt, "case": shape, "round": rnd + 1, "problems": [],
         "loglines": [], "requests": 0, "other_pct": 0.0, "sock_errors": 0, "non2xx": 0}
    s0 = stub.read()
    px = start_proxy(tgt, d, bport, certs)
    commands.setdefault(tgt, px["cmd"].replace(px["conf"], "CONFIG"))
    confs.setdefault(tgt, px["conf"])
    if px["p"] is None:
        r["problems"].append(f"did not start; log: {read_tail(px['errlog'], px['pos']).strip()[-500:]!r}")
        return r
    proxy = px["p"]
    err = check(px["port"])
    if err:
        r["problems"].append(f"h2 check failed: {err}")
    logf = os.path.join(d, "raw", f"r{rnd + 1}-{key}.log")
    raw = os.path.join(d, "raw", f"r{rnd + 1}-{key}.txt")
    cmd = h2load_cmd(px["port"], shape, logf)
    sampler = Sampler(stub)
    sampler.start()
    h2l = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                           text=True, bufsize=1)
    STARTED.append(h2l)
    watchdog = threading.Timer(WARMUP + DURATION + 60, h2l.kill)
    watchdog.start()
    marks, out = {}, []
    for line in h2l.stdout:
        out.append(line)
        if "Main benchmark duration is started" in line:
            marks["start"] = snapshot(proxy, origin, h2l, stub)
        elif "Main benchmark duration is over" in line:
            marks["end"] = snapshot(proxy, origin, h2l, stub)
    h2l.wait()
    watchdog.cancel()
    STARTED.remove(h2l)
    sampler.finish()
    out = "".join(out)
    write(raw, " ".join(cmd) + "\n" + out)
    r["raw"] = os.path.relpath(raw, d)
    r.update(parse_h2load(out))
    lat, rows, bad_rows = latencies(logf)
    r.update(lat)
    r["log_rows"], r["log_failed"] = rows, bad_rows
    if not KEEP_LOGS and os.path.exists(logf):
        os.unlink(logf)
    if h2l.returncode:
        r["problems"].append(f"h2load exited with status {h2l.returncode}")
    if r["proto"] != "h2":
        r["problems"].append(f"h2load's application protocol: {r['proto']!r}, not h2")
    r["sock_errors"] = r["failed"] + r["errored"] + r["timeout"]
    if r["sock_errors"]:
        r["problems"].append(f"h2load: {r['failed']} failed, {r['errored']} errored, {r['timeout']} timeout")
    if r["non2xx"]:
        r["problems"].append(f"h2load: {r['non2xx']} 4xx/5xx responses")
    if not r["requests"]:
        r["problems"].append("h2load completed no request")
    if "start" in marks and "end" in marks:
        a, b = marks["start"], marks["end"]
        wall = b["t"] - a["t"]
        du = sum(b["proxy"][q][0] - a["proxy"][q][0] for q in b["proxy"] if q in a["proxy"])
        ds = sum(b["proxy"][q][1] - a["proxy"][q][1] for q in b["proxy"] if q in a["proxy"])
        dp, do, dh = du + ds, delta(a["origin"], b["origin"]), b["h2load"] - a["h2load"]
        req = max(r["requests"], 1)
        r["wall"] = r["wrk_secs"] = wall
        r["cpu_us"] = dp / CLK_TCK * 1e6 / req if r["requests"] else None
        r["cpu_user_us"] = du / CLK_TCK * 1e6 / req if r["requests"] else None
        r["cpu_sys_us"] = ds / CLK_TCK * 1e6 / req if r["requests"] else None
        r["cpu_pct"] = dp / CLK_TCK / wall * 100
        r["backend_cpu_us"] = do / CLK_TCK * 1e6 / req
        r["h2load_cpu_pct"] = dh / CLK_TCK / wall * 100
        r["other_pct"] = ((b["busy"] - a["busy"]) - dp - do - dh) / CLK_TCK / wall * 100
        r["be_opened_window"] = opened(a["stub"], b["stub"])
        r["be_opened"] = opened(s0, b["stub"])
        r["origin_reqs"] = origin_requests(a["stub"], b["stub"])
        for s in (a["stub"], b["stub"]):
            sampler.see(s)
        if sorted(a["proxy"]) != sorted(b["proxy"]):
            r["problems"].append(f"proxy processes changed during the run: {sorted(a['proxy'])} -> "
                                 f"{sorted(b['proxy'])}")
    else:
        r["problems"].append("h2load never reported its measured window (no CPU figure)")
        r["wrk_secs"] = DURATION
    r["be_peak"] = sampler.peak if sampler.n else None
    if proxy.poll() is not None:
        r["problems"].append(f"proxy exited during the run (status {proxy.returncode})")
    bad_exit = stop_proxy(tgt, proxy)
    if bad_exit:
        r["problems"].append(bad_exit)
    r["loglines"] = log_lines_above_info(read_tail(px["errlog"], px["pos"]))[:10]
    return r


# ---------------------------------------------------------------- memory

def reading(p):
    rss = tree_rss_kb(p.pid)
    pss = {q: proc_pss_kb(q) for q in rss}
    return {"rss": sum(rss.values()), "pss": sum(v for v in pss.values() if v),
            "procs": {str(q): [rss[q], pss.get(q)] for q in rss}}


def settle(p):
    """Wait IDLE_MIN_S (a proxy may trim what an idle connection holds after
    a moment), then until RSS stops moving (within SETTLE s)."""
    t0 = time.monotonic()
    time.sleep(IDLE_MIN_S)
    prev = reading(p)
    while time.monotonic() - t0 < max(SETTLE, IDLE_MIN_S + 0.1):
        time.sleep(0.1)
        cur = reading(p)
        if abs(cur["rss"] - prev["rss"]) <= max(64, prev["rss"] * 0.002):
            return cur, time.monotonic() - t0
        prev = cur
    return prev, time.monotonic() - t0


class Hold:
    """bench/h2hold.py, driven over its stdin/stdout."""

    def __init__(self, port, errf):
        self.cmd = LOAD_PIN + [sys.executable, os.path.join(ROOT, "bench", "h2hold.py"), str(port),
                               str(HOLD_CONCURRENCY)]
        self.err = open(errf, "ab")
        self.p = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                  text=True, bufsize=1)
        STARTED.append(self.p)

    def ask(self, line, timeout):
        try:
            self.p.stdin.write(line + "\n")
            self.p.stdin.flush()
        except OSError:
            return None
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        if not ready:
            return None
        out = self.p.stdout.readline().split()
        if len(out) < 12 or out[0] != "open":
            return None
        return {out[i]: int(out[i + 1]) for i in range(0, 12, 2)}

    def close(self):
        try:
            self.p.stdin.write("q\n")
            self.p.stdin.flush()
            self.p.wait(15)
        except (OSError, subprocess.TimeoutExpired):
            pass
        stop(self.p)
        self.err.close()


def ramp(tgt, rnd, d, bport, certs):
    """One fresh proxy, idle h2 connections added STEP by STEP."""
    r = {"round": rnd + 1, "target": tgt, "points": [], "problems": []}
    px = start_proxy(tgt, d, bport, certs)
    if px["p"] is None:
        r["problems"].append(f"did not start; log: {read_tail(px['errlog'], px['pos']).strip()[-300:]!r}")
        return r
    p = px["p"]
    err = check(px["port"])
    if err:
        r["problems"].append(f"h2 check failed: {err}")
        stop(p)
        return r
    h = Hold(px["port"], os.path.join(d, "h2hold.err"))
    last = None
    for n in STEPS:
        t0 = time.monotonic()
        st = h.ask(str(n), 150) if n else h.ask("s", 30)
        open_s = time.monotonic() - t0
        if st is None:
            r["problems"].append(f"step {n}: h2hold gave no answer (exit status {h.p.poll()})")
            break
        if st["open"] < n:
            r["problems"].append(f"step {n}: only {st['open']} connections open "
                                 f"({st['errors']} failed, {st['closed']} closed by the proxy)")
        if p.poll() is not None:
            r["problems"].append(f"proxy exited (status {p.returncode})")
            break
        rd, settle_s = settle(p)
        st2 = h.ask("s", 10) or st
        rd.update(step=n, open=st2["open"], open_s=open_s, settle_s=settle_s)
        r["points"].append(rd)
        last = st2
        log(f"r{rnd + 1} memory {tgt:8} {st2['open']:>6} idle h2 conns  RSS {rd['rss'] / 1024:7.1f} MiB  "
            f"PSS {rd['pss'] / 1024:7.1f} MiB  (open {open_s:.1f} s, settle {settle_s:.1f} s)")
        if st["open"] < n * 0.9:
            break
    if last and last["closed"]:
        r["problems"].append(f"{last['closed']} idle connections were closed by the proxy during the ramp")
    r["client"] = last
    h.close()
    if p.poll() is not None:
        r["problems"].append(f"proxy exited (status {p.returncode})")
    stop(p)
    xs = [pt["open"] for pt in r["points"]]
    for k in ("rss", "pss"):
        b, r2 = lsq_slope(xs, [pt[k] for pt in r["points"]])
        r[f"slope_{k}"] = b * 1024 if b is not None else None      # bytes per connection
        r[f"r2_{k}"] = r2
    if r["slope_rss"] is None:
        r["problems"].append("no slope: fewer than two steps measured")
    return r


# ---------------------------------------------------------------- report

METRICS = ("rps", "cpu_us", "cpu_user_us", "cpu_sys_us", "cpu_pct", "p50", "p90", "p99", "p99_9", "backend_cpu_us", "h2load_cpu_pct",
           "be_opened", "be_opened_window", "be_peak")


def summarize(runs, tgt, shape):
    return benchlib.summarize(runs, tgt, METRICS, shape)


def mem_summary(ramps, tgt):
    rs = [x for x in ramps if x["target"] == tgt and x.get("slope_rss") is not None]
    if not rs:
        return None
    return {"n": len(rs), "rss": mmm([x["slope_rss"] for x in rs]), "pss": mmm([x["slope_pss"] for x in rs]),
            "r2": min(x["r2_rss"] for x in rs), "top": max(x["points"][-1]["open"] for x in rs),
            "base": mmm([x["points"][0]["rss"] for x in rs])}


def chart_load(path, summ, targets):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("Requests/s", "rps"), ("Proxy CPU µs per request (lower is better)", "cpu_us"),
              ("p99 latency, ms (h2load's per-request log)", "p99")]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    drawn = False
    for ax, (title, metric) in zip(axes, panels):
        drawn |= grouped_bars(ax, SHAPES, targets, lambda t, k: summ[(t, k)][metric] if (t, k) in summ
                              else (None, None, None), COLORS, skip_zero=True, fontsize=8)
        ax.set_xticks(range(len(SHAPES)))
        ax.set_xticklabels([shape_name(s) for s in SHAPES], fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        ax.legend(fontsize=8)
    fig.suptitle(f"HTTP/2 over TLS to one proxy worker, HTTP/1.1 keepalive to the origin: h2load -D{DURATION}s, "
                 f"{ROUNDS} rounds, medians (bars: min–max)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn


def chart_memory(path, ramps, targets, msumm):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.6))
    drawn = False
    for t in targets:
        rs = [x for x in ramps if x["target"] == t and x["points"]]
        if not rs:
            continue
        xs, ys = [], []
        for i, n in enumerate(STEPS):
            pts = [x["points"][i] for x in rs if len(x["points"]) > i]
            if pts:
                xs.append(mmm([pt["open"] for pt in pts])[0])
                ys.append(mmm([pt["rss"] for pt in pts])[0] / 1024)
        s = msumm.get(t)
        lab = t + (f" ({s['rss'][0] / 1024:.1f} KiB/conn)" if s else "")
        ax.plot(xs, ys, marker="o", color=COLORS.get(t, "#777"), label=lab)
        drawn = True
    ax.set_xlabel("idle h2 connections (TLS 1.3, one request answered on each)")
    ax.set_ylabel("RSS of the proxy's processes, MiB")
    ax.set_title(f"Memory per idle HTTP/2 connection, one proxy worker; medians of {MEM_ROUNDS} rounds",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn


def shown_path(path):
    """PATH relative to the repository when inside it, else as it is."""
    rel = os.path.relpath(path, ROOT)
    return path if rel.startswith("..") else rel


def fmt_conns(s, key):
    v = s[key]
    if v[0] is None:
        return "—"
    return f"{v[0]:,.0f}" if v[1] == v[2] else f"{v[0]:,.0f} ({v[1]:,.0f}–{v[2]:,.0f})"


def write_report(outdir, runs, ramps, targets, facts, commands, confs, cert_cmds, origin_cmd, notes,
                 loglines, started_at, elapsed):
    summ = {}
    for k in SHAPES:
        for t in targets:
            s = summarize(runs, t, k)
            if s and s["rps"][0]:
                summ[(t, k)] = s
    msumm = {t: s for t in targets for s in [mem_summary(ramps, t)] if s}
    charts = {}
    for name, fn in (("h2.png", lambda p: chart_load(p, summ, targets) if summ else False),
                     ("h2-memory.png", lambda p: chart_memory(p, ramps, targets, msumm) if msumm else False)):
        try:
            charts[name] = f"![{name[:-4]} chart]({name})" if fn(os.path.join(outdir, name)) else ""
        except Exception as e:  # noqa: BLE001 — a missing chart must not lose the tables
            charts[name] = f"(chart not drawn: {e!r})"
    peers = [p for p in ("haproxy", "nginx") if p in targets]
    L = ["# h2 — HTTP/2 over TLS to one proxy worker, HTTP/1.1 keepalive to the origin", ""]
    L.append(f"Run {started_at} UTC, {elapsed:.0f} s in all. {'QUICK mode. ' if QUICK else ''}"
             f"{ROUNDS} round(s) × {DURATION} s measured h2load windows (after {WARMUP} s of warm-up "
             "in which every connection is opened and its TLS handshake done), every run on a freshly "
             "started proxy. TLS 1.3, ECDSA P-256 (the same files for all three), h2 by ALPN. One "
             "proxy worker each: sluice `workers: 1` "
             f"(`{shown_path(SLUICE.get('src', SLUICE_BIN))}`, {SLUICE.get('tls', '?')}), "
             "HAProxy `nbthread 1`, nginx `worker_processes 1`. Origin: nginx, one worker, a static "
             f"{BODY_SIZE}-byte `return 200`, over HTTP/1.1 keepalive: sluice `max_connections: {POOL}` "
             f"(+ `idle_max: {POOL}`), HAProxy server `maxconn {POOL}` + `http-reuse always`, nginx "
             f"upstream `keepalive {POOL}` + `proxy_http_version 1.1`. Pinning: {PIN_TEXT}.")
    L.append("")
    if "load" in PARTS:
        L.append("## Load")
        L.append("")
        L.append("| shape | target | runs | req/s median (min–max) | p50 ms | p99 ms | proxy CPU µs/req "
                 "median (min–max) | of which user / kernel | proxy CPU % | backend conns opened (whole "
                 "run) | opened in the measured window | most open at once | errors |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for k in SHAPES:
            for t in targets:
                s = summ.get((t, k))
                if not s:
                    continue
                L.append(f"| {shape_name(k)} | **{t}** | {s['n']}/{s['total']} | "
                         f"{fmt(s['rps'][0])} ({fmt(s['rps'][1])}–{fmt(s['rps'][2])}) | "
                         f"{fmt(s['p50'][0], 2)} | {fmt(s['p99'][0], 2)} | "
                         + (f"**{fmt(s['cpu_us'][0], 2)}** ({fmt(s['cpu_us'][1], 2)}–{fmt(s['cpu_us'][2], 2)})"
                            if s["cpu_us"][0] is not None else "—")
                         + f" | {fmt(s['cpu_user_us'][0], 2)} / {fmt(s['cpu_sys_us'][0], 2)}"
                         + f" | {fmt(s['cpu_pct'][0])} | {fmt_conns(s, 'be_opened')} | "
                           f"{fmt_conns(s, 'be_opened_window')} | {fmt_conns(s, 'be_peak')} | {s['errors']} |")
        L.append("")
        L.append("Medians (min–max) over the runs used: the clean ones, or all if none was clean. "
                 "req/s: h2load's, over the measured window. p50/p99: medians over the runs of each "
                 "run's percentile of its per-request times (h2load `--log-file`: every request of the "
                 "window, from its start to the end of its response). Backend connections: accepted "
                 "by the origin (stub_status `accepts`, ours subtracted) from the proxy's start to the "
                 "end of the measured window, and within the window alone; most open at once: the "
                 f"origin's `Active connections` (ours subtracted) sampled every {SAMPLE_MS} ms. "
                 "errors = h2load's failed + errored + timed-out requests + 4xx/5xx, over all runs.")
        L.append("")
        if "sluice" in targets and peers:
            L.append("### Ratios sluice ÷ peer")
            L.append("")
            L.append("Median (min–max) of the per-round ratios (runs of one round ran seconds apart): "
                     "req/s above 1 = sluice faster; CPU µs/req, p50 and p99 below 1 = sluice cheaper "
                     "or quicker.")
            L.append("")
            cols = [(p, m) for p in peers for m in ("rps", "cpu_us", "p50", "p99")]
            name = {"rps": "req/s", "cpu_us": "CPU µs/req", "p50": "p50", "p99": "p99"}
            L.append("| shape | " + " | ".join(f"÷ {p} {name[m]}" for p, m in cols) + " |")
            L.append("|---|" + "---:|" * len(cols))
            for k in SHAPES:
                L.append(f"| {shape_name(k)} | "
                         + " | ".join(fmt_mmm(paired(runs, "sluice", p, k, m)) for p, m in cols) + " |")
            L.append("")
            L.append("### Issue 20's targets")
            L.append("")
            L.append("CPU: sluice's proxy CPU µs per request ÷ that of the better peer (the one with the "
                     "lower median), as the ratio of the medians and as the median (min–max) of the "
                     "per-round ratios; the target is met when the per-round median is at most 0.80 (it "
                     "is immune to the machine speeding up or slowing down between rounds). Backend "
                     f"connections: the most sluice had open at once in any run, against its "
                     f"`max_connections` ({POOL}).")
            L.append("")
            L.append("| shape | sluice CPU µs/req | better peer | its CPU µs/req | ratio of medians | "
                     "per-round ratio (target ≤ 0.80) | sluice backend conns most open at once "
                     f"(target ≤ {POOL}) | opened in a whole run, most of any run |")
            L.append("|---|---:|---|---:|---:|---:|---:|---:|")
            for k in SHAPES:
                s = summ.get(("sluice", k))
                ps = [(p, summ[(p, k)]["cpu_us"][0]) for p in peers
                      if (p, k) in summ and summ[(p, k)]["cpu_us"][0]]
                if not s or not s["cpu_us"][0] or not ps:
                    continue
                bp, bv = min(ps, key=lambda x: x[1])
                pr = paired(runs, "sluice", bp, k, "cpu_us")
                peak = max([r["be_peak"] for r in runs if r["label"] == "sluice" and r["case"] == k
                            and r["be_peak"] is not None], default=None)
                L.append(f"| {shape_name(k)} | {fmt(s['cpu_us'][0], 2)} | {bp} | {fmt(bv, 2)} | "
                         f"{s['cpu_us'][0] / bv:.2f} | **{fmt_mmm(pr)}** "
                         + ("—" if pr[0] is None else "met" if pr[0] <= 0.8 else "missed")
                         + f" | **{fmt(peak)}** "
                         + ("—" if peak is None else "met" if peak <= POOL else "missed")
                         + f" | {fmt(s['be_opened'][2])} |")
            L.append("")
        L.append(charts.get("h2.png", ""))
        L.append("")
    if "memory" in PARTS:
        L.append("## Memory per idle h2 connection")
        L.append("")
        L.append("| target | bytes/conn RSS median (min–max) | KiB/conn RSS | bytes/conn PSS median (min–max) "
                 "| lowest R² | ramps | connections at the top step | RSS at 0 connections, MiB |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for t in targets:
            s = msumm.get(t)
            if not s:
                continue
            L.append(f"| **{t}** | {fmt_mmm(s['rss'], 0)} | {s['rss'][0] / 1024:.1f} | {fmt_mmm(s['pss'], 0)} | "
                     f"{s['r2']:.3f} | {s['n']} | {s['top']:,} | {s['base'][0] / 1024:.1f} |")
        L.append("")
        if "sluice" in msumm:
            rl = [f"sluice ÷ {p}: {msumm['sluice']['rss'][0] / msumm[p]['rss'][0]:.2f}"
                  for p in peers if p in msumm and msumm[p]["rss"][0]]
            if rl:
                L.append("Ratios of the medians (RSS bytes per idle h2 connection, below 1 = sluice "
                         "smaller): " + "; ".join(rl) + ".")
                L.append("")
        L.append("Bytes per connection = least-squares slope of the proxy's RSS (VmRSS summed over "
                 "its processes) and PSS over the steps "
                 f"{', '.join(f'{n:,}' for n in STEPS)} idle connections, each step read after the "
                 f"connections sat idle for at least {IDLE_MIN_S:.0f} s and RSS stopped moving. Every "
                 "connection: TLS 1.3 handshake, h2 preface and SETTINGS, one `GET /` answered, then "
                 "idle (bench/h2hold.py).")
        L.append("")
        L.append(charts.get("h2-memory.png", ""))
        L.append("")
    report_list(L, "Problems seen", notes)
    report_list(L, "Proxy and origin log lines above info level", loglines)
    if runs:
        L.append("## Every run (in the order they ran)")
        L.append("")
        L.append("| round | shape | target | req/s | requests | p50 ms | p90 ms | p99 ms | p99.9 ms | proxy CPU µs/req | "
                 "user / kernel µs/req | proxy CPU % | origin CPU µs/req | h2load CPU % | others' CPU % | backend conns (run / "
                 "window / most open) | origin reqs ÷ h2load reqs | errors | raw |")
        L.append("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|---:|---:|---|")
        for r in runs:
            orr = (f"{r['origin_reqs'] / r['requests']:.3f}" if r.get("origin_reqs") is not None
                   and r["requests"] else "—")
            L.append(f"| {r['round']} | {r['case']} | {r['label']} | {fmt(r['rps'])} | {r['requests']} | "
                     f"{fmt(r.get('p50'), 2)} | {fmt(r.get('p90'), 2)} | {fmt(r.get('p99'), 2)} | "
                     f"{fmt(r.get('p99_9'), 2)} | {fmt(r['cpu_us'], 2)} | "
                     f"{fmt(r['cpu_user_us'], 2)} / {fmt(r['cpu_sys_us'], 2)} | {fmt(r['cpu_pct'])} | "
                     f"{fmt(r.get('backend_cpu_us'), 2)} | {fmt(r.get('h2load_cpu_pct'))} | "
                     f"{fmt(r['other_pct'])}{' ⚠' if r.get('noisy') else ''} | "
                     f"{fmt(r.get('be_opened'))} / {fmt(r.get('be_opened_window'))} / {fmt(r.get('be_peak'))} | "
                     f"{orr} | {r['sock_errors'] + r['non2xx']} | "
                     + (f"[{os.path.basename(r['raw'])}](h2/{r['raw']})" if r.get("raw") else "—") + " |")
        L.append("")
    if ramps:
        L.append("Memory ramps:")
        L.append("")
        L.append("| round | target | bytes/conn RSS | R² | bytes/conn PSS | RSS KiB at each step (open connections) |")
        L.append("|---:|---|---:|---:|---:|---|")
        for x in ramps:
            pts = ", ".join(f"{pt['rss']:,} ({pt['open']:,})" for pt in x["points"])
            L.append(f"| {x['round']} | {x['target']} | {fmt(x.get('slope_rss'))} | "
                     f"{fmt(x.get('r2_rss'), 3)} | {fmt(x.get('slope_pss'))} | {pts or '; '.join(x['problems'])} |")
        L.append("")
    L.append("## What was measured")
    L.append("")
    L.append("- Each round runs every shape, and within a shape every target once, the target order "
             "rotating by one each round. Each run starts the proxy fresh, checks it with one h2 "
             f"request (Python `h2`, ALPN h2 only: must be 200 with {BODY_SIZE} bytes), runs h2load "
             f"once (`--warm-up-time={WARMUP}`: connections opened, handshakes done, requests flowing; "
             f"then the measured `-D{DURATION}` window), stops the proxy (SIGTERM). The origin stays "
             "up throughout.")
    L.append("- Proxy CPU: utime+stime from `/proc/PID/stat` over the proxy's process tree (sluice "
             "and nginx: master + worker; HAProxy: one process), read when h2load prints that its "
             "measured window starts and ends (it flushes those lines as it goes), ÷ the requests "
             f"h2load completed in the window. Clock tick = 1/{CLK_TCK} s. The TLS handshakes happen "
             "in the warm-up and are not in the figure: this is the cost of h2 requests on open "
             "connections. User / kernel: the same split into utime and stime; kernel time is "
             "mostly the proxy's socket calls (loopback TCP send and receive, epoll).")
    L.append("- Backend connections: the origin's nginx `stub_status` (`accepts`; `Active connections` "
             "for the most open at once), read over one keepalive connection of the script's own, "
             "which is subtracted. 'Whole run' counts from just before the proxy starts to the end "
             "of the measured window (the check request, the warm-up and the window), so it does "
             "not include the connections a proxy closes when h2load drops its streams in flight "
             f"at the end. sluice and HAProxy stop at {POOL} and queue the rest; nginx opens a "
             f"backend connection per request in flight and keeps {POOL} of them idle, closing the "
             "others, so it opens connections all through a run with more than 64 streams in flight.")
    L.append("- Latency: every request of the window from h2load's per-request log (`--log-file`: "
             "start, status, µs to the end of the response), nearest-rank percentiles per run; "
             "failed streams (status -1) are left out of the percentiles and counted as errors.")
    L.append("- Memory: see the note under its table. Each (round, target) is a fresh proxy with "
             f"client idle timeouts of {IDLE_TIMEOUT} (nothing is closed during a ramp; a proxy that "
             "closes idle connections anyway shows up under Problems seen).")
    L.append(noise_note(NOISE_PCT, ATTEMPTS, QUIET_BUDGET).replace("wrk run", "h2load window"))
    L.append(f"- File descriptors: RLIMIT_NOFILE {resource.getrlimit(resource.RLIMIT_NOFILE)[0]} "
             f"(needed: about {NOFILE_NEED}; bench/h2.sh raises the soft limit to the hard one).")
    L.append("")
    L.append("## Commands (exact)")
    L.append("")
    L.append("```sh")
    L.append("# certificates (in h2/certs/; only ecdsa is used)")
    L.extend(cert_cmds)
    L.append(f"# origin (started once)\n{origin_cmd}")
    for k, v in commands.items():
        L.append(f"# {k}\n{v}")
    L.append("# load (per run; the per-request log is read, then deleted unless KEEP_LOGS=1)")
    for k in SHAPES:
        L.append(" ".join(h2load_cmd("PORT", k, "h2/raw/RUN.log")))
    L.append("# memory: idle h2 connections, driven over stdin (N = open until N are open)")
    L.append(" ".join(LOAD_PIN + ["/usr/bin/python3", "bench/h2hold.py", "PORT", str(HOLD_CONCURRENCY)]))
    L.append("```")
    L.append("")
    L.append("Ports are picked free at run time. Configs as used (also in [h2/configs/](h2/configs/)):")
    L.append("")
    report_end(L, outdir, "h2", confs, facts,
               "`make bench-h2` (or `QUICK=1 make bench-h2`); see docs/bench/h2.md.")
    return summ, msumm


def facts_software():
    sw = []
    if SLUICE.get("path"):
        sw.append(("sluice", f"{shown_path(SLUICE['src'])} (run as a copy in h2/bin/): "
                             f"{sluice_describe(SLUICE['path'], detail=True)}"))
    sw += [("haproxy", haproxy_version(with_ssl=True)),
           ("nginx", cmd_out(["nginx", "-v"]).replace("nginx version: ", "")),
           ("h2load", cmd_out(["h2load", "--version"]).splitlines()[0]),
           ("python3 h2", f"{sys.version.split()[0]}, h2 {__import__('h2').__version__}"),
           ("RLIMIT_NOFILE", " ".join(str(x) for x in resource.getrlimit(resource.RLIMIT_NOFILE)))]
    return sw


# ---------------------------------------------------------------- main

def main():
    need_tools(PROG, ("h2load", "nginx", "openssl") + (("haproxy",) if "haproxy" in TARGETS else ())
               + (("taskset",) if PROXY_PIN else ()), "bench/h2.sh")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < NOFILE_NEED:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(NOFILE_NEED, soft)), hard))
        except (ValueError, OSError):
            pass
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft < NOFILE_NEED:
        sys.exit(f"{PROG}: RLIMIT_NOFILE {soft} (hard {hard}) is below the {NOFILE_NEED} descriptors "
                 f"{MAX_CLIENTS:,} client connections need (proxy, client and backend sides): raise the "
                 "hard limit (ulimit -Hn, /etc/security/limits.conf) or use smaller SHAPES/STEPS")
    if "sluice" in TARGETS and not os.access(SLUICE_BIN, os.X_OK):
        sys.exit(f"{PROG}: {SLUICE_BIN} is not an executable sluice (make, or set BUILD=dir or SLUICE=path)")
    started, outdir, d = results_dirs("h2")
    t_start = time.monotonic()
    if "sluice" in TARGETS:
        dst, _, tls_line = copy_sluice(SLUICE_BIN, d)
        SLUICE.update(path=dst, src=SLUICE_BIN, tls=f"TLS {tls_line}" if tls_line else "TLS ?")
    log(f"results in {outdir}")
    if "load" in PARTS:
        per = DURATION + WARMUP + 2.5
        log(f"{ROUNDS} rounds x {len(SHAPES)} shapes x {len(TARGETS)} targets x ~{per:.0f} s = about "
            f"{ROUNDS * len(SHAPES) * len(TARGETS) * per:.0f} s of h2load; {PIN_TEXT}")
    facts = machine_facts(facts_software())
    certs, cert_cmds = make_certs(d)
    origin, bport, sport, origin_cmd, origin_conf = start_origin(d)
    stub = Stub(sport)
    if not stub.read():
        sys.exit(f"{PROG}: the origin's stub_status does not answer (port {sport})")
    quiet = Quiet(NOISE_PCT, QUIET_BUDGET, ATTEMPTS, log=log)
    runs, ramps, notes, loglines, commands = [], [], [], [], {}
    confs = {"origin": origin_conf}
    origin_err = os.path.join(d, "origin.error.log")

    def one_run(tgt, shape, rnd):
        opos = fsize(origin_err)
        r = quiet.run_if_budget(lambda: measure(tgt, shape, rnd, d, bport, certs, origin, stub, commands, confs),
                      f"round {rnd + 1}, {shape}, {tgt}", DURATION, notes,
                      lambda x: f"{fmt(x['rps'])} req/s, {fmt(x['cpu_us'], 2)} µs/req")
        runs.append(r)
        for pr in r["problems"]:
            notes.append(f"round {rnd + 1}, {shape}, {tgt}: {pr}")
        for ln in r.pop("loglines", []):
            loglines.append(f"round {rnd + 1}, {shape}, {tgt}, {ERRLOG[tgt]}: {ln.strip()}")
        for ln in [x for x in read_tail(origin_err, opos).splitlines() if x.strip()][:5]:
            loglines.append(f"round {rnd + 1}, {shape}, {tgt}, origin.error.log: {ln.strip()}")
        log(f"r{rnd + 1} {shape:8} {tgt:8} {fmt(r['rps']):>9} req/s  cpu {fmt(r['cpu_us'], 2):>6} us/req "
            f"({fmt(r['cpu_pct'])}%)  p50 {fmt(r.get('p50'), 2)} p99 {fmt(r.get('p99'), 2)} ms  backend conns "
            f"{fmt(r.get('be_opened'))}/{fmt(r.get('be_opened_window'))}/peak {fmt(r.get('be_peak'))}  "
            f"others {fmt(r['other_pct'])}%" + (f"  PROBLEMS: {r['problems']}" if r["problems"] else ""))

    if "load" in PARTS:
        for rnd in range(ROUNDS):
            k = rnd % len(TARGETS)
            order = TARGETS[k:] + TARGETS[:k]
            for shape in SHAPES:
                for tgt in order:
                    one_run(tgt, shape, rnd)
    if "memory" in PARTS:
        for rnd in range(MEM_ROUNDS):
            k = rnd % len(TARGETS)
            for tgt in TARGETS[k:] + TARGETS[:k]:
                x = ramp(tgt, rnd, d, bport, certs)
                ramps.append(x)
                for pr in x["problems"]:
                    notes.append(f"memory round {rnd + 1}, {tgt}: {pr}")
                log(f"r{rnd + 1} memory {tgt:8} "
                    + (f"{x['slope_rss'] / 1024:.1f} KiB/conn RSS (R² {x['r2_rss']:.3f}), "
                       f"{x['slope_pss'] / 1024:.1f} KiB/conn PSS" if x.get("slope_rss") is not None
                       else f"FAILED {x['problems']}"))
    stub.close()
    if origin.poll() is not None:
        notes.append(f"the origin exited during the benchmark (status {origin.returncode})")
    stop(origin)
    elapsed = time.monotonic() - t_start
    with open(os.path.join(d, "runs.json"), "w") as f:
        json.dump({"runs": runs, "memory": ramps}, f, indent=1, default=str)
    summ, msumm = write_report(outdir, runs, ramps, TARGETS, facts, commands, confs, cert_cmds, origin_cmd,
                               notes, loglines, started.strftime("%Y-%m-%d %H:%M:%S"), elapsed)
    refresh_latest(RESULTS, outdir, "h2", files=["h2.md", "h2.png", "h2-memory.png"])
    show_report(outdir, "h2", ["![h2 chart]", "## Problems seen"], log)
    log(f"elapsed {time.monotonic() - t_start:.0f} s")
    missing = [t for t in TARGETS
               if ("load" in PARTS and not any(tt == t and s["cpu_us"][0] for (tt, _), s in summ.items()))
               or ("memory" in PARTS and t not in msumm)]
    return exit_status(missing, log)


if __name__ == "__main__":
    run_main(main, PROG)
