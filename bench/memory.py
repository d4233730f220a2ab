#!/usr/bin/env python3
"""Memory benchmark: what a proxy's memory costs per open connection and
under request rate with the WAF on (the lesson of the ModSecurity
reference, where memory per process, not CPU, broke the server).

ONE worker each: sluice `workers: 1` (master + 1 worker), HAProxy
`nbthread 1` (one process), nginx `worker_processes 1` (master + 1 worker),
each configured for >= 10,000 client connections with idle timeouts of 30
minutes (nothing is closed during the measurement), in front of the static
nginx origin (128-byte body), one plain and one TLS listener (ECDSA P-256)
per proxy.

Part "conns": RSS (VmRSS, summed over the proxy's process tree) and PSS
(/proc/PID/smaps_rollup, shared pages split between master and worker) as
connections are added step by step, for three kinds of connection, held by
bench/connhold.c (one epoll process, pinned away from the proxy):
  idle-plain  TCP connect, one keepalive GET / answered, then idle
  idle-tls    TLS handshake (TLS 1.3, ECDSA P-256 certificate), one GET, idle
  active      plain keepalive connections each sending one GET every
              ACTIVE_INTERVAL_MS (1 s): N connections = N/interval req/s
Each (round, proxy, kind) is a fresh proxy, measured at every step of STEPS
after the step settled; bytes per connection = least-squares slope of RSS
(and of PSS) over the steps. With BASELINE=/path/to/another/sluice, target
sluice-base runs sluice's config with that binary in the same rounds, and
the report gives sluice/sluice-base of bytes per connection for every kind.

Part "waf": sluice with lua/waf.lua (the inspection hook on) vs sluice with
no hook (no rules loaded: the reference's "without rules"), optionally
sluice with the script loaded but `inspection: off` (sluice-off), and
HAProxy running the same waf.lua through bench/haproxy/sluice_hook.lua
(haproxy-waf, every pattern its own PCRE2 regex), and HAProxy and nginx
without rules, at increasing fixed request rates
(fortio load -qps Q, Q=0 meaning as fast as it goes), a ~500-byte
User-Agent and a query string on every request. RSS of the proxy's process
tree sampled every 0.25 s during each rate (end and peak), CPU % of the
proxy, achieved rate, latency. sluice exports no Lua-memory gauge on
/metrics; its log line "Lua memory N KiB" at script load is reported.

Usage: sh bench/memory.sh (or `make bench-memory`). Environment knobs:
  QUICK=1             small and short: the defaults marked QUICK below
  ROUNDS=N            rounds, proxies alternating (order rotates) (3, QUICK too)
  STEPS=a,b,...       connection counts (0,1000,2500,5000,10000; QUICK 0,1000)
  KINDS=a,b           subset of idle-plain,idle-tls,active
  TARGETS=a,b         subset/order of sluice,haproxy,nginx (conns part; and
                      sluice-base)
  SLUICE=path         the sluice binary measured as "sluice" (BUILD/sluice)
  BASELINE=path       another sluice binary, measured as "sluice-base" in the
                      conns part with sluice's config (added after sluice
                      unless TARGETS names it)
  ACTIVE_INTERVAL_MS  ms between two requests of one active connection (1000; QUICK 200)
  SETTLE=S            most seconds to wait for RSS to settle at a step (3; QUICK 1)
  PARTS=a,b           subset of conns,waf
  WAF_RATES=a,b       fortio -qps values, 0 = max (2000,6000,0; QUICK 0)
  WAF_DURATION=S      seconds per rate, may be fractional (1.5; QUICK 0.5)
  WAF_CONNS=N         fortio connections (32)
  WAF_TARGETS=a,b     subset/order of sluice-waf,sluice-nohook,sluice-off,haproxy,nginx
                      (all but sluice-off; QUICK sluice-waf,sluice-nohook)
  HAPROXY_WAF=file    HAProxy's port of the sluice hook (default
                      bench/haproxy/sluice_hook.lua when present: lua-load FILE,
                      `http-request lua.sluice_waf`): enables target haproxy-waf;
                      HAPROXY_WAF= (empty) drops it
  PIN=0               do not pin with taskset
  BUILD=dir           where sluice and connhold are (build); relative BUILD,
                      SLUICE, BASELINE: from the repository root
  RESULTS=dir         results root (bench/results); BENCH_TS=name: use it as
                      the timestamp directory (the whole-suite runner sets it)
  FORTIO=path         fortio binary (bench/memory.sh finds or installs it)

Output: RESULTS/<ts>/memory.md, memory.png (RSS vs connections),
memory-waf.png (RSS vs request rate), memory/ (configs, certificates,
raw samples as JSON, fortio JSON, logs); RESULTS/latest/ gets a copy and
report.md links it. Every process started here is stopped by its PID.
"""
import datetime
import functools
import json
import os
import re
import resource
import select
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import time

import benchlib
from benchlib import (BASELINE, BODY_SIZE, BUILD, CLK_TCK, PIN, QUICK, RESULTS, ROOT, SLUICE_BIN, STARTED,
                      baseline_binaries, cmd_out, fmt, free_port, fsize, lsq_slope, machine_facts, mmm,
                      need_sluice_bins, proc_pss_kb,
                      sluice_describe, with_baseline, nginx_main, nginx_temp_paths, nginx_upstream,
                      pinning, read_tail, refresh_latest, report_end, results_dirs, run_main, show_report,
                      start, start_backend_nginx, stop, tree_rss_kb, tree_ticks, wait_children, wait_port, write)

PROG = "bench/memory.py"
T_START = time.monotonic()
env_int = functools.partial(benchlib.env_int, prog=PROG)
env_float = functools.partial(benchlib.env_float, lo=0, prog=PROG)
env_list = functools.partial(benchlib.env_list, prog=PROG)

ROUNDS = env_int("ROUNDS", 3, 1)
STEPS = sorted(set(env_list("STEPS", "0,1000" if QUICK else "0,1000,2500,5000,10000", int)))
ALL_KINDS = ["idle-plain", "idle-tls", "active"]
KINDS = env_list("KINDS", ",".join(ALL_KINDS))
ALL_TARGETS = ["sluice", "sluice-base", "haproxy", "nginx"]
TARGETS = with_baseline(env_list("TARGETS", "sluice,haproxy,nginx"), PROG, "TARGETS")
ACTIVE_INTERVAL_MS = env_int("ACTIVE_INTERVAL_MS", 200 if QUICK else 1000, 1)
SETTLE = env_float("SETTLE", 1 if QUICK else 3)
IDLE_MIN_S = 1.0   # seconds idle connections sit before the first reading of a step
ALL_PARTS = ["conns", "waf"]
PARTS = env_list("PARTS", ",".join(ALL_PARTS))
WAF_RATES = env_list("WAF_RATES", "0" if QUICK else "2000,6000,0", int)
WAF_DURATION = env_float("WAF_DURATION", 0.5 if QUICK else 1.5)
WAF_CONNS = env_int("WAF_CONNS", 32, 1)
_HOOK = os.path.join(ROOT, "bench", "haproxy", "sluice_hook.lua")
HAPROXY_WAF = os.environ.get("HAPROXY_WAF", _HOOK if os.path.isfile(_HOOK) else "")
ALL_WAF_TARGETS = ["sluice-waf", "sluice-nohook", "sluice-off", "haproxy", "nginx"] + (["haproxy-waf"] if HAPROXY_WAF else [])
WAF_TARGETS = env_list("WAF_TARGETS", "sluice-waf,sluice-nohook" if QUICK else
                       ",".join(t for t in ALL_WAF_TARGETS if t != "sluice-off"))
FORTIO = os.environ.get("FORTIO") or shutil.which("fortio") or os.path.expanduser("~/go/bin/fortio")
POOL = 64                     # backend connections each proxy may keep / open
IDLE_TIMEOUT = "30m"          # client idle timeouts: far longer than any run
NOFILE = 65536                # RLIMIT_NOFILE we ask for (main() sets what we got)
MAXCONN = 40000               # client connections each proxy allows (main() caps it by NOFILE)

for name, vals, known in (("KINDS", KINDS, ALL_KINDS), ("TARGETS", TARGETS, ALL_TARGETS),
                          ("PARTS", PARTS, ALL_PARTS), ("WAF_TARGETS", WAF_TARGETS, ALL_WAF_TARGETS)):
    for v in vals:
        if v not in known:
            sys.exit(f"{PROG}: unknown {v!r} in {name} (known: {','.join(known)})")
if HAPROXY_WAF and not os.path.isfile(HAPROXY_WAF):
    sys.exit(f"{PROG}: HAPROXY_WAF={HAPROXY_WAF}: no such file")

PROXY_PIN, LOAD_PIN, PIN_TEXT = pinning(PIN)
PIN_TEXT = PIN_TEXT.replace("wrk and the backend", "connhold, fortio and the origin")
KIND_TEXT = {"idle-plain": "idle plain", "idle-tls": "idle TLS", "active": "active"}
COLORS = {"sluice": "#2b7bba", "sluice-base": "#8cc0e8", "haproxy": "#e07b39", "nginx": "#3a9e4f",
          "sluice-waf": "#17467a", "sluice-nohook": "#7fb8e6", "sluice-off": "#5a8fc0",
          "haproxy-waf": "#a04d12"}

# A ~500-byte User-Agent (fixed, made once) and a query string: what the WAF
# inspects on every request.
_chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "
_x = 42
_ua = []
for _ in range(490):
    _x = (_x * 1103515245 + 12345) % 2 ** 31
    _ua.append(_chars[_x % len(_chars)])
WAF_UA = "Mozilla/5.0 " + "".join(_ua).strip()
WAF_PATH = "/catalog/item?id=4711&page=2&sort=price"


def log(msg):
    print(f"[memory] {msg}", flush=True)


# ---------------------------------------------------------------- configs

def make_cert(d):
    cd = os.path.join(d, "certs")
    os.makedirs(cd, exist_ok=True)
    key, crt = os.path.join(cd, "ecdsa.key"), os.path.join(cd, "ecdsa.crt")
    cmd = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
           "-keyout", key, "-out", crt, "-days", "30", "-subj", "/CN=localhost",
           "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
    with open(os.path.join(cd, "ecdsa.pem"), "w") as f:
        f.write(open(crt).read() + open(key).read())
    return cd, " ".join(cmd)


def conf_sluice(d, name, port, tport, bport, aport, certs, waf=None):
    """waf: None (no hook), "on" or "off" (waf.lua loaded, `inspection:` on/off)."""
    insp = ""
    top = ""
    if waf:
        top = f"inspection: {waf}\n"
        insp = f"""    inspect:
      script: {os.path.join(ROOT, "lua", "waf.lua")}
"""
    tls = "" if tport is None else f"""  - name: tls
    address: 127.0.0.1:{tport}
    backend: app
    tls:
      certificates:
        - cert: {certs}/ecdsa.pem
          key: {certs}/ecdsa.key
{insp}"""
    return f"""# {name}: one worker; plain + TLS listener; client idle timeouts far above the run
workers: 1
error_log: {d}/{name}.error.log
user: nobody
access_log: off
{top}admin:
  address: 127.0.0.1:{aport}
timeouts:
  client_header: {IDLE_TIMEOUT}
  client_keepalive: {IDLE_TIMEOUT}
  client_send: {IDLE_TIMEOUT}
  drain: 0
limits:
  max_connections: 100000
listeners:
  - name: plain
    address: 127.0.0.1:{port}
    backend: app
{insp}{tls}backends:
  - name: app
    idle_max: {POOL}
    queue_max: 100000
    queue_timeout: 30s
    servers:
      - name: s1
        address: 127.0.0.1:{bport}
        max_connections: {POOL}
"""


def conf_haproxy(d, name, port, tport, bport, certs, waf_lua=None):
    # waf_lua: bench/haproxy/sluice_hook.lua, which runs lua/waf.lua unchanged in
    # HAProxy's Lua (every pattern its own PCRE2 regex); an action must not be
    # suspended midway (waf.lua keeps per-request state in upvalues).
    lua_g = (f"    lua-load {waf_lua}\n    tune.lua.forced-yield 100000000\n") if waf_lua else ""
    lua_fe = ("    http-request lua.sluice_waf\n"
              "    http-request deny deny_status 403 if { var(txn.sluice_deny) -m found }\n") if waf_lua else ""
    tls = f"    bind 127.0.0.1:{tport} ssl crt {certs}/ecdsa.pem\n" if tport else ""
    return f"""# {name}: one thread (one process); maxconn and idle timeouts for >= 10,000 clients
global
    nbthread 1
    maxconn {MAXCONN}
    # fds: RLIMIT_NOFILE is {NOFILE} and cannot be raised here; HAProxy would
    # refuse to start with maxconn above about half of it (it reserves a server
    # fd per client); plenty for this test's client connections
    ulimit-n {NOFILE}
    no strict-limits
    pidfile {d}/{name}.pid
{lua_g}
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
    bind 127.0.0.1:{port}
{tls}{lua_fe}    default_backend be

backend be
    server s1 127.0.0.1:{bport} maxconn {POOL}
"""


def conf_nginx(d, name, port, tport, bport, certs):
    tls = "" if tport is None else (f"        listen 127.0.0.1:{tport} ssl;\n"
                                    f"        ssl_certificate {certs}/ecdsa.pem;\n"
                                    f"        ssl_certificate_key {certs}/ecdsa.key;\n")
    return (f"# {name}: one worker; worker_connections and idle timeouts for >= 10,000 clients\n"
            + nginx_main(d, name, rlimit=NOFILE, conns=MAXCONN) + f"""    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout {IDLE_TIMEOUT};
    client_header_timeout {IDLE_TIMEOUT};
""" + nginx_temp_paths(d, "tmp-nginx") + nginx_upstream(bport, POOL) + f"""    server {{
        listen 127.0.0.1:{port} backlog=4096;
{tls}        location / {{
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
""")


def launch_proxy(tgt, d, bport, certs, sluice_bin, tls=True):
    """Start one proxy on free ports without waiting for it; wait_ready()
    finishes. Returns dict(p, port, tport, aport, cmd, conf, errlog, errpos)."""
    port, tport, aport = free_port(), (free_port() if tls else None), free_port()
    cfgdir = os.path.join(d, "configs")
    os.makedirs(cfgdir, exist_ok=True)
    if tgt.startswith("sluice"):
        waf = {"sluice-waf": "on", "sluice-off": "off"}.get(tgt)
        conf = write(os.path.join(cfgdir, f"{tgt}.yaml"),
                     conf_sluice(d, tgt, port, tport, bport, aport, certs, waf))
        cmd = PROXY_PIN + [sluice_bin, "-c", conf]
        errlog = os.path.join(d, f"{tgt}.error.log")
        out = os.path.join(d, f"{tgt}.out")
    elif tgt.startswith("haproxy"):
        conf = write(os.path.join(cfgdir, f"{tgt}.cfg"),
                     conf_haproxy(d, tgt, port, tport, bport, certs,
                                  HAPROXY_WAF if tgt == "haproxy-waf" else None))
        cmd = PROXY_PIN + ["haproxy", "-f", conf, "-db"]
        errlog = out = os.path.join(d, f"{tgt}.out")
    else:
        os.makedirs(os.path.join(d, "tmp-nginx"), exist_ok=True)
        conf = write(os.path.join(cfgdir, f"{tgt}.conf"), conf_nginx(d, tgt, port, tport, bport, certs))
        errlog = os.path.join(d, f"{tgt}.error.log")
        cmd = PROXY_PIN + ["nginx", "-p", d, "-e", errlog, "-c", conf]
        out = os.path.join(d, f"{tgt}.out")
    pos, opos = fsize(errlog), fsize(out)
    return {"tgt": tgt, "p": start(cmd, out), "port": port, "tport": tport, "aport": aport,
            "cmd": " ".join(cmd), "conf": conf, "errlog": errlog, "errpos": pos, "out": out,
            "outpos": opos, "t0": time.monotonic()}


def wait_ready(px):
    """Wait until the proxy listens (and has forked its worker); on failure
    stop it and set px["p"] = None and px["why"]. Returns px."""
    p = px["p"]
    # sluice's master compiles the WAF's pattern databases before it listens.
    if not wait_port(px["port"], p, deadline=60.0) or \
            (px["tport"] and not wait_port(px["tport"], p, deadline=10.0)):
        stop(p)
        px["p"] = None
        why = read_tail(px["errlog"], px["errpos"]).strip()
        if px["out"] != px["errlog"]:
            why = (why + "\n" + read_tail(px["out"], px["outpos"]).strip()).strip()
        px["why"] = why[-400:]
        return px
    if not px["tgt"].startswith("haproxy"):
        wait_children(p)
    px["start_s"] = time.monotonic() - px["t0"]
    return px


def start_proxy(tgt, d, bport, certs, sluice_bin, tls=True, notes=None):
    """launch_proxy + wait_ready. sluice loads a script's main chunk under a
    10 s wall-clock budget, which compiling waf.lua can exceed on a busy
    machine ("time budget exceeded"): up to 2 more tries then."""
    for attempt in range(3):
        px = wait_ready(launch_proxy(tgt, d, bport, certs, sluice_bin, tls))
        if px["p"] is not None or "time budget exceeded" not in px.get("why", ""):
            break
        if notes is not None:
            notes.append(f"{tgt}: start attempt {attempt + 1} failed: sluice's 10 s load budget for "
                         "the script's main chunk ran out (a busy machine); retried")
        log(f"{tgt}: load budget exceeded while compiling the WAF; retrying")
    return px


# ---------------------------------------------------------------- memory readings

def reading(p):
    """RSS and PSS (KiB) of the proxy's process tree; the worker's RSS (the
    largest process: sluice/nginx worker, HAProxy's only process)."""
    rss = tree_rss_kb(p.pid)
    pss = {q: proc_pss_kb(q) for q in rss}
    return {"rss": sum(rss.values()), "pss": sum(v for v in pss.values() if v),
            "worker_rss": max(rss.values()) if rss else 0,
            "procs": {str(q): [rss[q], pss.get(q)] for q in rss}}


def probe(port, tls):
    """One GET / on a new connection (closed after); error text or None."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            s = ctx.wrap_socket(s, server_hostname="localhost")
        s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
    except (OSError, ssl.SSLError) as e:
        return repr(e)
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200") or len(body) != BODY_SIZE:
        return f"answer {head[:40]!r}, {len(body)} body bytes"
    return None


# ---------------------------------------------------------------- connhold

class Holder:
    """bench/connhold.c, driven over its stdin/stdout."""

    def __init__(self, port, kind, logf):
        mode = {"idle-plain": "plain", "idle-tls": "tls", "active": "active"}[kind]
        self.cmd = LOAD_PIN + [os.path.join(BUILD, "connhold"), str(port), mode, str(ACTIVE_INTERVAL_MS)]
        self.err = open(logf, "ab")
        self.p = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True, bufsize=1)
        STARTED.append(self.p)

    def ask(self, line, timeout):
        """Send a command, return the parsed status line (dict) or None."""
        try:
            self.p.stdin.write(line + "\n")
            self.p.stdin.flush()
        except OSError:
            return None
        r, _, _ = select.select([self.p.stdout], [], [], timeout)
        if not r:
            return None
        out = self.p.stdout.readline().split()
        if len(out) < 12 or out[0] != "open":
            return None
        return {out[i]: int(out[i + 1]) for i in range(0, 12, 2)}

    def close(self):
        try:
            self.p.stdin.write("q\n")
            self.p.stdin.flush()
            self.p.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        stop(self.p)
        self.err.close()


def settle(p, kind):
    """Wait for the proxy's RSS to settle; returns (reading, seconds waited)."""
    t0 = time.monotonic()
    # active: at least one interval, so every connection sent a request at
    # this step's count; idle: a second, so every connection has been idle
    # long enough for a proxy to have trimmed what it keeps per idle
    # connection (sluice gives buffers back after 250 ms)
    minimum = ACTIVE_INTERVAL_MS / 1000 if kind == "active" else IDLE_MIN_S
    time.sleep(minimum)
    prev = reading(p)
    while time.monotonic() - t0 < max(SETTLE, minimum + 0.1):
        time.sleep(0.1)
        cur = reading(p)
        if abs(cur["rss"] - prev["rss"]) <= max(64, prev["rss"] * 0.002):
            return cur, time.monotonic() - t0
        prev = cur
    return prev, time.monotonic() - t0


def ramp(tgt, kind, rnd, d, bport, certs, sluice_bin, commands, confs):
    """One fresh proxy, connections added STEP by STEP. Returns the run dict."""
    r = {"round": rnd + 1, "target": tgt, "kind": kind, "points": [], "problems": []}
    px = start_proxy(tgt, d, bport, certs, sluice_bin)
    commands.setdefault(tgt, px["cmd"].replace(px["conf"], "CONFIG"))
    confs.setdefault(tgt, px["conf"])
    if px["p"] is None:
        r["problems"].append(f"did not start: {px['why']!r}")
        return r
    p = px["p"]
    for port, tls in ((px["port"], False), (px["tport"], True)):
        err = probe(port, tls)
        if err:
            r["problems"].append(f"probe {'TLS' if tls else 'plain'} failed: {err}")
    if r["problems"]:
        stop(p)
        return r
    port = px["tport"] if kind == "idle-tls" else px["port"]
    h = Holder(port, kind, os.path.join(d, "connhold.err"))
    last = None
    for n in STEPS:
        t0 = time.monotonic()
        st = h.ask(str(n), 150) if n else h.ask("s", 30)
        open_s = time.monotonic() - t0
        if st is None:
            r["problems"].append(f"step {n}: connhold gave no answer (exit status {h.p.poll()})")
            break
        if st["open"] < n:
            r["problems"].append(f"step {n}: only {st['open']} connections open "
                                 f"({st['errors']} failed, {st['closed']} closed by the proxy)")
        if p.poll() is not None:
            r["problems"].append(f"proxy exited (status {p.returncode})")
            break
        rd, settle_s = settle(p, kind)
        st2 = h.ask("s", 10) or st
        rd.update(step=n, open=st2["open"], open_s=open_s, settle_s=settle_s, reqs=st2["reqs"],
                  errors=st2["errors"], closed=st2["closed"])
        r["points"].append(rd)
        last = st2
        log(f"r{rnd + 1} {tgt:8} {kind:10} {st2['open']:>6} conns  RSS {rd['rss'] / 1024:7.1f} MiB  "
            f"PSS {rd['pss'] / 1024:7.1f} MiB  (open {open_s:.1f} s, settle {settle_s:.1f} s)")
        if st["open"] < n * 0.9:
            break
    if last and last["closed"]:
        r["problems"].append(f"{last['closed']} established connections were closed by the proxy "
                             "during the ramp")
    r["client"] = last
    h.close()
    if p.poll() is not None:
        r["problems"].append(f"proxy exited (status {p.returncode})")
    stop(p)
    xs = [pt["open"] for pt in r["points"]]
    for key in ("rss", "pss"):
        b, r2 = lsq_slope(xs, [pt[key] for pt in r["points"]])
        r[f"slope_{key}"] = b * 1024 if b is not None else None     # bytes per connection
        r[f"r2_{key}"] = r2
    if r["slope_rss"] is None:
        r["problems"].append("no slope: fewer than two steps measured")
    return r


# ---------------------------------------------------------------- WAF part

def fortio_cmd(port, qps, jsonf):
    return (LOAD_PIN + [FORTIO, "load", "-qps", str(qps), "-c", str(WAF_CONNS), "-t", f"{WAF_DURATION:g}s",
                        "-p", "50,99", "-json", jsonf, "-H", f"User-Agent: {WAF_UA}",
                        f"http://127.0.0.1:{port}{WAF_PATH}"])


def waf_run(tgt, rnd, d, px, notes):
    """Every rate of WAF_RATES in turn against one running proxy."""
    p = px["p"]
    out = {"round": rnd + 1, "target": tgt, "rates": [], "problems": [], "start_s": px.get("start_s")}
    out["idle"] = reading(p)
    for q in WAF_RATES:
        jf = os.path.join(d, "raw", f"r{rnd + 1}-{tgt}-qps{q}.json")
        cmd = fortio_cmd(px["port"], q, jf)
        c0, t0 = tree_ticks(p.pid), time.monotonic()
        with open(os.path.join(d, "raw", f"r{rnd + 1}-{tgt}-qps{q}.txt"), "w") as fo:
            fo.write(" ".join(cmd) + "\n")
            fo.flush()
            fp = subprocess.Popen(cmd, stdout=fo, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            STARTED.append(fp)
            peak, samples = 0, []
            while fp.poll() is None and time.monotonic() - t0 < WAF_DURATION + 30:
                rd = reading(p)
                samples.append(rd["rss"])
                peak = max(peak, rd["rss"])
                time.sleep(0.25)
            stop(fp)
        wall = time.monotonic() - t0
        c1 = tree_ticks(p.pid)
        end = reading(p)
        peak = max(peak, end["rss"])
        row = {"qps": q, "rss_end": end["rss"], "pss_end": end["pss"], "worker_rss": end["worker_rss"],
               "rss_peak": peak, "samples": samples,
               "cpu_pct": sum(c1[k] - c0[k] for k in c1 if k in c0) / CLK_TCK / wall * 100}
        try:
            with open(jf) as f:
                j = json.load(f)
            row["actual_qps"] = j.get("ActualQPS", 0.0)
            codes = {str(k): v for k, v in (j.get("RetCodes") or {}).items()}
            row["ok"] = codes.get("200", 0)
            row["bad"] = sum(v for k, v in codes.items() if k != "200")
            pct = {x["Percentile"]: x["Value"] * 1000 for x in
                   (j.get("DurationHistogram") or {}).get("Percentiles") or []}
            row["p50"], row["p99"] = pct.get(50), pct.get(99)
        except (OSError, ValueError) as e:
            row.update(actual_qps=0.0, ok=0, bad=0, p50=None, p99=None)
            out["problems"].append(f"qps {q}: no fortio JSON ({e!r})")
        if row["bad"]:
            out["problems"].append(f"qps {q}: {row['bad']} answers other than 200")
        if p.poll() is not None:
            out["problems"].append(f"proxy exited (status {p.returncode})")
            out["rates"].append(row)
            break
        out["rates"].append(row)
        log(f"r{rnd + 1} waf {tgt:11} qps {q or 'max':>5}: {row['actual_qps']:8,.0f} req/s  "
            f"RSS {row['rss_end'] / 1024:6.1f} MiB (peak {peak / 1024:.1f})  cpu {row['cpu_pct']:.0f}%  "
            f"p99 {fmt(row['p99'], 2)} ms")
    if tgt.startswith("sluice") and px.get("aport"):
        out["metrics"] = sluice_metrics(px["aport"])
        if tgt == "sluice-waf" and out["metrics"].get("inspect_allow", 0) == 0:
            out["problems"].append("the WAF inspected no request (sluice_inspect_allow_total = 0)")
    for pr in out["problems"]:
        notes.append(f"round {rnd + 1}, waf, {tgt}: {pr}")
    return out


def sluice_metrics(aport):
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{aport}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    m = {}
    for key, name in (("inspect_allow", "sluice_inspect_allow_total"),
                      ("inspect_deny", "sluice_inspect_deny_total"),
                      ("requests", "sluice_requests_total")):
        m[key] = sum(float(x) for x in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))
    return m


def lua_memory_kib(errlog, pos):
    m = re.findall(r"loaded in [\d.]+ ms, Lua memory (\d+) KiB", read_tail(errlog, pos))
    return int(m[-1]) if m else None


# ---------------------------------------------------------------- report

def fmt_mmm(t, nd=0, scale=1.0):
    if t[0] is None:
        return "—"
    a, b, c = (x * scale for x in t)
    if b == c:
        return f"{a:,.{nd}f}"
    return f"{a:,.{nd}f} ({b:,.{nd}f}–{c:,.{nd}f})"


def step_mmm(ramps, tgt, kind, step, key):
    return mmm([pt[key] for r in ramps if r["target"] == tgt and r["kind"] == kind
                for pt in r["points"] if pt["step"] == step])


def chart_conns(path, ramps, targets):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    kinds = [k for k in KINDS if any(r["kind"] == k and r["points"] for r in ramps)]
    if not kinds:
        return False
    fig, axes = plt.subplots(1, len(kinds) + 1, figsize=(5 * (len(kinds) + 1), 4.6), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        for t in targets:
            xs, med, lo, hi = [], [], [], []
            for s in STEPS:
                v = step_mmm(ramps, t, kind, s, "rss")
                o = step_mmm(ramps, t, kind, s, "open")
                if v[0] is None:
                    continue
                xs.append(o[0])
                med.append(v[0] / 1024)
                lo.append((v[0] - v[1]) / 1024)
                hi.append((v[2] - v[0]) / 1024)
            if xs:
                ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=3, color=COLORS[t], label=t)
        ax.set_title(f"{KIND_TEXT[kind]} connections: RSS (MiB)", fontsize=10)
        ax.set_xlabel("open connections")
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    ax = axes[0][-1]
    width = 0.8 / max(1, len(targets))
    for i, t in enumerate(targets):
        xs, med, lo, hi = [], [], [], []
        for j, kind in enumerate(kinds):
            v = mmm([r["slope_rss"] for r in ramps if r["target"] == t and r["kind"] == kind
                     and r.get("slope_rss") is not None])
            if v[0] is None:
                continue
            xs.append(j + (i - (len(targets) - 1) / 2) * width)
            med.append(v[0] / 1024)
            lo.append((v[0] - v[1]) / 1024)
            hi.append((v[2] - v[0]) / 1024)
        if xs:
            bars = ax.bar(xs, med, width, yerr=[lo, hi], capsize=3, color=COLORS[t], label=t)
            for b, v in zip(bars, med):
                ax.annotate(f"{v:.1f}", (b.get_x() + b.get_width() / 2, b.get_height()), xytext=(0, 2),
                            textcoords="offset points", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(kinds)))
    ax.set_xticklabels([KIND_TEXT[k] for k in kinds])
    ax.set_title("KiB per connection (slope of RSS)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(f"Memory per connection, one worker each, {ROUNDS} rounds: medians (bars: min–max); "
                 f"active = 1 request per {ACTIVE_INTERVAL_MS} ms per connection", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def rate_label(q):
    return "max" if q == 0 else f"{q:,}"


def chart_waf(path, wruns, targets):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if not wruns:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for t in targets:
        xs, rss, peak, cpu = [], [], [], []
        for q in WAF_RATES:
            rows = [row for w in wruns if w["target"] == t for row in w["rates"] if row["qps"] == q]
            if not rows:
                continue
            xs.append(statistics.median(r["actual_qps"] for r in rows))
            rss.append(mmm([r["rss_end"] / 1024 for r in rows]))
            peak.append(statistics.median(r["rss_peak"] / 1024 for r in rows))
            cpu.append(statistics.median(r["cpu_pct"] for r in rows))
        idle = mmm([w["idle"]["rss"] / 1024 for w in wruns if w["target"] == t])
        if not xs:
            continue
        xs, rss = [0] + xs, [idle] + rss
        axes[0].errorbar(xs, [v[0] for v in rss], yerr=[[v[0] - v[1] for v in rss], [v[2] - v[0] for v in rss]],
                         marker="o", capsize=3, color=COLORS.get(t, "#777"), label=t)
        axes[0].plot(xs[1:], peak, ls=":", color=COLORS.get(t, "#777"))
        axes[1].plot(xs[1:], cpu, marker="o", color=COLORS.get(t, "#777"), label=t)
    axes[0].set_title("RSS of the proxy (MiB) vs achieved req/s\n(solid: at the end of each rate, "
                      "dotted: peak during it)", fontsize=10)
    axes[1].set_title("proxy CPU % of one core vs achieved req/s", fontsize=10)
    for ax in axes:
        ax.set_xlabel("achieved requests/s (fortio)")
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.suptitle(f"Memory vs request rate, WAF on/off (one worker; fortio -c {WAF_CONNS}, "
                 f"{WAF_DURATION} s per rate, {ROUNDS} rounds, medians)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def write_report(outdir, ramps, wruns, targets, wtargets, facts, commands, confs, cert_cmd, backend_cmd,
                 lua_kib, start_s, notes, started_at, elapsed):
    L = []
    files = ["memory.md"]
    try:
        if chart_conns(os.path.join(outdir, "memory.png"), ramps, targets):
            files.append("memory.png")
    except Exception as e:  # noqa: BLE001 — a missing chart must not lose the tables
        notes.append(f"memory.png not drawn: {e!r}")
    try:
        if chart_waf(os.path.join(outdir, "memory-waf.png"), wruns, wtargets):
            files.append("memory-waf.png")
    except Exception as e:  # noqa: BLE001
        notes.append(f"memory-waf.png not drawn: {e!r}")
    L.append("# Memory — per connection, and under request rate with the WAF on")
    L.append("")
    L.append(f"Run {started_at} UTC, {elapsed:.0f} s in all. {'QUICK mode. ' if QUICK else ''}"
             f"{ROUNDS} round(s), proxies alternating (the order rotates each round). **One worker "
             "each**: sluice `workers: 1` (master + worker), HAProxy `nbthread 1` (one process), "
             f"nginx `worker_processes 1` (master + worker), all allowing {MAXCONN:,} client "
             f"connections with {IDLE_TIMEOUT} client idle timeouts, in front of one nginx origin "
             f"({BODY_SIZE}-byte body, backend pool {POOL}). RLIMIT_NOFILE {NOFILE} for every "
             f"process. Pinning: {PIN_TEXT}.")
    L.append("")
    L.append("The ModSecurity reference's lesson: CPU was never the limit, memory per process was. "
             "So: how much does each open connection cost, and does memory move with request rate "
             "when the WAF is on?")
    L.append("")
    if ramps:
        L.append("## Bytes per connection")
        L.append("")
        L.append(f"Least-squares slope of the proxy's memory over the steps {', '.join(map(str, STEPS))} "
                 "(connections actually open), per round; median (min–max) over rounds, in bytes per "
                 "connection. RSS = VmRSS summed over the proxy's processes; PSS = the same with pages "
                 "shared between master and worker split between them (from `/proc/PID/smaps_rollup`). "
                 "Kinds: *idle plain* = TCP + one keepalive GET answered, then idle; *idle TLS* = TLS 1.3 "
                 "handshake (ECDSA P-256) + one GET, then idle; *active* = plain keepalive, every "
                 f"connection sending a GET every {ACTIVE_INTERVAL_MS} ms (so N connections = "
                 f"{1000 / ACTIVE_INTERVAL_MS:g}·N req/s). Kernel socket buffers are not in RSS.")
        L.append("")
        L.append("| kind | proxy | runs | B/conn (RSS slope) | B/conn (PSS slope) | R² | "
                 f"RSS at {STEPS[-1]:,} MiB | PSS at {STEPS[-1]:,} MiB | RSS at 0 MiB |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for kind in KINDS:
            for t in targets:
                rs = [r for r in ramps if r["target"] == t and r["kind"] == kind and r.get("slope_rss")]
                if not rs:
                    continue
                L.append(f"| {KIND_TEXT[kind]} | **{t}** | {len(rs)} | "
                         f"**{fmt_mmm(mmm([r['slope_rss'] for r in rs]))}** | "
                         f"{fmt_mmm(mmm([r['slope_pss'] for r in rs]))} | "
                         f"{fmt(mmm([r['r2_rss'] for r in rs])[0], 3)} | "
                         f"{fmt_mmm(step_mmm(ramps, t, kind, STEPS[-1], 'rss'), 1, 1 / 1024)} | "
                         f"{fmt_mmm(step_mmm(ramps, t, kind, STEPS[-1], 'pss'), 1, 1 / 1024)} | "
                         f"{fmt_mmm(step_mmm(ramps, t, kind, STEPS[0], 'rss'), 1, 1 / 1024)} |")
        L.append("")
        peers = [p for p in targets if p != "sluice"]
        if "sluice" in targets and "sluice-base" in targets:
            cells = []
            for kind in KINDS:
                a, b = (mmm([r["slope_rss"] for r in ramps if r["target"] == t and r["kind"] == kind
                             and r.get("slope_rss")])[0] for t in ("sluice", "sluice-base"))
                if a is not None and b:
                    cells.append(f"{KIND_TEXT[kind]} **{a / b:.3f}** ({a:,.0f} vs {b:,.0f} B/conn)")
            L.append("**sluice ÷ sluice-base, bytes per connection (RSS slope, medians; below 1 = sluice "
                     "holds less)**: " + ("; ".join(cells) or "— (no figure for one of them)")
                     + ". Per-round ratios in the table below. " + baseline_binaries())
            L.append("")
        if "sluice" in targets and peers:
            L.append("Ratios sluice ÷ peer of bytes per connection (RSS slope), median (min–max) of "
                     "the per-round ratios (below 1 = sluice holds less per connection):")
            L.append("")
            L.append("| kind | " + " | ".join(f"sluice ÷ {p}" for p in peers) + " |")
            L.append("|---|" + "---:|" * len(peers))
            for kind in KINDS:
                cells = []
                for p in peers:
                    by = {}
                    for r in ramps:
                        if r["kind"] == kind and r["target"] in ("sluice", p) and r.get("slope_rss"):
                            by.setdefault(r["round"], {})[r["target"]] = r["slope_rss"]
                    cells.append(fmt_mmm(mmm([v["sluice"] / v[p] for v in by.values()
                                              if "sluice" in v and p in v and v[p] > 0]), 2))
                L.append(f"| {KIND_TEXT[kind]} | " + " | ".join(cells) + " |")
            L.append("")
        if "memory.png" in files:
            L.append("![memory chart](memory.png)")
            L.append("")
        L.append("### RSS at each step")
        L.append("")
        L.append("MiB, median (min–max) over rounds; *open* is what the client held (median).")
        L.append("")
        for kind in KINDS:
            if not any(r["kind"] == kind and r["points"] for r in ramps):
                continue
            L.append(f"**{KIND_TEXT[kind]}**")
            L.append("")
            L.append("| step | " + " | ".join(f"{t} open | {t} RSS | {t} PSS" for t in targets) + " |")
            L.append("|---:|" + "---:|" * (3 * len(targets)))
            for s in STEPS:
                cells = []
                for t in targets:
                    o = step_mmm(ramps, t, kind, s, "open")
                    cells += [fmt(o[0]), fmt_mmm(step_mmm(ramps, t, kind, s, "rss"), 1, 1 / 1024),
                              fmt_mmm(step_mmm(ramps, t, kind, s, "pss"), 1, 1 / 1024)]
                L.append(f"| {s:,} | " + " | ".join(cells) + " |")
            L.append("")
        L.append("Per process at the last step (first round): " + "; ".join(
            f"{r['target']} {KIND_TEXT[r['kind']]}: " + ", ".join(
                f"pid {q} RSS {v[0] / 1024:.1f} / PSS {(v[1] or 0) / 1024:.1f} MiB"
                for q, v in r["points"][-1]["procs"].items())
            for r in ramps if r["round"] == 1 and r["points"]) + ".")
        L.append("")
    if wruns:
        L.append("## Memory vs request rate, WAF on")
        L.append("")
        haw = "haproxy-waf" in wtargets
        L.append("*sluice-waf*: `lua/waf.lua` (the CRS-inspired ruleset, 300+ rules) on the "
                 "listener, inspection on; *sluice-nohook*: the same sluice with no inspection hook "
                 "configured (no rules loaded, the reference's \"without rules\"); "
                 + ("*sluice-off*: waf.lua loaded, `inspection: off` (the hook switched off, as "
                    "the admin `POST /inspect/off` does); " if "sluice-off" in wtargets else "")
                 + (f"*haproxy-waf*: HAProxy running the same waf.lua through "
                    f"`{os.path.relpath(HAPROXY_WAF, ROOT)}` (`http-request lua.sluice_waf`; every "
                    "pattern its own PCRE2 regex instead of sluice's one multi-pattern database); "
                    if haw else "")
                 + "*haproxy*, *nginx*: **no rules**, for scale. Each target is "
                 f"started fresh per round, then fortio runs {WAF_DURATION:g} s at each rate in turn "
                 f"(`-qps` {', '.join(rate_label(q) for q in WAF_RATES)}; max = `-qps 0`), "
                 f"{WAF_CONNS} connections, GET `{WAF_PATH}` with a {len(WAF_UA)}-byte User-Agent. "
                 "RSS sampled every 0.25 s during each rate; *end* = after it, *peak* = the highest "
                 "sample. Median (min–max) over rounds.")
        L.append("")
        if start_s:
            L.append("Start-up (exec to listening, median): " + ", ".join(
                f"{t} {statistics.median(v):.1f} s" for t, v in start_s.items())
                + " — sluice's master compiles the WAF's pattern databases before it listens.")
            L.append("")
        if lua_kib:
            L.append(f"Lua memory: sluice exports no Lua-memory gauge on `/metrics` (checked); its log "
                     f"says the worker's Lua state held **{lua_kib} KiB** after loading waf.lua. The "
                     "cap is `lua_memory_max` (64m by default).")
            L.append("")
        L.append("| proxy | asked req/s | achieved req/s | RSS end MiB | RSS peak MiB | PSS end MiB | "
                 "proxy CPU % | p50 ms | p99 ms | non-200 |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for t in wtargets:
            ws = [w for w in wruns if w["target"] == t]
            if not ws:
                continue
            L.append(f"| **{t}** | idle | 0 | {fmt_mmm(mmm([w['idle']['rss'] for w in ws]), 1, 1 / 1024)} | — | "
                     f"{fmt_mmm(mmm([w['idle']['pss'] for w in ws]), 1, 1 / 1024)} | — | — | — | — |")
            for q in WAF_RATES:
                rows = [row for w in ws for row in w["rates"] if row["qps"] == q]
                if not rows:
                    continue
                L.append(f"| {t} | {rate_label(q)} | {fmt_mmm(mmm([r['actual_qps'] for r in rows]))} | "
                         f"{fmt_mmm(mmm([r['rss_end'] for r in rows]), 1, 1 / 1024)} | "
                         f"{fmt_mmm(mmm([r['rss_peak'] for r in rows]), 1, 1 / 1024)} | "
                         f"{fmt_mmm(mmm([r['pss_end'] for r in rows]), 1, 1 / 1024)} | "
                         f"{fmt(mmm([r['cpu_pct'] for r in rows])[0])} | "
                         f"{fmt(mmm([r['p50'] for r in rows])[0], 2)} | "
                         f"{fmt(mmm([r['p99'] for r in rows])[0], 2)} | {sum(r['bad'] for r in rows)} |")
        L.append("")
        def peak_of(t):
            return mmm([max([w["idle"]["rss"]] + [r["rss_peak"] for r in w["rates"]])
                        for w in wruns if w["target"] == t])[0]
        a = peak_of("sluice-waf") if "sluice-waf" in wtargets else None
        if a:
            for t in ("sluice-nohook", "sluice-off"):
                b = peak_of(t) if t in wtargets else None
                if b:
                    L.append(f"- Highest RSS (median over rounds): sluice-waf {a / 1024:.1f} MiB vs {t} "
                             f"{b / 1024:.1f} MiB: {(a - b) / 1024:+.1f} MiB ({a / b:.2f}×).")
            for t in ("haproxy", "nginx", "haproxy-waf"):
                b = peak_of(t) if t in wtargets else None
                if b:
                    L.append(f"- sluice-waf ÷ {t}{'' if t == 'haproxy-waf' else ' (no rules)'} highest "
                             f"RSS: {a / b:.2f}.")
            L.append("")
        if "memory-waf.png" in files:
            L.append("![memory-waf chart](memory-waf.png)")
            L.append("")
    if notes:
        L.append("## Problems and notes")
        L.append("")
        for n in notes:
            L.append(f"- {n}")
        L.append("")
    L.append("## How to read this")
    L.append("")
    L.append("- Bytes per connection is the slope, not RSS ÷ connections: the fixed part (binary, "
             "libraries, TLS context, compiled WAF) is the intercept. An allocator that grabs memory in "
             "large chunks makes RSS a staircase; the fit over several steps averages it out (R² close "
             "to 1 = a straight line).")
    L.append("- The client (bench/connhold.c) is a separate process, pinned away from the proxy; its "
             "memory is not counted. The origin is not counted either.")
    L.append("- Trust ratios from the same run over absolute numbers on a noisy shared machine; memory "
             "figures are steadier than CPU figures, but the active kind and the WAF rates also depend "
             "on how fast the proxy keeps up.")
    L.append("")
    L.append("## Commands (exact)")
    L.append("")
    L.append("```sh")
    L.append(f"# certificate (in memory/certs/)\n{cert_cmd}")
    L.append(f"# origin (started once)\n{backend_cmd}")
    for k, v in commands.items():
        L.append(f"# {k}\n{v}")
    L.append("# connection holder: stdin takes the step counts (\"1000\", \"2500\", ...), "
             "one status line per step")
    for kind, mode in (("idle-plain", "plain"), ("idle-tls", "tls"), ("active", "active")):
        if kind in KINDS:
            L.append(" ".join(LOAD_PIN + [os.path.relpath(os.path.join(BUILD, "connhold"), ROOT),
                                          "PORT" if kind != "idle-tls" else "TLSPORT", mode,
                                          str(ACTIVE_INTERVAL_MS)]))
    if wruns:
        L.append("# WAF part, each rate Q in turn")
        L.append(" ".join(f"'{c}'" if " " in c else c for c in fortio_cmd("PORT", "Q", "raw/rN-TARGET-qpsQ.json")))
    L.append("# memory readings: VmRSS from /proc/PID/status, Pss from /proc/PID/smaps_rollup, "
             "summed over the proxy's process tree")
    L.append("```")
    L.append("")
    L.append("Ports are picked free at run time. Configs (all in [memory/configs/](memory/configs/)):")
    L.append("")
    report_end(L, outdir, "memory", confs, facts,
               "`make bench-memory` (or `QUICK=1 make bench-memory`); see docs/bench/memory.md.")
    return files


def facts_software(bins):
    """bins: [(target, the binary it was copied from, the copy run)]."""
    out = []
    for tgt, src, copy in bins:
        built = datetime.datetime.fromtimestamp(os.path.getmtime(src), datetime.timezone.utc)
        rel = os.path.relpath(src, ROOT)
        out.append((tgt, f"{src if rel.startswith('..') else rel} (built {built:%Y-%m-%d %H:%M:%S} UTC, run "
                         f"as a copy in memory/bin/): {sluice_describe(copy)}, "
                         f"{next((ln for ln in cmd_out([copy, '-V']).splitlines() if ln[:4].lower() == 'tls '), '')}"))
    return out + [
            ("haproxy", cmd_out(["haproxy", "-v"]).splitlines()[0]),
            ("nginx", cmd_out(["nginx", "-v"]).replace("nginx version: ", "")),
            ("fortio", cmd_out([FORTIO, "version"]).splitlines()[0] if os.path.exists(FORTIO) else "—"),
            ("openssl", cmd_out(["openssl", "version"])),
            ("RLIMIT_NOFILE", " ".join(str(x) for x in resource.getrlimit(resource.RLIMIT_NOFILE))),
            ("net.ipv4.ip_local_port_range", cmd_out(["cat", "/proc/sys/net/ipv4/ip_local_port_range"]))]


# ---------------------------------------------------------------- main

def main():
    global NOFILE, MAXCONN
    for tool in ("haproxy", "nginx", "openssl") + (("taskset",) if PROXY_PIN else ()):
        if not shutil.which(tool):
            sys.exit(f"{PROG}: {tool} not found (bench/memory.sh installs it)")
    sluice_src = SLUICE_BIN
    need_sluice_bins(PROG, ["sluice"] + TARGETS)
    if not os.access(os.path.join(BUILD, "connhold"), os.X_OK):
        sys.exit(f"{PROG}: {BUILD}/connhold missing (bench/memory.sh builds it)")
    if "waf" in PARTS and not os.access(FORTIO, os.X_OK):
        sys.exit(f"{PROG}: fortio not found at {FORTIO} (bench/memory.sh installs it; or set FORTIO)")
    # Room for >= 10,000 connections in the client and in every proxy (root
    # may raise the hard limit; otherwise use what we have).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(NOFILE, hard), max(NOFILE, hard)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    lim = NOFILE = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    MAXCONN = min(MAXCONN, NOFILE - 200)
    if "conns" in PARTS and lim < max(STEPS) + 200:
        sys.exit(f"{PROG}: RLIMIT_NOFILE {lim} is too low for {max(STEPS)} connections "
                 "(run as root or raise the hard limit)")

    started, outdir, d = results_dirs("memory")
    os.makedirs(os.path.join(d, "bin"), exist_ok=True)
    sluice_bin = shutil.copy2(sluice_src, os.path.join(d, "bin", "sluice"))  # others may rebuild BUILD/
    bins = [("sluice", sluice_src, sluice_bin)]
    if "sluice-base" in TARGETS:
        bins.append(("sluice-base", BASELINE, shutil.copy2(BASELINE, os.path.join(d, "bin", "sluice-base"))))
    bin_of = {t: copy for t, _, copy in bins}
    log(f"results in {outdir}; {PIN_TEXT}")
    facts = machine_facts(facts_software(bins))
    certs, cert_cmd = make_cert(d)
    backend, bport, backend_cmd = start_backend_nginx(d, LOAD_PIN, prog=PROG)
    notes, commands, confs = [], {}, {}
    ramps, wruns = [], []
    lua_kib = None
    start_s = {}              # WAF part: seconds from exec to listening, per sluice target

    if "conns" in PARTS:
        for rnd in range(ROUNDS):
            k = rnd % len(TARGETS)
            order = TARGETS[k:] + TARGETS[:k]
            for kind in KINDS:
                for tgt in order:
                    r = ramp(tgt, kind, rnd, d, bport, certs, bin_of.get(tgt, sluice_bin), commands, confs)
                    for pr in r["problems"]:
                        notes.append(f"round {rnd + 1}, {KIND_TEXT[kind]}, {tgt}: {pr}")
                        log(notes[-1])
                    ramps.append(r)
                    if r.get("slope_rss") is not None:
                        log(f"r{rnd + 1} {tgt:8} {kind:10} => {r['slope_rss']:,.0f} B/conn (RSS), "
                            f"{r['slope_pss']:,.0f} B/conn (PSS)")
    if "waf" in PARTS:
        for rnd in range(ROUNDS):
            k = rnd % len(WAF_TARGETS)
            order = WAF_TARGETS[k:] + WAF_TARGETS[:k]
            for tgt in order:
                # One at a time: sluice's master compiles the WAF for seconds
                # of CPU, and its 10 s load budget is wall time (see the docs).
                px = start_proxy(tgt, d, bport, certs, sluice_bin, tls=False, notes=notes)
                commands.setdefault(f"waf part: {tgt}", px["cmd"].replace(px["conf"], "CONFIG"))
                if tgt in ("sluice-waf", "haproxy-waf"):
                    confs.setdefault(tgt, px["conf"])
                if px["p"] is None:
                    notes.append(f"round {rnd + 1}, waf, {tgt}: did not start: {px['why']!r}")
                    log(notes[-1])
                    continue
                if tgt.startswith("sluice"):
                    start_s.setdefault(tgt, []).append(px["start_s"])
                if tgt == "sluice-waf" and lua_kib is None:
                    lua_kib = lua_memory_kib(px["errlog"], px["errpos"])
                err = probe(px["port"], False)
                if err:
                    notes.append(f"round {rnd + 1}, waf, {tgt}: probe failed: {err}")
                else:
                    wruns.append(waf_run(tgt, rnd, d, px, notes))
                stop(px["p"])
    if backend.poll() is not None:
        notes.append(f"the origin exited during the benchmark (status {backend.returncode})")
    stop(backend)
    elapsed = time.monotonic() - T_START
    with open(os.path.join(d, "runs.json"), "w") as f:
        json.dump({"ramps": ramps, "waf": wruns}, f, indent=1, default=str)
    files = write_report(outdir, ramps, wruns, TARGETS, WAF_TARGETS, facts, commands, confs, cert_cmd,
                         backend_cmd, lua_kib, start_s, notes, started.strftime("%Y-%m-%d %H:%M:%S"), elapsed)
    refresh_latest(RESULTS, outdir, "memory", files)
    show_report(outdir, "memory", ["## Problems and notes", "## How to read this"], log)
    log(f"elapsed {time.monotonic() - T_START:.0f} s")
    ok_conns = "conns" not in PARTS or all(
        any(r["target"] == t and r["kind"] == k and r.get("slope_rss") for r in ramps)
        for t in TARGETS for k in KINDS)
    ok_waf = "waf" not in PARTS or all(
        any(w["target"] == t and any(row["actual_qps"] > 0 for row in w["rates"]) for w in wruns)
        for t in WAF_TARGETS)
    if not (ok_conns and ok_waf):
        log("some target produced no figures")
        return 1
    return 0


if __name__ == "__main__":
    run_main(main, PROG)
