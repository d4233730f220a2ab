#!/usr/bin/env python3
"""Tier benchmark: 1 vs 2 sluice instances behind a layer-4 balancer.

The tier of the mission (issue 23) on one machine: HAProxy in TCP mode
(`mode tcp`, `balance roundrobin`, `server ... send-proxy-v2`) listens on
127.0.0.1 in front of one or two sluice instances on distinct loopback
addresses (A on 127.0.0.2, B on 127.0.0.3), each with one worker,
`accept_proxy_from: [127.0.0.1/32]`, the same ECDSA P-256 certificate and
the same `ticket_keys` file, all in front of one shared origin
(build/demo_backend). Topologies, rotated within every round:

  direct  the load straight to instance A, no HAProxy (A's config without
          accept_proxy_from: the client is on 127.0.0.1 too); the reference
  tier1   wrk -> HAProxy -> A
  tier2   wrk -> HAProxy -> A and B, alternating (round robin per connection)

Scenarios (SCENARIOS):
  churn      TLS 1.3 with the ECDSA certificate, `Connection: close` on every
             request: a new connection and a FULL handshake each (tickets
             off: wrk would resume otherwise), wrk -c50
  resume     the same with tickets on and the shared ticket_keys file: every
             connection after the first resumes, and behind round robin a
             ticket A issued is resumed by B (the counters say so)
  keepalive  plain HTTP/1.1 keepalive, wrk -c50

Per run: req/s, p50/p99 (wrk --latency), errors (socket errors + non-2xx),
and for EACH instance the requests it served (its own /metrics,
sluice_requests_total{listener="front"}, read before and after the measured
run) and its CPU: utime+stime of its master and worker from /proc, per
request it served. HAProxy's CPU per request (over all requests), the
origin's and the machine's others' CPU too. The headline: an instance's CPU
µs per request with two instances ÷ the same with one (near 1.0: adding an
instance costs each instance nothing per request), and requests per
sluice-CPU-second (the per-core figure that shows linearity: on a 2-core
machine the absolute rate cannot double, since the client, HAProxy, the
origin and both instances share the same 2 CPUs).

Part fixed (PARTS): churn in open loop, h2load offering FIXED_CPS new TLS
connections a second to tier1 and to tier2, and half of that to tier1
(tier1-half): a tier2 instance then carries what tier1-half's does, so A in
tier2 ÷ A in tier1-half is the second instance's cost at equal load per
instance, and tier1-half ÷ tier1 what halving an instance's load does.

Part ratelimit (PARTS): the keepalive load through tier2 with no limit,
`rate_limit: {rate: RL_RATE, store: local}` and `store: redis` against a
redis-server started here (free port, --save "" --appendonly no, stopped by
PID), the rate high enough that nothing is refused: sluice CPU µs per
request for each, and Redis's. Before measuring, a probe checks that the
binary enforces the limit (rate 1/m: the second request gets 429, and with
store: redis Redis saw commands); when it does not (native rate limits not
built in yet), the part is skipped and the report says why.

Usage: sh bench/tier.sh  (or `make bench-tier`). Environment knobs:
  QUICK=1          2 s runs, no warm-up, 1 round (about 40 s)
  PARTS=a,b        scenarios,fixed,ratelimit (all three)
  SCENARIOS=a,b    churn,resume,keepalive (all three)
  TOPOLOGIES=a,b   direct,tier1,tier2 (all three)
  DURATION=N       seconds per measured wrk run (5; QUICK 2)
  WARMUP=N         unmeasured wrk seconds before each measured run (1; QUICK 0)
  CONNECTIONS=N    wrk connections (50)
  WRK_THREADS=N    wrk threads (1)
  ROUNDS=N         rounds; each runs every topology of every scenario once (3; QUICK 1)
  FIXED_CPS=N      part fixed: connections a second offered to tier1 and tier2
                   (tier1-half: half of it) (600)
  FIXED_SECONDS=N  seconds of each fixed-rate run (10; QUICK: DURATION)
  RL_RATE=r        the rate of the ratelimit part (1000000/s: nothing refused)
  SLUICE=path      the sluice binary (BUILD/sluice); copied into the results
                   before the first run (others may rebuild build/ meanwhile)
  PIN=1            pin with taskset: the sluice instances on the first CPU,
                   HAProxy, wrk, the origin and Redis on the others (default:
                   nothing pinned; pinned, tier2's two instances share the
                   CPU tier1's one has alone)
  NOISE_PCT=N      others' CPU (% of one CPU) that makes a run noisy (25)
  QUIET_BUDGET=N   seconds in all for waiting for quiet / re-running (30; QUICK 0)
  BUILD=dir        where sluice and demo_backend are (build)
  RESULTS=dir      results root (bench/results)
  BENCH_TS=name    results directory name (default: UTC timestamp)

Output: RESULTS/<ts>/tier.md, tier.png, tier-ratelimit.png, tier/ (certs,
ticket key, configs, raw wrk output, logs, runs.json); RESULTS/latest/
gets a copy and report.md links it. Every process started here is stopped
by its PID. Exit status 1 if a measured topology produced no figure.
"""
import functools
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request

import benchlib
from benchlib import (BUILD, CLK_TCK, QUICK, RESULTS, SLUICE_BIN, Quiet, children_cpu, cmd_out, fmt,
                      fmt_mmm, fsize, grouped_bars, log_lines_above_info, machine_facts, mmm, noise_note,
                      parse_h2load_wrk, parse_wrk, peer_versions, pinning, read_tail, refresh_latest, report_end, report_list,
                      results_dirs, run_h2load, run_main, run_wrk, show_report, sluice_describe, start, stop, stop_proxy,
                      system_busy_ticks, tree_ticks, wait_children, write)
from tlslib import copy_sluice, make_certs, sluice_tls_failures

PROG = "bench/tier.py"
env_int = functools.partial(benchlib.env_int, prog=PROG)
env_names = functools.partial(benchlib.env_names, prog=PROG)

ALL_PARTS = ["scenarios", "fixed", "ratelimit"]
ALL_SCENARIOS = ["churn", "resume", "keepalive"]
ALL_TOPOLOGIES = ["direct", "tier1", "tier2"]
RL_CASES = ["rl-none", "rl-local", "rl-redis"]
PARTS = env_names("PARTS", ALL_PARTS, None, "part")
SCENARIOS = env_names("SCENARIOS", ALL_SCENARIOS, None, "scenario") if "scenarios" in PARTS else []
TOPOLOGIES = env_names("TOPOLOGIES", ALL_TOPOLOGIES, None, "topology")
DURATION = env_int("DURATION", 2 if QUICK else 5, 1)
WARMUP = env_int("WARMUP", 0 if QUICK else 1, 0)
CONNECTIONS = env_int("CONNECTIONS", 50, 1)
WRK_THREADS = env_int("WRK_THREADS", 1, 1)
ROUNDS = env_int("ROUNDS", 1 if QUICK else 3, 1)
NOISE_PCT = env_int("NOISE_PCT", 25)
QUIET_BUDGET = env_int("QUIET_BUDGET", 0 if QUICK else 30)
RL_RATE = os.environ.get("RL_RATE") or "1000000/s"
FIXED_CPS = env_int("FIXED_CPS", 600, 2)
# Longer than the closed-loop runs: at half of 600/s an instance gets ~300
# handshakes a second, and its CPU is counted in 10 ms ticks.
FIXED_SECONDS = env_int("FIXED_SECONDS", DURATION if QUICK else 10, 1)
FIXED_TOPOS = ["tier1-half", "tier1", "tier2"]
if not re.fullmatch(r"[1-9]\d*/[smh]", RL_RATE):
    sys.exit(f"{PROG}: RL_RATE={RL_RATE!r}: expected requests per period, e.g. 1000000/s")
if WRK_THREADS > CONNECTIONS:
    sys.exit(f"{PROG}: WRK_THREADS must not exceed CONNECTIONS")
if not TOPOLOGIES:
    sys.exit(f"{PROG}: TOPOLOGIES names no topology")
ATTEMPTS = 2
POOL = 64                        # backend connections each instance may keep
BACKEND_THREADS = 128            # demo_backend threads: both instances' pools fit
BODY_SIZE = 128

# The addresses of the tier: the balancer on .1, instance A on .2, B on .3.
LB_ADDR = "127.0.0.1"
INSTANCES = {"A": "127.0.0.2", "B": "127.0.0.3"}
TOPO_INSTANCES = {"direct": ["A"], "tier1": ["A"], "tier2": ["A", "B"], "tier1-half": ["A"]}
TOPO_DESC = {"direct": "wrk → A (no balancer)", "tier1": "wrk → HAProxy → A",
             "tier2": "wrk → HAProxy → A + B", "tier1-half": "HAProxy → A, half the offered rate"}
SCEN_DESC = {"churn": "TLS 1.3 ECDSA, full handshake per request (Connection: close)",
             "resume": "TLS 1.3 ECDSA, resumed with the shared ticket key (Connection: close)",
             "keepalive": "plain HTTP/1.1 keepalive",
             "fixed": f"churn in open loop: h2load offering {FIXED_CPS} new TLS connections a second "
                      f"(tier1-half: {FIXED_CPS // 2}), one request each",
             "rl-none": "keepalive, tier2, no rate limit",
             "rl-local": f"keepalive, tier2, rate_limit {RL_RATE} store: local",
             "rl-redis": f"keepalive, tier2, rate_limit {RL_RATE} store: redis"}

# Not pinned by default, unlike the other scenarios: pinned, the instances
# share one CPU in tier2 and have it alone in tier1, and on a shared machine
# an instance pinned next to someone else's busy process waits for it
# (measured here: one pinned instance fell from ~47k to ~9k keepalive req/s
# while a compiler ran; its CPU per request did not move). PIN=1 pins.
PIN = os.environ.get("PIN", "0") not in ("", "0")
PROXY_PIN, LOAD_PIN, _ = pinning(PIN)
PIN_TEXT = ((f"the sluice instances (masters and workers) on CPU {PROXY_PIN[-1]}; HAProxy, wrk, the "
             f"origin and Redis on CPU {LOAD_PIN[-1]} (taskset -c)") if PROXY_PIN
            else "nothing pinned" + (" (only 1 CPU)" if PIN else " (PIN=1 pins)"))


def log(msg):
    print(f"[tier] {msg}", flush=True)


# ---------------------------------------------------------------- small helpers

def free_port_on(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((addr, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_addr(addr, port, p, deadline=10.0):
    """True once addr:port accepts a connection; False if p exits first or
    the deadline passes."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if p.poll() is not None:
            return False
        try:
            socket.create_connection((addr, port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


METRICS = {"requests_total": "served", "tls_handshakes_full_ecdsa_total": "full",
           "tls_handshakes_resumed_total": "resumed", "tls_handshakes_failed_total": "tls_failed",
           "responses_2xx_total": "r2xx", "responses_4xx_total": "r4xx", "responses_5xx_total": "r5xx"}
METRIC_RE = re.compile(r'^sluice_(\w+)\{listener="front"\} (\d+)$', re.M)


def scrape(addr, aport):
    """The listener counters of one instance from its /metrics: {served,
    full, resumed, tls_failed, r2xx, r4xx, r5xx}; None when unreachable."""
    try:
        with urllib.request.urlopen(f"http://{addr}:{aport}/metrics", timeout=5) as f:
            text = f.read().decode()
    except OSError:
        return None
    out = dict.fromkeys(METRICS.values(), 0)
    for name, v in METRIC_RE.findall(text):
        if name in METRICS:
            out[METRICS[name]] = int(v)
    return out


def tree_switches(pid):
    """Context switches (voluntary + involuntary, /proc/PID/status) summed
    over pid and its descendants: how often the event loops went to sleep or
    were preempted. Per request, it says how much work each wake-up found."""
    n = 0
    for q in [pid] + benchlib.descendants(pid):
        try:
            with open(f"/proc/{q}/status") as f:
                n += sum(int(ln.split()[1]) for ln in f if ln.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")))
        except OSError:
            pass
    return n


def http_status(addr, port, path="/"):
    """Status of one plain GET on a new connection (0 if it failed)."""
    try:
        s = socket.create_connection((addr, port), timeout=5)
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: tier\r\nConnection: close\r\n\r\n".encode())
        data = s.recv(4096)
        s.close()
        return int(data.split(b" ", 2)[1])
    except (OSError, ValueError, IndexError):
        return 0


# ---------------------------------------------------------------- configs

def tls_block(certs, ticket_keys, tickets):
    return f"""    tls:
      certificates:
        - cert: {certs}/ecdsa.pem
          key: {certs}/ecdsa.key
      min_version: TLSv1.3
      max_version: TLSv1.3
      tickets: {tickets}
      ticket_keys: {ticket_keys}
      session_cache: 0
"""


def conf_sluice(d, inst, port, aport, bport, scen, topo, env):
    """One instance's config. env: certs, ticket_keys, redis (address or None)."""
    addr = INSTANCES[inst]
    tls = ""
    if scen in ("churn", "resume", "fixed"):
        tls = tls_block(env["certs"], env["ticket_keys"], "on" if scen == "resume" else "off")
    pp = "" if topo == "direct" else f"    accept_proxy_from: [{LB_ADDR}/32]\n"
    rl = ""
    if scen in ("rl-local", "rl-redis"):
        rl = f"    rate_limit:\n      rate: {RL_RATE}\n      store: {scen[3:]}\n"
    redis = f"redis:\n  address: {env['redis']}\n" if scen == "rl-redis" else ""
    return f"""# sluice instance {inst} of {topo}, scenario {scen}: one worker
workers: 1
error_log: {d}/sluice-{inst}.error.log
user: nobody
access_log: off
admin:
  address: {addr}:{aport}
timeouts:
  drain: 0
{redis}listeners:
  - name: front
    address: {addr}:{port}
    backend: app
{pp}{tls}{rl}backends:
  - name: app
    idle_max: {POOL}
    servers:
      - name: s1
        address: 127.0.0.1:{bport}
        max_connections: {POOL}
"""


def conf_haproxy(d, port, servers):
    """HAProxy in TCP mode: round robin over SERVERS [(name, addr, port)],
    each connection opened with a PROXY v2 header. No health check (its
    connections would carry no PROXY header and skew the counts)."""
    lines = "".join(f"    server {n} {a}:{p} send-proxy-v2\n" for n, a, p in servers)
    return f"""# HAProxy, layer 4: mode tcp, balance roundrobin, send-proxy-v2, one thread
global
    nbthread 1
    maxconn 8192
    pidfile {d}/haproxy.pid

defaults
    mode tcp
    timeout connect 3s
    timeout client 60s
    timeout server 60s

frontend fe
    bind {LB_ADDR}:{port}
    default_backend be

backend be
    balance roundrobin
{lines}"""


# ---------------------------------------------------------------- processes

def start_sluice(d, binary, inst, scen, topo, bport, env):
    """Start instance INST; returns a dict (name, addr, port, aport, p, conf,
    errlog, pos, cmd) or None with a note in env["notes"]."""
    addr = INSTANCES[inst]
    port, aport = free_port_on(addr), free_port_on(addr)
    conf = write(os.path.join(d, f"sluice-{inst}-{scen}-{topo}.yaml"),
                 conf_sluice(d, inst, port, aport, bport, scen, topo, env))
    errlog = os.path.join(d, f"sluice-{inst}.error.log")
    pos = fsize(errlog)
    cmd = PROXY_PIN + [binary, "-c", conf]
    p = start(cmd, os.path.join(d, f"sluice-{inst}.out"))
    if not wait_addr(addr, port, p) or not wait_addr(addr, aport, p):
        stop(p)
        env["notes"].append(f"{scen}/{topo}: sluice {inst} did not start: "
                            f"{read_tail(errlog, pos).strip()[-400:]!r}")
        return None
    wait_children(p, n=1)
    return {"name": inst, "addr": addr, "port": port, "aport": aport, "p": p, "conf": conf,
            "errlog": errlog, "pos": pos, "cmd": shlex.join(cmd)}


def start_haproxy(d, insts):
    port = free_port_on(LB_ADDR)
    conf = write(os.path.join(d, f"haproxy-{len(insts)}.cfg"),
                 conf_haproxy(d, port, [(i["name"], i["addr"], i["port"]) for i in insts]))
    cmd = LOAD_PIN + ["haproxy", "-f", conf, "-db"]
    p = start(cmd, os.path.join(d, "haproxy.out"))
    if not wait_addr(LB_ADDR, port, p):
        stop(p)
        return None
    return {"p": p, "port": port, "conf": conf, "cmd": shlex.join(cmd)}


def start_backend(d):
    cmd = LOAD_PIN + [os.path.join(BUILD, "demo_backend"), "--listen", "127.0.0.1:0", "--threads",
                      str(BACKEND_THREADS), "--backlog", "512", "--size", str(BODY_SIZE), "--quiet"]
    return benchlib.start_demo_backend(cmd, os.path.join(d, "backend-demo.log"), prog=PROG)


def start_redis(d):
    port = free_port_on("127.0.0.1")
    cmd = LOAD_PIN + ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                      "--appendonly", "no", "--dir", d, "--logfile", ""]
    p = start(cmd, os.path.join(d, "redis.out"))
    if not wait_addr("127.0.0.1", port, p):
        stop(p)
        return None, port, shlex.join(cmd)
    return p, port, shlex.join(cmd)


def redis_call(port, *args):
    """One Redis command in RESP over a socket (no client library needed):
    the raw reply, read until it is complete enough for our two uses (INFO
    stats, FLUSHALL); None if Redis does not answer."""
    req = f"*{len(args)}\r\n".encode() + b"".join(f"${len(a)}\r\n{a}\r\n".encode() for a in args)
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        s.sendall(req)
        data = b""
        while True:
            chunk = s.recv(65536)
            data += chunk
            if not chunk or (data.startswith(b"+") and data.endswith(b"\r\n")) or \
                    (data.startswith(b"$") and b"\r\n" in data
                     and len(data) >= data.index(b"\r\n") + 4 + int(data[1:data.index(b"\r\n")])):
                break
        s.close()
        return data
    except (OSError, ValueError):
        return None


def redis_commands(port):
    """Script calls clients made so far (EVAL, EVALSHA, their _RO forms,
    FCALL: INFO commandstats), each one a round trip from sluice; the
    commands a script runs inside are not counted. None if Redis does not
    answer."""
    data = redis_call(port, "INFO", "commandstats")
    if data is None:
        return None
    return sum(int(v) for k, v in re.findall(rb"cmdstat_(\w+):calls=(\d+)", data)
               if k.decode() in ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"))


# ---------------------------------------------------------------- one run

def wrk_cmd(scen, target, seconds):
    """wrk against TARGET (addr, port): TLS with Connection: close for churn
    and resume, plain keepalive otherwise."""
    tls = scen in ("churn", "resume")
    extra = ["-H", "Connection: close"] if tls else []
    url = f"{'https' if tls else 'http'}://{target[0]}:{target[1]}/"
    return benchlib.wrk_cmd(LOAD_PIN, WRK_THREADS, CONNECTIONS, seconds, url, extra)


def offered(topo):
    """The fixed part's offered connection rate for a topology."""
    return FIXED_CPS // 2 if topo == "tier1-half" else FIXED_CPS


def h2load_cmd(target, cps, seconds):
    """Open loop: CPS new TLS connections a second (in bursts of CPS/100
    every 10 ms), CPS x SECONDS in all, one Connection: close request each."""
    n = cps * seconds
    per, period = (cps // 100, 10) if cps % 100 == 0 else (max(1, cps // 10), 100)
    return LOAD_PIN + ["h2load", "--h1", "-t1", f"--rate={per}", f"--rate-period={period}ms",
                       f"--clients={n}", f"--requests={n}", "--connection-active-timeout=15s",
                       "-H", "Connection: close", f"https://{target[0]}:{target[1]}/"]


def measure(scen, topo, rnd, d, target, insts, lb, backend, redis):
    """Warm up, then one measured wrk run against TARGET (addr, port): per
    instance requests served and CPU, HAProxy's, the origin's, Redis's and
    the others' CPU. Returns the run record."""
    raw = os.path.join(d, "raw", f"r{rnd + 1}-{scen}-{topo}.txt")
    seconds = FIXED_SECONDS if scen == "fixed" else DURATION
    if scen == "fixed":
        if WARMUP:
            run_h2load(h2load_cmd(target, offered(topo), WARMUP), WARMUP, raw + ".warmup")
    elif WARMUP:
        run_wrk(wrk_cmd(scen, target, WARMUP), WARMUP)
    m0 = [scrape(i["addr"], i["aport"]) for i in insts]
    rc0 = redis_commands(redis[1]) if redis else None
    others = ([lb["p"]] if lb else []) + [backend] + ([redis[0]] if redis else [])
    t_inst0 = [tree_ticks(i["p"].pid) for i in insts]
    cs0 = [tree_switches(i["p"].pid) for i in insts]
    t_oth0 = [tree_ticks(p.pid) for p in others]
    w0, s0, t0 = children_cpu(), system_busy_ticks(), time.monotonic()
    if scen == "fixed":
        out = run_h2load(h2load_cmd(target, offered(topo), seconds), seconds, raw)
    else:
        out = run_wrk(wrk_cmd(scen, target, DURATION), DURATION, raw)
    wall = time.monotonic() - t0
    s1 = system_busy_ticks()
    t_inst1 = [tree_ticks(i["p"].pid) for i in insts]
    cs1 = [tree_switches(i["p"].pid) for i in insts]
    t_oth1 = [tree_ticks(p.pid) for p in others]
    wrk_s = children_cpu() - w0
    m1 = [scrape(i["addr"], i["aport"]) for i in insts]
    rc1 = redis_commands(redis[1]) if redis else None

    def delta(a, b):
        return sum(b[q] - a[q] for q in b if q in a)

    r = parse_h2load_wrk(out) if scen == "fixed" else parse_wrk(out)
    r.update(case=scen, label=topo, round=rnd + 1, wall=wall, raw=os.path.relpath(raw, d), problems=[])
    req = max(r["requests"], 1)
    per, total_ticks = [], 0
    for i, a, b, x0, x1, sw0, sw1 in zip(insts, m0, m1, t_inst0, t_inst1, cs0, cs1):
        ticks = delta(x0, x1)
        total_ticks += ticks
        if a is None or b is None:
            r["problems"].append(f"instance {i['name']}: /metrics did not answer")
            c = dict.fromkeys(METRICS.values(), 0)
        else:
            c = {k: b[k] - a[k] for k in b}
        served = c["served"]
        per.append({"name": i["name"], "ticks": ticks, **c,
                    "cpu_us": ticks / CLK_TCK * 1e6 / served if served else None,
                    "cpu_pct": ticks / CLK_TCK / wall * 100,
                    "switches_per_req": (sw1 - sw0) / served if served else None})
        if i["p"].poll() is not None:
            r["problems"].append(f"instance {i['name']} exited during the run (status {i['p'].returncode})")
        if c["r4xx"] or c["r5xx"]:
            r["problems"].append(f"instance {i['name']}: {c['r4xx']} 4xx, {c['r5xx']} 5xx answers")
        if c["tls_failed"]:
            r["problems"].append(f"instance {i['name']}: {c['tls_failed']} failed TLS handshakes")
    r["inst"] = per
    served = sum(x["served"] for x in per)
    r["served"] = served
    r["sluice_cpu_us"] = total_ticks / CLK_TCK * 1e6 / served if served else None
    # Requests per second of sluice CPU: the per-core figure (1e6 / µs per request).
    r["per_core"] = served / (total_ticks / CLK_TCK) if total_ticks else None
    for k in ("A", "B"):
        x = next((x for x in per if x["name"] == k), None)
        r[f"cpu_us_{k}"] = x["cpu_us"] if x else None
        r[f"share_{k}"] = x["served"] / served if x and served else None
        r[f"sw_{k}"] = x["switches_per_req"] if x else None
    oth = [delta(a, b) for a, b in zip(t_oth0, t_oth1)]
    lb_ticks = oth[0] if lb else None
    r["lb_cpu_us"] = lb_ticks / CLK_TCK * 1e6 / req if lb else None
    r["lb_cpu_pct"] = lb_ticks / CLK_TCK / wall * 100 if lb else None
    be_ticks = oth[1 if lb else 0]
    r["backend_cpu_us"] = be_ticks / CLK_TCK * 1e6 / req
    r["redis_cpu_us"] = oth[-1] / CLK_TCK * 1e6 / req if redis else None
    r["redis_cmds_per_req"] = (rc1 - rc0) / req if redis and rc0 is not None and rc1 is not None else None
    r["wrk_cpu_pct"] = wrk_s / wall * 100
    r["other_pct"] = (s1 - s0 - total_ticks - sum(oth)) / CLK_TCK / wall * 100 - r["wrk_cpu_pct"]
    r["errors"] = r["sock_errors"] + r["non2xx"]
    if r["requests"] == 0:
        r["problems"].append("wrk completed no request")
    if r["sock_errors"]:
        r["problems"].append(r["sock_detail"])
    if r["non2xx"]:
        r["problems"].append(f"Non-2xx or 3xx responses: {r['non2xx']}")
    # wrk counts the requests it completed; the instances count those they
    # received, including the few that wrk's stop cut short.
    if served and abs(served - r["requests"]) > max(CONNECTIONS * 2, r["requests"] * 0.01):
        r["problems"].append(f"the instances counted {served} requests, wrk {r['requests']}")
    return r


def describe(r):
    inst = ", ".join(f"{x['name']} {fmt(x['cpu_us'], 1)} µs/req ({x['served']:,} req)" for x in r["inst"])
    lat = f"mean {fmt(r['req_mean'], 2)} ms" if r.get("req_mean") is not None else f"p99 {fmt(r['p99'], 2)} ms"
    return (f"{fmt(r['rps'])} req/s, {lat}, sluice {inst}"
            + (f", haproxy {fmt(r['lb_cpu_us'], 1)} µs/req" if r["lb_cpu_us"] is not None else "")
            + (f", redis {fmt(r['redis_cpu_us'], 1)} µs/req" if r["redis_cpu_us"] is not None else "")
            + (f", errors {r['errors']}" if r["errors"] else ""))


QUIET = Quiet(NOISE_PCT, QUIET_BUDGET, ATTEMPTS, log=log)


def one_run(scen, topo, rnd, d, binary, bport, backend, env, runs, loglines, confs, commands, redis=None):
    """Start the topology's instances (and HAProxy), measure, stop them."""
    insts = []
    for name in TOPO_INSTANCES[topo]:
        i = start_sluice(d, binary, name, scen, topo, bport, env)
        if i is None:
            break
        insts.append(i)
    lb = None
    if len(insts) == len(TOPO_INSTANCES[topo]) and topo != "direct":
        lb = start_haproxy(d, insts)
        if lb is None:
            env["notes"].append(f"round {rnd + 1}, {scen}/{topo}: HAProxy did not start: "
                                f"{read_tail(os.path.join(d, 'haproxy.out'), 0).strip()[-400:]!r}")
    ok = len(insts) == len(TOPO_INSTANCES[topo]) and (lb is not None or topo == "direct")
    if ok:
        for i in insts:
            # One config of each kind in the report: A's per scenario in
            # tier2 (B's differs by its address only), and one direct.
            if (topo == "tier2" and i["name"] == "A") or (topo == "direct" and
                                                           not any("direct" in k for k in confs)):
                confs[f"sluice {i['name']}, {scen}, {topo}"] = i["conf"]
            commands[f"sluice {i['name']} (config per scenario and topology)"] = i["cmd"]
        if lb:
            confs[f"haproxy, {len(insts)} servers"] = lb["conf"]
            commands["haproxy"] = lb["cmd"]
        target = (LB_ADDR, lb["port"]) if lb else (insts[0]["addr"], insts[0]["port"])
        r = QUIET.run_if_budget(lambda: measure(scen, topo, rnd, d, target, insts, lb, backend, redis),
                                f"round {rnd + 1}, {scen}/{topo}", FIXED_SECONDS if scen == "fixed" else DURATION,
                                env["notes"], describe)
        runs.append(r)
        log(f"round {rnd + 1} {scen:9} {topo:6}: {describe(r)}"
            + (f"  PROBLEMS: {r['problems']}" if r["problems"] else ""))
    if lb:
        bad = stop_proxy("haproxy", lb["p"])
        if bad and ok:
            r["problems"].append(f"haproxy: {bad}")
    for i in insts:
        bad = stop_proxy("sluice", i["p"])
        text = read_tail(i["errlog"], i["pos"])
        if ok:
            if bad:
                r["problems"].append(f"sluice {i['name']}: {bad}")
            fails = sluice_tls_failures(text)
            if fails:
                r["problems"].append(f"sluice {i['name']}: {len(fails)} TLS failures logged, first: "
                                     f"{fails[0].strip()}")
        for ln in log_lines_above_info(text)[:5]:
            loglines.append(f"round {rnd + 1}, {scen}/{topo}, sluice {i['name']}: {ln.strip()}")
    if ok:
        for pr in r["problems"]:
            env["notes"].append(f"round {rnd + 1}, {scen}/{topo}: {pr}")


# ---------------------------------------------------------------- the rate-limit probe

def probe_rate_limit(d, binary, bport, env, store):
    """None if BINARY enforces a `rate_limit` with STORE (rate 1/m: the
    first request passes, the second gets 429; with redis, Redis saw
    commands), else why not."""
    inst = "A"
    addr = INSTANCES[inst]
    port, aport = free_port_on(addr), free_port_on(addr)
    text = conf_sluice(d, inst, port, aport, bport, f"rl-{store}", "direct", env)
    # The probe's own listener name keeps its key (its scope) apart from
    # the measured runs' (Redis is flushed after the probe all the same).
    text = (text.replace(f"rate: {RL_RATE}", "rate: 1/m").replace("# sluice instance", "# probe: sluice instance")
            .replace("  - name: front\n", "  - name: probe\n"))
    conf = write(os.path.join(d, f"probe-rl-{store}.yaml"), text)
    cp = subprocess.run([binary, "-t", "-c", conf], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True, timeout=30)
    if cp.returncode != 0:
        return f"`sluice -t` rejects `rate_limit` with store: {store}: {cp.stdout.strip()[-300:]}"
    p = start([binary, "-c", conf], os.path.join(d, f"probe-rl-{store}.out"))
    try:
        if not wait_addr(addr, port, p):
            return f"sluice with a store: {store} rate_limit did not start (see probe-rl-{store}.out)"
        rc0 = redis_commands(env["redis_port"]) if store == "redis" else None
        codes = [http_status(addr, port) for _ in range(3)]
        rc1 = redis_commands(env["redis_port"]) if store == "redis" else None
    finally:
        stop(p)
    if codes[0] != 200 or 429 not in codes[1:]:
        return (f"rate_limit {{rate: 1/m, store: {store}}} is accepted but not enforced by this binary "
                f"(three GETs answered {codes}, expected 200 then 429)")
    if store == "redis":
        if rc0 is None or rc1 is None or rc1 - rc0 < 2:
            return "store: redis decided without asking Redis (no command reached it)"
        # The probe's 1/m bucket stays in Redis for a minute: gone before measuring.
        if not (redis_call(env["redis_port"], "FLUSHALL") or b"").startswith(b"+OK"):
            return "Redis did not answer FLUSHALL after the probe"
    return None


# ---------------------------------------------------------------- report

def summ(runs, case, topo, key):
    rs = [r for r in runs if r["case"] == case and r["label"] == topo]
    use = [r for r in rs if not r["noisy"]] or rs
    return mmm([r.get(key) for r in use])


def per_round_ratio(runs, case, a_topo, a_key, b_topo, b_key):
    """(median, min, max) over rounds of a's A_KEY ÷ b's B_KEY in the same
    round (clean pairs; all pairs when none is clean)."""
    def pairs(clean):
        va = {r["round"]: r.get(a_key) for r in runs if r["case"] == case and r["label"] == a_topo
              and not (clean and r["noisy"])}
        vb = {r["round"]: r.get(b_key) for r in runs if r["case"] == case and r["label"] == b_topo
              and not (clean and r["noisy"])}
        return [va[k] / vb[k] for k in va if k in vb and va[k] and vb[k]]
    return mmm(pairs(True) or pairs(False))


def ratio_text(t):
    return "—" if t[0] is None else (f"**{t[0]:.3f}**" if t[1] == t[2] else f"**{t[0]:.3f}** ({t[1]:.3f}–{t[2]:.3f})")


def chart(path, runs, cases, topos):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = {"direct": "#999999", "tier1": "#8cc0e8", "tier2": "#2b7bba",
              "tier1 A": "#8cc0e8", "tier2 A": "#2b7bba", "tier2 B": "#1b4f7a", "direct A": "#999999"}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    grouped_bars(axes[0], cases, topos, lambda t, c: summ(runs, c, t, "rps"), colors)
    axes[0].set_title("Requests/s (median, bars: min–max; log scale)", fontsize=10)
    bars = [f"{t} {i}" for t in topos for i in TOPO_INSTANCES[t]]
    grouped_bars(axes[1], cases, bars, lambda b, c: summ(runs, c, b.split()[0], f"cpu_us_{b.split()[1]}"),
                 colors)
    axes[1].set_title("sluice CPU µs per request it served, per instance", fontsize=10)
    lbs = [t for t in topos if t != "direct"]
    grouped_bars(axes[2], cases, lbs, lambda t, c: summ(runs, c, t, "lb_cpu_us"), colors)
    axes[2].set_title("HAProxy (mode tcp) CPU µs per request", fontsize=10)
    for ax in axes:
        ax.set_yscale("log")      # TLS churn and keepalive differ a hundredfold
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels(cases, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        ax.legend(fontsize=8)
    fig.suptitle(f"sluice tier: 1 vs 2 instances behind HAProxy mode tcp, wrk -c{CONNECTIONS} -d{DURATION}s, "
                 f"{ROUNDS} rounds, 1 worker per instance, 2 CPUs shared by everything", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def chart_rl(path, runs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cases = [c for c in RL_CASES if any(r["case"] == c for r in runs)]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = {"A": "#2b7bba", "B": "#1b4f7a", "redis": "#c0392b", "haproxy": "#e07b39"}
    grouped_bars(a1, cases, ["A", "B"], lambda i, c: summ(runs, c, "tier2", f"cpu_us_{i}"), colors)
    a1.set_title("sluice CPU µs per request, per instance (tier2, keepalive)", fontsize=10)
    # Redis idles through the cases that do not use it: no bar for those.
    grouped_bars(a2, cases, ["redis", "haproxy"],
                 lambda t, c: ((None, None, None) if t == "redis" and c != "rl-redis" else
                               summ(runs, c, "tier2", "redis_cpu_us" if t == "redis" else "lb_cpu_us")),
                 colors, skip_zero=True)
    a2.set_title("Redis and HAProxy CPU µs per request", fontsize=10)
    for ax in (a1, a2):
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels(cases, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        ax.legend(fontsize=8)
    fig.suptitle(f"The cost of a rate limit per request: none vs store: local vs store: redis ({RL_RATE}, "
                 "nothing refused)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(outdir, d, runs, facts, commands, confs, notes, loglines, started_at, elapsed, rl_skip,
                 binary_desc, backend_cmd, redis_cmd):
    cases = [c for c in SCENARIOS if any(r["case"] == c for r in runs)]
    topos = [t for t in TOPOLOGIES if any(r["label"] == t for r in runs)]
    rl_cases = [c for c in RL_CASES if any(r["case"] == c for r in runs)]
    charts = []
    for name, fn, ok in (("tier.png", lambda p: chart(p, runs, cases, topos), cases),
                         ("tier-ratelimit.png", lambda p: chart_rl(p, runs), rl_cases)):
        if not ok:
            continue
        try:
            fn(os.path.join(outdir, name))
            charts.append(f"![{name[:-4]}]({name})")
        except Exception as e:  # noqa: BLE001 — a missing chart must not lose the tables
            charts.append(f"({name} not drawn: {e!r})")

    L = ["# Tier benchmark — 1 vs 2 sluice instances behind a layer-4 balancer", ""]
    L.append(f"Run {started_at} UTC, {elapsed:.0f} s in all. {'QUICK mode. ' if QUICK else ''}{ROUNDS} "
             f"round(s) × {DURATION} s measured wrk runs (after {WARMUP} s of warm-up each), wrk "
             f"`-t{WRK_THREADS} -c{CONNECTIONS}`. HAProxy `mode tcp`, `balance roundrobin`, `send-proxy-v2` "
             f"on {LB_ADDR}; sluice A on {INSTANCES['A']}, B on {INSTANCES['B']}, `workers: 1` each, "
             f"`accept_proxy_from: [{LB_ADDR}/32]`, one shared origin (demo_backend, {BODY_SIZE}-byte "
             f"bodies). sluice: {binary_desc}. Pinning: {PIN_TEXT}.")
    L.append("")
    L.append("**On this 2-CPU machine the absolute rate cannot double with the second instance**: wrk "
             "(which also does the client side of every TLS handshake), HAProxy, the origin and both "
             "sluice instances share the same 2 CPUs, so req/s is capped by the load side and "
             "moves little. What must hold is that each instance's **CPU per request** does not "
             "rise when a second one joins: then N instances on N machines carry N times the "
             "load. The per-core figure, requests per second of sluice CPU (1,000,000 ÷ µs per "
             "request), is what one instance delivers per core it is given.")
    L.append("")
    if cases:
        L.append("## Per scenario and topology")
        L.append("")
        L.append("| scenario | topology | req/s | sluice A µs/req | sluice B µs/req | req per sluice-CPU-second "
                 "| A : B requests | HAProxy µs/req | HAProxy CPU % | p50 ms | p99 ms | errors |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for c in cases:
            for t in topos:
                rs = [r for r in runs if r["case"] == c and r["label"] == t]
                if not rs:
                    continue
                share = summ(runs, c, t, "share_A")
                L.append(f"| {c} | {t} ({TOPO_DESC[t]}) | {fmt(summ(runs, c, t, 'rps')[0])} | "
                         f"{fmt_mmm(summ(runs, c, t, 'cpu_us_A'), 1, True)} | "
                         f"{fmt_mmm(summ(runs, c, t, 'cpu_us_B'), 1, True)} | "
                         f"{fmt(summ(runs, c, t, 'per_core')[0])} | "
                         + (f"{share[0] * 100:.0f} : {100 - share[0] * 100:.0f}" if t == "tier2" and share[0] else "—")
                         + f" | {fmt_mmm(summ(runs, c, t, 'lb_cpu_us'), 1, True)} | "
                         f"{fmt(summ(runs, c, t, 'lb_cpu_pct')[0])} | {fmt(summ(runs, c, t, 'p50')[0], 2)} | "
                         f"{fmt(summ(runs, c, t, 'p99')[0], 2)} | {sum(r['errors'] for r in rs)} |")
        L.append("")
        L.append("µs/req: the instance's CPU (utime+stime of its master and worker, /proc) ÷ the requests "
                 "it served (its own `sluice_requests_total{listener=\"front\"}`), median (min–max) over "
                 "the rounds. req per sluice-CPU-second: all requests ÷ all sluice CPU seconds of the run. "
                 "HAProxy µs/req: its CPU ÷ all requests. errors: wrk socket errors + non-2xx, all runs.")
        L.append("")
        L.append("## Headline: does an instance cost more per request when a second one joins?")
        L.append("")
        L.append("Per-round ratios (runs of the same round, seconds apart): near 1.0 means linear.")
        L.append("")
        L.append("| scenario | A in tier2 ÷ A in tier1 | B in tier2 ÷ A in tier1 | tier2 ÷ tier1, req per "
                 "sluice-CPU-second | A in tier1 ÷ A direct (what the balancer and PROXY v2 add) | "
                 "tier2 ÷ tier1, req/s | A's context switches per request, tier1 → tier2 |")
        L.append("|---|---:|---:|---:|---:|---:|---:|")
        for c in cases:
            L.append(f"| {c} | {ratio_text(per_round_ratio(runs, c, 'tier2', 'cpu_us_A', 'tier1', 'cpu_us_A'))} | "
                     f"{ratio_text(per_round_ratio(runs, c, 'tier2', 'cpu_us_B', 'tier1', 'cpu_us_A'))} | "
                     f"{ratio_text(per_round_ratio(runs, c, 'tier2', 'per_core', 'tier1', 'per_core'))} | "
                     f"{ratio_text(per_round_ratio(runs, c, 'tier1', 'cpu_us_A', 'direct', 'cpu_us_A'))} | "
                     f"{ratio_text(per_round_ratio(runs, c, 'tier2', 'rps', 'tier1', 'rps'))} | "
                     f"{fmt(summ(runs, c, 'tier1', 'sw_A')[0], 3)} → {fmt(summ(runs, c, 'tier2', 'sw_A')[0], 3)} |")
        L.append("")
        L.append("Context switches (voluntary + involuntary, `/proc/PID/status`, master + worker) per "
                 "request: how often the instance's event loop slept or was preempted. In tier2 each "
                 "instance carries about half the load, so each wake-up of its event loop finds fewer "
                 "requests ready and its fixed cost (epoll_wait, timers, the syscalls of a loop "
                 "iteration) is shared by fewer requests; when this figure rises with the µs/req ratio, "
                 "that is what the ratio shows, not a cost of the second instance's presence. Instances "
                 "on their own machines, each as loaded as tier1's, would not pay it.")
        L.append("")
        hs = [c for c in ("churn", "resume") if c in cases]
        if hs:
            L.append("TLS handshakes counted by the instances (all runs): "
                     + "; ".join(f"{c}/{t}: " + ", ".join(
                         f"{i} full {sum(x['full'] for r in runs if r['case'] == c and r['label'] == t for x in r['inst'] if x['name'] == i):,}"
                         f" resumed {sum(x['resumed'] for r in runs if r['case'] == c and r['label'] == t for x in r['inst'] if x['name'] == i):,}"
                         for i in TOPO_INSTANCES[t])
                         for c in hs for t in topos if any(r["case"] == c and r["label"] == t for r in runs))
                     + ". In `resume`, round robin sends each new connection of a client to either "
                     "instance, so without the shared `ticket_keys` about half of tier2's handshakes "
                     "would be full ones; only each wrk connection's first is.")
            L.append("")
    fixed = [t for t in FIXED_TOPOS if any(r["case"] == "fixed" and r["label"] == t for r in runs)]
    if fixed:
        L.append("## Equal load per instance: churn at a fixed offered rate")
        L.append("")
        L.append(f"Open loop: h2load offers new TLS 1.3 connections at a fixed rate, one `Connection: close` "
                 f"request each (full handshakes): {FIXED_CPS}/s to tier1 and to tier2, and {FIXED_CPS // 2}/s "
                 "to tier1 (`tier1-half`). So an instance of tier2 carries the same load as tier1-half's: "
                 "A in tier2 ÷ A in tier1-half is what the second instance's presence costs each instance "
                 "at equal load, and A in tier1-half ÷ A in tier1 what halving an instance's load does to "
                 "its cost per request.")
        L.append("")
        L.append("| topology | offered/s | achieved/s | sluice A µs/req | sluice B µs/req | A context switches/req "
                 "| HAProxy µs/req | mean request ms | errors |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for t in fixed:
            rs = [r for r in runs if r["case"] == "fixed" and r["label"] == t]
            L.append(f"| {t} | {offered(t)} | {fmt(summ(runs, 'fixed', t, 'rps')[0])} | "
                     f"{fmt_mmm(summ(runs, 'fixed', t, 'cpu_us_A'), 1, True)} | "
                     f"{fmt_mmm(summ(runs, 'fixed', t, 'cpu_us_B'), 1, True)} | "
                     f"{fmt(summ(runs, 'fixed', t, 'sw_A')[0], 2)} | "
                     f"{fmt_mmm(summ(runs, 'fixed', t, 'lb_cpu_us'), 1, True)} | "
                     f"{fmt(summ(runs, 'fixed', t, 'req_mean')[0], 2)} | {sum(r['errors'] for r in rs)} |")
        L.append("")
        L.append("| ratio (per round) | value |")
        L.append("|---|---:|")
        for what, a, ak, b in (("A in tier2 ÷ A in tier1-half (equal load per instance)", "tier2", "cpu_us_A", "tier1-half"),
                               ("B in tier2 ÷ A in tier1-half (equal load per instance)", "tier2", "cpu_us_B", "tier1-half"),
                               ("A in tier1-half ÷ A in tier1 (half the load on one instance)", "tier1-half", "cpu_us_A", "tier1")):
            L.append(f"| {what} | {ratio_text(per_round_ratio(runs, 'fixed', a, ak, b, 'cpu_us_A'))} |")
        L.append("")
    L.append("## The cost of a rate limit per request")
    L.append("")
    if rl_skip:
        L.append(f"**Not measured: {rl_skip}.** Run again with `PARTS=ratelimit` once native rate limits "
                 "(`rate_limit:` with `store: local|redis`, docs/config.md) are in the binary.")
        L.append("")
    elif rl_cases:
        L.append(f"Keepalive load (wrk -c{CONNECTIONS}) through tier2, `rate_limit: {{rate: {RL_RATE}}}` on "
                 "the listener (key: the client address; behind PROXY v2 that is wrk's 127.0.0.1, one "
                 "key), high enough that nothing is refused (a 4xx would show under errors). "
                 "Redis: one redis-server for both instances (`--save \"\" --appendonly no`).")
        L.append("")
        L.append("| case | req/s | sluice A µs/req | sluice B µs/req | sluice µs/req, both | ÷ no limit | "
                 "Redis µs/req | Redis script calls/req | HAProxy µs/req | p99 ms | errors |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for c in rl_cases:
            rs = [r for r in runs if r["case"] == c]
            L.append(f"| {c} | {fmt(summ(runs, c, 'tier2', 'rps')[0])} | "
                     f"{fmt_mmm(summ(runs, c, 'tier2', 'cpu_us_A'), 2, True)} | "
                     f"{fmt_mmm(summ(runs, c, 'tier2', 'cpu_us_B'), 2, True)} | "
                     f"{fmt_mmm(summ(runs, c, 'tier2', 'sluice_cpu_us'), 2, True)} | "
                     + ("1 (reference)" if c == "rl-none" else paired_cases(runs, c, "rl-none", "sluice_cpu_us"))
                     + f" | {fmt_mmm(summ(runs, c, 'tier2', 'redis_cpu_us'), 2, True) if c == 'rl-redis' else '—'} | "
                     f"{fmt(summ(runs, c, 'tier2', 'redis_cmds_per_req')[0], 2) if c == 'rl-redis' else '—'} | "
                     f"{fmt_mmm(summ(runs, c, 'tier2', 'lb_cpu_us'), 2, True)} | "
                     f"{fmt(summ(runs, c, 'tier2', 'p99')[0], 2)} | {sum(r['errors'] for r in rs)} |")
        L.append("")
    else:
        L.append("Not run (PARTS).")
        L.append("")
    L += charts + [""]
    report_list(L, "Problems seen", notes)
    report_list(L, "sluice log lines above info level", loglines[:40])
    L.append("## Every run (in the order they ran)")
    L.append("")
    L.append("| round | scenario | topology | req/s | requests | A served | A µs/req | B served | B µs/req | "
             "HAProxy µs/req | origin µs/req | Redis µs/req | p50 ms | p99 ms | others' CPU % | errors | raw |")
    L.append("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in runs:
        a = next((x for x in r["inst"] if x["name"] == "A"), None)
        b = next((x for x in r["inst"] if x["name"] == "B"), None)
        L.append(f"| {r['round']} | {r['case']} | {r['label']} | {fmt(r['rps'])} | {r['requests']} | "
                 f"{a['served'] if a else '—'} | {fmt(a['cpu_us'], 2) if a else '—'} | "
                 f"{b['served'] if b else '—'} | {fmt(b['cpu_us'], 2) if b else '—'} | "
                 f"{fmt(r['lb_cpu_us'], 2)} | {fmt(r['backend_cpu_us'], 2)} | {fmt(r['redis_cpu_us'], 2)} | "
                 f"{fmt(r['p50'], 2)} | {fmt(r['p99'], 2)} | {fmt(r['other_pct'])}{' ⚠' if r['noisy'] else ''} | "
                 f"{r['errors']} | [{os.path.basename(r['raw'])}](tier/{r['raw']}) |")
    L.append("")
    L.append("## What was measured")
    L.append("")
    L.append("- Each round runs every topology of every scenario once, the topology order rotating by "
             "one each round. The instances (and HAProxy) are started fresh for each run and stopped "
             "(SIGTERM, by PID) after it; the origin stays up for the whole benchmark. Ports are "
             "picked free at run time on each instance's own loopback address.")
    L.append("- Scenarios: " + "; ".join(f"`{c}`: {SCEN_DESC[c]}" for c in cases + (["fixed"] if fixed else [])
                                         + rl_cases) + ". "
             "`churn` configures the shared `ticket_keys` file too, but with `tickets: off` (wrk resumes "
             "whenever it may, and the point is the full handshake); `resume` turns tickets on.")
    L.append("- direct: A's config without `accept_proxy_from` (wrk connects from 127.0.0.1, the "
             "balancer's address, and would have to send a PROXY header); otherwise the same config. "
             "So tier1 ÷ direct is what the balancer hop and the PROXY v2 header cost the instance.")
    L.append("- Instance CPU: utime+stime (`/proc/PID/stat`) of the instance's master and worker, read "
             "just before and just after the measured wrk run; the requests it served from its own "
             "`/metrics`, read before and after too (the scrapes fall outside the CPU window). "
             f"Clock tick = 1/{CLK_TCK} s.")
    L.append("- HAProxy, origin and Redis µs/req: their CPU over the same window ÷ wrk's completed requests.")
    L.append("- others' CPU %: the machine's busy time (/proc/stat) minus everything above and wrk, in % "
             "of one CPU: other people's processes plus kernel work charged to nobody (loopback softirq).")
    L.append(noise_note(NOISE_PCT, ATTEMPTS, QUIET_BUDGET))
    L.append("")
    L.append("## Commands (exact)")
    L.append("")
    L.append("```sh")
    L.append(f"# origin (started once)\n{backend_cmd}")
    if redis_cmd:
        L.append(f"# redis (ratelimit part)\n{redis_cmd}")
    for k, v in commands.items():
        L.append(f"# {k}\n{v}")
    if cases:
        L.append("# load, TLS scenarios / keepalive (through HAProxy: the balancer's port; direct: A's)")
        L.append(shlex.join(wrk_cmd("churn", (LB_ADDR, "PORT"), DURATION)))
        L.append(shlex.join(wrk_cmd("keepalive", (LB_ADDR, "PORT"), DURATION)))
    L.append("```")
    L.append("")
    L.append("Configs as used (one of each kind; all in [tier/](tier/)):")
    L.append("")
    report_end(L, outdir, "tier", confs, facts, "`make bench-tier` (or `QUICK=1 make bench-tier`); see "
               "docs/bench/tier.md.")


def paired_cases(runs, a, b, key):
    """Per-round ratio of case A's KEY ÷ case B's (tier2), as text."""
    def pairs(clean):
        va = {r["round"]: r.get(key) for r in runs if r["case"] == a and not (clean and r["noisy"])}
        vb = {r["round"]: r.get(key) for r in runs if r["case"] == b and not (clean and r["noisy"])}
        return [va[k] / vb[k] for k in va if k in vb and va[k] and vb[k]]
    return ratio_text(mmm(pairs(True) or pairs(False)))


# ---------------------------------------------------------------- main

def main():
    benchlib.need_tools(PROG, ["wrk", "haproxy", "openssl"] + (["taskset"] if PROXY_PIN else [])
                        + (["h2load"] if "fixed" in PARTS else [])
                        + (["redis-server"] if "ratelimit" in PARTS else []), "bench/tier.sh")
    if not os.access(SLUICE_BIN, os.X_OK):
        sys.exit(f"{PROG}: {SLUICE_BIN} is not an executable sluice (make, or SLUICE=path)")
    if not os.access(os.path.join(BUILD, "demo_backend"), os.X_OK):
        sys.exit(f"{PROG}: {BUILD}/demo_backend missing: make {BUILD}/demo_backend")
    started, outdir, d = results_dirs("tier")
    t_start = time.monotonic()
    log(f"results in {outdir}")
    binary, _, _ = copy_sluice(SLUICE_BIN, d)
    binary_desc = f"`{SLUICE_BIN}` ({sluice_describe(binary)}), run from a copy"
    facts = machine_facts([("sluice", sluice_describe(binary, detail=True))] + peer_versions()
                          + [("redis-server", cmd_out(["redis-server", "--version"]))])
    certs, _ = make_certs(d)
    ticket_keys = os.path.join(d, "ticket.keys")
    key = subprocess.run(["openssl", "rand", "-base64", "48"], check=True, stdout=subprocess.PIPE,
                         text=True).stdout.strip()
    write(ticket_keys, key + "\n")
    os.chmod(ticket_keys, 0o600)
    env = {"certs": certs, "ticket_keys": ticket_keys, "redis": None, "redis_port": None, "notes": []}
    runs, loglines, confs, commands = [], [], {}, {}
    n = len(SCENARIOS) * len(TOPOLOGIES) + (3 if "fixed" in PARTS else 0) + (3 if "ratelimit" in PARTS else 0)
    log(f"{ROUNDS} round(s) x {n} runs x ~{DURATION + WARMUP + 1.5:.0f} s; {PIN_TEXT}")

    backend, bport, backend_cmd = start_backend(d)
    rl_skip, redis_cmd = None, ""
    for rnd in range(ROUNDS):
        k = rnd % len(TOPOLOGIES)
        order = TOPOLOGIES[k:] + TOPOLOGIES[:k]
        for scen in SCENARIOS:
            for topo in order:
                one_run(scen, topo, rnd, d, binary, bport, backend, env, runs, loglines, confs, commands)

    if "fixed" in PARTS:
        for rnd in range(ROUNDS):
            k = rnd % len(FIXED_TOPOS)
            for topo in FIXED_TOPOS[k:] + FIXED_TOPOS[:k]:
                one_run("fixed", topo, rnd, d, binary, bport, backend, env, runs, loglines, confs, commands)

    if "ratelimit" in PARTS:
        redis, rport, redis_cmd = start_redis(d)
        if redis is None:
            rl_skip = f"redis-server did not start (see {d}/redis.out)"
        else:
            env["redis"], env["redis_port"] = f"127.0.0.1:{rport}", rport
            rl_skip = probe_rate_limit(d, binary, bport, env, "local") or \
                probe_rate_limit(d, binary, bport, env, "redis")
        if rl_skip:
            log(f"ratelimit part skipped: {rl_skip}")
        else:
            for rnd in range(ROUNDS):
                k = rnd % len(RL_CASES)
                for case in RL_CASES[k:] + RL_CASES[:k]:
                    one_run(case, "tier2", rnd, d, binary, bport, backend, env, runs, loglines, confs,
                            commands, redis=(redis, rport))
        if redis is not None:
            stop(redis)

    if backend.poll() is not None:
        env["notes"].append(f"the origin exited during the benchmark (status {backend.returncode})")
    stop(backend)
    write(os.path.join(d, "runs.json"), json.dumps(runs, indent=1, default=str))
    write_report(outdir, d, runs, facts, commands, confs, env["notes"], loglines,
                 started.strftime("%Y-%m-%d %H:%M:%S"), time.monotonic() - t_start, rl_skip, binary_desc,
                 backend_cmd, redis_cmd)
    refresh_latest(RESULTS, outdir, "tier", files=["tier.md", "tier.png", "tier-ratelimit.png"])
    show_report(outdir, "tier", ["![tier", "## Problems seen"], log)
    wanted = [(c, t) for c in SCENARIOS for t in TOPOLOGIES] + [("fixed", t) for t in FIXED_TOPOS
                                                                 if "fixed" in PARTS]
    missing = [f"{c}/{t}" for c, t in wanted if not any(r["case"] == c and r["label"] == t for r in runs)]
    if "ratelimit" in PARTS and not rl_skip:
        missing += [c for c in RL_CASES if not any(r["case"] == c for r in runs)]
    return benchlib.exit_status(missing, log)


if __name__ == "__main__":
    run_main(main, PROG)
