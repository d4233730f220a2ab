#!/usr/bin/env python3
"""CRS cost: the OWASP Core Rule Set run by sluice's own engine (lua/crs.lua, the
sluice.crs primitive) vs Apache 2.4 + ModSecurity 2.9 (Debian's
libapache2-mod-security2) running the same CRS 3.3.4 files (Debian's
modsecurity-crs), at paranoia levels 1 and 2, in proxy CPU per request.

Processes (each started once, on free ports, stopped by PID at the end):
  backend   the static nginx origin (benchlib), 128-byte answers, for sluice
  sluice    ONE process, workers: 1, three listeners with the same inspect settings
            (body: 128k, budget {time: 100ms, instructions: 0, wall_time: 5s}):
            `allow` runs lua/allow_all.lua, `crs1` lua/crs.lua (PARANOIA 1), `crs2` a
            copy of lua/crs.lua with PARANOIA = 2 (in the run's directory, with
            lua/crs-base.conf copied next to it)
  modsec    THREE `apache2 -X` processes (one process each, no MPM children), written
            by tests/e2e/modsec.py's ModSecurity class with SecDebugLogLevel 0:
            `on1` (SecRuleEngine On, paranoia 1), `on2` (On, paranoia 2) and `off`
            (the same config with SecRuleEngine Off: Apache + mod_security2 loaded, the
            CRS parsed, no rule evaluated). Apache serves a small static file itself
            (FallbackResource), so it has no backend hop; the only change to the
            class's config is KeepAlive On (the class turns it off for its debug-log
            bookkeeping), so both proxies get the same keep-alive connection.

Targets: sluice-allow, sluice-crs1, sluice-crs2, modsec-off, modsec-on1, modsec-on2.
Headline: the CPU per request attributable to CRS evaluation, taken against each
server's own baseline: sluice-crsN − sluice-allow and modsec-onN − modsec-off.

Workloads (the same bytes to every target, and to crs_replay):
  get   the inspection bench's siege request: GET URL_PATH with a random UA_BYTES-byte
        User-Agent (inspection.py's generator) and ordinary browser headers
  form  a ~4 KB application/x-www-form-urlencoded POST of a benign order form
  json  a ~16 KB application/json POST of a benign nested document
Before the load every workload goes once to every target: each must be answered 200
(CRS passes it); a block is reported and that workload is not measured.

Load: this file's own client (`crs.py --client`, pinned with the load side): ONE
keep-alive connection, requests paced at a FIXED rate (RATES_*), each sent when due
and read to the end of its response before the next; a request due while the
previous one is still out is sent as soon as it returns; a run where over 5 % of the
requests went out more than one interval (and 50 ms) late is marked saturated. CPU: the
proxy's process tree, from /proc/PID/task/*/schedstat (ns of CPU per thread; the
utime+stime ticks too, as a cross-check), over the client's run, divided by the
completed requests.

Engine only: `crs_replay -s 910100 -s 910140 -b REPLAY_ROUNDS CONF < request`, CONF
the same includes as crs.lua at paranoia N, pinned to the proxy's CPU: the mean µs
of one evaluation, without any proxying (median of 3 runs).

Usage: sh bench/crs.sh (or `make bench-crs`). Environment knobs:
  QUICK=1          1 round, 1.5 s runs, REPLAY_ROUNDS=20 (under a minute)
  RATES_GET=a,b    offered request rates per second for get (300), form (RATES_FORM,
  RATES_FORM=..    60) and json (RATES_JSON, 3): the same for every target, and under
  RATES_JSON=..    the slowest one's saturation (one request at a time, so 1 / its CPU
                   time per request: ModSecurity PL2 takes ~2 ms for get, ~10 ms for
                   form, ~220 ms for json on the 2-core VM these were set on)
  DURATION=S       seconds per run (6; QUICK 1.5)
  ROUNDS=N         rounds; each runs every target once per case, rotating the order (3)
  PLS=a,b          paranoia levels (1,2)
  WORKLOADS=a,b    subset of get,form,json
  UA_BYTES=N       length of the random User-Agent (500)
  REPLAY_ROUNDS=N  crs_replay -b (200; QUICK 20)
  PIN=0            do not pin with taskset
  NOISE_PCT=N      others' CPU (% of one CPU) above which a run is marked (25)
  BUILD=dir        where sluice and crs_replay are (build); RESULTS=dir (bench/results)
  BENCH_TS=name    results directory name (default: the UTC start time)

Output: RESULTS/<ts>/crs.md, crs.json, crs.png, crs/ (configs, the request files,
raw client output, logs); RESULTS/latest/ gets a copy. Exits non-zero when a target
produced no figures.
"""
import functools
import importlib.util
import json
import os
import random
import shutil
import socket
import statistics
import string
import subprocess
import sys
import time
import types
import urllib.parse

# --client runs in the load process: it needs nothing but the standard library.
if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--client":
    pass
else:
    import benchlib
    from benchlib import (BUILD, CLK_TCK, PIN, QUICK, RESULTS, ROOT, children_cpu, cmd_out, descendants, fmt,
                          free_port, git_describe, machine_facts, pinning, read_tail, refresh_latest,
                          report_configs_and_machine, results_dirs, run_main, start, start_backend_nginx, stop,
                          system_busy_ticks, tree_ticks, wait_children, wait_port, write)

    PROG = "bench/crs.py"
    env_int = functools.partial(benchlib.env_int, prog=PROG)
    env_float = functools.partial(benchlib.env_float, prog=PROG)
    env_list = functools.partial(benchlib.env_list, prog=PROG)

    # offered rates per workload: under the slowest target's saturation (one request at a
    # time: 1 / its CPU time per request), so every target runs at the same load
    RATES_DEFAULT = {"get": "300", "form": "60", "json": "3"}
    RATES = {w: [int(x) for x in os.environ.get(f"RATES_{w.upper()}", RATES_DEFAULT[w]).split(",") if x.strip()]
             for w in RATES_DEFAULT}
    DURATION = env_float("DURATION", 1.5 if QUICK else 6.0, 0.2)
    ROUNDS = env_int("ROUNDS", 1 if QUICK else 3, 1)
    PLS = env_list("PLS", "1,2", int)
    WORKLOADS = env_list("WORKLOADS", "get,form,json")
    UA_BYTES = env_int("UA_BYTES", 500, 20)
    REPLAY_ROUNDS = env_int("REPLAY_ROUNDS", 20 if QUICK else 200, 1)
    NOISE_PCT = env_int("NOISE_PCT", 25)
    POOL = 64
    URL_PATH = "/catalog/item?id=4217&page=2&sort=price"
    for p in PLS:
        if p not in (1, 2, 3, 4):
            sys.exit(f"{PROG}: paranoia levels are 1..4, not {p}")
    for w in WORKLOADS:
        if w not in ("get", "form", "json"):
            sys.exit(f"{PROG}: unknown workload {w!r} (get, form, json)")
    TARGETS = (["sluice-allow"] + [f"sluice-crs{p}" for p in PLS]
               + ["modsec-off"] + [f"modsec-on{p}" for p in PLS])
    PROXY_PIN, LOAD_PIN, PIN_TEXT = pinning(PIN)
    PROXY_CPUS = {int(x) for x in PROXY_PIN[-1].split(",")} if PROXY_PIN else set()
    PIN_TEXT = PIN_TEXT.replace("wrk and the backend", "the client, the backend and crs_replay's parent")


def log(msg):
    print(f"[crs] {msg}", flush=True)


# ---------------------------------------------------------------- the client (load side)

def client_main(argv):
    """crs.py --client PORT RATE SECONDS REQFILE: one keep-alive connection, REQFILE's
    bytes sent at RATE per second for SECONDS; prints a JSON summary."""
    port, rate, seconds, reqfile = int(argv[0]), float(argv[1]), float(argv[2]), argv[3]
    with open(reqfile, "rb") as f:
        req = f.read()
    interval = 1.0 / rate
    statuses, lat, reconnects, errors = {}, [], 0, []
    sock, buf = None, b""

    def connect():
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def read_response(s, buf):
        """(status, close, rest of buf) of one response (Content-Length or chunked)."""
        while b"\r\n\r\n" not in buf:
            d = s.recv(65536)
            if not d:
                raise ConnectionError("EOF before the response head")
            buf += d
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        hdr = {}
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            hdr[k.strip().lower()] = v.strip().lower()
        close = hdr.get(b"connection") == b"close"
        if b"content-length" in hdr:
            n = int(hdr[b"content-length"])
            while len(buf) < n:
                d = s.recv(65536)
                if not d:
                    raise ConnectionError("EOF in the body")
                buf += d
            buf = buf[n:]
        elif hdr.get(b"transfer-encoding") == b"chunked":
            while b"\r\n0\r\n\r\n" not in b"\r\n" + buf:
                d = s.recv(65536)
                if not d:
                    raise ConnectionError("EOF in a chunked body")
                buf += d
            buf = (b"\r\n" + buf).split(b"\r\n0\r\n\r\n", 1)[1]
        elif close:
            while s.recv(65536):
                pass
            buf = b""
        return status, close, buf

    t0 = time.monotonic()
    end = t0 + seconds
    due = t0
    late = 0
    n = 0
    while True:
        now = time.monotonic()
        if due >= end or now >= end:
            break
        if now < due:
            time.sleep(due - now)
        elif now - due > max(interval, 0.05):     # behind by over one interval (50 ms at least:
            late += 1                              # a 300/s client's own scheduling jitter is not)
        try:
            if sock is None:
                sock, buf = connect(), b""
                reconnects += 1
            ts = time.monotonic()
            sock.sendall(req)
            status, close, buf = read_response(sock, buf)
            lat.append(time.monotonic() - ts)
            statuses[status] = statuses.get(status, 0) + 1
            n += 1
            if close:
                sock.close()
                sock = None
        except (OSError, ValueError, IndexError) as e:
            errors.append(repr(e))
            if sock is not None:
                sock.close()
            sock = None
            if len(errors) > 50:
                break
        due += interval
    wall = time.monotonic() - t0
    if sock is not None:
        sock.close()
    lat.sort()
    q = (lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3 if lat else None)
    print(json.dumps({"completed": n, "statuses": {str(k): v for k, v in statuses.items()},
                      "wall_s": wall, "rate": n / wall if wall else 0, "late": late,
                      "connections": reconnects, "errors": errors[:5], "n_errors": len(errors),
                      "p50_ms": q(0.5), "p99_ms": q(0.99), "mean_ms": (sum(lat) / len(lat) * 1e3) if lat else None}))
    return 0


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--client":
    sys.exit(client_main(sys.argv[2:]))


# ---------------------------------------------------------------- ModSecurity (tests/e2e/modsec.py)

def modsec_module():
    """tests/e2e/modsec.py, imported as is. It imports pytest for its fixture; the
    bench's Python may not have it, so a stand-in with the two names it uses."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
    if importlib.util.find_spec("pytest") is None:
        stub = types.ModuleType("pytest")
        stub.fixture = lambda *a, **k: (a[0] if a and callable(a[0]) else (lambda f: f))
        stub.skip = lambda why: sys.exit(f"{PROG}: {why}")
        sys.modules["pytest"] = stub
    import modsec
    return modsec


def bench_modsec_class(modsec):
    class BenchModSecurity(modsec.ModSecurity):
        """The oracle's instance, for load: debug log level 0, KeepAlive On (the oracle
        wants one request per connection; a benchmark wants the same keep-alive
        connection for both servers), and ENGINE On or Off."""

        def __init__(self, workdir, name, paranoia, engine):
            super().__init__(workdir, name=name, paranoia=paranoia, blocking=True, debug_level=0)
            self.engine = engine

        def _write_config(self):
            super()._write_config()
            with open(self.conf_path) as f:
                conf = f.read()
            if "KeepAlive Off" not in conf:
                raise RuntimeError("modsec.py's config has no 'KeepAlive Off' line to switch")
            conf = conf.replace("KeepAlive Off", "KeepAlive On\nMaxKeepAliveRequests 0\nKeepAliveTimeout 30")
            with open(self.conf_path, "w") as f:
                f.write(conf)
            with open(self.modsec_conf_path) as f:
                mc = f.read()
            if "SecRuleEngine On\n" not in mc or "SecDebugLogLevel 0\n" not in mc:
                raise RuntimeError("modsec.py's ModSecurity config lacks SecRuleEngine On / SecDebugLogLevel 0")
            mc = mc.replace("SecRuleEngine On\n", f"SecRuleEngine {self.engine}\n")
            with open(self.modsec_conf_path, "w") as f:
                f.write(mc)
    return BenchModSecurity


# ---------------------------------------------------------------- the workloads

BROWSER = [("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
           ("Accept-Language", "en-US,en;q=0.5"), ("Accept-Encoding", "gzip, deflate"),
           ("Connection", "keep-alive")]
HOST = "shop.example"


def make_ua(seed):
    """inspection.py's random User-Agent: 'Mozilla/5.0 ' + letter/digit words."""
    rng = random.Random(f"inspection-{seed}-0")
    words, n = ["Mozilla/5.0"], len("Mozilla/5.0")
    while n < UA_BYTES:
        w = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(rng.randint(3, 12)))
        words.append(w)
        n += len(w) + 1
    return " ".join(words)[:UA_BYTES].rstrip()


PROSE = [  # plain sentences; few of the characters CRS's SQL anomaly rules count
    "We would like the order delivered to the back door of the shop since the front entrance is closed "
    "for renovation until the end of the month",
    "Please wrap the ceramic bowls separately and add a note for my aunt who collects handmade pottery",
    "The garden chairs arrived last spring in good condition and we would be happy to order two more in "
    "the same green colour",
    "Our team meets every Thursday morning so a delivery between nine and eleven would suit us best",
    "If the oak table is out of stock we are glad to wait a few weeks rather than choose another model",
    "Thank you for the quick answer to my earlier question about the warranty on the lamps",
    "The children loved the wooden train set and we are looking for the matching bridge and tunnel pieces",
    "Kindly send the invoice by post as our accounting office still files paper copies for each supplier",
]


def prose(rng, n_bytes):
    out = []
    while sum(len(s) + 2 for s in out) < n_bytes:
        out.append(rng.choice(PROSE))
    return ". ".join(out)[:n_bytes].rstrip() + "."


def form_body(target=4096):
    rng = random.Random("crs-form")
    fields = [("first_name", "Margaret"), ("last_name", "Holloway"), ("email", "margaret.holloway@example.org"),
              ("phone", "0161 496 0732"), ("company", "Holloway Garden Supplies"),
              ("street", "14 Willow Lane"), ("city", "Manchester"), ("postcode", "M14 5RT"),
              ("country", "United Kingdom"), ("subject", "Question about my recent order"),
              ("newsletter", "yes"), ("preferred_contact", "email"), ("message", "")]
    base = len(urllib.parse.urlencode(fields))
    fields[-1] = ("message", prose(rng, max(100, int((target - base) / 1.02))))
    body = urllib.parse.urlencode(fields)
    while len(body) > target:                       # trim the prose to the size
        fields[-1] = ("message", fields[-1][1][:-(len(body) - target)].rstrip())
        body = urllib.parse.urlencode(fields)
    return body.encode()


def json_body(target=16384):
    rng = random.Random("crs-json")
    names = ["Alice Moreau", "Ben Carter", "Chen Wei", "Dana Kowalski", "Elif Demir", "Femi Adeyemi",
             "Greta Lind", "Hugo Santos"]
    products = [("GX2041", "Ceramic bowl"), ("TB1180", "Oak table"), ("LM0332", "Reading lamp"),
                ("CH7710", "Garden chair"), ("TR0905", "Wooden train set"), ("MG4410", "Tea mug")]
    orders = []
    doc = {"store": "north", "currency": "EUR", "generated": "2026-11-26", "orders": orders, "comment": ""}
    dump = functools.partial(json.dumps, separators=(", ", ": "))
    i = 0
    while True:
        items = [{"sku": s, "name": nm, "quantity": rng.randint(1, 4), "unit_price": round(rng.uniform(3, 240), 2),
                  "gift": rng.random() < 0.2} for s, nm in rng.sample(products, rng.randint(1, 3))]
        o = {"id": 41000 + i, "customer": {"name": rng.choice(names), "loyalty": rng.random() < 0.5,
                                           "visits": rng.randint(1, 90)},
             "items": items, "paid": rng.random() < 0.8,
             "total": round(sum(x["quantity"] * x["unit_price"] for x in items), 2),
             "note": prose(rng, rng.randint(60, 200))}
        orders.append(o)
        if len(dump(doc)) > target:
            orders.pop()
            break
        i += 1
    pad = target - len(dump(doc))           # the rest: a prose comment, to the exact size
    doc["comment"] = prose(rng, pad + 10)[:pad] if pad > 0 else ""
    return dump(doc).encode()


def raw_request(method, path, headers, body=b""):
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}"] + [f"{k}: {v}" for k, v in headers]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def workloads(ua):
    ua_h = [("User-Agent", ua)]
    out = {}
    if "get" in WORKLOADS:
        out["get"] = raw_request("GET", URL_PATH, ua_h + BROWSER)
    firefox = [("User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0")]
    if "form" in WORKLOADS:
        out["form"] = raw_request("POST", "/contact/submit", firefox + BROWSER + [
            ("Referer", f"https://{HOST}/contact"), ("Origin", f"https://{HOST}"),
            ("Content-Type", "application/x-www-form-urlencoded")], form_body())
    if "json" in WORKLOADS:
        out["json"] = raw_request("POST", "/api/v1/orders/import", firefox + [
            ("Accept", "application/json"), ("Accept-Language", "en-US,en;q=0.5"),
            ("Accept-Encoding", "gzip, deflate"), ("Connection", "keep-alive"),
            ("Content-Type", "application/json")], json_body())
    return out


def body_len(raw):
    return len(raw.split(b"\r\n\r\n", 1)[1])


# ---------------------------------------------------------------- sluice

def conf_sluice(d, ports, scripts):
    ls = []
    for name, script in scripts.items():
        ls.append(f"""  - name: {name}
    address: 127.0.0.1:{ports[name]}
    backend: app
    inspect:
      script: {script}
      body: 128k
      budget:
        time: 100ms
        instructions: 0
        wall_time: 5s
""")
    return f"""# sluice, one worker; allow_all.lua and crs.lua at each paranoia level, same inspect settings
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
{''.join(ls)}backends:
  - name: app
    idle_max: {POOL}
    servers:
      - name: s1
        address: 127.0.0.1:{ports['backend']}
        max_connections: {POOL}
"""


def crs_script(d, pl):
    """lua/crs.lua at paranoia PL: the file itself for 1, else a copy with PARANOIA = PL
    in D (with crs-base.conf next to it: crs.lua includes it from its own directory)."""
    src = os.path.join(ROOT, "lua", "crs.lua")
    if pl == 1:
        return src
    sub = os.path.join(d, f"crs-pl{pl}")
    os.makedirs(sub, exist_ok=True)
    text = open(src).read()
    if "local PARANOIA = 1\n" not in text:
        sys.exit(f"{PROG}: lua/crs.lua has no 'local PARANOIA = 1' line")
    write(os.path.join(sub, "crs.lua"), text.replace("local PARANOIA = 1\n", f"local PARANOIA = {pl}\n", 1))
    shutil.copy2(os.path.join(ROOT, "lua", "crs-base.conf"), os.path.join(sub, "crs-base.conf"))
    return os.path.join(sub, "crs.lua")


def pin_tree(pid, cpus):
    """Pin every thread of pid and of its descendants to cpus."""
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


# ---------------------------------------------------------------- CPU accounting

def tree_ns(pid):
    """{tid: ns of CPU} for every thread of pid and its descendants (schedstat)."""
    out = {}
    for q in [pid] + descendants(pid):
        try:
            tids = os.listdir(f"/proc/{q}/task")
        except OSError:
            continue
        for t in tids:
            try:
                with open(f"/proc/{q}/task/{t}/schedstat") as f:
                    out[int(t)] = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return out


def snapshot(pid, backend_pid):
    return {"ns": tree_ns(pid), "ticks": tree_ticks(pid), "backend": tree_ticks(backend_pid),
            "load": children_cpu(), "busy": system_busy_ticks(), "t": time.monotonic()}


def cpu_figures(s0, s1, done):
    dns = sum(v - s0["ns"][k] for k, v in s1["ns"].items() if k in s0["ns"])
    dt = sum(v - s0["ticks"][k] for k, v in s1["ticks"].items() if k in s0["ticks"])
    db = sum(v - s0["backend"][k] for k, v in s1["backend"].items() if k in s0["backend"])
    wall = s1["t"] - s0["t"]
    load_s = s1["load"] - s0["load"]
    return {"cpu_us": dns / 1e3 / done if done else None,
            "cpu_us_ticks": dt / CLK_TCK * 1e6 / done if done else None,
            "cpu_pct": dns / 1e9 / wall * 100,
            "other_pct": ((s1["busy"] - s0["busy"]) - dt - db) / CLK_TCK / wall * 100 - load_s / wall * 100}


# ---------------------------------------------------------------- runs

class Setup:
    def __init__(self, d):
        self.d = d
        self.backend, self.bport, self.backend_cmd = start_backend_nginx(d, LOAD_PIN, prog=PROG)
        self.scripts = {"allow": os.path.join(ROOT, "lua", "allow_all.lua")}
        for pl in PLS:
            self.scripts[f"crs{pl}"] = crs_script(d, pl)
        self.sp = {k: free_port() for k in list(self.scripts) + ["admin"]}
        self.sp["backend"] = self.bport
        self.sluice_conf = write(os.path.join(d, "sluice.yaml"), conf_sluice(d, self.sp, self.scripts))
        self.sluice_cmd = PROXY_PIN + [os.path.join(BUILD, "sluice"), "-c", self.sluice_conf]
        self.sluice = None
        self.modsec = {}
        self.notes = []

    def start(self):
        t0 = time.monotonic()
        # Started unpinned, pinned once it listens: compiling the CRS twice on a CPU shared
        # with the load side could run over the script's load-time wall clock.
        self.sluice = start(self.sluice_cmd[len(PROXY_PIN):], os.path.join(self.d, "sluice.out"))
        if not all(wait_port(self.sp[k], self.sluice, deadline=180.0) for k in self.scripts):
            sys.exit(f"{PROG}: sluice did not start: "
                     f"{(read_tail(os.path.join(self.d, 'sluice.error.log'), 0) + read_tail(os.path.join(self.d, 'sluice.out'), 0))[-800:]}")
        wait_children(self.sluice)
        if PROXY_CPUS:
            pin_tree(self.sluice.pid, PROXY_CPUS)
        log(f"sluice up in {time.monotonic() - t0:.1f} s")
        ms = modsec_module()
        cls = bench_modsec_class(ms)
        for name, pl, engine in [("off", 1, "Off")] + [(f"on{p}", p, "On") for p in PLS]:
            t1 = time.monotonic()
            m = cls(self.d, f"modsec-{name}", pl, engine)
            self.modsec[name] = m          # stopped in stop_all() even if start() fails
            m.start(timeout=120.0)
            if PROXY_CPUS:
                pin_tree(m.proc.pid, PROXY_CPUS)
            log(f"apache2 -X modsec-{name} (engine {engine}, paranoia {pl}) up in {time.monotonic() - t1:.1f} s")
        self.versions = ms.package_versions()

    def stop_all(self):
        for m in self.modsec.values():
            try:
                m.stop()
            except Exception as e:  # noqa: BLE001
                log(f"stopping {m.name}: {e!r}")
        if self.sluice is not None:
            stop(self.sluice)
        stop(self.backend)

    def port(self, target):
        kind, v = target.split("-", 1)
        return self.sp[v] if kind == "sluice" else self.modsec[v].port

    def pid(self, target):
        kind, v = target.split("-", 1)
        return self.sluice.pid if kind == "sluice" else self.modsec[v].proc.pid

    def alive(self, target):
        kind, v = target.split("-", 1)
        p = self.sluice if kind == "sluice" else self.modsec[v].proc
        return p is not None and p.poll() is None


def exchange_once(port, raw):
    """One request on a new connection: the status (or None) and the response head."""
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    try:
        s.sendall(raw)
        data = b""
        while b"\r\n\r\n" not in data:
            d = s.recv(65536)
            if not d:
                break
            data += d
    finally:
        s.close()
    try:
        return int(data.split(b" ", 2)[1]), data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    except (IndexError, ValueError):
        return None, data[:300].decode("latin-1")


def client_cmd(port, rate, seconds, reqfile):
    return LOAD_PIN + [sys.executable, os.path.abspath(__file__), "--client", str(port), str(rate),
                       f"{seconds:g}", reqfile]


def run_client(setup, target, wl, rate, rnd, reqfile, d, seconds=None, raw=True):
    seconds = seconds or DURATION
    cmd = client_cmd(setup.port(target), rate, seconds, reqfile)
    pid = setup.pid(target)
    s0 = snapshot(pid, setup.backend.pid)
    cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=seconds + 60)
    s1 = snapshot(pid, setup.backend.pid)
    r = {"target": target, "workload": wl, "rate": rate, "round": rnd + 1, "problems": []}
    try:
        j = json.loads(cp.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        j = {}
        r["problems"].append(f"client printed no summary: {cp.stderr.strip()[-300:]}")
    r.update({k: j.get(k) for k in ("completed", "statuses", "late", "connections", "n_errors",
                                    "p50_ms", "p99_ms", "mean_ms", "wall_s")})
    r["achieved_rate"] = j.get("rate")
    r.update(cpu_figures(s0, s1, r.get("completed") or 0))
    st = r.get("statuses") or {}
    bad = {k: v for k, v in st.items() if k != "200"}
    if bad:
        r["problems"].append(f"answers other than 200: {bad}")
    if r.get("n_errors"):
        r["problems"].append(f"{r['n_errors']} connection errors, e.g. {j.get('errors', ['?'])[0][:120]}")
    # saturated: more than 5 % of the requests went out over one interval (and 50 ms) late: the
    # server was still busy with the previous one; the achieved rate alone misleads on short runs
    if r.get("completed") and (r.get("late") or 0) > 0.05 * r["completed"]:
        r["problems"].append(f"{r['late']} of {r['completed']} requests sent over max(1/{rate} s, 50 ms) late "
                             f"(achieved {r['achieved_rate']:.1f}/s of {rate}/s offered: saturated)")
        r["saturated"] = True
    if not setup.alive(target):
        r["problems"].append(f"{target} exited")
    r["noisy"] = r["other_pct"] >= NOISE_PCT
    if raw:
        write(os.path.join(d, "raw", f"client-r{rnd + 1}-{wl}-q{rate}-{target}.json"), json.dumps(r, indent=1) + "\n")
    return r


# ---------------------------------------------------------------- crs_replay

def replay_conf(d, pl):
    return write(os.path.join(d, f"replay-pl{pl}.conf"), "\n".join([
        f"Include {os.path.join(ROOT, 'lua', 'crs-base.conf')}",
        "Include /etc/modsecurity/crs/crs-setup.conf",
        f'SecAction "id:900000,phase:1,nolog,pass,t:none,setvar:tx.paranoia_level={pl}"',
        'SecAction "id:900110,phase:1,nolog,pass,t:none,setvar:tx.inbound_anomaly_score_threshold=5,'
        'setvar:tx.outbound_anomaly_score_threshold=4"',
        "Include /etc/modsecurity/crs/REQUEST-900-EXCLUSION-RULES-BEFORE-CRS.conf",
        "Include /usr/share/modsecurity-crs/rules/*.conf",
        "Include /etc/modsecurity/crs/RESPONSE-999-EXCLUSION-RULES-AFTER-CRS.conf", ""]))


def replay_cmd(conf):
    return PROXY_PIN + [os.path.join(BUILD, "crs_replay"), "-s", "910100", "-s", "910140",
                        "-b", str(REPLAY_ROUNDS), conf]


def run_replay(d, pl, wl, raw):
    inp = os.path.join(d, f"replay-{wl}.in")
    with open(inp, "wb") as f:
        f.write(f"{wl}\t{len(raw)}\n".encode() + raw)
    conf = replay_conf(d, pl)
    vals, notes = [], []
    for i in range(3):
        with open(inp, "rb") as f:
            cp = subprocess.run(replay_cmd(conf), stdin=f, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                timeout=300)
        out = cp.stdout.decode(errors="replace")
        write(os.path.join(d, "raw", f"replay-pl{pl}-{wl}-{i + 1}.txt"),
              out + "\n--- stderr\n" + cp.stderr.decode(errors="replace")[-2000:])
        try:
            j = json.loads(out.strip().splitlines()[-1])
            vals.append(float(j["mean_us"]))
        except (ValueError, IndexError, KeyError):
            notes.append(f"crs_replay pl{pl} {wl}: no result (exit {cp.returncode}): "
                         f"{cp.stderr.decode(errors='replace').strip()[-200:]}")
            break
    return (statistics.median(vals) if vals else None), vals, notes


# ---------------------------------------------------------------- summary, chart, report

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(runs):
    """{(workload, rate): {target: {"cpu_us": median, "min", "max", "n", ...}}}"""
    out = {}
    for r in runs:
        if r.get("cpu_us") is None:
            continue
        out.setdefault((r["workload"], r["rate"]), {}).setdefault(r["target"], []).append(r)
    summ = {}
    for key, by in out.items():
        summ[key] = {}
        for t, rs in by.items():
            cs = [r["cpu_us"] for r in rs]
            summ[key][t] = {"n": len(rs), "cpu_us": med(cs), "min": min(cs), "max": max(cs),
                            "cpu_us_ticks": med([r.get("cpu_us_ticks") for r in rs]),
                            "p50_ms": med([r.get("p50_ms") for r in rs]),
                            "achieved_rate": med([r.get("achieved_rate") for r in rs]),
                            "saturated": any(r.get("saturated") for r in rs),
                            "noisy": sum(1 for r in rs if r.get("noisy"))}
    return summ


def headline(summ, replay):
    rows = []
    for (wl, rate), by in sorted(summ.items(), key=lambda kv: (WORKLOADS.index(kv[0][0]), kv[0][1])):
        for pl in PLS:
            s_crs, s_allow = by.get(f"sluice-crs{pl}"), by.get("sluice-allow")
            m_on, m_off = by.get(f"modsec-on{pl}"), by.get("modsec-off")
            g = lambda x: x["cpu_us"] if x else None  # noqa: E731
            ds = g(s_crs) - g(s_allow) if s_crs and s_allow else None
            dm = g(m_on) - g(m_off) if m_on and m_off else None
            rows.append({"workload": wl, "rate": rate, "pl": pl, "sluice_crs": g(s_crs), "sluice_allow": g(s_allow),
                         "modsec_on": g(m_on), "modsec_off": g(m_off), "sluice_crs_cost": ds, "modsec_crs_cost": dm,
                         "ratio_cost": ds / dm if ds is not None and dm else None,
                         "ratio_abs": g(s_crs) / g(m_on) if s_crs and m_on and g(m_on) else None,
                         "replay_us": replay.get((pl, wl), {}).get("median"),
                         "saturated": any(x and x["saturated"] for x in (s_crs, s_allow, m_on, m_off)),
                         "noisy": sum(x["noisy"] for x in (s_crs, s_allow, m_on, m_off) if x)})
    return rows


def table_lines(rows):
    L = ["| workload | rate /s | PL | sluice+crs | sluice+allow_all | ModSec on | ModSec off | "
         "**sluice CRS cost** | **ModSec CRS cost** | **ratio** (cost) | ratio (absolute) | crs_replay µs |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        flag = (" ⚠sat" if r["saturated"] else "") + (" ⚠noise" if r["noisy"] else "")
        L.append(f"| {r['workload']}{flag} | {r['rate']} | {r['pl']} | {fmt(r['sluice_crs'], 1)} | "
                 f"{fmt(r['sluice_allow'], 1)} | {fmt(r['modsec_on'], 1)} | {fmt(r['modsec_off'], 1)} | "
                 f"**{fmt(r['sluice_crs_cost'], 1)}** | **{fmt(r['modsec_crs_cost'], 1)}** | "
                 f"**{fmt(r['ratio_cost'], 2)}** | {fmt(r['ratio_abs'], 2)} | {fmt(r['replay_us'], 1)} |")
    return L


def chart(path, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    lowest = {}
    for r in rows:
        lowest[r["workload"]] = min(lowest.get(r["workload"], r["rate"]), r["rate"])
    rs = [r for r in rows if r["rate"] == lowest[r["workload"]]]
    labels = [f"{r['workload']} ({r['rate']}/s)\nPL{r['pl']}" for r in rs]
    x = list(range(len(rs)))
    w = 0.27
    fig, ax = plt.subplots(figsize=(max(7, 1.5 * len(rs) + 2), 4.6))
    series = [("sluice: crs.lua − allow_all.lua", "sluice_crs_cost", "#2b7bba", -w),
              ("ModSecurity: engine On − Off", "modsec_crs_cost", "#e07b39", 0),
              ("sluice engine only (crs_replay)", "replay_us", "#8fbfe0", w)]
    for label, key, col, off in series:
        vals = [r[key] or 0 for r in rs]
        bars = ax.bar([i + off for i in x], vals, w, label=label, color=col)
        for b, v in zip(bars, vals):
            ax.annotate(f"{v:,.0f}", (b.get_x() + b.get_width() / 2, v), xytext=(0, 2), textcoords="offset points",
                        ha="center", fontsize=7)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("CPU µs per request attributable to CRS")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"OWASP CRS 3.3.4, CPU per request attributable to CRS, at a fixed rate on one keep-alive "
                 f"connection; medians of {ROUNDS} round(s)", fontsize=9)
    if max((r["sluice_crs_cost"] or 0) for r in rs) > 20 * max(1, min((r["modsec_crs_cost"] or 1) for r in rs)):
        ax.set_yscale("log")
        ax.set_ylabel("CPU µs per request attributable to CRS (log scale)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    started, outdir, d = results_dirs("crs")
    t0 = time.monotonic()
    for f in ("sluice", "crs_replay"):
        if not os.access(os.path.join(BUILD, f), os.X_OK):
            sys.exit(f"{PROG}: {BUILD}/{f} missing; run bench/crs.sh (or make BUILD=...)")
    if not shutil.which("nginx"):
        sys.exit(f"{PROG}: nginx not found; run bench/crs.sh")
    n_runs = ROUNDS * sum(len(RATES[w]) for w in WORKLOADS) * len(TARGETS)
    log(f"results in {outdir}; {n_runs} client runs of {DURATION:g} s; {PIN_TEXT}")

    ua = make_ua(0)
    reqs = workloads(ua)
    reqfiles = {}
    for wl, raw in reqs.items():
        reqfiles[wl] = os.path.join(d, f"request-{wl}.http")
        with open(reqfiles[wl], "wb") as f:
            f.write(raw)
    log("workloads: " + ", ".join(f"{wl} {len(raw)} bytes (body {body_len(raw)})" for wl, raw in reqs.items()))

    setup = Setup(d)
    notes, runs, checks = [], [], []
    replay = {}
    try:
        setup.start()
        notes += setup.notes
        # every workload must pass the CRS on both (status 200) before it is measured
        measured = []
        for wl, raw in reqs.items():
            row = {"workload": wl}
            for t in TARGETS:
                row[t], head = exchange_once(setup.port(t), raw)
                if row[t] != 200:
                    notes.append(f"check: {wl} on {t}: status {row[t]} ({head.splitlines()[0] if head else '?'})")
            checks.append(row)
            pl1_ok = all(row.get(t) == 200 for t in TARGETS if t.endswith(("crs1", "on1", "allow", "off")))
            if pl1_ok:
                measured.append(wl)
            else:
                notes.append(f"workload {wl} is blocked at paranoia 1 (or fails): not measured")
        log("check: " + "; ".join(f"{c['workload']}: " + " ".join(f"{t}={c[t]}" for t in TARGETS) for c in checks))

        for wl in measured:
            for pl in PLS:
                m, vals, ns = run_replay(d, pl, wl, reqs[wl])
                replay[(pl, wl)] = {"median": m, "runs": vals}
                notes += ns
                log(f"crs_replay PL{pl} {wl}: {fmt(m, 1)} µs/evaluation ({', '.join(fmt(v, 1) for v in vals)})")

        # one unmeasured warm-up run per target and workload
        for wl in measured:
            for t in TARGETS:
                run_client(setup, t, wl, min(RATES[wl]), 0, reqfiles[wl], d, seconds=0.5, raw=False)
        for rnd in range(ROUNDS):
            k = rnd % len(TARGETS)
            order = TARGETS[k:] + TARGETS[:k]
            for wl in measured:
                for rate in RATES[wl]:
                    line = []
                    for t in order:
                        r = run_client(setup, t, wl, rate, rnd, reqfiles[wl], d)
                        runs.append(r)
                        notes += [f"round {rnd + 1}, {wl} {rate}/s, {t}: {p}" for p in r["problems"]]
                        line.append(f"{t} {fmt(r.get('cpu_us'), 1)}")
                    log(f"r{rnd + 1} {wl:4} {rate:>5}/s  cpu µs/req: " + "  ".join(line))
    finally:
        setup.stop_all()

    errlog = read_tail(os.path.join(d, "sluice.error.log"), 0)
    bad = [l for l in errlog.splitlines() if any(w in l.lower() for w in ("error", "warn", "budget", "crit"))]
    if bad:
        notes.append(f"sluice error log: {len(bad)} lines at warning or above, e.g. {bad[0][:240]}")
    for name, m in setup.modsec.items():
        el = read_tail(m.error_log, 0)
        mb = [l for l in el.splitlines() if ":error]" in l or ":crit]" in l or "ModSecurity: Warning" in l]
        if mb:
            notes.append(f"modsec-{name} error log: {len(mb)} error lines, e.g. {mb[0][:240]}")

    summ = summarize(runs)
    rows = headline(summ, replay)
    charts = []
    try:
        if rows:
            chart(os.path.join(outdir, "crs.png"), rows)
            charts.append("crs.png")
    except Exception as e:  # noqa: BLE001
        notes.append(f"chart not drawn: {e!r}")

    facts = machine_facts([
        ("sluice", f"{cmd_out([os.path.join(BUILD, 'sluice'), '-V']).splitlines()[0]} ({git_describe()})"),
        ("Apache / ModSecurity / CRS", "; ".join(f"{k} {v}" for k, v in sorted(setup.versions.items()))),
        ("nginx (origin)", cmd_out(["nginx", "-v"]).replace("nginx version: ", "")),
    ])
    elapsed = time.monotonic() - t0
    L = ["# CRS: sluice's engine vs ModSecurity", "",
         f"Run {started.strftime('%Y-%m-%d %H:%M:%S')} UTC, {elapsed:.0f} s; {PIN_TEXT}. "
         f"{ROUNDS} round(s), {DURATION:g} s per run, offered rates "
         + ", ".join(f"{w} {'/'.join(map(str, RATES[w]))}" for w in WORKLOADS) + " req/s on one "
         "keep-alive connection (bench/crs.py's paced client). CPU µs per request of the server's process "
         "tree (sluice master + worker; the `apache2 -X` process), medians over the rounds. "
         "**CRS cost** = sluice+crs − sluice+allow_all and ModSecurity On − Off (same config, "
         "`SecRuleEngine Off`): what evaluating the CRS adds; sluice also proxies to an nginx origin and "
         "Apache serves a static file itself, so only the costs compare like for like. **ratio** = "
         "sluice ÷ ModSecurity (below 1: sluice uses less CPU). crs_replay: sluice's engine alone "
         f"(`crs_replay -b {REPLAY_ROUNDS}`), mean µs per evaluation, median of 3.", ""]
    L += table_lines(rows) + [""]
    if charts:
        L += ["![crs](crs.png)", ""]
    L += ["Workloads (the exact bytes are in crs/request-*.http):", ""]
    for wl, raw in reqs.items():
        first = raw.split(b"\r\n", 1)[0].decode()
        L.append(f"- `{wl}`: {len(raw)} bytes, body {body_len(raw)} bytes; first line `{first}`")
    L += ["", "Status check before the load (each workload once to each target):", "",
          "| workload | " + " | ".join(TARGETS) + " |", "|---|" + "---:|" * len(TARGETS)]
    for c in checks:
        L.append(f"| {c['workload']} | " + " | ".join(str(c.get(t)) for t in TARGETS) + " |")
    L += ["", "## Problems seen", ""] + [f"- {n}" for n in notes or ["none"]] + [""]
    L += ["## Every run", "", "| round | workload | rate | target | completed | achieved /s | p50 ms | "
          "CPU µs/req (schedstat) | CPU µs/req (ticks) | CPU % | others' CPU % |",
          "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        L.append(f"| {r['round']} | {r['workload']} | {r['rate']} | {r['target']} | {fmt(r.get('completed'))} | "
                 f"{fmt(r.get('achieved_rate'), 1)} | {fmt(r.get('p50_ms'), 3)} | {fmt(r.get('cpu_us'), 1)} | "
                 f"{fmt(r.get('cpu_us_ticks'), 1)} | {fmt(r.get('cpu_pct'), 1)} | "
                 f"{fmt(r.get('other_pct'))}{' ⚠' if r.get('noisy') else ''} |")
    L += ["", f"⚠: others' CPU at or above {NOISE_PCT}% of one CPU during the run; kept.", "",
          "## Commands", "", "```sh",
          f"# backend\n{setup.backend_cmd}", f"# sluice\n{' '.join(setup.sluice_cmd)}  (pinned once it listens)",
          "# Apache + ModSecurity: apache2 -X -f crs/modsec-{off,on1,on2}-httpd.conf (tests/e2e/modsec.py's "
          "config, SecDebugLogLevel 0, KeepAlive On; off: SecRuleEngine Off)",
          "# the client, one run per target",
          " ".join(client_cmd("PORT", "RATE", DURATION, "crs/request-WORKLOAD.http")),
          "# the engine alone",
          " ".join(replay_cmd("crs/replay-plN.conf")) + " < crs/replay-WORKLOAD.in", "```", ""]
    confs = {"sluice": setup.sluice_conf}
    for name, m in setup.modsec.items():
        confs[f"modsec-{name} ModSecurity"] = m.modsec_conf_path
    if setup.modsec:
        confs["Apache (modsec-on1)"] = next(iter(setup.modsec.values())).conf_path
    report_configs_and_machine(L, confs, facts)
    L += ["Reproduce: `make bench-crs` (or `QUICK=1 make bench-crs`); see docs/bench/inspection.md.", ""]
    write(os.path.join(outdir, "crs.md"), "\n".join(L))
    write(os.path.join(outdir, "crs.json"), json.dumps({
        "started": started.isoformat(), "rounds": ROUNDS, "duration_s": DURATION, "rates": RATES, "pls": PLS,
        "workloads": {wl: {"bytes": len(raw), "body_bytes": body_len(raw)} for wl, raw in reqs.items()},
        "pinning": PIN_TEXT, "headline": rows, "checks": checks,
        "summary": {f"{wl}@{rate}": v for (wl, rate), v in summ.items()},
        "replay": {f"pl{pl}-{wl}": v for (pl, wl), v in replay.items()},
        "runs": runs, "notes": notes, "machine": dict(facts)}, indent=1) + "\n")
    refresh_latest(RESULTS, outdir, "crs", files=["crs.md", "crs.json"] + charts)
    print("\n" + "\n".join(table_lines(rows)) + "\n")
    for n in notes:
        log(f"note: {n}")
    log(f"report: {os.path.join(outdir, 'crs.md')}; elapsed {time.monotonic() - t0:.0f} s")
    missing = [f"{t} {wl}" for wl in WORKLOADS for t in TARGETS
               if not any(r["target"] == t and r["workload"] == wl and r.get("cpu_us") for r in runs)]
    if missing:
        log(f"no figures for: {', '.join(missing)}")
        return 1
    return 0


if __name__ == "__main__":
    run_main(main, PROG)
