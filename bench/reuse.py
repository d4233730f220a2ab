#!/usr/bin/env python3
"""Reuse benchmark (formerly "identity"): telling the backend who the client was, and what it
costs in backend connection reuse.

1,000 keepalive clients, each from its own source address in 127.0.0.0/8
(bench/srcload.c binds connection i to 127.0.(1 + i/250).(2 + i%250) before
connecting), through ONE proxy worker to an nginx backend, two ways:

  header-only  the proxy adds X-Forwarded-For; any pooled backend connection
               may carry any client's request (full multiplexing)
  PROXY v2     the proxy opens every backend connection with a PROXY v2
               header (CRC32C and UNIQUE_ID TLVs). A header speaks for one
               client connection, so a backend connection that carried one
               may only serve that client connection again: sluice keys its
               pool on the header bytes, HAProxy hashes the PROXY line into
               its connection key.

Targets (proxy x mode x pool setting), run one at a time, the order rotating
by one every round:

  sluice-hdr          header-only, idle_max 1100
  sluice-hdr-idle64   header-only, idle_max 64 (a small pool: the old default)
  haproxy-hdr         header-only, option forwardfor, http-reuse always
  sluice-pp2          PROXY v2, idle_max 1100
  sluice-pp2-idle64   PROXY v2, idle_max 64 (a small pool: the old default)
  haproxy-pp2         PROXY v2, send-proxy-v2 proxy-v2-options crc32c,unique-id,
                      unique-id-format per client connection
  haproxy-pp2-reqid   (not in the default set) the same with the per-request
                      unique-id-format of HAProxy's manual (%Ts, %rt)
  haproxy-pp2-defpool (not in the default set) haproxy-pp2 with HAProxy's own
                      idle-pool defaults (no pool-low-conn, fd ratios 20/25%)

Per run: req/s, p50/p99 (srcload), errors; backend connections opened and
requests served during the measured run (nginx stub_status deltas, read at
barriers where no request is in flight), hence requests per backend
connection and % of requests on reused backend connections; the proxy's CPU
per request (utime+stime of its process tree).

Usage: sh bench/reuse.sh  (or `make bench-reuse`). Environment knobs:
  QUICK=1          1 s runs after a 1 s warm-up, only the four targets
                   sluice-hdr, haproxy-hdr, sluice-pp2, haproxy-pp2
  DURATION=N       measured seconds per run (5; QUICK 1)
  WARMUP=N         unmeasured seconds before it, same connections (2; QUICK 1)
  CLIENTS=N        client connections, one source address each (1000)
  ROUNDS=N         rounds; each round runs every target once (3)
  TARGETS=a,b      subset/order of the targets above
  MAX_CONNS=N      sluice max_connections and HAProxy server maxconn (2000)
  IDLE_MAX=N       sluice idle_max of the non-"idle64" targets, and HAProxy's
                   pool-low-conn (1100)
  PIN=0            do not pin with taskset
  NOISE_PCT=N      others' CPU (% of one CPU) that makes a run noisy (25)
  QUIET_BUDGET=N   seconds in all for waiting for quiet / re-running (30; QUICK 5)
  BUILD=dir        where sluice and srcload are (build)
  RESULTS=dir      results root (bench/results)

Output: RESULTS/<UTC timestamp>/reuse.md, reuse.png, reuse/
(configs, srcload JSON lines, logs, runs.json); RESULTS/latest/ gets a copy
and report.md links it. Every process started here is stopped by its PID.
"""
import datetime
import functools
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time

import benchlib
from benchlib import (BUILD, CLK_TCK, HAPROXY_DEFAULTS, PIN, QUICK, RESULTS, ROOT, STARTED, cmd_out, fmt,
                      free_port, fsize, git_describe, launch_proxy, log_lines_above_info, machine_facts, mmm,
                      pinning, Quiet, read_tail, recv_all, refresh_latest, report_end, report_list,
                      results_dirs, run_main, show_report, start, stop, stop_proxy, system_busy_ticks,
                      tree_ticks, wait_port, write)

PROG = "bench/reuse.py"
env_int = functools.partial(benchlib.env_int, prog=PROG)

DURATION = env_int("DURATION", 1 if QUICK else 5, 1)
WARMUP = env_int("WARMUP", 1 if QUICK else 2, 0)
CLIENTS = env_int("CLIENTS", 1000, 1)
ROUNDS = env_int("ROUNDS", 3, 1)
MAX_CONNS = env_int("MAX_CONNS", 2000, 1)
IDLE_MAX = env_int("IDLE_MAX", 1100, 0)
IDLE_DEFAULT = 64                 # the small pool of the *-idle64 targets (sluice's default was 64 until it became "no limit")
NOISE_PCT = env_int("NOISE_PCT", 25)
QUIET_BUDGET = env_int("QUIET_BUDGET", 5 if QUICK else 30)
ATTEMPTS = 3
DRAIN = 3                         # srcload --drain: max seconds to finish in-flight requests
SETTLE = 0.3                      # seconds between a barrier and reading the backend's counters
CHECK_SRC = "127.0.9.9"           # source address of the identity check request

ALL_TARGETS = ["sluice-hdr", "haproxy-hdr", "sluice-hdr-idle64",
               "sluice-pp2", "haproxy-pp2", "sluice-pp2-idle64", "haproxy-pp2-reqid",
               "haproxy-pp2-defpool"]
# QUICK leaves out the small-pool variants: the four that answer the question.
DEFAULT_TARGETS = ["sluice-hdr", "haproxy-hdr", "sluice-pp2", "haproxy-pp2"] if QUICK else ALL_TARGETS[:6]
TARGETS = [t for t in os.environ.get("TARGETS", ",".join(DEFAULT_TARGETS)).split(",") if t]
for _t in TARGETS:
    if _t not in ALL_TARGETS:
        sys.exit(f"{PROG}: unknown target {_t!r} (known: {', '.join(ALL_TARGETS)})")
if len(set(TARGETS)) != len(TARGETS):
    sys.exit(f"{PROG}: a target is named twice in TARGETS")

MODES = [("hdr", "header-only (X-Forwarded-For)"), ("pp2", "PROXY v2 (crc32c, unique_id)")]
HAPROXY_UID_CONN = r"%{+X}o\ %ci:%cp_%fi:%fp_%pid"            # one value per client connection
HAPROXY_UID_REQ = r"%{+X}o\ %ci:%cp_%fi:%fp_%Ts_%rt:%pid"     # the manual's example: per request


def mode_of(t):
    return "pp2" if "-pp2" in t else "hdr"


def proxy_of(t):
    return t.split("-", 1)[0]


def describe(t):
    m = mode_of(t)
    if t.startswith("sluice"):
        im = IDLE_DEFAULT if t.endswith("idle64") else IDLE_MAX
        return (f"sluice, {'forward: x_forwarded_for append' if m == 'hdr' else 'proxy_protocol: v2, proxy_tlvs [crc32c, unique_id]'}, "
                f"max_connections {MAX_CONNS}, idle_max {im}{' (small pool)' if t.endswith('idle64') else ''}")
    pool = ("idle pool defaults (no pool-low-conn, fd ratios 20/25%)" if t.endswith("defpool")
            else f"pool-low-conn {IDLE_MAX}, fd ratios 80/90%")
    if m == "hdr":
        return f"HAProxy, option forwardfor, http-reuse always, server maxconn {MAX_CONNS}, {pool}"
    return (f"HAProxy, send-proxy-v2 proxy-v2-options crc32c,unique-id, server maxconn {MAX_CONNS}, "
            f"unique-id {'per request (manual example)' if t.endswith('reqid') else 'per client connection'}, "
            f"{pool}")


def log(msg):
    print(f"[reuse] {msg}", flush=True)


PROXY_PIN, LOAD_PIN, _ = pinning(PIN)
if PROXY_PIN:
    PIN_TEXT = (f"proxy (all its processes) on CPU {PROXY_PIN[-1]}; srcload and the nginx backend "
                f"on CPU {LOAD_PIN[-1]} (taskset -c)")
else:
    PIN_TEXT = "nothing pinned" + ("" if PIN else " (PIN=0)")


# ---------------------------------------------------------------- backend

def conf_backend(d, port_hdr, port_pp, port_stats):
    return f"""# backend: nginx, one worker. Listener A ({port_hdr}) for header-only identity,
# listener B ({port_pp}) expecting a PROXY header on every connection, stub_status
# on {port_stats} (accepts/requests counters: backend connection reuse).
# /id answers with the client address the backend learnt (identity check).
worker_processes 1;
daemon off;
master_process on;
pid {d}/backend.pid;
error_log {d}/backend.error.log warn;
worker_rlimit_nofile 16384;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    client_body_temp_path {d}/tmp-backend/body;
    proxy_temp_path {d}/tmp-backend/proxy;
    fastcgi_temp_path {d}/tmp-backend/fastcgi;
    uwsgi_temp_path {d}/tmp-backend/uwsgi;
    scgi_temp_path {d}/tmp-backend/scgi;
    server {{
        listen 127.0.0.1:{port_hdr} backlog=4096;
        location / {{ default_type text/plain; return 200 "ok\\n"; }}
        location = /id {{ default_type text/plain; return 200 "$http_x_forwarded_for\\n"; }}
    }}
    server {{
        listen 127.0.0.1:{port_pp} proxy_protocol backlog=4096;
        location / {{ default_type text/plain; return 200 "ok\\n"; }}
        location = /id {{ default_type text/plain; return 200 "$proxy_protocol_addr\\n"; }}
    }}
    server {{
        listen 127.0.0.1:{port_stats};
        location / {{ stub_status; }}
    }}
}}
"""


def start_backend(d):
    ports = (free_port(), free_port(), free_port())
    while len(set(ports)) < 3:
        ports = (free_port(), free_port(), free_port())
    os.makedirs(os.path.join(d, "tmp-backend"), exist_ok=True)
    conf = write(os.path.join(d, "backend-nginx.conf"), conf_backend(d, *ports))
    cmd = LOAD_PIN + ["nginx", "-p", d, "-e", os.path.join(d, "backend.error.log"), "-c", conf]
    p = start(cmd, os.path.join(d, "backend.out"))
    for port in ports:
        if not wait_port(port, p):
            sys.exit(f"{PROG}: nginx backend did not start, see {d}/backend.error.log")
    return p, ports, " ".join(cmd), conf


def stub_status(port):
    """nginx stub_status as a dict: active, accepts, handled, requests."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET / HTTP/1.0\r\nHost: stats\r\n\r\n")
    data = recv_all(s)
    s.close()
    text = data.decode("latin-1")
    m = re.search(r"Active connections:\s*(\d+).*?\n\s*(\d+)\s+(\d+)\s+(\d+)", text, re.S)
    if not m:
        raise RuntimeError(f"unexpected stub_status answer: {text!r}")
    return {"active": int(m.group(1)), "accepts": int(m.group(2)), "handled": int(m.group(3)),
            "requests": int(m.group(4))}


# ---------------------------------------------------------------- proxies

def conf_sluice(d, t, port, bport):
    m = mode_of(t)
    idle = (f"    idle_max: {IDLE_DEFAULT}  # a small pool, per worker per server"
            if t.endswith("idle64") else f"    idle_max: {IDLE_MAX}")
    if m == "hdr":
        fwd = ("    forward:                      # X-Forwarded-For only, like HAProxy's option forwardfor\n"
               "      x_forwarded_for: append\n"
               "      x_forwarded_proto: false")
        pp = ""
    else:
        fwd = ("    forward:                      # no identity headers: the PROXY header says it\n"
               "      x_forwarded_for: off\n"
               "      x_forwarded_proto: false")
        pp = ("        proxy_protocol: v2\n"
              "        proxy_tlvs: [crc32c, unique_id]\n")
    return f"""# sluice, one worker: {describe(t)}
workers: 1
error_log: {d}/{t}.error.log
user: nobody
access_log: off
timeouts:
  drain: 0
listeners:
  - name: http
    address: 127.0.0.1:{port}
    backlog: 4096
    backend: app
backends:
  - name: app
{idle}
{fwd}
    servers:
      - name: s1
        address: 127.0.0.1:{bport}
        max_connections: {MAX_CONNS}
{pp}"""


def conf_haproxy(d, t, port, bport):
    m = mode_of(t)
    if m == "hdr":
        fe = "    option forwardfor\n"
        srv = ""
    else:
        uid = HAPROXY_UID_REQ if t.endswith("reqid") else HAPROXY_UID_CONN
        fe = f"    unique-id-format {uid}\n"
        srv = " send-proxy-v2 proxy-v2-options crc32c,unique-id"
    if t.endswith("defpool"):
        tune, low = "", ""
        why = "# Idle server connections: HAProxy's defaults throughout (see haproxy-pp2)."
    else:
        tune = "    tune.pool-low-fd-ratio 80\n    tune.pool-high-fd-ratio 90\n"
        low = f" pool-low-conn {IDLE_MAX}"
        why = f"""# Idle server connections: pool-max-conn -1 (the default: unlimited),
# pool-purge-delay 5s (default). Raised so that HAProxy keeps one idle server
# connection per client: it stops keeping idle server connections once the
# process uses more than tune.pool-low-fd-ratio (default 20%) of maxsock
# (~2 x maxconn) and closes them above tune.pool-high-fd-ratio (default 25%),
# which 1,000 clients + ~640 server connections reach; and it keeps no more
# idle ones than the connections it estimates it needs (the most used at
# once in the last pool-purge-delay) plus pool-low-conn (default 0) — too few
# when every connection belongs to one client (PROXY v2)."""
    return f"""# HAProxy, one thread: {describe(t)}
{why}
global
    nbthread 1
    maxconn 4096
{tune}    pidfile {d}/{t}.pid

{HAPROXY_DEFAULTS}
frontend fe
    bind 127.0.0.1:{port} backlog 4096
{fe}    default_backend be

backend be
    server s1 127.0.0.1:{bport} maxconn {MAX_CONNS}{low}{srv}
"""


def proxy_errlog(t, d):
    return os.path.join(d, f"{t}.error.log" if t.startswith("sluice") else f"{t}.out")


def start_proxy(t, d, bports):
    bport = bports[1] if mode_of(t) == "pp2" else bports[0]
    port = free_port()
    if t.startswith("sluice"):
        conf = write(os.path.join(d, f"{t}.yaml"), conf_sluice(d, t, port, bport))
    else:
        conf = write(os.path.join(d, f"{t}.cfg"), conf_haproxy(d, t, port, bport))
    p, cmd = launch_proxy(proxy_of(t), d, port, conf, PROXY_PIN, SLUICE, name=t, out=proxy_errlog(t, d))
    return p, port, cmd, conf


def identity_check(port):
    """GET /id from CHECK_SRC through the proxy: the backend must name CHECK_SRC
    (X-Forwarded-For on listener A, the PROXY header's source on B).
    Returns None when right, else what came back."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(CHECK_SRC, 0))
        s.sendall(b"GET /id HTTP/1.1\r\nHost: check\r\nConnection: close\r\n\r\n")
        data = recv_all(s)
        s.close()
    except OSError as e:
        return f"GET /id failed: {e!r}"
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
    if " 200 " not in status + " " or body.strip() != CHECK_SRC.encode():
        return f"GET /id from {CHECK_SRC} -> {status!r}, body {body[:80]!r}"
    return None


# ---------------------------------------------------------------- load

def srcload_cmd(port):
    return LOAD_PIN + [SRCLOAD, "-a", f"127.0.0.1:{port}", "-c", str(CLIENTS), "-d", str(DURATION),
                       "-w", str(WARMUP), "--drain", str(DRAIN), "--sync"]


def measure(t, rnd, d, port, proxy, backend, stats_port):
    """One srcload run with counters read at its two barriers."""
    raw = os.path.join(d, "raw", f"r{rnd + 1}-{t}.txt")
    cmd = srcload_cmd(port)
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    STARTED.append(p)
    watchdog = threading.Timer(WARMUP + DURATION + 2 * DRAIN + 30, p.kill)
    watchdog.start()
    marks, lines, problems = {}, [], []
    pids_before = None
    try:
        for line in p.stdout:
            lines.append(line)
            if line.startswith("sync "):
                what = line.split()[1]
                marks[what] = {"t": time.monotonic(), "sys": system_busy_ticks(),
                               "proxy": tree_ticks(proxy.pid), "backend": tree_ticks(backend.pid),
                               "load": tree_ticks(p.pid)}
                # Let the backend see the closes of connections the proxy
                # dropped with the last responses (its active count); closes
                # change neither accepts nor requests.
                time.sleep(SETTLE)
                marks[what]["stats"] = stub_status(stats_port)
                if pids_before is None:
                    pids_before = sorted(marks[what]["proxy"])
                p.stdin.write("go\n")
                p.stdin.flush()
        p.wait()
    finally:
        watchdog.cancel()
        if p.poll() is None:
            p.kill()
            p.wait()
        if p in STARTED:
            STARTED.remove(p)
    write(raw, " ".join(cmd) + "\n" + "".join(lines))
    r = {"label": t, "mode": mode_of(t), "proxy": proxy_of(t), "round": rnd + 1,
         "raw": os.path.relpath(raw, d), "rps": 0.0, "requests": 0, "p50": None, "p99": None,
         "errors": 0, "non2xx": 0, "cpu_us": None, "cpu_pct": None, "other_pct": 0.0,
         "new_conns": None, "be_requests": None, "req_per_conn": None, "new_per_1k": None, "reused_pct": None,
         "be_open_end": None}
    js = None
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                js = json.loads(line)
            except ValueError:
                pass
            break
    if js is None or "measure" not in marks or "end" not in marks:
        problems.append(f"srcload failed (exit {p.returncode}): {''.join(lines)[-300:]!r}")
        r["problems"] = problems
        return r
    a, b = marks["measure"], marks["end"]
    wall = b["t"] - a["t"]
    sent = js["requests"] + js["requests_late"]

    def dticks(key):
        return sum(b[key][q] - a[key][q] for q in b[key] if q in a[key])

    dp, db, dl = dticks("proxy"), dticks("backend"), dticks("load")
    # Each stub_status read is one connection and one request of its own:
    # the second read is inside the delta, the first is not.
    new_conns = b["stats"]["accepts"] - a["stats"]["accepts"] - 1
    be_req = b["stats"]["requests"] - a["stats"]["requests"] - 1
    r.update(
        rps=js["rps"], requests=js["requests"], late=js["requests_late"], p50=js["p50_ms"],
        p99=js["p99_ms"], p999=js["p999_ms"], max_ms=js["max_ms"], errors=js["errors"],
        non2xx=js["non2xx"], reconnects=js["reconnects"], srcload=js, wrk_secs=js["seconds"],
        wall=wall, cpu_us=dp / CLK_TCK * 1e6 / max(sent, 1), cpu_pct=dp / CLK_TCK / wall * 100,
        backend_cpu_us=db / CLK_TCK * 1e6 / max(sent, 1), load_cpu_pct=dl / CLK_TCK / wall * 100,
        other_pct=((b["sys"] - a["sys"]) - dp - db - dl) / CLK_TCK / wall * 100,
        new_conns=new_conns, be_requests=be_req,
        req_per_conn=(be_req / new_conns) if new_conns > 0 else None,
        new_per_1k=(1000.0 * new_conns / be_req) if be_req > 0 else None,
        reused_pct=(100.0 * max(be_req - new_conns, 0) / be_req) if be_req > 0 else None,
        be_open_end=b["stats"]["active"] - 1, stats=(a["stats"], b["stats"]))
    if js["p50_ms"] < 0:
        r["p50"] = r["p99"] = r["p999"] = None
    if proxy.poll() is not None:
        problems.append(f"proxy exited during the run (status {proxy.returncode})")
    elif pids_before is not None and sorted(tree_ticks(proxy.pid)) != pids_before:
        problems.append(f"proxy processes changed during the run: {pids_before} -> "
                        f"{sorted(tree_ticks(proxy.pid))}")
    if js["requests"] == 0:
        problems.append("no request completed")
    if js["errors"]:
        kinds = ", ".join(f"{k[2:]} {js[k]}" for k in ("e_connect", "e_bind", "e_read", "e_write",
                                                       "e_timeout", "e_parse", "e_eof") if js[k])
        problems.append(f"srcload errors: {js['errors']} ({kinds})")
    if js["non2xx"]:
        problems.append(f"non-2xx/3xx responses: {js['non2xx']}")
    if js["in_flight_at_start"] or js["in_flight_at_end"]:
        problems.append(f"requests still in flight at a barrier (start {js['in_flight_at_start']}, "
                        f"end {js['in_flight_at_end']}): counters not exactly aligned")
    if be_req != sent:
        problems.append(f"backend counted {be_req} requests, srcload sent {sent}")
    if js["eof_idle"]:
        problems.append(f"{js['eof_idle']} idle client connections closed by the proxy (reconnected)")
    r["problems"] = problems
    return r


SLUICE_REUSE_RE = re.compile(r"backend (\S+): (\d+) requests on (\d+) new connections, ([\d.]+)% on reused ones")


# ---------------------------------------------------------------- report

def summarize(runs, t):
    allr = [r for r in runs if r["label"] == t]
    if not allr:
        return None
    rs = [r for r in allr if not r.get("noisy") and r["requests"]] or [r for r in allr if r["requests"]]
    if not rs:
        return None

    def col(k):
        return mmm([r.get(k) for r in rs])

    return {"n": len(rs), "total": len(allr), "rps": col("rps"), "p50": col("p50"), "p99": col("p99"),
            "cpu_us": col("cpu_us"), "cpu_pct": col("cpu_pct"), "new_conns": col("new_conns"),
            "req_per_conn": col("req_per_conn"), "new_per_1k": col("new_per_1k"),
            "reused_pct": col("reused_pct"),
            "be_open_end": col("be_open_end"), "new_per_s": mmm([r["new_conns"] / r["wrk_secs"]
                                                                 for r in rs if r.get("new_conns") is not None]),
            "errors": sum(r["errors"] + r["non2xx"] for r in allr),
            "zero_new": sum(1 for r in rs if r.get("new_conns") == 0)}


def fmt_mmm(t, nd=0):
    if t is None or t[0] is None:
        return "—"
    t = tuple(round(x, nd) + 0.0 for x in t)  # no "-0.0"
    if fmt(t[1], nd) == fmt(t[2], nd):
        return fmt(t[0], nd)
    sep = " to " if t[1] < 0 else "–"
    return f"{fmt(t[0], nd)} ({fmt(t[1], nd)}{sep}{fmt(t[2], nd)})"


def paired(runs, a, b, key):
    """(median, min, max) over rounds of a's KEY ÷ b's in the same round."""
    by = {}
    for r in runs:
        if r["label"] in (a, b) and r.get(key):
            by.setdefault(r["round"], {})[r["label"]] = r[key]
    return mmm([v[a] / v[b] for v in by.values() if a in v and b in v])


def paired_diff(runs, a, b, key):
    """(median, min, max) over rounds of a's KEY minus b's in the same round."""
    by = {}
    for r in runs:
        if r["label"] in (a, b) and r.get(key) is not None:
            by.setdefault(r["round"], {})[r["label"]] = r[key]
    return mmm([v[a] - v[b] for v in by.values() if a in v and b in v])


def rpc_text(s):
    """Requests per backend connection: ∞ when no connection was opened."""
    if s["req_per_conn"][0] is None:
        return "∞ (no new connection)" if s["zero_new"] else "—"
    extra = f", {s['zero_new']} run(s) ∞" if s["zero_new"] else ""
    return fmt_mmm(s["req_per_conn"], 1) + extra


COLORS = {"sluice-hdr": "#2b7bba", "sluice-pp2": "#2b7bba", "sluice-hdr-idle64": "#8fbfe0",
          "sluice-pp2-idle64": "#8fbfe0", "haproxy-hdr": "#e07b39", "haproxy-pp2": "#e07b39",
          "haproxy-pp2-reqid": "#f2b58c", "haproxy-pp2-defpool": "#c9c9c9"}


def short(t):
    return {"sluice-hdr": f"sluice idle_max {IDLE_MAX}", "sluice-pp2": f"sluice idle_max {IDLE_MAX}",
            "sluice-hdr-idle64": "sluice idle_max 64 (small pool)",
            "sluice-pp2-idle64": "sluice idle_max 64 (small pool)",
            "haproxy-hdr": "HAProxy", "haproxy-pp2": "HAProxy",
            "haproxy-pp2-reqid": "HAProxy, per-request unique-id",
            "haproxy-pp2-defpool": "HAProxy, idle-pool defaults"}[t]


def chart(path, summ, targets):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Grouped bars: one group per mode, one bar per variant in it.
    variants = []
    for t in targets:
        v = t.replace("-hdr", "-X").replace("-pp2", "-X")
        if v not in variants:
            variants.append(v)
    modes = [m for m, _ in MODES if any(mode_of(t) == m for t in summ)]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.6))
    panels = [("rps", "Requests/s (median, bars: min–max)", "{:,.0f}"),
              ("reused_pct", "% of backend requests on reused connections", "{:.1f}"),
              ("cpu_us", "Proxy CPU µs per request (lower is better)", "{:.1f}")]
    width = 0.8 / max(1, len(variants))
    for ax, (key, title, f) in zip(axes, panels):
        for i, v in enumerate(variants):
            xs, med, lo, hi, col, lab = [], [], [], [], None, None
            for j, m in enumerate(modes):
                t = v.replace("-X", f"-{m}")
                if t not in summ or summ[t][key][0] is None:
                    continue
                s = summ[t][key]
                xs.append(j + (i - (len(variants) - 1) / 2) * width)
                med.append(s[0])
                lo.append(s[0] - s[1])
                hi.append(s[2] - s[0])
                col, lab = COLORS[t], short(t)
            if not xs:
                continue
            bars = ax.bar(xs, med, width * 0.95, yerr=[lo, hi], capsize=3, color=col, label=lab)
            for bar, val, h in zip(bars, med, hi):
                ax.annotate(f.format(val), (bar.get_x() + bar.get_width() / 2, val + h),
                            xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                            fontsize=7)
        ax.set_xticks(range(len(modes)))
        ax.set_xticklabels([dict(MODES)[m] for m in modes], fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        if key == "reused_pct":
            ax.set_ylim(0, 110)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(1, len(labels)), fontsize=8, frameon=False)
    fig.suptitle(f"sluice reuse: {CLIENTS} keepalive clients from distinct 127.x addresses, one proxy "
                 f"worker, {DURATION} s runs, {ROUNDS} round(s)", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(outdir, d, runs, targets, facts, commands, confs, backend_cmd, checks, notes,
                 loglines, started_at, elapsed):
    summ = {t: summarize(runs, t) for t in targets}
    summ = {k: v for k, v in summ.items() if v}
    try:
        chart(os.path.join(outdir, "reuse.png"), summ, targets)
        chart_line = "![reuse chart](reuse.png)"
    except Exception as e:  # noqa: BLE001 — a missing chart must not lose the table
        chart_line = f"(chart not drawn: {e!r})"
    L = ["# Reuse benchmark — backend connection reuse, header-only vs PROXY v2 identity", ""]
    L.append(f"Run {started_at} UTC, {elapsed:.0f} s in all. {'QUICK mode. ' if QUICK else ''}"
             f"{ROUNDS} round(s) × {DURATION} s measured runs (after {WARMUP} s of unmeasured warm-up on "
             f"the same connections), **{CLIENTS} keepalive client connections, each from its own source "
             f"address** (127.0.1.2 … ), one request in flight per connection, through **one proxy "
             f"worker** to an nginx backend answering `ok\\n` (3 bytes). sluice `max_connections "
             f"{MAX_CONNS}`, HAProxy server `maxconn {MAX_CONNS}`. Pinning: {PIN_TEXT}.")
    L.append("")
    L.append("| target | mode | runs used | req/s median (min–max) | p50 ms | p99 ms (min–max) | "
             "proxy CPU µs/req | proxy CPU % | new backend conns / run | new conns /s | "
             "backend conns opened per 1,000 requests | requests per backend conn | % requests on reused backend conns | backend conns open at end | errors |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in targets:
        if t not in summ:
            continue
        s = summ[t]
        L.append(f"| **{t}** | {'header' if mode_of(t) == 'hdr' else 'PROXY v2'} | {s['n']}/{s['total']} | "
                 f"{fmt_mmm(s['rps'])} | {fmt(s['p50'][0], 1)} | {fmt_mmm(s['p99'], 1)} | "
                 f"{fmt_mmm(s['cpu_us'], 1)} | {fmt(s['cpu_pct'][0])} | {fmt_mmm(s['new_conns'])} | "
                 f"{fmt(s['new_per_s'][0])} | {fmt_mmm(s['new_per_1k'], 2)} | {rpc_text(s)} | {fmt_mmm(s['reused_pct'], 1)} | "
                 f"{fmt(s['be_open_end'][0])} | {s['errors']} |")
    L.append("")
    L.append("Targets: " + "; ".join(f"`{t}` = {describe(t)}" for t in targets) + ".")
    L.append("")
    L.append("Medians (min–max) over the runs used: the clean ones (others' CPU below "
             f"{NOISE_PCT}% of a CPU), or all if none was clean. *new backend conns* and *requests* come "
             "from the backend's nginx `stub_status` (accepts, requests), read at two barriers where no "
             "request is in flight (after the warm-up and after the measured run's last response), so "
             "they cover exactly the requests of the measured run. *% on reused* = (requests − new "
             "connections) ÷ requests: the share of requests that did not need a new backend "
             "connection; *backend conns opened per 1,000 requests* = 1,000 × new connections ÷ requests "
             "(0 when every request rode an already open connection). *backend conns open at end* = the backend's active connections at the second "
             "barrier. errors = srcload errors + non-2xx, over all runs.")
    L.append("")
    pairs = []
    for m, mname in MODES:
        hp = f"haproxy-{m}"
        for t in targets:
            if t.startswith("sluice") and mode_of(t) == m and t in summ and hp in summ:
                pairs.append((t, hp, mname))
    if pairs:
        L.append("## sluice ÷ HAProxy, per mode")
        L.append("")
        L.append("Median (min–max) over rounds of the ratio between the two runs of the same round "
                 "(for % reused: the difference, in percentage points). req/s: >1 means sluice "
                 "faster; p99 and CPU µs/req: <1 means sluice lower; % reused: below 0 means sluice "
                 "reused fewer backend connections.")
        L.append("")
        L.append("| mode | pair | req/s | p99 | proxy CPU µs/req | % reused, sluice − HAProxy |")
        L.append("|---|---|---:|---:|---:|---:|")
        for a, b, mname in pairs:
            L.append(f"| {mname} | {a} ÷ {b} | {fmt_mmm(paired(runs, a, b, 'rps'), 2)} | "
                     f"{fmt_mmm(paired(runs, a, b, 'p99'), 2)} | {fmt_mmm(paired(runs, a, b, 'cpu_us'), 2)} | "
                     f"{fmt_mmm(paired_diff(runs, a, b, 'reused_pct'), 1)} |")
        L.append("")
    mpairs = [(a, b) for a, b in (("sluice-pp2", "sluice-hdr"), ("sluice-pp2-idle64", "sluice-hdr-idle64"),
                                  ("haproxy-pp2", "haproxy-hdr")) if a in summ and b in summ]
    if mpairs:
        L.append("## PROXY v2 ÷ header-only, same proxy")
        L.append("")
        L.append("What switching the identity from X-Forwarded-For to a PROXY v2 header costs each "
                 "proxy (per-round ratios, median and min–max; % reused as a difference in points).")
        L.append("")
        L.append("| pair | req/s | p99 | proxy CPU µs/req | % reused, PROXY v2 − header |")
        L.append("|---|---:|---:|---:|---:|")
        for a, b in mpairs:
            L.append(f"| {a} ÷ {b} | {fmt_mmm(paired(runs, a, b, 'rps'), 2)} | "
                     f"{fmt_mmm(paired(runs, a, b, 'p99'), 2)} | {fmt_mmm(paired(runs, a, b, 'cpu_us'), 2)} | "
                     f"{fmt_mmm(paired_diff(runs, a, b, 'reused_pct'), 1)} |")
        L.append("")
    L.append("## Identity checks")
    L.append("")
    L.append(f"Before each run one `GET /id` from source address {CHECK_SRC} through the proxy; the "
             "backend answers with the client address it learnt (`$http_x_forwarded_for` on the "
             "header-only listener, `$proxy_protocol_addr` on the PROXY listener):")
    L.append("")
    for t in targets:
        res = checks.get(t, [])
        bad = [x for x in res if x]
        L.append(f"- {t}: " + (f"{len(res)} check(s), all answered {CHECK_SRC}" if res and not bad
                               else f"FAILED {len(bad)}/{len(res)}: {bad[0] if bad else 'not run'}"))
    L.append("")
    L.append(chart_line)
    L.append("")
    if notes:
        report_list(L, "Problems seen", notes)
    report_list(L, "Proxy log lines above info level", loglines)
    L.append("## Every run (in the order they ran)")
    L.append("")
    L.append("| round | target | req/s | requests | p50 ms | p99 ms | proxy CPU µs/req | proxy CPU % | "
             "srcload CPU % | others' CPU % | new backend conns | backend requests | % reused | "
             "open at end | sluice's own count (process lifetime) | errors | raw |")
    L.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for r in runs:
        L.append(f"| {r['round']} | {r['label']} | {fmt(r['rps'])} | {fmt(r['requests'])} | {fmt(r['p50'], 2)} | "
                 f"{fmt(r['p99'], 2)} | {fmt(r['cpu_us'], 1)} | {fmt(r['cpu_pct'])} | "
                 f"{fmt(r.get('load_cpu_pct'))} | {fmt(r['other_pct'])}{' ⚠' if r.get('noisy') else ''} | "
                 f"{fmt(r['new_conns'])} | {fmt(r['be_requests'])} | {fmt(r['reused_pct'], 1)} | "
                 f"{fmt(r['be_open_end'])} | {r.get('sluice_reuse', '—')} | {r['errors'] + r['non2xx']} | "
                 f"[{os.path.basename(r['raw'])}](reuse/{r['raw']}) |")
    L.append("")
    L.append("## What was measured")
    L.append("")
    L.append(f"- **Clients.** `bench/srcload.c` (built as `{os.path.relpath(SRCLOAD_SRC, ROOT)}`): "
             f"{CLIENTS} keepalive HTTP/1.1 connections in one epoll thread, connection *i* bound "
             "before `connect()` to 127.0.(1 + i/250).(2 + i%250) (all of 127.0.0.0/8 is local on "
             "Linux), each sending `GET /` back to back with one request in flight and reconnecting "
             "from the same address if the connection closes. Responses are parsed (status line, "
             "Content-Length); latency is per request, 1 µs buckets. It warms up for "
             f"{WARMUP} s (connects everything; not counted), waits until no request is in flight, "
             "prints a sync line and waits for the script to read its counters, runs the measured "
             f"{DURATION} s, stops sending, waits for the last responses (counted in the backend "
             "figures and in CPU per request, not in req/s), and stops at a second sync point.")
    L.append("- **Backend.** One nginx worker with two listeners: A (plain) for header-only identity, "
             "B (`listen … proxy_protocol`) for PROXY v2, `keepalive_requests 1000000`, "
             "`keepalive_timeout 300s` (neither closes a connection during a run), `access_log off`, "
             "`return 200 \"ok\\n\"`; `stub_status` on a third port. nginx accepts the v2 header and "
             "ignores its TLVs (it does not check CRC32C).")
    L.append("- **Proxies.** One worker each (sluice `workers: 1`; HAProxy `nbthread 1`), keepalive "
             f"to clients and backend. sluice: `max_connections: {MAX_CONNS}` for the server, "
             f"`idle_max: {IDLE_MAX}` or a small pool of {IDLE_DEFAULT} (idle keepalive connections kept "
             "per worker per server: a connection that comes back when that many are idle is "
             "closed), header-only with `forward: {x_forwarded_for: append, x_forwarded_proto: "
             "false}` (X-Forwarded-For only, as HAProxy's `option forwardfor`), PROXY v2 with "
             "`proxy_protocol: v2`, `proxy_tlvs: [crc32c, unique_id]` and no identity header. sluice's "
             "pool is keyed on the PROXY header bytes, UNIQUE_ID is per client connection, so a "
             "backend connection that carried one client connection's header only ever serves that "
             "client connection again, and is closed when it goes. HAProxy: `http-reuse always`, "
             f"server `maxconn {MAX_CONNS}`, `maxconn 4096`, `pool-max-conn -1` (default: unlimited), "
             f"`pool-purge-delay 5s` (default), and two changes so that it can keep one idle server "
             f"connection per client: `pool-low-conn {IDLE_MAX}` (HAProxy keeps no more idle "
             "connections than it estimates it needs — the most in use at once during the last "
             "purge period — plus pool-low-conn, default 0: too few when each connection belongs to "
             "one client) and `tune.pool-low-fd-ratio 80`, `tune.pool-high-fd-ratio 90` (with the "
             "defaults, 20% and 25% of maxsock ≈ 2 × maxconn, it stops pooling once the process holds "
             "~1,640 descriptors: 1,000 clients + ~640 server connections). With all of HAProxy's "
             "defaults (target `haproxy-pp2-defpool`) its PROXY v2 reuse varied between 0% and "
             "99.8% of requests from one run to the next in trials, and header-only reuse fell to "
             "~47%; PROXY v2 with `send-proxy-v2 proxy-v2-options crc32c,unique-id` "
             f"and `unique-id-format {HAPROXY_UID_CONN}` (client address and port: one value per "
             "client connection, like sluice's); HAProxy hashes the PROXY header into its connection "
             "key, so its reuse is per client connection too. With the manual's per-request format "
             f"(`{HAPROXY_UID_REQ}`, target `haproxy-pp2-reqid`) every request has a different header "
             "and HAProxy can never reuse a backend connection.")
    L.append("- **Proxy CPU** = utime+stime from `/proc/PID/stat` over the proxy's process tree "
             "between the two sync points ÷ requests sent in the measured run. *others' CPU %*: all "
             "CPUs' busy time minus proxy, backend and srcload (noise: at or above "
             f"{NOISE_PCT}% the run is re-run, up to {ATTEMPTS - 1} times within {QUIET_BUDGET} s; "
             "noisy runs still kept are marked ⚠).")
    L.append("- **sluice's own count** is the line its worker logs when it stops (`backend app: N "
             "requests on M new connections, X% on reused ones`): the whole process lifetime, warm-up "
             "and identity check included — a cross-check of the backend's figures.")
    L.append(f"- **Order.** Each round runs every target once, the order rotating by one each round; "
             "each proxy is started fresh, checked, measured and stopped. The backend stays up.")
    L.append("")
    L.append("## Commands (exact)")
    L.append("")
    L.append("```sh")
    L.append(f"# backend (started once)\n{backend_cmd}")
    for k, v in commands.items():
        L.append(f"# {k}\n{v}")
    L.append("# load, per run (PORT: the proxy's)")
    L.append(" ".join(srcload_cmd("PORT")))
    L.append("```")
    L.append("")
    L.append("Ports are picked free at run time. Configs as used (also in [reuse/](reuse/)):")
    L.append("")
    report_end(L, outdir, "reuse", confs, facts,
               "`make bench-reuse` (or `QUICK=1 make bench-reuse`); see "
               "docs/bench/reuse.md.")
    return summ


# ---------------------------------------------------------------- main

SLUICE = os.path.join(BUILD, "sluice")
SRCLOAD = os.path.join(BUILD, "srcload")
SLUICE_SRC, SRCLOAD_SRC = SLUICE, SRCLOAD


def main():
    global SLUICE, SRCLOAD
    for tool in ("haproxy", "nginx") + (("taskset",) if PROXY_PIN else ()):
        if not shutil.which(tool):
            sys.exit(f"{PROG}: {tool} not found (bench/reuse.sh installs it)")
    for b in (SLUICE, SRCLOAD):
        if not os.access(b, os.X_OK):
            sys.exit(f"{PROG}: {b} missing: make BUILD={os.path.relpath(BUILD, ROOT)} all "
                     f"{os.path.relpath(BUILD, ROOT)}/srcload")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < 2 * CLIENTS + MAX_CONNS + 200:
        log(f"warning: open-files limit {hard} may be too low for {CLIENTS} clients")

    started, outdir, d = results_dirs("reuse")
    os.makedirs(os.path.join(d, "bin"), exist_ok=True)
    # Run copies: others may rebuild build*/ while the benchmark runs.
    for src in (SLUICE_SRC, SRCLOAD_SRC):
        shutil.copy2(src, os.path.join(d, "bin", os.path.basename(src)))
    SLUICE, SRCLOAD = os.path.join(d, "bin", "sluice"), os.path.join(d, "bin", "srcload")
    t_start = time.monotonic()
    targets = TARGETS
    per_run = WARMUP + DURATION + 3
    log(f"results in {outdir}")
    log(f"{ROUNDS} rounds x {len(targets)} targets x ~{per_run} s = about "
        f"{ROUNDS * len(targets) * per_run} s; {PIN_TEXT}")
    built = datetime.datetime.fromtimestamp(os.path.getmtime(SLUICE_SRC), datetime.timezone.utc)
    facts = machine_facts([
        ("sluice", f"{os.path.relpath(SLUICE_SRC, ROOT)} (built {built:%Y-%m-%d %H:%M:%S} UTC, run as a copy "
                   f"in reuse/bin/): {cmd_out([SLUICE, '-V']).splitlines()[0]} ({git_describe()}; -O2, jemalloc)"),
        ("haproxy", cmd_out(["haproxy", "-v"]).splitlines()[0]),
        ("nginx", cmd_out(["nginx", "-v"]).replace("nginx version: ", "")),
        ("srcload", f"{os.path.relpath(SRCLOAD_SRC, ROOT)} from bench/srcload.c"),
        ("RLIMIT_NOFILE", " ".join(str(x) for x in resource.getrlimit(resource.RLIMIT_NOFILE))),
        ("net.ipv4.tcp_tw_reuse", cmd_out(["cat", "/proc/sys/net/ipv4/tcp_tw_reuse"])),
        ("net.ipv4.ip_local_port_range", cmd_out(["cat", "/proc/sys/net/ipv4/ip_local_port_range"])),
    ])
    backend, bports, backend_cmd, bconf = start_backend(d)
    confs = {"backend": bconf}
    commands, notes, loglines, checks, runs = {}, [], [], {}, []
    quiet = Quiet(NOISE_PCT, QUIET_BUDGET, ATTEMPTS, log=log)

    for rnd in range(ROUNDS):
        k = rnd % len(targets)
        for t in targets[k:] + targets[:k]:
            errlog = proxy_errlog(t, d)
            pos = fsize(errlog)
            proxy, port, cmd, conf = start_proxy(t, d, bports)
            commands.setdefault(t, cmd.replace(conf, "CONFIG"))
            confs.setdefault(t, conf)
            if proxy is None:
                notes.append(f"round {rnd + 1}, {t}: did not start; log: "
                             f"{read_tail(errlog, pos).strip()[-500:]!r}")
                log(notes[-1])
                continue
            err = identity_check(port)
            checks.setdefault(t, []).append(err)
            if err:
                notes.append(f"round {rnd + 1}, {t}: identity check failed: {err}")
                log(notes[-1])
            r = quiet.run(lambda: measure(t, rnd, d, port, proxy, backend, bports[2]),
                          f"round {rnd + 1}, {t}", DURATION, notes,
                          lambda x: f"{fmt(x['rps'])} req/s")
            bad_exit = stop_proxy(t, proxy)
            if bad_exit:
                r["problems"].append(bad_exit)
            new = read_tail(errlog, pos)
            if t.startswith("sluice"):
                m = SLUICE_REUSE_RE.findall(new)
                if m:
                    _, nreq, nconn, pct = m[-1]
                    r["sluice_reuse"] = f"{int(nreq):,} req on {int(nconn):,} new conns, {pct}% reused"
            for ln in log_lines_above_info(new)[:10]:
                loglines.append(f"round {rnd + 1}, {t}, {os.path.basename(errlog)}: {ln.strip()}")
            for pr in r["problems"]:
                notes.append(f"round {rnd + 1}, {t}: {pr}")
            runs.append(r)
            log(f"r{rnd + 1} {t:18} {r['rps']:>9,.0f} req/s  p99 {fmt(r['p99'], 1):>6} ms  "
                f"cpu {fmt(r['cpu_us'], 1):>6} us/req ({fmt(r['cpu_pct'])}%)  new conns {fmt(r['new_conns'])}"
                f"  reused {fmt(r['reused_pct'], 1)}%  open {fmt(r['be_open_end'])}"
                f"  others {fmt(r['other_pct'])}%"
                + (f"  PROBLEMS: {r['problems']}" if r["problems"] else ""))
    if backend.poll() is not None:
        notes.append(f"the backend exited during the benchmark (status {backend.returncode})")
    stop(backend)
    elapsed = time.monotonic() - t_start
    with open(os.path.join(d, "runs.json"), "w") as f:
        json.dump(runs, f, indent=1, default=str)
    summ = write_report(outdir, d, runs, targets, facts, commands, confs, backend_cmd, checks, notes,
                        loglines, started.strftime("%Y-%m-%d %H:%M:%S"), elapsed)
    refresh_latest(RESULTS, outdir, "reuse")
    show_report(outdir, "reuse", ["## Identity checks"], log)
    return 0 if summ else 1


if __name__ == "__main__":
    run_main(main, PROG)
