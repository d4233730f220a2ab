#!/usr/bin/env python3
"""Persistence and routing cost: CPU instructions per request (callgrind).

What does content routing (N path-prefix routes the request does not match)
and each kind of session persistence (cookie, jvm_route, weblogic, app_cookie,
source) add to the CPU cost of one keepalive request in one sluice worker, and
what do HAProxy's equivalents (use_backend through a map or rules, cookie
insert, use-server on the session cookie, stick tables, hash balancing) add to
HAProxy's, measured the same way in the same run?

Timing is useless for this on a shared 2-core machine (a few hundred
nanoseconds against a noise of microseconds), so the proxy runs under
valgrind's callgrind, which counts the instructions it executes: a
deterministic figure. For every case the proxy is started under callgrind,
sent N requests on one keepalive connection, and stopped; its instruction
total is read from callgrind's output (sluice: the worker, the largest of its
processes' totals; HAProxy: its one process). Done for N = N1 and N = N2:

    instructions per request = (total(N2) - total(N1)) / (N2 - N1)

which cancels start-up, configuration and shutdown. Every case carries the
same request: a Firefox page load's headers (670 bytes) whose Cookie
header has one slot of fixed width holding the case's key (SLUICE_SERVER=...,
JSESSIONID=..., ...), or a neutral cookie, padded, so that the request's length
is the same in every case and only the configuration differs.

To turn instructions into time, each proxy's base configuration is loaded
by `wrk -c50` (the same request; the proxy saturated), once under callgrind
(instructions per request, from two durations) and natively (user CPU µs per
request, utime from /proc/PID/stat): their ratio is the proxy's instructions
per user-CPU µs on this machine. callgrind counts user-space instructions
only, and routing and persistence make no system calls of their own.

Usage: sh bench/persist.sh  (or `make bench-persist`). Environment knobs:
  QUICK=1          a few cases (base, 100 routes, cookie hit, source; HAProxy's
                   peers), N1=100, N2=300, short calibration (CAL_CG=2,4, one
                   2 s native run)
  N1, N2           requests per callgrind run (1000, 3000)
  ROUNDS=N         callgrind rounds per case (2; the counts are deterministic,
                   the second round shows it)
  CASES=a,b        subset of the cases (names in the report; default all)
  TARGETS=a,b      sluice,haproxy (default both)
  CALIBRATE=N      seconds per native calibration run (10; 0 = no
                   calibration, then the report has instructions only)
  CAL_ROUNDS=N     native calibration runs per proxy (3); the median is used
  CAL_CONNECTIONS=N  wrk connections for the calibration (50)
  CAL_CG=a,b       seconds of the two calibration runs under callgrind (3,9)
  PIN=0            do not pin the calibration runs with taskset
  COOKIES=N        N more bytes (in 40-byte cookies) in the Cookie header, before
                   the case's cookie (0): how the cost grows with the header
  NOISE_PCT=N      others' CPU (% of a CPU) making a native calibration run
                   noisy (25); QUIET_BUDGET=N: seconds in all for waiting for
                   quiet and re-running noisy ones (60), as bench/core.py
  KEEP_CG=1        keep every callgrind output file (default: round 1's, gzipped)
  SLUICE=path      the sluice binary (BUILD/sluice); BUILD=dir (build)
  RESULTS=dir      results root (bench/results)

Output: RESULTS/<UTC timestamp>/persist.md, persist.png, persist.json and
persist/ (configs, callgrind outputs, logs); RESULTS/latest/ gets a copy.
Every process started here is stopped by its PID on exit.
"""
import functools
import glob
import gzip
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time

import benchlib
from benchlib import (BUILD, CLK_TCK, HAPROXY_DEFAULTS, PIN, QUICK, RESULTS, SLUICE_BIN, cmd_out, fmt,
                      free_port, haproxy_version, machine_facts, need_tools, parse_wrk, pinning, refresh_latest,
                      report_end, report_list, results_dirs, run_main, show_report, sluice_describe, start,
                      start_demo_backend, stop, system_busy_ticks, wait_children, wait_port, write)

PROG = "bench/persist.py"
env_int = functools.partial(benchlib.env_int, prog=PROG)

N1 = env_int("N1", 100 if QUICK else 1000, 1)
N2 = env_int("N2", 300 if QUICK else 3000, 2)
ROUNDS = env_int("ROUNDS", 2, 1)
CALIBRATE = env_int("CALIBRATE", 2 if QUICK else 10, 0)
CAL_ROUNDS = env_int("CAL_ROUNDS", 1 if QUICK else 3, 1)
CAL_CONNECTIONS = env_int("CAL_CONNECTIONS", 50, 1)
CAL_CG = benchlib.env_list("CAL_CG", "2,4" if QUICK else "3,9", int, prog=PROG)
if len(CAL_CG) != 2 or not 0 < CAL_CG[0] < CAL_CG[1]:
    sys.exit(f"{PROG}: CAL_CG must be two durations in seconds, the first shorter (3,9)")
KEEP_CG = os.environ.get("KEEP_CG", "") not in ("", "0")
COOKIES = env_int("COOKIES", 0, 0)     # bytes of other cookies before the case's slot
TARGETS = [t for t in os.environ.get("TARGETS", "sluice,haproxy").split(",") if t]
if N2 <= N1:
    sys.exit(f"{PROG}: N2 must be larger than N1")
for t in TARGETS:
    if t not in ("sluice", "haproxy"):
        sys.exit(f"{PROG}: unknown target {t!r} in TARGETS (sluice, haproxy)")

POOL = 8                 # max_connections / maxconn per server
SLOT = 96                # width of the Cookie header's case slot
TARGET_US = 0.5          # the bar: each feature adds < 0.5 µs per request

PROXY_PIN, LOAD_PIN, PIN_TEXT = pinning(PIN)
NOISE_PCT = env_int("NOISE_PCT", 25)          # others' CPU (% of one CPU) that makes a calibration run noisy
QUIET_BUDGET = env_int("QUIET_BUDGET", 60)    # seconds in all for waiting/re-running noisy calibration runs


def log(msg):
    print(f"[persist] {msg}", flush=True)


QUIET = benchlib.Quiet(NOISE_PCT, QUIET_BUDGET, 3, log=log)


# ---------------------------------------------------------------- the request

# Session keys (fixed, so that every run sends the same bytes).
TOMCAT_ID = "4F2A9C01B7D3E58612AB34CD56EF7890"                  # 32 hex digits, as Tomcat's
WLS_ID = "Qm9Xc2V0aW9uSWRGb3JXZWJMb2dpY0JlbmNoMDEyMzQ1Njc4OWFi"  # 52 characters
APP_ID = "7c1e5d2a9b8f4630a1d2e3f405162738"
NEUTRAL = "lang=en"


def extra_cookies():
    """COOKIES bytes (rounded up to 40) of other cookies, `_cNN=vvv...; `,
    as analytics and preference cookies that come before the session's."""
    return "".join(f"_c{i:02d}={'v' * 33}; " for i in range(-(-COOKIES // 40)))


def cookie_slot(key):
    """The case's cookie and a padding cookie, SLOT characters in all."""
    pad = SLOT - len(key) - len("; pad=")
    if pad < 1:
        raise ValueError(f"cookie {key!r} does not fit the slot")
    return f"{key}; pad={'x' * pad}"


def request(key=NEUTRAL, path="/index.html"):
    """A Firefox page load (as bench/core.py's REQUEST=browser), its Cookie
    header ending with the case's slot."""
    return (f"GET {path} HTTP/1.1\r\n"
            "Host: www.example.com\r\n"
            "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n"
            "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8\r\n"
            "Accept-Language: en-US,en;q=0.5\r\n"
            "Accept-Encoding: gzip, deflate, br, zstd\r\n"
            "Cookie: session=3f9a1c77e2b04d6c; theme=dark; _ga=GA1.2.1234567890.1700000000; "
            f"{extra_cookies()}{cookie_slot(key)}\r\n"
            "Referer: https://www.example.com/\r\n"
            "Connection: keep-alive\r\n"
            "Upgrade-Insecure-Requests: 1\r\n"
            "Sec-Fetch-Dest: document\r\n"
            "Sec-Fetch-Mode: navigate\r\n"
            "Sec-Fetch-Site: same-origin\r\n"
            "Priority: u=0, i\r\n\r\n").encode()


REQ_LEN = len(request())


class Client:
    """One keepalive connection; send() returns (status, head) of the
    response, whose body it reads by Content-Length."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, raw):
        self.s.sendall(raw)
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i >= 0:
                head = self.buf[:i].decode("latin-1")
                m = re.search(r"(?im)^content-length:\s*(\d+)", head)
                end = i + 4 + (int(m.group(1)) if m else 0)
                if len(self.buf) >= end:
                    self.buf = self.buf[end:]
                    return int(head.split(" ", 2)[1]), head
            b = self.s.recv(65536)
            if not b:
                raise ConnectionError("connection closed by the proxy")
            self.buf += b

    def close(self):
        self.s.close()


def header_values(head, name):
    return re.findall(rf"(?im)^{re.escape(name)}:\s*(.*?)\s*$", head)


# ---------------------------------------------------------------- cases

class Case:
    """One configuration of one proxy. key: the cookie in the request's
    slot (a callable of the run's state when primed); expect_conns: how many
    backend connections its requests should use (2: round robin over both
    servers; 1: every request sticks to one); expect_set_cookie: every
    response carries the proxy's Set-Cookie (True) or none does (False)."""

    def __init__(self, name, target, row, what, conf, key=NEUTRAL, expect_conns=2, expect_set_cookie=False,
                 prime=None, note=""):
        self.name, self.target, self.row, self.what = name, target, row, what
        self.conf, self.key, self.prime, self.note = conf, key, prime, note
        self.expect_conns, self.expect_set_cookie = expect_conns, expect_set_cookie


def sluice_yaml(d, port, bport, routes=0, persistence="", s1="", s2="", bport2=None):
    r = ("    routes:\n" + "".join(f"      - {{name: r{i}, match: {{path: {{prefix: /app{i}}}}}, backend: app}}\n"
                                   for i in range(routes))) if routes else ""
    p = "    persistence:\n" + "".join(f"      {ln}\n" for ln in persistence.split("\n")) if persistence else ""
    b2 = bport2 or bport
    return f"""workers: 1
error_log: {d}/sluice.error.log
user: root
access_log: off
timeouts:
  drain: 0
listeners:
  - name: front
    address: 127.0.0.1:{port}
    backend: app
{r}backends:
  - name: app
    idle_max: {POOL}
{p}    servers:
      - name: s1
        address: 127.0.0.1:{bport}
        max_connections: {POOL}
{s1}      - name: s2
        address: 127.0.0.1:{b2}
        max_connections: {POOL}
{s2}"""


def haproxy_cfg(d, port, bport, frontend="", backend="", s1="", s2=""):
    return f"""global
    nbthread 1
    maxconn 4096
    pidfile {d}/haproxy.pid

{HAPROXY_DEFAULTS}
frontend fe
    bind 127.0.0.1:{port}
{frontend}    default_backend be

backend be
{backend}    server s1 127.0.0.1:{bport} maxconn {POOL}{s1}
    server s2 127.0.0.1:{bport} maxconn {POOL}{s2}
"""


def routes_map(d, n):
    return write(os.path.join(d, f"routes{n}.map"), "".join(f"/app{i}/ be\n" for i in range(n)))


def prime_cookie(st):
    """sluice cookie: one request without it on its own connection; the
    token of the server that answered, from its Set-Cookie."""
    c = Client(st["port"])
    status, head = c.send(request())
    c.close()
    for v in header_values(head, "Set-Cookie"):
        m = re.match(r"SLUICE_SERVER=([^;]+)", v)
        if m:
            return f"SLUICE_SERVER={m.group(1)}"
    raise RuntimeError(f"no SLUICE_SERVER cookie in the response ({status})")


def prime_app_cookie(st):
    """app_cookie hit: the demo backend sets no cookie, so s1's port is first
    served by a stand-in that answers one request with Set-Cookie:
    APPSESSION=APP_ID (sluice learns APP_ID -> that server), then the stand-in
    closes and a demo_backend takes the same port for the measured requests."""
    st["standin"].serve_one()
    c = Client(st["port"])
    status, head = c.send(request(path="/login"))
    c.close()
    st["standin"].close()
    if status != 200 or not any(v.startswith("APPSESSION=") for v in header_values(head, "Set-Cookie")):
        raise RuntimeError(f"priming app_cookie: {status}, no Set-Cookie: APPSESSION")
    st["start_own_backend"]()
    return f"APPSESSION={APP_ID}"


class StandIn:
    """A listener on a port of its own that answers requests with
    Set-Cookie: APPSESSION=APP_ID and Connection: close."""

    def __init__(self):
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(8)
        self.port = self.ls.getsockname()[1]
        self.t = None

    def serve_one(self):
        def run():
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            c.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                b = c.recv(65536)
                if not b:
                    break
                data += b
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\n"
                      b"Set-Cookie: APPSESSION=" + APP_ID.encode() + b"; Path=/; HttpOnly\r\n"
                      b"Connection: close\r\n\r\nok\n")
            c.close()
        self.t = threading.Thread(target=run, daemon=True)
        self.t.start()

    def close(self):
        if self.t:
            self.t.join(30)
        self.ls.close()


def all_cases():
    S, H = "sluice", "haproxy"
    wl = {"s1": '        jvmid: "-1111"\n', "s2": '        jvmid: "2222"\n'}
    cases = [
        Case("base", S, "base", "no routes, no persistence, round robin over 2 servers",
             lambda d, p, b: sluice_yaml(d, p, b)),
    ]
    for n in (1, 100, 1000):
        cases.append(Case(f"routes{n}", S, f"routes{n}",
                          f"{n} route{'s' if n > 1 else ''} `{{match: {{path: {{prefix: /appI}}}}}}`, none matching",
                          lambda d, p, b, n=n: sluice_yaml(d, p, b, routes=n)))
    cases += [
        Case("cookie-hit", S, "cookie-hit", "`persistence: {type: cookie}`; the request carries "
             "`SLUICE_SERVER=<token>` (read from a first response)",
             lambda d, p, b: sluice_yaml(d, p, b, persistence="type: cookie"),
             key=None, prime=prime_cookie, expect_conns=1),
        Case("cookie-miss", S, "cookie-miss", "`persistence: {type: cookie}`; no cookie in the request: "
             "a `Set-Cookie` added to every response",
             lambda d, p, b: sluice_yaml(d, p, b, persistence="type: cookie"), expect_set_cookie=True),
        Case("jvm_route", S, "jvm_route", f"`type: jvm_route`, servers' `route` s1/s2; "
             f"`JSESSIONID=<32 hex>.s1`",
             lambda d, p, b: sluice_yaml(d, p, b, persistence="type: jvm_route", s1="        route: s1\n",
                                         s2="        route: s2\n"),
             key=f"JSESSIONID={TOMCAT_ID}.s1", expect_conns=1),
        Case("weblogic", S, "weblogic", "`type: weblogic`, `jvmid` seeds -1111/2222; "
             "`JSESSIONID=<52 chars>!-1111!2222`",
             lambda d, p, b: sluice_yaml(d, p, b, persistence="type: weblogic", **wl),
             key=f"JSESSIONID={WLS_ID}!-1111!2222", expect_conns=1),
        Case("app_cookie-miss", S, "app_cookie-miss", "`type: app_cookie, cookie: APPSESSION`; the request's "
             "`APPSESSION=<32 hex>` was never learned (the demo backend sets no cookie): a table "
             "lookup that misses, then round robin",
             lambda d, p, b: sluice_yaml(d, p, b, persistence="type: app_cookie\ncookie: APPSESSION"),
             key=f"APPSESSION={APP_ID}"),
        Case("app_cookie-hit", S, "app_cookie-hit", "`type: app_cookie, cookie: APPSESSION`; the value "
             "learned first from a stand-in's `Set-Cookie` on s1's port (then a demo_backend there): "
             "a table lookup that hits",
             lambda d, p, b: sluice_yaml(d, p, b, persistence="type: app_cookie\ncookie: APPSESSION"),
             key=None, prime=prime_app_cookie, expect_conns=1),
        Case("source", S, "source", "`type: source` (rendezvous hashing of the client address)",
             lambda d, p, b: sluice_yaml(d, p, b, persistence="type: source"), expect_conns=1),
        # ---- HAProxy
        Case("h-base", H, "base", "no rules, `balance roundrobin` over 2 servers",
             lambda d, p, b: haproxy_cfg(d, p, b)),
    ]
    for n in (1, 100, 1000):
        cases.append(Case(f"h-map{n}", H, f"routes{n}",
                          f"`use_backend %[path,map_beg(routes{n}.map,be)]`, {n} prefix{'es' if n > 1 else ''} "
                          "`/appI/`, none matching",
                          lambda d, p, b, n=n: haproxy_cfg(
                              d, p, b, frontend=f"    use_backend %[path,map_beg({routes_map(d, n)},be)]\n")))
        cases.append(Case(f"h-rules{n}", H, f"routes{n}",
                          f"{n} `use_backend be if {{ path_beg /appI/ }} || {{ path /appI }}` rule{'s' if n > 1 else ''}, "
                          "none matching",
                          lambda d, p, b, n=n: haproxy_cfg(
                              d, p, b, frontend="".join(f"    use_backend be if {{ path_beg /app{i}/ }} || "
                                                        f"{{ path /app{i} }}\n" for i in range(n)))))
    ck = "    cookie SRV insert indirect nocache\n"
    cases += [
        Case("h-cookie-hit", H, "cookie-hit", "`cookie SRV insert indirect nocache`, servers `cookie s1`/`s2`; "
             "the request carries `SRV=s1`",
             lambda d, p, b: haproxy_cfg(d, p, b, backend=ck, s1=" cookie s1", s2=" cookie s2"),
             key="SRV=s1", expect_conns=1),
        Case("h-cookie-miss", H, "cookie-miss", "the same, no `SRV` cookie in the request: "
             "`Set-Cookie` (and `Cache-Control: private`) added to every response",
             lambda d, p, b: haproxy_cfg(d, p, b, backend=ck, s1=" cookie s1", s2=" cookie s2"),
             expect_set_cookie=True),
        Case("h-use-server", H, "jvm_route", "`use-server s1 if { req.cook(JSESSIONID) -m end .s1 }` "
             "(and s2); `JSESSIONID=<32 hex>.s1`",
             lambda d, p, b: haproxy_cfg(d, p, b, backend="".join(
                 f"    use-server s{i} if {{ req.cook(JSESSIONID) -m end .s{i} }}\n" for i in (1, 2))),
             key=f"JSESSIONID={TOMCAT_ID}.s1", expect_conns=1),
        Case("h-stick-cookie", H, "app_cookie-hit", "`stick-table type string len 64 size 1m`, "
             "`stick on req.cook(JSESSIONID)`, `stick store-response res.cook(JSESSIONID)`; "
             "`JSESSIONID=<32 hex>.s1` (stored by the first request, a hit after)",
             lambda d, p, b: haproxy_cfg(d, p, b, backend="    stick-table type string len 64 size 1m\n"
                                         "    stick on req.cook(JSESSIONID)\n"
                                         "    stick store-response res.cook(JSESSIONID)\n"),
             key=f"JSESSIONID={TOMCAT_ID}.s1", expect_conns=1),
        Case("h-hash-cookie", H, "app_cookie-hit", "`balance hash req.cook(JSESSIONID)`; "
             "`JSESSIONID=<32 hex>.s1`",
             lambda d, p, b: haproxy_cfg(d, p, b, backend="    balance hash req.cook(JSESSIONID)\n"),
             key=f"JSESSIONID={TOMCAT_ID}.s1", expect_conns=1),
        Case("h-stick-src", H, "source", "`stick-table type ip size 1m`, `stick on src`",
             lambda d, p, b: haproxy_cfg(d, p, b, backend="    stick-table type ip size 1m\n    stick on src\n"),
             expect_conns=1),
        Case("h-balance-source", H, "source", "`balance source`, `hash-type consistent`",
             lambda d, p, b: haproxy_cfg(d, p, b, backend="    balance source\n    hash-type consistent\n"),
             expect_conns=1),
    ]
    return cases


ALL_CASES = all_cases()
QUICK_CASES = ("base", "routes100", "cookie-hit", "source", "h-base", "h-map100", "h-cookie-hit", "h-stick-src")
ROW_SHORT = {"routes1": "1 route", "routes100": "100 routes", "routes1000": "1000 routes",
             "cookie-hit": "cookie, hit", "cookie-miss": "cookie, miss", "jvm_route": "jvm_route",
             "weblogic": "weblogic", "app_cookie-miss": "app cookie,\nmiss", "app_cookie-hit": "app cookie,\nhit",
             "source": "source"}
ROWS = [  # the summary table's rows: (row key, what both proxies do)
    ("base", "nothing (the base)"),
    ("routes1", "1 path-prefix route, not matched"),
    ("routes100", "100 path-prefix routes, none matched"),
    ("routes1000", "1000 path-prefix routes, none matched"),
    ("cookie-hit", "inserted server cookie, request has it"),
    ("cookie-miss", "inserted server cookie, request without it (Set-Cookie each response)"),
    ("jvm_route", "Tomcat `JSESSIONID=<id>.<jvmRoute>`"),
    ("weblogic", "WebLogic `JSESSIONID=<id>!<primary>!<secondary>`"),
    ("app_cookie-miss", "application cookie, value not known"),
    ("app_cookie-hit", "application cookie, value known"),
    ("source", "client address"),
]


def selected_cases():
    names = [c.name for c in ALL_CASES]
    want = os.environ.get("CASES", "")
    if want:
        sel = [x for x in want.split(",") if x]
        for x in sel:
            if x not in names:
                sys.exit(f"{PROG}: unknown case {x!r} in CASES (one of {', '.join(names)})")
    else:
        sel = list(QUICK_CASES) if QUICK else names
    out = [c for c in ALL_CASES if c.name in sel and c.target in TARGETS]
    # Every target measured needs its base, for the differences.
    for t in TARGETS:
        base = "base" if t == "sluice" else "h-base"
        if any(c.target == t for c in out) and base not in [c.name for c in out]:
            out.insert(0, next(c for c in ALL_CASES if c.name == base))
    return out


# ---------------------------------------------------------------- running a case

def check_config(case, conf, bin_):
    """sluice -t -c / haproxy -c -f: None if the config is valid, else the output."""
    cmd = [bin_, "-t", "-c", conf] if case.target == "sluice" else ["haproxy", "-c", "-q", "-f", conf]
    cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    return None if cp.returncode == 0 else f"`{' '.join(cmd)}` -> {cp.returncode}: {cp.stdout.strip()[-600:]}"


def proxy_cmd(case, conf, bin_):
    return [bin_, "-c", conf] if case.target == "sluice" else ["haproxy", "-f", conf, "-db"]


def cg_cmd(case, conf, bin_, rundir):
    """The proxy under callgrind, its output files in RUNDIR (sluice: the
    master's and the worker's, cg.<pid>)."""
    return (["valgrind", "--tool=callgrind", f"--callgrind-out-file={rundir}/cg.%p"]
            + (["--trace-children=yes"] if case.target == "sluice" else []) + proxy_cmd(case, conf, bin_))


def cg_totals(cgdir):
    """{file: total instructions} of the callgrind outputs in cgdir."""
    out = {}
    for f in glob.glob(os.path.join(cgdir, "cg.*")):
        with open(f, errors="replace") as fh:
            for line in fh:
                if line.startswith(("totals:", "summary:")):
                    out[f] = int(line.split()[1])
    return out


def run_case(case, n, rnd, d, bport, bin_):
    """The proxy under callgrind, one priming step if the case has one, N
    requests on one connection, stop. Returns the run's record."""
    tag = f"{case.name}-r{rnd + 1}-n{n}"
    rundir = os.path.join(d, "cg", tag)
    os.makedirs(rundir, exist_ok=True)
    port = free_port()
    st = {"port": port}
    own = []
    if case.prime is prime_app_cookie:
        standin = StandIn()
        st["standin"] = standin

        def start_own_backend():
            p, _, _ = start_demo_backend([os.path.join(BUILD, "demo_backend"), "--listen",
                                          f"127.0.0.1:{standin.port}", "--keepalive-ms", "0", "--quiet"],
                                         os.path.join(rundir, "backend.log"), prog=PROG)
            own.append(p)
        st["start_own_backend"] = start_own_backend
        conf_text = case.conf(d, port, standin.port)
    else:
        conf_text = case.conf(d, port, bport)
    ext = "yaml" if case.target == "sluice" else "cfg"
    conf = write(os.path.join(d, f"{case.name}.{ext}"), conf_text)
    cmd = cg_cmd(case, conf, bin_, rundir)
    r = {"case": case.name, "target": case.target, "round": rnd + 1, "n": n, "problems": []}
    t0 = time.monotonic()
    p = start(cmd, os.path.join(rundir, "valgrind.log"))
    try:
        if not wait_port(port, p, deadline=120):
            r["problems"].append(f"{case.target} did not listen (see {os.path.relpath(rundir, d)}/valgrind.log)")
            return r
        if case.target == "sluice":
            wait_children(p, deadline=60)
        key = case.key
        if case.prime:
            key = case.prime(st)
        raw = request(key)
        if len(raw) != REQ_LEN:
            r["problems"].append(f"request is {len(raw)} bytes, not {REQ_LEN}")
        c = Client(port)
        statuses, conns, set_cookie = {}, set(), 0
        t1 = time.monotonic()
        for _ in range(n):
            status, head = c.send(raw)
            statuses[status] = statuses.get(status, 0) + 1
            conns.update(header_values(head, "X-Conn-Id"))
            set_cookie += bool(header_values(head, "Set-Cookie"))
        r["req_seconds"] = time.monotonic() - t1
        c.close()
        time.sleep(0.3)
    except (OSError, RuntimeError, ConnectionError) as e:
        r["problems"].append(f"{type(e).__name__}: {e}")
        return r
    finally:
        rc = stop(p, grace=120)
        for q in own:
            stop(q)
        if "standin" in st:
            st["standin"].ls.close()
        r["wall"] = time.monotonic() - t0
    if rc not in (0, None) and not (case.target == "haproxy" and rc in (143, -15)):
        r["problems"].append(f"exit status {rc} after SIGTERM")
    tot = cg_totals(rundir)
    r.update(statuses=statuses, conns=len(conns), set_cookie=set_cookie, files=len(tot),
             totals=sorted(tot.values(), reverse=True), total=max(tot.values()) if tot else None, key=key)
    if not tot:
        r["problems"].append("no callgrind totals (output files missing)")
    if statuses.get(200, 0) != n:
        r["problems"].append(f"statuses {statuses}, expected {n} x 200")
    if len(conns) != case.expect_conns:
        r["problems"].append(f"requests used {len(conns)} backend connection(s), expected {case.expect_conns}")
    want_sc = n if case.expect_set_cookie else 0
    if set_cookie != want_sc:
        r["problems"].append(f"{set_cookie} of {n} responses had Set-Cookie, expected {want_sc}")
    keep_cg(rundir, tot, rnd)
    return r


def keep_cg(rundir, tot, rnd):
    """Keep round 1's largest callgrind output gzipped (all of them, as they
    are, with KEEP_CG=1); drop the rest."""
    if KEEP_CG:
        return
    big = max(tot, key=tot.get) if tot else None
    for f in glob.glob(os.path.join(rundir, "cg.*")):
        if f == big and rnd == 0:
            with open(f, "rb") as src, gzip.open(f + ".gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
        os.unlink(f)


# ---------------------------------------------------------------- calibration

def lua_string(b):
    return '"' + "".join({"\\": "\\\\", '"': '\\"', "\r": "\\r", "\n": "\\n"}.get(ch, ch)
                         for ch in b.decode("latin-1")) + '"'


def wrk_cmd(d, port, seconds, pin):
    """wrk -t1 -c CAL_CONNECTIONS sending request() (a Lua request() returns
    the exact bytes, so the proxy sees what the callgrind runs send)."""
    script = os.path.join(d, "calibrate.lua")
    if not os.path.exists(script):
        write(script, f"local r = {lua_string(request())}\nrequest = function() return r end\n")
    return pin + ["wrk", "-t1", f"-c{CAL_CONNECTIONS}", f"-d{seconds}s", "-s", script, f"http://127.0.0.1:{port}/"]


def run_wrk(cmd, seconds, raw):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=seconds + 120).stdout
    write(raw, " ".join(cmd) + "\n" + out)
    return parse_wrk(out)


def cg_wrk(case, d, bport, bin_, seconds):
    """The base case under callgrind, loaded by wrk for SECONDS: (worker
    total instructions, requests wrk completed, problem or None)."""
    rundir = os.path.join(d, "cg", f"calibrate-{case.name}-{seconds}s")
    os.makedirs(rundir, exist_ok=True)
    port = free_port()
    conf = write(os.path.join(d, f"calibrate-{case.name}.{'yaml' if case.target == 'sluice' else 'cfg'}"),
                 case.conf(d, port, bport))
    p = start(cg_cmd(case, conf, bin_, rundir), os.path.join(rundir, "valgrind.log"))
    try:
        if not wait_port(port, p, deadline=120):
            return None, 0, f"{case.target} did not listen under callgrind"
        if case.target == "sluice":
            wait_children(p, deadline=60)
        w = run_wrk(wrk_cmd(d, port, seconds, LOAD_PIN), seconds,
                    os.path.join(d, "raw", f"calibrate-{case.target}-callgrind-{seconds}s.txt"))
    finally:
        stop(p, grace=120)
    tot = cg_totals(rundir)
    keep_cg(rundir, tot, 1)
    err = w["sock_errors"] + w["non2xx"]
    return (max(tot.values()) if tot else None), w["requests"], \
        (f"wrk under callgrind: {w['sock_detail']} non-2xx {w['non2xx']}" if err else None)


def native_run(d, port, pid, proxy, backend, instr, raw):
    """One measured native wrk run: the proxy worker's (PID) user and system
    CPU per request, and others' CPU (the machine's busy time but the proxy's,
    the backend's and wrk's), for benchlib.Quiet."""
    u0, s0 = benchlib.proc_times(pid)
    p0, b0 = benchlib.tree_ticks(proxy.pid), benchlib.tree_ticks(backend.pid)
    m0, w0, t0 = system_busy_ticks(), benchlib.children_cpu(), time.monotonic()
    w = run_wrk(wrk_cmd(d, port, CALIBRATE, LOAD_PIN), CALIBRATE, os.path.join(d, "raw", raw))
    wall = time.monotonic() - t0
    u1, s1 = benchlib.proc_times(pid)
    p1, b1 = benchlib.tree_ticks(proxy.pid), benchlib.tree_ticks(backend.pid)
    m1, wrk_s = system_busy_ticks(), benchlib.children_cpu() - w0
    mine = sum(p1[q] - p0[q] for q in p1 if q in p0) + sum(b1[q] - b0[q] for q in b1 if q in b0)
    req = max(1, w["requests"])
    user_us = (u1 - u0) / CLK_TCK * 1e6 / req
    sys_us = (s1 - s0) / CLK_TCK * 1e6 / req
    return {"requests": w["requests"], "rps": w["rps"], "wrk_secs": w.get("wrk_secs", CALIBRATE),
            "user_us": user_us, "sys_us": sys_us, "user_ticks": u1 - u0, "sys_ticks": s1 - s0,
            "cpu_pct": (u1 - u0 + s1 - s0) / CLK_TCK / wall * 100,
            "ipus_user": instr / user_us if user_us else None,
            "ipus_total": instr / (user_us + sys_us) if user_us + sys_us else None,
            "errors": w["sock_errors"] + w["non2xx"] + (w["requests"] == 0),
            "other_pct": ((m1 - m0) - mine) / CLK_TCK / wall * 100 - wrk_s / wall * 100}


def calibrate(case, d, bport, backend, bin_, notes):
    """Instructions per user-CPU µs of the proxy on this machine, from the
    base case under wrk -c CAL_CONNECTIONS (the proxy saturated, so its event
    loop batches alike natively and under callgrind):
    1. under callgrind for CAL_CG[0] and CAL_CG[1] seconds: instructions per
       request = difference of the totals ÷ difference of the requests;
    2. natively, pinned, CAL_ROUNDS runs of CALIBRATE s after 1 s of warm-up:
       the worker's (HAProxy: the process's) utime per request.
    callgrind counts user-space instructions only, hence user time; what
    routing and persistence add is user-space work too."""
    out = {"runs": [], "problems": []}
    cg = [cg_wrk(case, d, bport, bin_, s) for s in CAL_CG]
    out["cg"] = [{"seconds": s, "total": t, "requests": n} for s, (t, n, _) in zip(CAL_CG, cg)]
    out["problems"] += [pr for _, _, pr in cg if pr]
    (t1, n1, _), (t2, n2, _) = cg
    if t1 is None or t2 is None or n2 <= n1:
        out["problems"].append("no instruction count under wrk (callgrind runs failed)")
        return out
    out["instr"] = instr = (t2 - t1) / (n2 - n1)
    log(f"calibrate {case.target}: {instr:,.0f} instructions/request under wrk -c{CAL_CONNECTIONS} "
        f"({n2 - n1:,} requests)")
    port = free_port()
    conf = write(os.path.join(d, f"calibrate-{case.name}.{'yaml' if case.target == 'sluice' else 'cfg'}"),
                 case.conf(d, port, bport))
    cmd = PROXY_PIN + proxy_cmd(case, conf, bin_)
    out["cmd"] = " ".join(cmd)
    p = start(cmd, os.path.join(d, f"calibrate-{case.target}.log"))
    try:
        if not wait_port(port, p, deadline=30):
            out["problems"].append(f"{case.target} did not start natively")
            return out
        if case.target == "sluice":
            wait_children(p)
            kids = benchlib.descendants(p.pid)
            if len(kids) != 1:
                out["problems"].append(f"sluice has {len(kids)} workers, expected 1")
                return out
            pid = kids[0]
        else:
            pid = p.pid
        run_wrk(wrk_cmd(d, port, 1, LOAD_PIN), 1, os.path.join(d, "raw", f"calibrate-{case.target}-warmup.txt"))
        for i in range(CAL_ROUNDS):
            x = QUIET.run(functools.partial(native_run, d, port, pid, p, backend, instr,
                                            f"calibrate-{case.target}-{i + 1}.txt"),
                          f"calibration, {case.target}, run {i + 1}", CALIBRATE, notes,
                          lambda x: f"{x['user_us']:.2f} user µs/req")
            out["runs"].append(x)
            log(f"calibrate {case.target} {i + 1}/{CAL_ROUNDS}: {fmt(x['rps'])} req/s, user {x['user_us']:.2f} + "
                f"sys {x['sys_us']:.2f} µs/req -> {fmt(x['ipus_user'])} instructions per user µs, others' CPU "
                f"{x['other_pct']:.0f}%")
    finally:
        stop(p)
    ok = [x for x in out["runs"] if x["ipus_user"] and not x["errors"]]
    ok = [x for x in ok if not x["noisy"]] or ok
    if ok:
        mid = sorted(ok, key=lambda x: x["ipus_user"])[(len(ok) - 1) // 2]
        out.update(ipus_user=mid["ipus_user"], ipus_total=mid["ipus_total"], user_us=mid["user_us"],
                   sys_us=mid["sys_us"])
    else:
        out["problems"].append("no clean native run")
    return out


# ---------------------------------------------------------------- figures

def per_request(runs, case):
    """Instructions per request of each round (N2 total - N1 total) / (N2 - N1)."""
    out = []
    for rnd in range(1, ROUNDS + 1):
        a = [r for r in runs if r["case"] == case and r["round"] == rnd and r["n"] == N1 and r.get("total")]
        b = [r for r in runs if r["case"] == case and r["round"] == rnd and r["n"] == N2 and r.get("total")]
        if a and b:
            out.append((b[0]["total"] - a[0]["total"]) / (N2 - N1))
    return out


def summarize(runs, cases, cal):
    summ = {}
    for c in cases:
        v = per_request(runs, c.name)
        if not v:
            continue
        ipus = (cal.get(c.target) or {}).get("ipus_user")
        med = statistics.median(v)
        summ[c.name] = {"target": c.target, "rounds": v, "instr": med, "spread": max(v) - min(v),
                        "ipus": ipus, "us": med / ipus if ipus else None,
                        "problems": sum(len(r["problems"]) for r in runs if r["case"] == c.name)}
    for name, s in summ.items():
        base = summ.get("base" if s["target"] == "sluice" else "h-base")
        s["delta"] = s["instr"] - base["instr"] if base else None
        s["delta_us"] = s["delta"] / s["ipus"] if base and s["ipus"] else None
    return summ


def chart(path, cases, summ):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # one bar per case but the bases, grouped by what they measure (ROWS)
    groups = []
    for row, what in ROWS[1:]:
        cs = [c for c in cases if c.row == row and c.name in summ]
        if cs:
            groups.append((row, cs))
    if not groups:
        raise RuntimeError("nothing to draw")
    colors = {"sluice": "#2b7bba", "haproxy": "#e07b39"}
    labels, ys, ticks = [], [], []
    y = 0
    for row, cs in groups:
        start_y = y
        for c in cs:
            labels.append(c)
            ys.append(y)
            y += 1
        ticks.append(((start_y + y - 1) / 2, ROW_SHORT.get(row, row)))
        y += 0.6
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.32 * len(labels) + 2.2), sharey=True)
    for ax, key, title, unit in ((axes[0], "delta", "Δ instructions per request vs the base", "instr"),
                                 (axes[1], "delta_us", "Δ user-CPU µs per request vs the base (estimated)", "µs")):
        vals = [summ[c.name][key] if summ[c.name][key] is not None else 0 for c in labels]
        ax.barh(ys, vals, color=[colors[c.target] for c in labels], height=0.8)
        for yy, v, c in zip(ys, vals, labels):
            txt = f"{c.name}: {v:+,.0f}" if unit == "instr" else f"{c.name}: {v:+.3f}"
            ax.annotate(txt, (v, yy), xytext=(3 if v >= 0 else -3, 0), textcoords="offset points",
                        va="center", ha="left" if v >= 0 else "right", fontsize=7)
        ax.set_xscale("symlog", linthresh=200 if unit == "instr" else 0.1)
        if unit == "µs":
            ax.axvline(TARGET_US, color="#c0392b", ls="--", lw=1, label=f"target: < {TARGET_US} µs")
        ax.axvline(0, color="#333", lw=0.6)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.set_axisbelow(True)
        ax.margins(x=0.25)
    axes[0].set_yticks([t[0] for t in ticks])
    axes[0].set_yticklabels([t[1] for t in ticks], fontsize=8)
    axes[0].invert_yaxis()
    from matplotlib.patches import Patch
    from matplotlib.lines import Line2D
    axes[1].legend(handles=[Patch(color=colors[t], label=t) for t in ("sluice", "haproxy")
                            if any(c.target == t for c in labels)]
                   + [Line2D([0], [0], color="#c0392b", ls="--", lw=1, label=f"target < {TARGET_US} µs")],
                   fontsize=8, loc="lower right")
    fig.suptitle(f"sluice persist: cost of routing and session persistence per keepalive request "
                 f"(callgrind, N={N1}/{N2}; symlog scale)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------- report

def fmt_d(v, nd=0):
    return "—" if v is None else f"{v:+,.{nd}f}"


def write_report(outdir, d, cases, runs, summ, cal, facts, confs, notes, started_at, elapsed, bin_):
    try:
        chart(os.path.join(outdir, "persist.png"), cases, summ)
        chart_line = "![persist chart](persist.png)"
    except Exception as e:  # noqa: BLE001 — a missing chart must not lose the table
        chart_line = f"(chart not drawn: {e!r})"
    L = ["# Persistence and routing cost — instructions per request (callgrind)", ""]
    L.append(f"Run {started_at} UTC, {elapsed:.0f} s in all. {'QUICK mode. ' if QUICK else ''}"
             f"Each case: the proxy under callgrind, N = {N1} and N = {N2} keepalive requests on one "
             f"connection, instructions per request = (total({N2}) − total({N1})) / {N2 - N1}, "
             f"{ROUNDS} round{'s' if ROUNDS > 1 else ''} (median shown). One worker (sluice "
             "`workers: 1`, HAProxy `nbthread 1`), one backend of 2 servers (the same demo_backend), "
             f"a {REQ_LEN}-byte browser request, the same in every case but for its cookie slot.")
    L.append("")
    fac = []
    for t in ("sluice", "haproxy"):
        c = cal.get(t) or {}
        if c.get("ipus_user"):
            fac.append(f"{t} {c['ipus_user']:,.0f} instructions per user-CPU µs")
    L.append("µs: Δ instructions ÷ the proxy's own conversion factor, measured in this run with its "
             f"base configuration under `wrk -c{CAL_CONNECTIONS}`, with and without callgrind (see Calibration): "
             + ("; ".join(fac) if fac else "not measured (CALIBRATE=0)") + ". "
             f"The issue's bar: each feature adds < {TARGET_US} µs of CPU per request.")
    L.append("")
    L.append("| what | sluice case | instr/req | Δ instr | Δ µs | HAProxy case | instr/req | Δ instr | Δ µs |")
    L.append("|---|---|---:|---:|---:|---|---:|---:|---:|")

    def cells(c, cont=False):
        if c is None or c.name not in summ:
            return ["", "", "", ""] if cont else ["—", "", "", ""]
        s = summ[c.name]
        flag = " ⚠" if s["delta_us"] is not None and s["delta_us"] >= TARGET_US else ""
        if c.row == "base":
            return [f"`{c.name}`", fmt(s["instr"]), "", f"({fmt(s['us'], 2)} µs/req)" if s["us"] else ""]
        return [f"`{c.name}`", fmt(s["instr"]), fmt_d(s["delta"]), fmt_d(s["delta_us"], 3) + flag]

    for row, what in ROWS:
        sl = [c for c in cases if c.row == row and c.target == "sluice"]
        hp = [c for c in cases if c.row == row and c.target == "haproxy"]
        for i in range(max(len(sl), len(hp))):
            a = sl[i] if i < len(sl) else None
            b = hp[i] if i < len(hp) else None
            if a is None and b is None:
                continue
            L.append("| " + " | ".join([what if i == 0 else "″"] + cells(a, i > 0) + cells(b, i > 0)) + " |")
    L.append("")
    L.append(f"Δ = the case minus its proxy's base (`base`, `h-base`). ⚠: at or above {TARGET_US} µs. "
             "In brackets on the base row: the base's own estimated user-CPU µs per request (instr/req "
             "÷ factor); the kernel's work for a request (system time) comes on top of it.")
    L.append("")
    L.append(chart_line)
    L.append("")
    report_list(L, "Problems seen", notes)
    L.append("## Cases")
    L.append("")
    L.append("| case | proxy | configuration and request | instr/req per round | spread | backend conns | "
             "Set-Cookie | problems |")
    L.append("|---|---|---|---:|---:|---:|---|---:|")
    for c in cases:
        s = summ.get(c.name)
        rr = [r for r in runs if r["case"] == c.name and r["n"] == N2]
        conns = sorted({r.get("conns") for r in rr if r.get("conns") is not None})
        sc = sorted({r.get("set_cookie") for r in rr if r.get("set_cookie") is not None})
        L.append(f"| `{c.name}` | {c.target} | {c.what.replace('|', chr(92) + '|')} | "
                 + (" / ".join(fmt(v, 1) for v in s["rounds"]) if s else "—") + " | "
                 + (fmt(s["spread"], 1) if s else "—") + f" | {'/'.join(map(str, conns)) or '—'} | "
                 + (f"{'/'.join(map(str, sc))} of {N2}" if sc else "—")
                 + f" | {sum(len(r['problems']) for r in runs if r['case'] == c.name)} |")
    L.append("")
    L.append("backend conns: distinct `X-Conn-Id` values the demo backend put on the responses of an "
             f"N = {N2} run: 2 = the requests alternated between the servers (round robin), 1 = they "
             "all stuck to one server, as persistence should make them. Set-Cookie: responses that "
             "carried one. Both are checked against what the case expects; a mismatch is a problem "
             "listed above.")
    L.append("")
    if cal:
        L.append("## Calibration (instructions per µs)")
        L.append("")
        L.append(f"Each proxy's base configuration loaded by `wrk -t1 -c{CAL_CONNECTIONS}` sending the same "
                 f"{REQ_LEN}-byte request (a Lua `request()` returning it), so that the proxy is saturated and "
                 "its event loop batches alike with and without valgrind: (1) under callgrind for "
                 f"{CAL_CG[0]} s and {CAL_CG[1]} s, instructions per request = difference of the totals ÷ "
                 "difference of the requests; (2) natively, pinned "
                 f"({PIN_TEXT}), 1 s of warm-up then {CAL_ROUNDS} run(s) of {CALIBRATE} s: the worker's "
                 "(HAProxy: the process's) utime and stime from `/proc/PID/stat`, per request. Factor = "
                 "(1) ÷ user µs per request of (2); the median run's is used. callgrind counts user-space "
                 "instructions only, and what routing and persistence add is user-space work (no system "
                 "call of its own), hence user time. Before each native run the script waits for the "
                 f"machine to be quiet (others' CPU below {NOISE_PCT}% of a CPU) and re-runs a noisy run, "
                 f"within {QUIET_BUDGET} s in all; noisy runs kept are marked ⚠ and not used if a clean one exists.")
        L.append("")
        L.append("| proxy | instr/req under wrk (callgrind) | run | req/s | CPU % | user µs/req | sys µs/req | "
                 "user ticks | instr per user µs | instr per (user+sys) µs | others' CPU % |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for t, c in cal.items():
            if not c["runs"]:
                L.append(f"| {t} | {fmt(c.get('instr'))} | — | " + "; ".join(c["problems"]) + " | | | | | | | |")
            for i, x in enumerate(c["runs"]):
                L.append(f"| {t} | {fmt(c.get('instr'))} | {i + 1} | {fmt(x['rps'])} | {x['cpu_pct']:.0f} | "
                         f"{x['user_us']:.2f} | {x['sys_us']:.2f} | {x['user_ticks']} | {fmt(x['ipus_user'])} | "
                         f"{fmt(x['ipus_total'])} | {x['other_pct']:.0f}{' ⚠' if x['noisy'] else ''}"
                         f"{' (errors)' if x['errors'] else ''} |")
        L.append("")
        ticks = [x["user_ticks"] for c in cal.values() for x in c["runs"]]
        L.append("utime and stime (reported in 1/100 s) come from the kernel's tick sampling"
                 + (f"; with ~{fmt(statistics.median(ticks))} user ticks per run the factor is good to a few %"
                    if ticks else "")
                 + ". Other people's work on the machine (others' CPU) slows the proxy down, which "
                 "lowers the factor and raises the µs figures: read the µs as estimates, the "
                 "instruction counts as the measurement. With the (user+sys) factor instead, which "
                 "charges every instruction its share of the kernel's work for the request too, each "
                 "Δ µs would be larger by the ratio of the two factors.")
        L.append("")
    L.append("## Every callgrind run")
    L.append("")
    L.append("| case | round | N | worker total instr | processes | other totals | seconds (requests / all) | "
             "problems |")
    L.append("|---|---:|---:|---:|---:|---|---:|---|")
    for r in runs:
        L.append(f"| `{r['case']}` | {r['round']} | {r['n']} | {fmt(r.get('total'))} | {r.get('files', '—')} | "
                 f"{', '.join(fmt(x) for x in (r.get('totals') or [])[1:]) or '—'} | "
                 f"{fmt(r.get('req_seconds'), 1)} / {fmt(r.get('wall'), 1)} | {'; '.join(r['problems']) or ''} |")
    L.append("")
    L.append("## What was measured")
    L.append("")
    L.append(f"- sluice: `{bin_}` ({sluice_describe(bin_)}), `workers: 1`, `access_log: off`, "
             f"`user: root` (callgrind writes its files from the worker), backend `app` with servers "
             f"s1 and s2 on the same demo_backend, `max_connections`/`idle_max` {POOL}. Command: "
             f"`valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=DIR/cg.%p "
             "sluice -c CONF`; the worker's total is the largest of the processes' totals (the "
             "master's is its start-up).")
    L.append(f"- HAProxy: {haproxy_version()}, `nbthread 1`, keepalive both sides, `http-reuse always`, "
             f"servers s1 and s2 on the same demo_backend, `maxconn {POOL}`; `valgrind --tool=callgrind "
             "--callgrind-out-file=DIR/cg.%p haproxy -f CONF -db` (one process).")
    L.append("- Backend: `demo_backend --keepalive-ms 0 --quiet` (128-byte body). Responses carry "
             "`X-Conn-Id`, the backend connection's number, which tells whether requests stuck.")
    L.append(f"- Request ({REQ_LEN} bytes, every case): `GET /index.html` with a Firefox page load's "
             "headers; its `Cookie` header"
             + (f" (COOKIES={COOKIES}: {-(-COOKIES // 40)} more 40-byte cookies after the first three)"
                if COOKIES else "")
             + " ends with a slot of "
             f"{SLOT} characters: the case's cookie (`SLUICE_SERVER=<token>`, `SRV=s1`, "
             "`JSESSIONID=...`, `APPSESSION=...`) or `lang=en`, then `pad=xxx…` to fill it, so the "
             "request's length does not change between cases. Before the N requests, `cookie-hit` "
             "sends one request on its own connection to read the token from `Set-Cookie`; "
             "`app_cookie-hit` has s1 and s2 on a port served first by a stand-in that answers one "
             "request with `Set-Cookie: APPSESSION=<value>` (sluice learns the value), then by a "
             "demo_backend of its own. Both runs (N1 and N2) do the same, so it cancels.")
    L.append("- Instructions per request include everything the proxy does for a request on a kept-"
             "alive connection, both directions: reading and parsing it, routing, persistence, "
             "forwarding over a pooled backend connection, the response's way back. Time-driven "
             "work (timers) is counted too, in proportion to the N2 run's extra wall time under "
             "callgrind; it is the same in every case and cancels in the Δ.")
    L.append("- Callgrind output: round 1's worker file of each run, gzipped, in "
             "[persist/cg/](persist/cg/) (`callgrind_annotate` reads it after `gunzip`); KEEP_CG=1 "
             "keeps every file.")
    L.append("")
    L.append("## Configs")
    L.append("")
    big = {k: v for k, v in confs.items() if sum(1 for _ in open(v)) > 40}
    if big:
        L.append("Too long to show here (the ports are the last run's): "
                 + ", ".join(f"[{os.path.basename(v)}](persist/{os.path.basename(v)})" for v in big.values())
                 + "; the others, as used:")
        L.append("")
    report_end(L, outdir, "persist", {k: v for k, v in confs.items() if k not in big}, facts,
               "`make bench-persist` (or `QUICK=1 sh bench/persist.sh`); see docs/bench/persist.md.")


# ---------------------------------------------------------------- main

def main():
    need_tools(PROG, ("valgrind",) + (("haproxy",) if "haproxy" in TARGETS else ())
               + (("wrk",) if CALIBRATE else ()) + (("taskset",) if PROXY_PIN and CALIBRATE else ()),
               "bench/persist.sh")
    if "sluice" in TARGETS and not os.access(SLUICE_BIN, os.X_OK):
        sys.exit(f"{PROG}: {SLUICE_BIN} is not an executable sluice (make, or BUILD=dir, SLUICE=path)")
    if not os.access(os.path.join(BUILD, "demo_backend"), os.X_OK):
        sys.exit(f"{PROG}: {BUILD}/demo_backend missing: make {BUILD}/demo_backend")
    cases = selected_cases()
    started, outdir, d = results_dirs("persist")
    t_start = time.monotonic()
    # A copy, so a rebuild during the run cannot change what is measured.
    os.makedirs(os.path.join(d, "bin"), exist_ok=True)
    bin_ = shutil.copy2(SLUICE_BIN, os.path.join(d, "bin", "sluice")) if "sluice" in TARGETS else SLUICE_BIN
    log(f"results in {outdir}")
    log(f"{len(cases)} cases x {ROUNDS} rounds x N={N1},{N2} under callgrind"
        + (f", then {CAL_ROUNDS} x {CALIBRATE} s natively per proxy" if CALIBRATE else ""))
    facts = machine_facts([("sluice", f"{bin_}: {sluice_describe(bin_, detail=True)}"),
                           ("haproxy", haproxy_version()), ("valgrind", cmd_out(["valgrind", "--version"])),
                           ("wrk", (cmd_out(["wrk", "--version"]).splitlines() or ["?"])[0])])
    notes, confs, runs = [], {}, []
    backend, bport, backend_cmd = start_demo_backend(
        LOAD_PIN + [os.path.join(BUILD, "demo_backend"), "--listen", "127.0.0.1:0", "--keepalive-ms", "0",
                    "--quiet"], os.path.join(d, "backend.log"), prog=PROG)
    # configs first: a case whose config does not load is reported and skipped
    good = []
    for c in cases:
        conf = write(os.path.join(d, f"{c.name}.{'yaml' if c.target == 'sluice' else 'cfg'}"),
                     c.conf(d, 1, bport))
        err = check_config(c, conf, bin_)
        if err:
            notes.append(f"{c.name}: config rejected: {err}")
            log(notes[-1])
        else:
            good.append(c)
    cases = good
    for rnd in range(ROUNDS):
        for c in cases:
            for n in (N1, N2):
                r = run_case(c, n, rnd, d, bport, bin_)
                runs.append(r)
                for pr in r["problems"]:
                    notes.append(f"{c.name}, round {rnd + 1}, N={n}: {pr}")
                log(f"round {rnd + 1} {c.name:16} N={n:<5} total {fmt(r.get('total')):>14}  "
                    f"conns {r.get('conns', '—')}  set-cookie {r.get('set_cookie', '—')}  "
                    f"{fmt(r.get('wall'), 1)} s" + (f"  PROBLEMS: {r['problems']}" if r["problems"] else ""))
            v = per_request(runs, c.name)
            if len(v) == rnd + 1:
                log(f"round {rnd + 1} {c.name:16} {v[-1]:,.1f} instructions/request")
    for c in cases:
        confs[c.name] = os.path.join(d, f"{c.name}.{'yaml' if c.target == 'sluice' else 'cfg'}")
    cal = {}
    if CALIBRATE:
        for t in TARGETS:
            base = next((c for c in cases if c.name == ("base" if t == "sluice" else "h-base")), None)
            if base is None:
                continue
            cal[t] = calibrate(base, d, bport, backend, bin_, notes)
            notes += [f"calibration, {t}: {pr}" for pr in cal[t]["problems"]]
            for i, x in enumerate(cal[t]["runs"]):
                if x["errors"]:
                    notes.append(f"calibration, {t}, run {i + 1}: wrk errors, non-2xx responses or no request")
    if backend.poll() is not None:
        notes.append(f"the backend exited during the benchmark (status {backend.returncode})")
    stop(backend)
    summ = summarize(runs, cases, cal)
    elapsed = time.monotonic() - t_start
    write_report(outdir, d, cases, runs, summ, cal, facts, confs, notes,
                 started.strftime("%Y-%m-%d %H:%M:%S"), elapsed, bin_)
    with open(os.path.join(outdir, "persist.json"), "w") as f:
        json.dump({"started": started.isoformat(), "elapsed_s": elapsed, "quick": QUICK, "n1": N1, "n2": N2,
                   "rounds": ROUNDS, "request_bytes": REQ_LEN, "cookies": COOKIES, "sluice": bin_, "backend": backend_cmd,
                   "calibrate": {"seconds": CALIBRATE, "runs": CAL_ROUNDS, "connections": CAL_CONNECTIONS,
                                 "callgrind_seconds": CAL_CG, "pin": PIN_TEXT},
                   "cases": {c.name: {"target": c.target, "row": c.row, "what": c.what,
                                      **summ.get(c.name, {})} for c in cases},
                   "calibration": cal, "runs": runs, "problems": notes, "machine": dict(facts)},
                  f, indent=1, default=str)
    refresh_latest(RESULTS, outdir, "persist", files=("persist.md", "persist.png", "persist.json"))
    show_report(outdir, "persist", ["![persist chart]", "(chart not drawn"], log)
    missing = [c.name for c in cases if c.name not in summ]
    if missing:
        log(f"no figures for: {', '.join(missing)}")
    return 1 if missing else 0


if __name__ == "__main__":
    run_main(main, PROG)
