#!/usr/bin/env python3
"""Churn benchmark: connection churn with TLS offload and PROXY v2 to the backend.

The OCI Flexible Load Balancer experiment on one machine: every request
carries `Connection: close`, so each one is a new TCP connection and a FULL
TLS handshake (session tickets and session caches off on every server,
since wrk resumes otherwise), TLS 1.2 and 1.3, ECDSA P-256 vs RSA-2048
certificates, and the proxy tells the HTTP/1.1 backend who the client was
with a PROXY protocol v2 header on every backend connection:

  sluice   servers[].proxy_protocol: v2
  HAProxy  server ... send-proxy-v2
  nginx    OSS nginx's http proxy cannot send a PROXY header to an upstream
           (only its stream module can, and only v1): it sends
           X-Forwarded-For instead, and opens one backend connection per
           request too (no upstream keepalive), like the PROXY-v2 proxies
           must (a PROXY header describes one client connection)

The backend is one nginx with two listeners: one that requires the PROXY
header (`listen ... proxy_protocol`) for sluice and HAProxy, one plain for
nginx; it echoes what it learnt ($proxy_protocol_addr:port, X-Forwarded-For)
in response headers, and a probe through every proxy checks that the backend
saw the probe's own address and port.

Targets: each sluice build is a target of its own, named after its TLS
library as in bench/tls.py (sluice-awslc, the default build, and
sluice-openssl), found by what `sluice -V` says; then haproxy and nginx. A
sluice build that cannot be found (AWS-LC needs cargo to build) is left out,
and the report says so.

Two parts (PARTS):
  cases  closed loop, 50 connections of bench/tlsload.c (CLIENT=tlsload, the
         default; CLIENT=wrk for wrk): every case (certificate x TLS
         version) on every target, round after round. Per run:
         connections (= handshakes = requests) per second, mean and p99
         time per request, failure rate (socket errors + non-2xx responses
         over all attempts), and the headline: the proxy's own CPU µs per
         handshake (utime+stime of its processes ÷ handshakes). tlsload is
         one thread on AWS-LC that costs 2-3x less CPU per connection than
         wrk and (-x) skips checking the server's signature, so the proxy
         saturates before the client does; with wrk the client was the
         limit on two cores. Scaling: the SCALE cases run again with 2 workers
         (sluice `workers: 2`, HAProxy `nbthread 2`, nginx
         `worker_processes 2`), the proxy then allowed on every CPU while
         the client and the backend stay where they were.
  ramp   open loop, h2load: new connections offered at a fixed rate (TLS 1.3
         ECDSA, one request each), rising step by step, for the best sluice
         build (sluice-awslc when there is one) and HAProxy, one worker each:
         achieved CPS, proxy CPU %, mean and p99 request time, mean connect
         + handshake time, errors, up to the knee (achieved < 95% of
         offered, errors, or proxy CPU >= 98%) and one step past it.
With BASELINE=/path/to/another/sluice, target sluice-base runs sluice's
config with that binary in the same rounds, and the report gives
sluice-X ÷ sluice-base of the proxy CPU µs per handshake for every case,
sluice-X being the target built with the same TLS library as BASELINE.

Usage: sh bench/churn.sh  (or `make bench-churn`). Environment knobs:
  QUICK=1          1 s runs, no warm-up, cases ecdsa-1.3,rsa-1.3 (+ scaling),
                   ramp steps of 2 s from 300 CPS
  PARTS=a,b        cases,ramp (both)
  DURATION=N       seconds per measured wrk run (4; QUICK 1)
  WARMUP=N         unmeasured wrk seconds before each measured run (1; QUICK 0)
  CONNECTIONS=N    client connections (50)
  CLIENT=tlsload|wrk  the cases' client (tlsload; wrk when build/tlsload
                   is missing, with a note)
  CLIENT_VERIFY=1  tlsload verifies the server's handshake signature
  WRK_THREADS=N    wrk threads, CLIENT=wrk (1)
  ROUNDS=N         rounds; each round runs every case on every target once (3)
  CASES=a,b        1-worker cases, CERT-VERSION with CERT ecdsa|rsa, VERSION 1.2|1.3
                   (ecdsa-1.2,ecdsa-1.3,rsa-1.2,rsa-1.3; QUICK ecdsa-1.3,rsa-1.3)
  SCALE=a,b        cases also run with 2 workers (ecdsa-1.3; empty: none)
  TARGETS=a,b      subset/order of sluice-awslc,sluice-openssl,sluice,
                   sluice-base,haproxy,nginx
                   (sluice-awslc,sluice-openssl,haproxy,nginx); "sluice" is the
                   one binary SLUICE or BUILD/sluice, whatever its library
  SLUICE_AWSLC=path, SLUICE_OPENSSL=path
                   the binary of that target (checked with sluice -V)
  SLUICE=path      a sluice binary: the target of its TLS library uses it
                   (unless SLUICE_<LIB> names another), and so does "sluice"
  BUILD=dir        the same for dir/sluice, after SLUICE (default build/);
                   other builds are found among build/ (AWS-LC, the
                   default), build-openssl/ and build-awslc/ (the newest
                   for each library); relative paths are from the
                   repository root
  BASELINE=path    another sluice binary, measured as "sluice-base" with the
                   same configs (placed after the sluice target of its TLS
                   library unless TARGETS names it)
  RAMP_STEPS=a,b   offered connections per second, in rising order
                   (250,500,...,10000; QUICK 300,600,1200,2400,4800)
  RAMP_SECONDS=N   seconds of offered load per step (4; QUICK 2)
  RAMP_CASE=c      the ramp's case (ecdsa-1.3)
  RAMP_TARGETS=a,b the ramp's targets (the best sluice build, haproxy)
  PIN=0            do not pin with taskset
  NOISE_PCT=N      others' CPU (% of one CPU) that makes a run noisy (25)
  QUIET_BUDGET=N   seconds in all for waiting for quiet / re-running (30; QUICK 0)
  RESULTS=dir      results root (bench/results)
  BENCH_TS=name    results directory name (default: UTC timestamp)

Output: RESULTS/<ts>/churn.md, churn.png, churn-ramp.png, churn/
(certificates, configs, raw wrk and h2load output, h2load's per-request
logs, proxy and origin logs, runs.json); RESULTS/latest/ gets a copy and
report.md links it. Every process started here is stopped by its PID.
Exit status 1 if a target produced no figure.
"""
import functools
import json
import os
import re
import ssl
import subprocess
import sys
import time

import benchlib
from benchlib import (BASELINE, BODY_SIZE, BUILD, CLK_TCK, PIN, QUICK, RESULTS, ROOT, SLUICE_BIN, STATIC_BODY,
                      cmd_out, exit_status, fmt, fmt_mmm, free_port, fsize, grouped_bars, haproxy_conf, kind_of,
                      launch_proxy, machine_facts, measure_wrk, need_tools, nginx_main, nginx_temp_paths,
                      noise_note, paired, parse_wrk, peer_versions, pinning, proxy_errlog, Quiet, read_tail,
                      refresh_latest, report_end, report_list, results_dirs, run_main, run_wrk, runs_of,
                      show_report, sluice_conf, sluice_describe, start, stop, wait_port, write)
from tlslib import (CERT_NAME, LIB_NAME, SLUICE_LIBS, copy_sluice, find_sluice, haproxy_bind_ssl,
                    haproxy_global_ssl, make_certs, nginx_ssl, probe, sluice_lib, sluice_tls, stop_tls_proxy)

PROG = "bench/churn.py"
env_int = functools.partial(benchlib.env_int, prog=PROG)
env_names = functools.partial(benchlib.env_names, prog=PROG)
env_list = functools.partial(benchlib.env_list, prog=PROG)

ALL_PARTS = ["cases", "ramp"]
PARTS = env_names("PARTS", ALL_PARTS, None, "part")
DURATION = env_int("DURATION", 1 if QUICK else 4, 1)
WARMUP = env_int("WARMUP", 0 if QUICK else 1, 0)
CONNECTIONS = env_int("CONNECTIONS", 50, 1)
WRK_THREADS = env_int("WRK_THREADS", 1, 1)
CLIENT = os.environ.get("CLIENT", "tlsload")
CLIENT_VERIFY = os.environ.get("CLIENT_VERIFY", "") not in ("", "0")
if CLIENT not in ("tlsload", "wrk"):
    sys.exit(f"{PROG}: CLIENT must be tlsload or wrk, not {CLIENT!r}")
ROUNDS = env_int("ROUNDS", 3, 1)
NOISE_PCT = env_int("NOISE_PCT", 25)
QUIET_BUDGET = env_int("QUIET_BUDGET", 0 if QUICK else 30)
ATTEMPTS = 2
POOL = 64                      # backend connections each proxy may open
BACKLOG = 1024                 # every proxy's listen backlog (the ramp queues there past the knee)

ALL_CASES = ["ecdsa-1.2", "ecdsa-1.3", "rsa-1.2", "rsa-1.3"]
CASE_KEYS = env_names("CASES", ALL_CASES, "ecdsa-1.3,rsa-1.3" if QUICK else None, "case")
SCALE_KEYS = env_names("SCALE", ALL_CASES, "ecdsa-1.3", "case")
if "cases" not in PARTS:
    CASE_KEYS, SCALE_KEYS = [], []

# The ramp (open loop): offered CPS per step, in rising order.
RAMP_STEPS = env_list("RAMP_STEPS", "300,600,1200,2400,4800" if QUICK else
                      "250,500,750,1000,1250,1500,2000,2500,3000,4000,5000,6000,8000,10000",
                      int)
RAMP_SECONDS = env_int("RAMP_SECONDS", 2 if QUICK else 4, 1)
RAMP_CASE = env_names("RAMP_CASE", ALL_CASES, "ecdsa-1.3", "case")
RAMP_TIMEOUT = 15              # seconds a connection may stay open (a hung one fails): h2load -T, tlsload -t
RAMP_CLIENT = os.environ.get("RAMP_CLIENT", "tlsload")
if RAMP_CLIENT not in ("tlsload", "h2load"):
    sys.exit(f"{PROG}: RAMP_CLIENT must be tlsload or h2load, not {RAMP_CLIENT!r}")
RAMP_CONNS = env_int("RAMP_CONNS", 1000, 1)  # tlsload -c: connections in flight at most
RAMP_KNEE_PCT = 95             # achieved below this % of offered: the knee
RAMP_CPU_PCT = 98              # proxy CPU at or above this: the knee
if len(RAMP_CASE) != 1:
    sys.exit(f"{PROG}: RAMP_CASE names one case")
if "ramp" in PARTS and (not RAMP_STEPS or any(s < 1 for s in RAMP_STEPS) or RAMP_STEPS != sorted(RAMP_STEPS)):
    sys.exit(f"{PROG}: RAMP_STEPS must be rising positive connection rates, e.g. 250,500,1000")
if WRK_THREADS > CONNECTIONS:
    sys.exit(f"{PROG}: WRK_THREADS must not exceed CONNECTIONS")

# ---------------------------------------------------------------- targets and binaries

LIB_TARGETS = [f"sluice-{lib}" for lib in ("awslc", "openssl")]
KNOWN_TARGETS = LIB_TARGETS + ["sluice", "sluice-base", "haproxy", "nginx"]
DEFAULT_TARGETS = "sluice-awslc,sluice-openssl,haproxy,nginx"
RAMP_PREFERENCE = ["sluice-awslc", "sluice-openssl", "sluice"]


def shown(path):
    """PATH relative to the repository when it is inside it."""
    rel = os.path.relpath(path, ROOT)
    return path if rel.startswith("..") else rel


def find_binaries():
    """{lib: (path, TLS line)}: SLUICE_<LIB> first, then SLUICE and BUILD/sluice
    for the library each was built with, then the newest build of each
    library among build*/ (tlslib.find_sluice)."""
    named = find_sluice(PROG)              # SLUICE_<LIB> (checked), else the newest of build*/
    out = {lib: named[lib] for lib, (_, var) in SLUICE_LIBS.items() if os.environ.get(var) and lib in named}
    if os.environ.get("SLUICE") and not os.access(SLUICE_BIN, os.X_OK):
        sys.exit(f"{PROG}: SLUICE={SLUICE_BIN} is not an executable sluice")
    for path in dict.fromkeys([SLUICE_BIN, os.path.join(BUILD, "sluice")]):
        if os.access(path, os.X_OK):
            lib, tls_line = sluice_lib(path)
            if lib and lib not in out:
                out[lib] = (path, tls_line)
    for lib, v in named.items():
        out.setdefault(lib, v)
    return out


def choose_targets():
    """(targets, {target: (source binary, TLS line, lib)}, notes on the
    targets left out, the target sluice-base is compared with)."""
    found = find_binaries()
    asked = env_names("TARGETS", KNOWN_TARGETS, DEFAULT_TARGETS, "target")
    ramp_asked = env_names("RAMP_TARGETS", KNOWN_TARGETS, "", "target")
    bins, left_out = {}, []
    for t in dict.fromkeys(asked + ramp_asked):
        if t in LIB_TARGETS:
            lib = t.split("-", 1)[1]
            if lib in found:
                bins[t] = found[lib] + (lib,)
            else:
                left_out.append(f"{t}: no sluice built with {LIB_NAME[lib]} was found (`make TLS={lib} all`"
                                + (", which needs cargo" if lib == "awslc" else "") + ") — left out of the run")
        elif t == "sluice":
            if not os.access(SLUICE_BIN, os.X_OK):
                sys.exit(f"{PROG}: {SLUICE_BIN} is not an executable sluice (make, or set BUILD=dir or SLUICE=path)")
            lib, tls_line = sluice_lib(SLUICE_BIN)
            bins[t] = (SLUICE_BIN, tls_line, lib)
    targets = [t for t in asked if t not in LIB_TARGETS or t in bins]
    base_of = None
    if BASELINE:
        if not os.access(BASELINE, os.X_OK):
            sys.exit(f"{PROG}: BASELINE={BASELINE} is not an executable sluice")
        lib, tls_line = sluice_lib(BASELINE)
        bins["sluice-base"] = (BASELINE, tls_line, lib)
        sl = [t for t in targets if kind_of(t) == "sluice" and t != "sluice-base"]
        base_of = ("sluice" if "sluice" in sl else f"sluice-{lib}" if f"sluice-{lib}" in sl
                   else sl[0] if sl else None)
        if "sluice-base" not in targets:
            targets.insert(targets.index(base_of) + 1 if base_of else 0, "sluice-base")
    elif "sluice-base" in asked + ramp_asked:
        sys.exit(f"{PROG}: target sluice-base needs BASELINE=/path/to/another/sluice")
    if ramp_asked:
        ramp = [t for t in ramp_asked if kind_of(t) != "sluice" or t in bins]
    else:
        # the best sluice build: among the sluice targets of TARGETS first
        pick = (next((t for t in RAMP_PREFERENCE if t in targets and t in bins), None)
                or next((f"sluice-{lib}" for lib in ("awslc", "openssl") if lib in found), None))
        if pick and pick not in bins:
            lib = pick.split("-", 1)[1]
            bins[pick] = found[lib] + (lib,)
        ramp = ([pick] if pick else []) + ["haproxy"]
    return targets, bins, left_out, base_of, ramp


TARGETS, BINS, LEFT_OUT, BASE_OF, RAMP_TARGETS = choose_targets()
if "ramp" not in PARTS:
    RAMP_TARGETS = []
if not ((TARGETS and (CASE_KEYS or SCALE_KEYS)) or RAMP_TARGETS):
    sys.exit(f"{PROG}: nothing to measure" + (f" ({'; '.join(LEFT_OUT)})" if LEFT_OUT else ""))

# Every measured case: certificate, TLS version, workers. A SCALE case runs
# with 1 worker too (as a CASES case if listed there, else on its own).
CASES = []
for k in dict.fromkeys(CASE_KEYS + SCALE_KEYS):
    cert, ver = k.split("-")
    CASES.append({"cert": cert, "ver": ver, "workers": 1, "key": f"{k}-w1"})
for k in SCALE_KEYS:
    cert, ver = k.split("-")
    CASES.append({"cert": cert, "ver": ver, "workers": 2, "key": f"{k}-w2"})
_rc, _rv = RAMP_CASE[0].split("-")
RAMP = {"cert": _rc, "ver": _rv, "workers": 1, "key": f"ramp-{RAMP_CASE[0]}"}

PROXY_PIN, LOAD_PIN, PIN_TEXT = pinning(PIN)
ALL_CPUS = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
PROXY_PIN2 = ["taskset", "-c", ALL_CPUS] if PROXY_PIN else []
OCI = {"cps": 60000, "mean_ms": 17, "fail_pct": 0.001}
RUN = {}                       # sluice target -> {path (the run copy), src, tls, lib}


def log(msg):
    print(f"[churn] {msg}", flush=True)


def case_name(c, workers=True):
    s = f"{CERT_NAME[c['cert']]} TLS {c['ver']}"
    return s + (f", {c['workers']} worker{'s' if c['workers'] > 1 else ''}" if workers else "")


def sluice_targets(targets):
    """The sluice targets among TARGETS, sluice-base aside."""
    return [t for t in targets if kind_of(t) == "sluice" and t != "sluice-base"]


# ---------------------------------------------------------------- configs

def conf_origin(d, pp_port, plain_port):
    return (f"# origin: nginx, one worker, {BODY_SIZE}-byte body; it echoes what it learnt of the client\n"
            + nginx_main(d, "origin")
            + "    access_log off;\n    keepalive_requests 1000000;\n    keepalive_timeout 60s;\n"
            + nginx_temp_paths(d, "tmp-origin") + f"""    server {{
        # sluice and HAProxy: every connection must start with a PROXY header
        listen 127.0.0.1:{pp_port} proxy_protocol backlog=4096;
        # nginx (cannot send one): plain, the client in X-Forwarded-For
        listen 127.0.0.1:{plain_port} backlog=4096;
        location / {{
            default_type text/plain;
            add_header X-PP-Client "$proxy_protocol_addr:$proxy_protocol_port" always;
            add_header X-XFF "$http_x_forwarded_for" always;
            return 200 "{STATIC_BODY}";
        }}
    }}
}}
""")


def conf_sluice(d, port, pp_port, c, certs, name="sluice"):
    return sluice_conf(d, f"{name}, {c['workers']} worker(s); full handshakes only; PROXY v2 to the server",
                       port, pp_port, POOL, listener="https", workers=c["workers"], name=name,
                       tls=sluice_tls(certs, c["cert"], c["ver"], True),
                       listener_extra=f"    backlog: {BACKLOG}\n",
                       server_extra="        proxy_protocol: v2\n")


def conf_haproxy(d, port, pp_port, c, certs):
    return haproxy_conf(d, f"HAProxy, {c['workers']} thread(s); tickets and session cache off; PROXY v2 "
                        "to the server", port, pp_port, POOL, nbthread=c["workers"],
                        global_extra=haproxy_global_ssl(True),
                        bind_extra=haproxy_bind_ssl(certs, c["cert"], c["ver"], True) + f" backlog {BACKLOG}",
                        server_extra=" send-proxy-v2")


def conf_nginx(d, port, plain_port, c, certs):
    return (f"# nginx, {c['workers']} worker(s); tickets and session cache off.\n"
            "# OSS nginx cannot send a PROXY header to an http upstream: X-Forwarded-For\n"
            "# instead, and no upstream keepalive (one backend connection per request,\n"
            "# as a PROXY header forces on the others).\n"
            + nginx_main(d, "nginx", workers=c["workers"])
            + "    access_log off;\n    keepalive_requests 1000000;\n    keepalive_timeout 60s;\n"
            + nginx_temp_paths(d, "tmp-nginx") + f"""    upstream be {{
        server 127.0.0.1:{plain_port};
    }}
    server {{
        listen 127.0.0.1:{port} ssl reuseport backlog={BACKLOG};
{nginx_ssl(certs, c['cert'], c['ver'], True)}        location / {{
            proxy_pass http://be;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }}
    }}
}}
""")


CONF = {"sluice": (conf_sluice, "yaml"), "haproxy": (conf_haproxy, "cfg"), "nginx": (conf_nginx, "conf")}


def start_proxy(tgt, d, ports, c, certs):
    """Returns (Popen or None, port, command line, config path)."""
    port = free_port()
    os.makedirs(os.path.join(d, "configs"), exist_ok=True)
    kind = kind_of(tgt)
    make, ext = CONF[kind]
    conf = write(os.path.join(d, "configs", f"{tgt}-{c['key']}.{ext}"),
                 make(d, port, ports["plain" if kind == "nginx" else "pp"], c, certs,
                      **({"name": tgt} if kind == "sluice" else {})))
    # sluice and nginx: a master and one process per worker
    p, cmd = launch_proxy(kind, d, port, conf, PROXY_PIN2 if c["workers"] > 1 else PROXY_PIN,
                          RUN.get(tgt, {}).get("path"), name=tgt, workers=c["workers"])
    return p, port, cmd, conf


def start_origin(d):
    ports = {"pp": free_port(), "plain": free_port()}
    os.makedirs(os.path.join(d, "tmp-origin"), exist_ok=True)
    conf = write(os.path.join(d, "origin.conf"), conf_origin(d, ports["pp"], ports["plain"]))
    cmd = LOAD_PIN + ["nginx", "-p", d, "-e", os.path.join(d, "origin.error.log"), "-c", conf]
    p = start(cmd, os.path.join(d, "origin.out"))
    if not wait_port(ports["plain"], p):
        sys.exit(f"{PROG}: the nginx origin did not start, see {d}/origin.error.log")
    return p, ports, " ".join(cmd), conf


# ---------------------------------------------------------------- the cases' client

def load_cmd(port, seconds, c):
    """The cases' client command: tlsload (TLS version pinned to the case's,
    as the servers' are) or, CLIENT=wrk, wrk -H "Connection: close"."""
    url = f"https://127.0.0.1:{port}/"
    if CLIENT == "tlsload":
        return benchlib.tlsload_cmd(LOAD_PIN, CONNECTIONS, seconds, url, version=c["ver"], verify=CLIENT_VERIFY)
    return benchlib.wrk_cmd(LOAD_PIN, WRK_THREADS, CONNECTIONS, seconds, url, ["-H", "Connection: close"])


def client_text():
    if CLIENT == "tlsload":
        return (f"`tlsload{'' if CLIENT_VERIFY else ' -x'} -c{CONNECTIONS}` (bench/tlsload.c: one thread, "
                "AWS-LC, a new connection per request"
                + (")" if CLIENT_VERIFY else "; -x: the server's handshake signature is not checked, "
                   "which leaves the server's work unchanged)"))
    return f"`wrk -t{WRK_THREADS} -c{CONNECTIONS} -H \"Connection: close\"`"


def mean_ms(out):
    """wrk's `Latency Avg`, or tlsload's `Latency Distribution (mean X)`."""
    m = (re.search(r"^\s+Latency\s+([\d.]+)(us|ms|s|m)\s", out, re.M)
         or re.search(r"Latency Distribution \(mean ([\d.]+)(us|ms|s)\)", out))
    return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[m.group(2)] if m else None


def measure(tgt, c, rnd, d, port, proxy, origin):
    if WARMUP:
        run_wrk(load_cmd(port, WARMUP, c), WARMUP)
    raw = os.path.join(d, "raw", f"r{rnd + 1}-{c['key']}-{tgt}.txt")
    parse = benchlib.parse_tlsload if CLIENT == "tlsload" else parse_wrk
    r = measure_wrk(lambda: run_wrk(load_cmd(port, DURATION, c), DURATION, raw), proxy, origin,
                    parse=lambda out: dict(parse(out), mean=mean_ms(out)))
    r.update(label=tgt, case=c["key"], round=rnd + 1, raw=os.path.relpath(raw, d))
    if not r["requests"]:
        r["cpu_us"] = None
    r["attempts"] = r["requests"] + r["sock_errors"]
    r["failures"] = r["sock_errors"] + r["non2xx"]
    r["fail_pct"] = r["failures"] / r["attempts"] * 100 if r["attempts"] else None
    return r


def check_identity(tgt, port, c):
    """One TLS GET through the proxy; the origin echoes the client address
    it learnt (PROXY header, or X-Forwarded-For for nginx). Returns (error or
    None, description, negotiated version + cipher)."""
    err, facts = probe(port, c["ver"], tries=1, size=BODY_SIZE)
    last = facts.get("last")
    neg = f"{facts.get('version', '?')} {facts.get('cipher', '')}"
    if err:
        return err, "", neg
    h = last["headers"]
    if tgt == "nginx":
        got, want = h.get("x-xff", ""), "127.0.0.1"
        desc = (f"X-Forwarded-For: {got or '(none)'}; PROXY header: "
                f"{'none' if h.get('x-pp-client', '') in ('', ':') else h['x-pp-client']}")
        ok = got == want and h.get("x-pp-client", "") in ("", ":")
    else:
        got, want = h.get("x-pp-client", ""), f"127.0.0.1:{last['local_port']}"
        desc = (f"PROXY header: {got or '(none)'} (probe connected from {want}); "
                f"X-Forwarded-For: {h.get('x-xff') or '(none)'}")
        ok = got == want
    return (None if ok else f"the origin did not learn the client: {desc}"), desc, neg


# ---------------------------------------------------------------- h2load (the ramp)

def rate_args(cps):
    """(connections per period, period in ms) for h2load -r/--rate-period
    offering CPS connections a second in the smallest bursts h2load's whole
    numbers allow; (r, 10) rounded when none is exact."""
    for p in (1, 2, 4, 5, 8, 10, 20, 25, 40, 50, 100):
        if cps * p % 1000 == 0:
            return cps * p // 1000, p
    return max(1, round(cps / 100)), 10


def h2load_cmd(port, rate, period_ms, n, logfile):
    """Open loop: RATE new connections every PERIOD_MS, N in all, one
    Connection: close request on each (-n = -c), HTTP/1.1 over TLS."""
    return LOAD_PIN + ["h2load", "--h1", "-t1", f"--rate={rate}", f"--rate-period={period_ms}ms",
                       f"--clients={n}", f"--requests={n}", f"--connection-active-timeout={RAMP_TIMEOUT}s",
                       "-H", "Connection: close", f"--log-file={logfile}", f"https://127.0.0.1:{port}/"]


UNIT_MS2 = {"us": 0.001, "ms": 1.0, "s": 1000.0}
# h2load prints these two lines for every connection to a server that
# selects no ALPN protocol (all three proxies here); the raw files leave them out.
ALPN_CHATTER = ("No protocol negotiated. Fallback behaviour may be activated",
                "Server does not support NPN/ALPN. Falling back to HTTP/1.1.")


def parse_h2load(out):
    """h2load's summary: requests = 2xx responses; sock_errors = requests
    that got no response at all (errored, timed out, never done); non2xx;
    secs ("finished in"), achieved (2xx ÷ secs); for request, connect
    (TCP connect + TLS handshake) and ttfb (connect start to the first
    response byte): min, max, mean, sd in ms."""
    r = {"requests": 0, "rps": 0.0, "sock_errors": 0, "sock_detail": "", "non2xx": 0, "secs": None,
         "total": 0}
    m = re.search(r"finished in ([\d.]+)(us|ms|s), ([\d.]+) req/s", out)
    if m:
        r["secs"] = float(m.group(1)) * UNIT_MS2[m.group(2)] / 1000
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                  r"(\d+) errored, (\d+) timeout", out)
    st = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if m and st:
        total, _, _, _, failed, errored, timeout = (int(x) for x in m.groups())
        s2, s3, s4, s5 = (int(x) for x in st.groups())
        r.update(total=total, requests=s2, non2xx=s3 + s4 + s5, sock_errors=total - (s2 + s3 + s4 + s5))
        if r["sock_errors"]:
            r["sock_detail"] = f"h2load: {failed} failed, {errored} errored, {timeout} timeout of {total}"
    if r["secs"]:
        r["rps"] = r["requests"] / r["secs"]
    for name, key in (("time for request", "req"), ("time for connect", "conn"), ("time to 1st byte", "ttfb")):
        m = re.search(rf"^{name}:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+"
                      rf"([\d.]+)(us|ms|s)", out, re.M)
        if m:
            g = m.groups()
            for i, stat in enumerate(("min", "max", "mean", "sd")):
                r[f"{key}_{stat}"] = float(g[2 * i]) * UNIT_MS2[g[2 * i + 1]]
    return r


def pct(sorted_vals, q):
    """The q-th percentile (nearest rank) of an ascending list."""
    if not sorted_vals:
        return None
    k = max(0, min(len(sorted_vals) - 1, int(-(-q * len(sorted_vals) // 100)) - 1))
    return sorted_vals[k]


def request_log(logfile):
    """From h2load's --log-file (start µs since the epoch, status, µs from
    writing the request to the end of the response), the 2xx rows: (their
    request times in ms, sorted; the CPS at which they completed: one less
    than their count ÷ the seconds from the first response's end to the
    last's, or None)."""
    times, ends = [], []
    try:
        with open(logfile) as f:
            for line in f:
                p = line.split("\t")
                if len(p) >= 3 and p[1].startswith("2"):
                    times.append(int(p[2]) / 1000)
                    ends.append(int(p[0]) + int(p[2]))
    except (OSError, ValueError):
        pass
    span = (max(ends) - min(ends)) / 1e6 if len(ends) > 1 else 0
    return sorted(times), ((len(ends) - 1) / span if span > 0 else None)


def run_ramp_client(cmd, name):
    """One ramp step's client run: its output, what it printed before being
    killed when it overran its time."""
    try:
        cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=RAMP_SECONDS + RAMP_TIMEOUT + 60)
        return cp.stdout
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode("utf-8", "replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return out + f"\n({name} killed: it overran its time)\n"


def measure_ramp(tgt, cps, d, port, proxy, origin):
    if RAMP_CLIENT == "tlsload":
        return measure_ramp_tlsload(tgt, cps, d, port, proxy, origin)
    rate, period = rate_args(cps)
    offered = rate * 1000 / period
    n = max(1, round(offered * RAMP_SECONDS))
    raw = os.path.join(d, "raw", f"ramp-{tgt}-{cps}.txt")
    logfile = raw[:-4] + ".tsv"
    if os.path.exists(logfile):
        os.unlink(logfile)       # a re-run (noise) starts a new log
    cmd = h2load_cmd(port, rate, period, n, logfile)

    def run():
        out = run_ramp_client(cmd, "h2load")
        lines = out.splitlines()
        kept = [ln for ln in lines if ln not in ALPN_CHATTER]
        write(raw, " ".join(cmd) + "\n" + "\n".join(kept)
              + f"\n({len(lines) - len(kept)} lines of h2load's per-connection ALPN notice left out)\n")
        return out

    r = measure_wrk(run, proxy, origin, parse=parse_h2load)
    r["problems"] = [p.replace("wrk completed", "h2load completed") for p in r["problems"]]
    times, done_cps = request_log(logfile)
    # Achieved: the rate responses completed at, from the log (a constant
    # latency shifts the first and the last alike); h2load's own figure
    # (2xx ÷ its run time, which adds the last connection's latency to a
    # short step) when the log has too few rows.
    achieved = done_cps if done_cps is not None and r["requests"] > 10 else r["rps"]
    r.update(label=tgt, step=cps, offered=offered, rate=rate, period_ms=period, clients=n,
             raw=os.path.relpath(raw, d), log=os.path.relpath(logfile, d),
             mean=sum(times) / len(times) if times else None, p50=pct(times, 50), p99=pct(times, 99),
             achieved=achieved, achieved_pct=achieved / offered * 100 if offered else None,
             errors=r["total"] - r["requests"] if r["total"] else n)
    return ramp_verdict(r)


def tlsload_ramp_cmd(port, cps, n):
    """Open loop: CPS new connections a second on a fixed schedule, N in
    all, at most RAMP_CONNS in flight, one Connection: close request each."""
    return benchlib.tlsload_cmd(LOAD_PIN, RAMP_CONNS, 0, f"https://127.0.0.1:{port}/", version=RAMP["ver"],
                                verify=CLIENT_VERIFY, rate=cps, count=n, timeout_s=RAMP_TIMEOUT)


def measure_ramp_tlsload(tgt, cps, d, port, proxy, origin):
    n = max(1, round(cps * RAMP_SECONDS))
    raw = os.path.join(d, "raw", f"ramp-{tgt}-{cps}.txt")
    cmd = tlsload_ramp_cmd(port, cps, n)

    def run():
        out = run_ramp_client(cmd, "tlsload")
        write(raw, " ".join(cmd) + "\n" + out)
        return out

    def parse(out):
        r = benchlib.parse_tlsload(out)
        done = r["requests"]                    # responses, whatever their status
        r["requests"] = done - r["non2xx"]      # 2xx
        r["total"] = n
        r["sock_errors"] = n - done
        if r["sock_errors"]:
            r["sock_detail"] = f"tlsload: {r['sock_errors']} of {n} connections got no response"
        return r

    r = measure_wrk(run, proxy, origin, parse=parse)
    r["problems"] = [p.replace("wrk completed", "tlsload completed") for p in r["problems"]]
    # Achieved: the rate responses ended at, first to last (tlsload's own
    # figure); responses ÷ run time when there are too few.
    achieved = r["completions"] if r["completions"] and r["requests"] > 10 else r["rps"]
    r.update(label=tgt, step=cps, offered=float(cps), clients=n, raw=os.path.relpath(raw, d),
             mean=r["req_mean"], conn_mean=r["hs_mean"], conn_max=r["hs_max"], ttfb_mean=None,
             achieved=achieved, achieved_pct=achieved / cps * 100 if cps else None,
             errors=n - r["requests"])
    return ramp_verdict(r)


def ramp_verdict(r):
    """The load side's CPU and the step's knee conditions."""
    r["h2load_cpu_pct"] = r.pop("wrk_cpu_pct")
    # The load side: the client and the origin, pinned together (CPU 1 of 2).
    r["load_cpu_pct"] = r["h2load_cpu_pct"] + r["backend_cpu_us"] * max(r["requests"], 1) / r["wall"] / 1e4
    why = []
    if r["achieved_pct"] is None or r["achieved_pct"] < RAMP_KNEE_PCT:
        why.append(f"achieved {fmt(r['achieved_pct'])}% of offered")
    if r["errors"]:
        why.append(f"{r['errors']:,} errors")
    if r["cpu_pct"] is not None and r["cpu_pct"] >= RAMP_CPU_PCT:
        why.append(f"proxy CPU {fmt(r['cpu_pct'])}%")
    r["knee"] = why
    return r


# ---------------------------------------------------------------- report

def summarize(runs, tgt, key):
    s = benchlib.summarize(runs, tgt, ("rps", "cpu_us", "cpu_pct", "mean", "p50", "p99", "backend_cpu_us",
                                       "wrk_cpu_pct"), key)
    if s:
        allr = runs_of(runs, tgt, key)
        att = sum(r["attempts"] for r in allr)
        fail = sum(r["failures"] for r in allr)
        s.update(attempts=att, failures=fail, fail_pct=fail / att * 100 if att else None,
                 tls_fail=sum(r.get("tls_fail", 0) for r in allr))
    return s


COLORS = {"sluice-awslc": "#7b4fb0", "sluice-openssl": "#2b7bba",
          "sluice": "#1f4e79", "sluice-base": "#8cc0e8", "haproxy": "#e07b39", "nginx": "#3a9e4f"}


def chart(path, summ, targets):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    w1 = [c["key"] for c in CASES if c["workers"] == 1]
    panels = [("Proxy CPU µs per full handshake (lower is better)", w1, "cpu_us"),
              ("Connections (= full handshakes) per second", w1, "rps"),
              ("Mean time per request, ms (client)", w1, "mean")]
    if SCALE_KEYS:
        panels.append(("Scaling: CPS with 1 and 2 workers",
                       [k for s in SCALE_KEYS for k in (f"{s}-w1", f"{s}-w2")], "rps"))
    ncol = 2 if len(panels) == 4 else len(panels)
    nrow = (len(panels) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.2 * ncol, 4.4 * nrow + 0.4), squeeze=False)
    drawn = False
    for ax, (title, keys, metric) in zip(axes.flat, panels):
        drawn |= grouped_bars(ax, keys, targets, lambda t, k: summ[(t, k)][metric] if (t, k) in summ
                              else (None, None, None), COLORS, fontsize=6 if len(targets) > 3 else 7)
        labels = []
        for k in keys:
            cert, ver, w = k.split("-")
            labels.append(f"{'ECDSA' if cert == 'ecdsa' else 'RSA'} {ver}"
                          + (f"\n{w[1]} worker{'s' if w != 'w1' else ''}" if metric == "rps" and "Scaling" in title else ""))
        ax.set_xticks(range(len(keys)))
        ax.set_xticklabels(labels, fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"Connection churn, full TLS handshake per request, PROXY v2 to the backend "
                 f"(nginx: X-Forwarded-For)\n{CLIENT} -c{CONNECTIONS} -d{DURATION}s, "
                 f"{ROUNDS} rounds, medians (bars: min–max)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn


def chart_ramp(path, steps, targets):
    """Three panels over the ramp's steps, one line per target: achieved CPS
    vs p99 request time (the knee), offered vs achieved CPS, offered CPS vs
    mean connect + handshake time."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    drawn = False
    top = max((s["offered"] for s in steps), default=1)
    for t in targets:
        ss = [s for s in steps if s["label"] == t and s["requests"]]
        if not ss:
            continue
        drawn = True
        col = COLORS.get(t, "#777")
        xs = [s["achieved"] for s in ss]
        axes[0].plot(xs, [s["p99"] for s in ss], "o-", color=col, label=t)
        for s in ss:
            if s["knee"]:
                axes[0].annotate(f"{s['offered']:,.0f}", (s["achieved"], s["p99"]), xytext=(3, 3),
                                 textcoords="offset points", fontsize=7, color=col)
        axes[1].plot([s["offered"] for s in ss], xs, "o-", color=col, label=t)
        axes[2].plot([s["offered"] for s in ss], [s.get("conn_mean") for s in ss], "o-", color=col, label=t)
        for s in ss:
            if s["knee"]:
                for ax, y in ((axes[1], s["achieved"]), (axes[2], s.get("conn_mean"))):
                    if y:
                        ax.plot([s["offered"]], [y], "x", color="black", markersize=9)
    axes[1].plot([0, top], [0, top], ":", color="#999", label="achieved = offered")
    axes[0].set_title("Achieved CPS vs p99 request time (log scale)", fontsize=10)
    axes[0].set_xlabel("achieved connections per second")
    axes[0].set_ylabel("p99 ms, request written → response read")
    axes[0].set_yscale("log")
    axes[1].set_title("Offered vs achieved CPS (x: a knee condition)", fontsize=10)
    axes[1].set_xlabel("offered connections per second")
    axes[1].set_ylabel("achieved connections per second")
    axes[2].set_title("Mean TCP connect + TLS handshake, ms (log scale)", fontsize=10)
    axes[2].set_xlabel("offered connections per second")
    axes[2].set_yscale("log")
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in (axes[0], axes[2]):
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
            lambda v, _: f"{v:g}" if str(f"{v:g}")[0] in "25" else ""))
    fig.suptitle(f"Ramp: open-loop {RAMP_CLIENT}, {case_name(RAMP, False)}, one request per connection "
                 f"(Connection: close), {RAMP_SECONDS} s per step, one proxy worker pinned", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn


def ramp_knee(steps, t):
    """(target T's knee: the first step that met a knee condition and was
    followed by one that did too, or was its last; or None. The highest
    step it ran clean below the knee, or None.)"""
    ss = [s for s in steps if s["label"] == t]
    knee = next((s for i, s in enumerate(ss) if s["knee"] and (i + 1 == len(ss) or ss[i + 1]["knee"])), None)
    clean = [s for s in ss if not s["knee"] and (knee is None or s["step"] < knee["step"])]
    return knee, (clean[-1] if clean else None)


def hs_ratio(steps, a, b):
    """Mean connect + handshake time A ÷ B at the highest step where both
    ran at >= 95% proxy CPU; else, when each saturated at a step of its own
    (one proxy faster than the other: never both at one rate), at each one's
    first such step; else at the step closest to saturation (where the lower
    of the two proxy CPU % is highest). (ratio, step A, step B, how it was
    chosen) or None."""
    sa = {s["step"]: s for s in steps if s["label"] == a and s.get("conn_mean") and s["cpu_pct"] is not None}
    sb = {s["step"]: s for s in steps if s["label"] == b and s.get("conn_mean") and s["cpu_pct"] is not None}
    common = sorted(set(sa) & set(sb))
    if not common:
        return None
    hot = [k for k in common if sa[k]["cpu_pct"] >= 95 and sb[k]["cpu_pct"] >= 95]
    first_a = next((sa[k] for k in sorted(sa) if sa[k]["cpu_pct"] >= 95), None)
    first_b = next((sb[k] for k in sorted(sb) if sb[k]["cpu_pct"] >= 95), None)
    if hot:
        k, how = hot[-1], "the highest step where both proxies ran at ≥ 95% CPU"
    elif first_a and first_b:
        return (first_a["conn_mean"] / first_b["conn_mean"], first_a, first_b,
                "no step had both proxies at ≥ 95% CPU, so each at its own first step there")
    else:
        k = max(common, key=lambda x: (min(sa[x]["cpu_pct"], sb[x]["cpu_pct"]), x))
        how = ("no step had both proxies at ≥ 95% CPU: the step closest to saturation (the highest lower "
               "proxy CPU % of the two)")
    return sa[k]["conn_mean"] / sb[k]["conn_mean"], sa[k], sb[k], how


def report_ramp(L, steps, targets, chart_ramp_line):
    knees = {t: ramp_knee(steps, t)[0] for t in targets}
    L.append("## Ramp: offered connection rate rising to the knee")
    L.append("")
    if RAMP_CLIENT == "tlsload":
        how = (f"tlsload (bench/tlsload.c, `-R CPS`) starts new connections on a fixed schedule whatever the "
               f"proxy does ({RAMP_STEPS[0]:,} CPS = one every {1e3 / RAMP_STEPS[0]:.1f} ms; at most "
               f"{RAMP_CONNS:,} in flight, a start finding none free waits and its lateness is in the raw "
               f"output), for {RAMP_SECONDS} s per step, one `Connection: close` request on each"
               + ("" if CLIENT_VERIFY else ", the server's signature not checked (`-x`)"))
    else:
        rate_ex, per_ex = rate_args(RAMP_STEPS[0])
        how = (f"h2load (HTTP/1.1, `--h1`) opens new connections at a fixed rate whatever the "
               f"proxy does (`-r R --rate-period P`: R connections every P ms; {RAMP_STEPS[0]:,} CPS = "
               f"{rate_ex} every {per_ex} ms), for {RAMP_SECONDS} s per step, one `Connection: close` "
               f"request on each (`-n` = `-c`)")
    L.append(f"Open loop: {how}: every connection is a full handshake ({case_name(RAMP, False)}, "
             "tickets and caches off) and a new PROXY-v2 backend connection. One proxy worker "
             f"(thread), pinned as above; each proxy started fresh for each step, the two taking turns. A "
             f"step meets a *knee condition* when the proxy achieved less than {RAMP_KNEE_PCT}% of the "
             f"offered rate, or had an error, or its CPU reached {RAMP_CPU_PCT}%; the **knee** is the first "
             "such step that the next one confirms (a lone one, followed by a step that meets none, was "
             "noise: the climb goes on). A target stops one step past its knee.")
    L.append("")
    src = ("tlsload's distributions" if RAMP_CLIENT == "tlsload" else "h2load's per-request log, `--log-file`")
    L.append("*achieved* = the rate responses completed at (responses less one ÷ the time from the first "
             "one's end to the last one's: a latency common to all "
             "shifts both ends alike); *proxy µs/conn* = the proxy's CPU time ÷ 2xx responses; "
             f"*request* times ({src}) run from writing the request on the "
             "handshaken connection to the end of the response (as the cases' client above); *connect* = "
             "from `connect()` to the end of the TLS handshake (the wait in the "
             "listen backlog included): the handshake latency; *first byte* (h2load only) = from `connect()` "
             "to the first response byte, all of it. *load CPU* = the client's CPU + the origin's, which share "
             f"{'CPU ' + LOAD_PIN[-1] if LOAD_PIN else 'the machine'}: near 100% means the load side, not "
             "the proxy, was the limit at that step; others' CPU (⚠ at or above NOISE_PCT) is what the rest of the "
             "machine took meanwhile.")
    L.append("")
    L.append("| target | offered CPS | achieved CPS | achieved ÷ offered | proxy CPU % | proxy µs/conn | "
             "load CPU % | others' CPU % | mean request ms | p99 request ms | mean connect + handshake ms | "
             "max connect ms | mean first byte ms | errors | knee condition | raw |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for t in targets:
        for s in (x for x in steps if x["label"] == t):
            L.append(f"| **{t}** | {fmt(s['offered'])} | {fmt(s['achieved'])} | {fmt(s['achieved_pct'])}% | "
                     f"{fmt(s['cpu_pct'])} | {fmt(s['cpu_us'])} | {fmt(s['load_cpu_pct'])} | "
                     f"{fmt(s['other_pct'])}{' ⚠' if s['noisy'] else ''} | {fmt(s['mean'], 2)} | "
                     f"{fmt(s['p99'], 2)} | {fmt(s.get('conn_mean'), 2)} | {fmt(s.get('conn_max'), 1)} | "
                     f"{fmt(s.get('ttfb_mean'), 2)} | {s['errors']:,} / {s['clients']:,} | "
                     f"{'; '.join(s['knee']) or '—'}{' (knee)' if s is knees.get(t) else ''} | "
                     f"[{os.path.basename(s['raw'])}](churn/{s['raw']}) |")
    L.append("")
    for t in targets:
        knee, clean = knees.get(t), ramp_knee(steps, t)[1]
        ran = [s for s in steps if s["label"] == t]
        if not ran:
            L.append(f"- **{t}**: no step ran.")
            continue
        hot = max(ran, key=lambda s: s["load_cpu_pct"] or 0)
        L.append(f"- **{t}**: " + (f"knee at {fmt(knee['offered'])} offered CPS ({'; '.join(knee['knee'])}; "
                                     f"load CPU {fmt(knee['load_cpu_pct'])}%)" if knee else
                                     f"no knee up to {fmt(ran[-1]['offered'])} offered CPS (raise `RAMP_STEPS`)")
                 + (f"; highest clean step {fmt(clean['offered'])} offered, {fmt(clean['achieved'])} achieved "
                    f"at {fmt(clean['cpu_pct'])}% proxy CPU, p99 {fmt(clean['p99'], 2)} ms, mean handshake "
                    f"{fmt(clean.get('conn_mean'), 2)} ms" if clean else "; no clean step")
                 + (f". The load side (client + origin) reached {fmt(hot['load_cpu_pct'])}% CPU at "
                    f"{fmt(hot['offered'])} offered: the client side was (near) the limit there"
                    if (hot["load_cpu_pct"] or 0) >= 90 else "")
                 + ".")
    L.append("")
    sl = [t for t in targets if kind_of(t) == "sluice"]
    if sl and "haproxy" in targets:
        a = sl[0]
        L.append(f"### {a} and HAProxy side by side")
        L.append("")
        L.append(f"Per offered rate (— where a target had stopped). *hs ratio* = mean connect + handshake "
                 f"time {a} ÷ HAProxy (below 1 = {a} quicker).")
        L.append("")
        L.append(f"| offered CPS | achieved {a} | achieved haproxy | proxy CPU % {a} | proxy CPU % haproxy | "
                 f"p99 ms {a} | p99 ms haproxy | mean hs ms {a} | mean hs ms haproxy | hs ratio | "
                 f"errors {a} | errors haproxy |")
        L.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        by = {(s["label"], s["step"]): s for s in steps}
        for k in RAMP_STEPS:
            x, y = by.get((a, k)), by.get(("haproxy", k))
            if not x and not y:
                continue

            def g(s, f, nd=0):
                return fmt(s.get(f), nd) if s else "—"
            ratio_ = (fmt(x["conn_mean"] / y["conn_mean"], 2) if x and y and x.get("conn_mean")
                      and y.get("conn_mean") else "—")
            L.append(f"| {fmt((x or y)['offered'])} | {g(x, 'achieved')} | {g(y, 'achieved')} | "
                     f"{g(x, 'cpu_pct')} | {g(y, 'cpu_pct')} | {g(x, 'p99', 2)} | {g(y, 'p99', 2)} | "
                     f"{g(x, 'conn_mean', 2)} | {g(y, 'conn_mean', 2)} | {ratio_} | "
                     f"{g(x, 'errors')} | {g(y, 'errors')} |")
        L.append("")
        hr = hs_ratio(steps, a, "haproxy")
        if hr:
            ratio_, x, y, how = hr
            client = max(x["load_cpu_pct"] or 0, y["load_cpu_pct"] or 0) >= 90
            within = "within 2×" if ratio_ <= 2 else "**more than 2×**"
            at = (f"{fmt(x['offered'])} offered CPS" if x["offered"] == y["offered"] else
                  f"{fmt(x['offered'])} ({a}) and {fmt(y['offered'])} (HAProxy) offered CPS")
            L.append(f"**Mean handshake latency {a} ÷ HAProxy: {ratio_:.2f}** at {at} "
                     f"({how}: {a} {fmt(x['cpu_pct'])}% CPU, {fmt(x['conn_mean'], 2)} ms; HAProxy "
                     f"{fmt(y['cpu_pct'])}% CPU, {fmt(y['conn_mean'], 2)} ms). Issue 21's target, \"at 100% "
                     f"proxy CPU, mean handshake latency within 2× of HAProxy's\": "
                     + (("**met**" if ratio_ <= 2 else "**missed**") if x["cpu_pct"] >= 95 and y["cpu_pct"] >= 95
                        else "**not measured** by this run, which had no step with both proxies at 100% CPU: "
                        + ("the load side (client + origin) ran out of CPU first (`RAMP_CASE=rsa-1.3` moves "
                           "the cost to the proxies)" if client else
                           "the knee came before the proxies saturated (other processes' CPU, or queueing)")
                        + f"; at the step closest to it the ratio is {within}")
                     + ".")
        else:
            L.append(f"Mean handshake latency {a} ÷ HAProxy: — (no step where both have a figure).")
        L.append("")
    L.append(chart_ramp_line)
    L.append("")


def write_report(outdir, d, runs, steps, targets, idents, facts, commands, confs, cert_cmds, origin_cmd,
                 notes, loglines, started_at, elapsed):
    summ = {}
    for c in CASES:
        for t in targets:
            s = summarize(runs, t, c["key"])
            if s:
                summ[(t, c["key"])] = s
    chart_line = ""
    if CASES:
        try:
            drawn = chart(os.path.join(outdir, "churn.png"), summ, targets)
            chart_line = "![churn chart](churn.png)" if drawn else "(no chart: no figures)"
        except Exception as e:  # noqa: BLE001 — a missing chart must not lose the tables
            chart_line = f"(chart not drawn: {e!r})"
    chart_ramp_line = ""
    if RAMP_TARGETS:
        try:
            drawn = chart_ramp(os.path.join(outdir, "churn-ramp.png"), steps, RAMP_TARGETS)
            chart_ramp_line = "![churn ramp chart](churn-ramp.png)" if drawn else "(no ramp chart: no figures)"
        except Exception as e:  # noqa: BLE001
            chart_ramp_line = f"(ramp chart not drawn: {e!r})"
    sls = sluice_targets(targets)
    peers = [p for p in ("sluice-base", "haproxy", "nginx") if p in targets]
    builds = "; ".join(f"**{t}** `{shown(RUN[t]['src'])}`, TLS **{RUN[t]['tls']}**"
                       for t in dict.fromkeys(targets + RAMP_TARGETS) if t in RUN)
    L = ["# churn — connection churn with TLS offload (a full handshake per request, PROXY v2 to the backend)", ""]
    L.append(f"Run {started_at} UTC, {elapsed:.0f} s in all. {'QUICK mode. ' if QUICK else ''}Parts: "
             f"{', '.join(PARTS)}. "
             + (f"Cases: {ROUNDS} round(s) × {DURATION} s measured load runs (after {WARMUP} s of unmeasured "
                f"warm-up each), {client_text()} over "
                f"https: every request is a new TCP connection and a full TLS handshake (tickets and "
                f"session caches off on every server), targets {', '.join(targets)}. " if CASES else "")
             + (f"Ramp: open-loop {RAMP_CLIENT}, {', '.join(RAMP_TARGETS)}. " if RAMP_TARGETS else "")
             + f"{BODY_SIZE}-byte responses from one nginx origin. sluice builds (each a target of its "
             f"own, run as a copy in churn/bin/): {builds or '(none)'}."
             + (f" sluice-base (BASELINE) is compared with {BASE_OF}." if "sluice-base" in targets else "")
             + (" **Left out:** " + " ".join(LEFT_OUT) if LEFT_OUT else "")
             + f" Pinning: {PIN_TEXT}; with 2 workers the "
             f"proxy may use every CPU ({ALL_CPUS}) while the client and the origin stay where they are.")
    L.append("")
    L.append(f"Reference (OCI Flexible Load Balancer, Locust): {OCI['cps']:,} CPS per load balancer "
             f"at {OCI['mean_ms']} ms mean, 120,000 with two (linear scale-out), failures ≤ "
             f"{OCI['fail_pct']}%. Here the whole test (client, proxy, origin) shares one "
             f"{os.cpu_count()}-CPU machine, so absolute CPS are far lower; compare the proxies "
             "with each other, in proxy CPU µs per handshake first.")
    L.append("")
    if CASES:
        L.append("## Results")
        L.append("")
        if BASE_OF and "sluice-base" in targets:
            cells = []
            for c in CASES:
                a, b = summ.get((BASE_OF, c["key"])), summ.get(("sluice-base", c["key"]))
                if a and b and a["cpu_us"][0] and b["cpu_us"][0]:
                    cells.append(f"{case_name(c)} **{a['cpu_us'][0] / b['cpu_us'][0]:.3f}** "
                                 f"({a['cpu_us'][0]:.1f} vs {b['cpu_us'][0]:.1f} µs/hs; per round "
                                 f"{fmt_mmm(paired(runs, BASE_OF, 'sluice-base', c['key'], 'cpu_us'), 3)})")
            L.append(f"**{BASE_OF} ÷ sluice-base, proxy CPU µs per handshake** (medians; below 1 = {BASE_OF} "
                     "needs less): " + ("; ".join(cells) or "— (no figure for one of them)") + ". "
                     f"{BASE_OF}: `{shown(RUN[BASE_OF]['src'])}` ({sluice_describe(RUN[BASE_OF]['path'])}); "
                     f"sluice-base: `{shown(BASELINE)}` ({sluice_describe(RUN['sluice-base']['path'])}).")
            L.append("")
        L.append("CPS = connections per second = handshakes/s = requests/s. **Proxy CPU µs/hs** = "
                 "utime+stime of the proxy's processes ÷ handshakes (the headline: lower = more "
                 "handshakes per core); *at 100% CPU* = 10⁶ ÷ that, the CPS one worker would reach "
                 "if the client kept up. Failure rate = (client socket errors + non-2xx) ÷ attempts "
                 "(completed requests + socket errors), summed over all runs. mean and p99 leave "
                 "out connect and handshake; *cycle ms* = connections ÷ CPS includes them (see "
                 "[What was measured](#what-was-measured)). Client CPU % near 100 means the client was "
                 "the limit; proxy CPU % near 100, the proxy.")
        L.append("")
        L.append("| case | target | runs | CPS median (min–max) | proxy CPU µs/hs median (min–max) | "
                 "at 100% CPU | proxy CPU % | mean ms | p99 ms | cycle ms | failures | failure rate | "
                 "≤ 0.001% | client CPU % |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|---:|")
        for c in CASES:
            for t in targets:
                s = summ.get((t, c["key"]))
                if not s:
                    continue
                cap = 1e6 / s["cpu_us"][0] if s["cpu_us"][0] else None
                ok = "—" if s["fail_pct"] is None else "yes" if s["fail_pct"] <= OCI["fail_pct"] else "**no**"
                fr = "—" if s["fail_pct"] is None else f"{s['fail_pct']:.4f}%"
                L.append(f"| {case_name(c)} | **{t}** | {s['n']}/{s['total']} | "
                         f"{fmt(s['rps'][0])} ({fmt(s['rps'][1])}–{fmt(s['rps'][2])}) | "
                         f"**{fmt(s['cpu_us'][0], 1)}** ({fmt(s['cpu_us'][1], 1)}–{fmt(s['cpu_us'][2], 1)}) | "
                         f"{fmt(cap)} | {fmt(s['cpu_pct'][0])} | {fmt(s['mean'][0], 2)} | {fmt(s['p99'][0], 2)} | "
                         f"{fmt(CONNECTIONS / s['rps'][0] * 1000 if s['rps'][0] else None, 2)} | "
                         f"{s['failures']:,} / {s['attempts']:,} | "
                         f"{fr} | {ok} | "
                         f"{fmt(s['wrk_cpu_pct'][0])} |")
        L.append("")
        if sls and peers:
            L.append("### sluice ÷ peer")
            L.append("")
            L.append("Each sluice build against each peer: median (min–max) of the per-round ratios (the "
                     "runs of one round ran seconds apart; rounds where both runs were clean, all rounds "
                     "if none was). CPS: above 1 = sluice faster; CPU µs/hs: below 1 = sluice cheaper per "
                     "handshake; p99: below 1 = sluice quicker.")
            L.append("")
            L.append("| case | sluice build | " + " | ".join(f"÷ {p} CPS | ÷ {p} CPU µs/hs | ÷ {p} p99"
                                                          for p in peers) + " |")
            L.append("|---|---|" + "---:|" * (3 * len(peers)))
            for c in CASES:
                for s in sls:
                    cells = []
                    for p in peers:
                        cells += [fmt_mmm(paired(runs, s, p, c["key"], m)) for m in ("rps", "cpu_us", "p99")]
                    L.append(f"| {case_name(c)} | **{s}** | " + " | ".join(cells) + " |")
            L.append("")
        pairs_ = [(sls[i], sls[j]) for i in range(len(sls)) for j in range(i + 1, len(sls))]
        if pairs_:
            L.append("### sluice builds side by side")
            L.append("")
            L.append("The same sluice code with different TLS libraries, same rounds: median (min–max) of "
                     "the per-round ratios; CPU µs/hs below 1 = the first build cheaper per handshake.")
            L.append("")
            L.append("| case | " + " | ".join(f"{a} ÷ {b} CPU µs/hs | {a} ÷ {b} CPS" for a, b in pairs_) + " |")
            L.append("|---|" + "---:|" * (2 * len(pairs_)))
            for c in CASES:
                cells = []
                for a, b in pairs_:
                    cells += [fmt_mmm(paired(runs, a, b, c["key"], "cpu_us")),
                              fmt_mmm(paired(runs, a, b, c["key"], "rps"))]
                L.append(f"| {case_name(c)} | " + " | ".join(cells) + " |")
            L.append("")
        # ECDSA vs RSA
        pairs = [(f"rsa-{v}-w1", f"ecdsa-{v}-w1", v) for v in ("1.2", "1.3")
                 if any(c["key"] == f"rsa-{v}-w1" for c in CASES)
                 and any(c["key"] == f"ecdsa-{v}-w1" for c in CASES)]
        if pairs:
            L.append("### ECDSA P-256 vs RSA-2048")
            L.append("")
            L.append("RSA ÷ ECDSA for the same target and TLS version, median (min–max) of the per-round "
                     "ratios: proxy CPU µs per handshake above 1 = ECDSA is cheaper (\"significantly "
                     "reduces the compute per handshake\").")
            L.append("")
            L.append("| target | " + " | ".join(f"TLS {v}: CPU µs/hs RSA ÷ ECDSA | TLS {v}: CPS RSA ÷ ECDSA"
                                                for _, _, v in pairs) + " |")
            L.append("|---|" + "---:|" * (2 * len(pairs)))
            for t in targets:
                cells = []
                for kr, ke, _ in pairs:
                    cells += [fmt_mmm(paired(runs, t, t, kr, "cpu_us", ke)),
                              fmt_mmm(paired(runs, t, t, kr, "rps", ke))]
                L.append(f"| {t} | " + " | ".join(cells) + " |")
            L.append("")
        # scaling
        if SCALE_KEYS:
            L.append("## Scaling from 1 to 2 workers")
            L.append("")
            L.append(f"The same load with sluice `workers: 2`, HAProxy `nbthread 2`, nginx "
                     f"`worker_processes 2` (nginx with `reuseport`, as sluice opens one SO_REUSEPORT "
                     f"socket per worker). With 1 worker the proxy has CPU {PROXY_PIN[-1] if PROXY_PIN else '(any)'} "
                     f"to itself; with 2 it may run on every CPU ({ALL_CPUS}), including the one the client "
                     "and the origin are pinned to. On a 2-CPU machine that second CPU is not free: the "
                     "client (which does a full handshake per request too) and the "
                     "origin already use most of it. So CPS cannot double here: the second worker takes "
                     "CPU away from the client that drives it. The OCI figure scaled linearly because "
                     "each load balancer had its own machines. Proxy CPU µs per handshake should stay "
                     "about flat from 1 to 2 workers (each handshake costs the same wherever it runs); "
                     "a rise means the workers got in each other's way (locks, a shared accept queue) "
                     "or the CPUs ran slower when both were busy.")
            L.append("")
            L.append("| case | target | CPS 1 worker | CPS 2 workers | scale factor (per round) | "
                     "CPU µs/hs 1 worker | CPU µs/hs 2 workers | 2 ÷ 1 CPU µs/hs | proxy CPU % 1 → 2 | "
                     "client CPU % 1 → 2 | mean ms 1 → 2 |")
            L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for k in SCALE_KEYS:
                for t in targets:
                    a, b = summ.get((t, f"{k}-w1")), summ.get((t, f"{k}-w2"))
                    if not a or not b:
                        continue
                    cert, ver = k.split("-")
                    L.append(f"| {CERT_NAME[cert]} TLS {ver} | **{t}** | {fmt(a['rps'][0])} | {fmt(b['rps'][0])} | "
                             f"**{fmt_mmm(paired(runs, t, t, f'{k}-w2', 'rps', f'{k}-w1'))}** | "
                             f"{fmt(a['cpu_us'][0], 1)} | {fmt(b['cpu_us'][0], 1)} | "
                             f"{fmt_mmm(paired(runs, t, t, f'{k}-w2', 'cpu_us', f'{k}-w1'))} | "
                             f"{fmt(a['cpu_pct'][0])} → {fmt(b['cpu_pct'][0])} | "
                             f"{fmt(a['wrk_cpu_pct'][0])} → {fmt(b['wrk_cpu_pct'][0])} | "
                             f"{fmt(a['mean'][0], 2)} → {fmt(b['mean'][0], 2)} |")
            L.append("")
        L.append(chart_line)
        L.append("")
    if RAMP_TARGETS:
        report_ramp(L, steps, RAMP_TARGETS, chart_ramp_line)
    # identity check
    L.append("## PROXY v2 / client identity check")
    L.append("")
    L.append("Before each target's first run of each case (and of the ramp), one HTTPS `GET /` through "
             "the proxy (Python `ssl`, same TLS version): the origin answers with `X-PP-Client: "
             "$proxy_protocol_addr:$proxy_protocol_port` and `X-XFF: $http_x_forwarded_for`. sluice "
             "and HAProxy talk to the origin's `listen … proxy_protocol` port, which refuses a "
             "connection without a PROXY header (a refused request would be a 502: a failure above); "
             "nginx to its plain port. **OSS nginx's http proxy cannot send the PROXY protocol to an "
             "upstream** (its stream module can, v1 only, and then it is not an HTTP proxy): it is "
             "measured with `X-Forwarded-For` and no upstream keepalive, so that, like the other "
             "two, it opens one backend connection per client connection, but it writes no PROXY "
             "header.")
    L.append("")
    L.append("| target | case | result | negotiated | what the origin saw |")
    L.append("|---|---|---|---|---|")
    for (t, k), (err, desc, neg) in idents.items():
        L.append(f"| {t} | {k} | {'**FAILED**: ' + err if err else 'ok'} | {neg} | {desc.replace('|', '/')} |")
    L.append("")
    report_list(L, "Problems seen", LEFT_OUT + notes)
    report_list(L, "Proxy and origin log lines above info level (and sluice's TLS failures)", loglines)
    if runs:
        L.append("## Every run (in the order they ran)")
        L.append("")
        L.append("| round | case | target | CPS | requests | mean ms | p50 ms | p99 ms | proxy CPU µs/hs | "
                 "proxy CPU % | origin CPU µs/req | client CPU % | others' CPU % | socket errors | non-2xx | raw |")
        L.append("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in runs:
            L.append(f"| {r['round']} | {r['case']} | {r['label']} | {fmt(r['rps'])} | {r['requests']} | "
                     f"{fmt(r['mean'], 2)} | {fmt(r['p50'], 2)} | {fmt(r['p99'], 2)} | {fmt(r['cpu_us'], 1)} | "
                     f"{fmt(r['cpu_pct'])} | {fmt(r['backend_cpu_us'], 1)} | {fmt(r['wrk_cpu_pct'])} | "
                     f"{fmt(r['other_pct'])}{' ⚠' if r['noisy'] else ''} | {r['sock_errors']} | {r['non2xx']} | "
                     f"[{os.path.basename(r['raw'])}](churn/{r['raw']}) |")
        L.append("")
    L.append("## What was measured")
    L.append("")
    if CASES:
        L.append("- Cases: each round runs every case, and within a case every target once, the target "
                 "order rotating by one each round. Each target is started fresh for its run with only "
                 "that case's certificate and `min_version = max_version` = the case's version, checked "
                 f"(identity probe, first run of each case), warmed up ({WARMUP} s of load, unmeasured), "
                 "measured, stopped (SIGTERM). The origin stays up throughout.")
    L.append("- Servers: tickets and session caches off everywhere (sluice `tickets: off`, "
             "`session_cache: 0`; HAProxy `no-tls-tickets`, `tune.ssl.cachesize 0`; nginx "
             "`ssl_session_tickets off; ssl_session_cache off;`), so no client can resume: every "
             "connection is a full handshake (bench/tls.py checks this with a request log of the "
             "resumed flag). Ciphers, groups and signature algorithms are each server's defaults. "
             f"Listen backlog {BACKLOG} on every proxy.")
    L.append("- sluice builds: the same source built against each TLS library (`make all` for "
             "AWS-LC, the default, `make TLS=openssl all` for OpenSSL 3); each target runs a copy "
             "of its binary (churn/bin/), so a rebuild during the run cannot swap it; the same "
             "config for each, but for its name.")
    L.append("- Proxy CPU: utime+stime from `/proc/PID/stat` over the proxy's process tree (sluice "
             "and nginx: master + workers; HAProxy: one process), read just before and after the "
             f"measured run, ÷ requests completed. Clock tick = 1/{CLK_TCK} s.")
    if CASES:
        L.append("- Times (cases): the client (tlsload or wrk alike) times a request from its write to "
                 "the end of its response, once the "
                 "connection is up and the handshake done, so *mean* and *p99* "
                 "leave out the TCP connect and the TLS handshake. *cycle ms* adds "
                 "them back on average: each of the N connections the client keeps busy goes through connect, "
                 "handshake, request, response and close one after the other, so by Little's law a "
                 "cycle takes N ÷ CPS on average.")
    if RAMP_TARGETS:
        L.append(f"- Ramp: {'tlsload `-R`' if RAMP_CLIENT == 'tlsload' else 'h2load (`--h1 -t1`) in rate mode'}, "
                 f"pinned with the cases' client, {RAMP_SECONDS} s of "
                 "offered load per step; CPU read over the whole client run. Steps run target by target, "
                 "the order alternating each step, so both proxies meet the machine in the same state.")
    L.append(noise_note(NOISE_PCT, ATTEMPTS, QUIET_BUDGET))
    L.append("")
    L.append("## Commands (exact)")
    L.append("")
    L.append("```sh")
    L.append("# certificates (in churn/certs/)")
    L.extend(cert_cmds)
    L.append(f"# origin (started once)\n{origin_cmd}")
    for k, v in commands.items():
        L.append(f"# {k}\n{v}")
    if CASES:
        L.append(f"# load (warm-up uses -d{WARMUP}s)")
        L.append(" ".join(load_cmd("PORT", DURATION, {"ver": "VERSION"})))
    if RAMP_TARGETS:
        if RAMP_CLIENT == "tlsload":
            L.append(f"# ramp, one step: CPS connections a second, N = CPS x {RAMP_SECONDS} s in all")
            L.append(" ".join(tlsload_ramp_cmd("PORT", "CPS", "N")))
        else:
            L.append(f"# ramp, one step: R connections every P ms, N = offered CPS x {RAMP_SECONDS} s in all")
            L.append(" ".join(h2load_cmd("PORT", "R", "P", "N", "LOG.tsv")))
    L.append("```")
    L.append("")
    L.append("Ports are picked free at run time. Every config used is in [churn/configs/](churn/configs/); "
             "the ECDSA TLS 1.3 ones (others differ in the certificate, the version and the "
             "worker count; the sluice builds' only in their name) and the origin's:")
    L.append("")
    report_end(L, outdir, "churn", confs, facts,
               "`make bench-churn` (or `QUICK=1 make bench-churn`); see docs/bench/churn.md.")
    return summ


def facts_software():
    sw = [(t, f"{shown(x['src'])} (run as a copy in churn/bin/): {sluice_describe(x['path'])}, TLS {x['tls']}")
          for t, x in RUN.items()] + peer_versions(haproxy_ssl=True)
    if RAMP_TARGETS and RAMP_CLIENT == "h2load":
        sw.append(("h2load", cmd_out(["h2load", "--version"])))
    return sw + [("openssl", cmd_out(["openssl", "version"])),
                 ("python3 ssl", f"{sys.version.split()[0]}, {ssl.OPENSSL_VERSION}")]


# ---------------------------------------------------------------- main

def main():
    global CLIENT
    if CASES and CLIENT == "tlsload" and not benchlib.have_tlsload():
        LEFT_OUT.append(f"No {os.path.relpath(benchlib.TLSLOAD, ROOT)} (make build/tlsload): wrk drives the "
                        "cases, and on two cores it saturates before the proxies.")
        CLIENT = "wrk"
    global RAMP_CLIENT
    if RAMP_TARGETS and RAMP_CLIENT == "tlsload" and not benchlib.have_tlsload():
        LEFT_OUT.append(f"No {os.path.relpath(benchlib.TLSLOAD, ROOT)} (make build/tlsload): h2load drives the "
                        "ramp, and on two cores it saturates before the proxies.")
        RAMP_CLIENT = "h2load"
    tools = (("haproxy", "nginx", "openssl") + (("wrk",) if CASES and CLIENT == "wrk" else ())
             + (("h2load",) if RAMP_TARGETS and RAMP_CLIENT == "h2load" else ()))
    need_tools(PROG, tools + (("taskset",) if PROXY_PIN else ()), "bench/churn.sh")
    started, outdir, d = results_dirs("churn")
    t_start = time.monotonic()
    for t in dict.fromkeys((TARGETS if CASES else []) + RAMP_TARGETS):
        if t in BINS:
            src, _, _ = BINS[t]
            dst, lib, tls_line = copy_sluice(src, d, t)
            RUN[t] = {"path": dst, "src": src, "tls": tls_line or "?", "lib": lib}
    log(f"results in {outdir}")
    for n in LEFT_OUT:
        log(n)
    per = DURATION + WARMUP + 0.8
    if CASES:
        log(f"cases: {ROUNDS} rounds x {len(CASES)} cases x {len(TARGETS)} targets x ~{per:.1f} s = about "
            f"{ROUNDS * len(CASES) * len(TARGETS) * per:.0f} s")
    if RAMP_TARGETS:
        log(f"ramp: {', '.join(RAMP_TARGETS)}, up to {len(RAMP_STEPS)} steps x ~{RAMP_SECONDS + 1.5:.1f} s each "
            "(each stops one step past its knee)")
    log(PIN_TEXT)
    facts = machine_facts(facts_software())
    certs, cert_cmds = make_certs(d)
    origin, ports, origin_cmd, origin_conf = start_origin(d)
    err, _ = probe(ports["plain"], "none", tries=1, size=BODY_SIZE)
    if err:
        sys.exit(f"{PROG}: origin check failed: {err}")
    quiet = Quiet(NOISE_PCT, QUIET_BUDGET, ATTEMPTS, log=log)
    runs, steps, notes, loglines, commands, confs, idents = [], [], [], [], {}, {}, {}
    confs["origin"] = origin_conf
    origin_err = os.path.join(d, "origin.error.log")
    first_sluice = next((t for t in TARGETS + RAMP_TARGETS if kind_of(t) == "sluice"), None)
    shown_keys = ("ecdsa-1.3-w1", "ecdsa-1.3-w2") if CASES else (RAMP["key"],)

    def with_proxy(tgt, c, what, fn):
        """Start TGT for case C, check identity once per (target, case), run
        fn(port, proxy), stop it; collect its log lines. fn's result (a dict
        with problems) or None if the proxy did not start."""
        errlog = proxy_errlog(kind_of(tgt), d, name=tgt)
        pos, opos = fsize(errlog), fsize(origin_err)
        proxy, port, cmd, conf = start_proxy(tgt, d, ports, c, certs)
        commands.setdefault(f"{tgt}, {c['workers']} worker(s)", cmd.replace(conf, "CONFIG"))
        if c["key"] in shown_keys and \
                (kind_of(tgt) != "sluice" or tgt in (first_sluice, "sluice-base")):
            confs.setdefault(f"{tgt}, {c['key']}", conf)
        if proxy is None:
            notes.append(f"{what}, {tgt}: did not start; log: {read_tail(errlog, pos).strip()[-500:]!r}")
            log(notes[-1])
            return None
        if (tgt, c["key"]) not in idents:
            idents[(tgt, c["key"])] = check_identity(tgt, port, c)
            if idents[(tgt, c["key"])][0]:
                notes.append(f"{what}, {tgt}: {idents[(tgt, c['key'])][0]}")
                log(notes[-1])
        r = fn(port, proxy)
        bad = stop_tls_proxy(kind_of(tgt), proxy, errlog, pos, r)
        obad = [ln for ln in read_tail(origin_err, opos).splitlines() if ln.strip()]
        if any("broken header" in ln for ln in obad):
            r["problems"].append("the origin logged connections without a valid PROXY header")
        for ln in bad[:10]:
            loglines.append(f"{what}, {tgt}, {os.path.basename(errlog)}: {ln.strip()}")
        for ln in obad[:5]:
            loglines.append(f"{what}, {tgt}, origin.error.log: {ln.strip()}")
        for pr in r["problems"]:
            notes.append(f"{what}, {tgt}: {pr}")
        return r

    def one_run(tgt, c, rnd):
        what = f"round {rnd + 1}, {c['key']}"
        r = with_proxy(tgt, c, what, lambda port, proxy: quiet.run_if_budget(
            lambda: measure(tgt, c, rnd, d, port, proxy, origin), f"{what}, {tgt}", DURATION, notes,
            lambda x: f"{fmt(x['rps'])} CPS, {fmt(x['cpu_us'], 1)} µs/hs"))
        if r is None:
            return
        runs.append(r)
        log(f"r{rnd + 1} {c['key']:12} {tgt:16} {r['rps']:>8,.0f} CPS  cpu {fmt(r['cpu_us'], 1):>6} us/hs "
            f"({fmt(r['cpu_pct'])}%)  {CLIENT} {fmt(r['wrk_cpu_pct'])}%  mean {fmt(r['mean'], 2)} ms  "
            f"p99 {fmt(r['p99'], 2)} ms  fail {r['failures']}"
            + (f"  PROBLEMS: {r['problems']}" if r["problems"] else ""))

    for rnd in range(ROUNDS if CASES else 0):
        k = rnd % len(TARGETS)
        order = TARGETS[k:] + TARGETS[:k]
        for c in CASES:
            for tgt in order:
                one_run(tgt, c, rnd)

    # The ramp: every target climbs the same steps, in alternating order,
    # until one step past its own knee. A knee condition at one step that
    # the next step does not meet was noise: the climb goes on.
    left = {t: None for t in RAMP_TARGETS}      # None: no knee yet; else steps still to run
    for i, cps in enumerate(RAMP_STEPS):
        todo = [t for t in RAMP_TARGETS if left[t] is None or left[t] > 0]
        if not todo:
            break
        k = i % len(todo)
        for tgt in todo[k:] + todo[:k]:
            what = f"ramp {cps} CPS"
            r = with_proxy(tgt, RAMP, what, lambda port, proxy: quiet.run_if_budget(
                lambda: measure_ramp(tgt, cps, d, port, proxy, origin), f"{what}, {tgt}", 0, notes,
                lambda x: f"{fmt(x['achieved'])} CPS achieved"))
            if r is None:
                left[tgt] = 0
                continue
            r["conn_mean"] = r.get("conn_mean")
            steps.append(r)
            if left[tgt] is not None:
                left[tgt] = None if not r["knee"] else left[tgt] - 1
            elif r["knee"]:
                left[tgt] = 1
            log(f"ramp {tgt:16} offered {r['offered']:>7,.0f}  achieved {fmt(r['achieved']):>7}  "
                f"cpu {fmt(r['cpu_pct'])}%  load {fmt(r['load_cpu_pct'])}%  req mean {fmt(r['mean'], 2)} "
                f"p99 {fmt(r['p99'], 2)} ms  connect mean {fmt(r.get('conn_mean'), 2)} ms  errors {r['errors']}"
                + (f"  KNEE: {'; '.join(r['knee'])}" if r["knee"] else ""))

    if origin.poll() is not None:
        notes.append(f"the origin exited during the benchmark (status {origin.returncode})")
    stop(origin)
    elapsed = time.monotonic() - t_start
    with open(os.path.join(d, "runs.json"), "w") as f:
        json.dump({"runs": runs, "ramp": steps, "identity": {f"{t}|{k}": v for (t, k), v in idents.items()},
                   "left_out": LEFT_OUT}, f, indent=1, default=str)
    summ = write_report(outdir, d, runs, steps, TARGETS, idents, facts, commands, confs, cert_cmds, origin_cmd,
                        notes, loglines, started.strftime("%Y-%m-%d %H:%M:%S"), elapsed)
    refresh_latest(RESULTS, outdir, "churn", ["churn.md", "churn.png", "churn-ramp.png"])
    show_report(outdir, "churn", ["## PROXY v2"], log)
    log(f"elapsed {time.monotonic() - t_start:.0f} s")
    missing = [t for t in (TARGETS if CASES else [])
               if not any(s and s["rps"][0] and s["cpu_us"][0] for (tt, _), s in summ.items() if tt == t)]
    missing += [f"{t} (ramp)" for t in RAMP_TARGETS if not any(s["label"] == t and s["requests"] for s in steps)]
    return exit_status(missing, log)


if __name__ == "__main__":
    run_main(main, PROG)
