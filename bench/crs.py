#!/usr/bin/env python3
"""CRS cost: the OWASP Core Rule Set run by sluice's own engine (lua/crs.lua, the
sluice.crs primitive) vs Apache 2.4 + ModSecurity 2.9 (Debian's
libapache2-mod-security2) running the same CRS 3.3.4 files (Debian's
modsecurity-crs), at paranoia levels 1 and 2: proxy CPU per request (part 1), latency
percentiles under fortio (part 2), memory and configuration-load time (part 3).

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
  modsec-ev (part 2 only) `ev-off`, `ev-on1`, `ev-on2`: the same three configs with
            mpm_event in place of mpm_prefork, still `apache2 -X`: one process, but
            with the event MPM's worker threads. prefork under -X has one thread, which
            holds the first keep-alive connection until it closes, so a second
            connection gets nothing (fortio -c 4 aborts on its 3 s read timeout); event
            serves every connection, as Debian's default Apache does.

Targets: sluice-allow, sluice-crs1, sluice-crs2, modsec-off, modsec-on1, modsec-on2
(part 2: the sluice three and modsec-ev-off, modsec-ev-on1, modsec-ev-on2).
Headline: the CPU per request attributable to CRS evaluation, taken against each
server's own baseline: sluice-crsN − sluice-allow and modsec-onN − modsec-off; the
latency CRS adds, the same differences of fortio's percentiles.

Workloads (the same bytes to every target, and to crs_replay):
  get   the inspection bench's siege request: GET URL_PATH with a random UA_BYTES-byte
        User-Agent (inspection.py's generator) and ordinary browser headers
  form  a ~4 KB application/x-www-form-urlencoded POST of a benign order form
  json  a ~16 KB application/json POST of a benign nested document
Before the load every workload goes once to every target: each must be answered 200
(CRS passes it); a block is reported and that workload is not measured.

Part 1 (`cpu`), load: this file's own client (`crs.py --client`, pinned with the load
side): ONE keep-alive connection, requests paced at a FIXED rate (RATES_*), each sent
when due and read to the end of its response before the next; a request due while the
previous one is still out is sent as soon as it returns; a run where over 5 % of the
requests went out more than one interval (and 50 ms) late is marked saturated. CPU: the
proxy's process tree, from /proc/PID/task/*/schedstat (ns of CPU per thread; the
utime+stime ticks too, as a cross-check), over the client's run, divided by the
completed requests. A rate of `max` is a closed loop instead, siege-style: wrk, requests
back to back on SIEGE_CONNS keep-alive connections to sluice (its one worker saturated,
as under siege's many users) and on one to `apache2 -X` (it serves one connection at a
time); each server's CPU per request is then taken at its own saturation.

Engine only (part 1): `crs_replay -s 910100 -s 910140 -b REPLAY_ROUNDS CONF < request`,
CONF the same includes as crs.lua at paranoia N, pinned to the proxy's CPU: the mean µs
of one evaluation, without any proxying (median of 3 runs).

Part 2 (`fortio`), the get workload only: `fortio load -c C -qps Q -t FORTIO_DURATION
-uniform` on keep-alive connections with the get request's request line and header
lines (fortio sends Host first and the others in alphabetical order: the same bytes
in another order), for each C in CONNS and Q in QPS, against sluice-allow, sluice-crsN,
modsec-ev-off, modsec-ev-onN (N in PLS); p50/p90/p99 from fortio's JSON, medians over
the rounds, and the added latency crsN − allow and ev-onN − ev-off. The rates stay
under ModSecurity's saturation on one CPU (~2.4 ms per GET with the CRS at PL1-2, so
~400/s at most); a run whose achieved rate is under 95 % of the requested one is
marked saturated. The proxy's CPU per request is taken as in part 1.

Part 3 (`memory`), after the load: (a) sluice alone, one process per script with
ONE listener (allow_all.lua, crs.lua at each PL; otherwise the same config): VmRSS,
RssAnon and Pss of the master and of the worker after MEM_REQUESTS requests of each
workload, the time from exec to the first answer, the worker's own script-load time and
Lua memory (its log line); (b) `sluice -t -c CONF` for each of those configs, wall time,
median of 3: the master's compile of the script (for crs.lua, the CRS), which workers
inherit by fork; (c) the three-listener process of parts 1-2 after the load; (d) Apache:
VmRSS/RssAnon of every `apache2 -X` above after the load, and of a `bare` one (the same
config without mod_security2, so without the CRS) after MEM_REQUESTS of each workload;
`apache2 -t -f CONF` wall time, median of 3, for bare, off, on1, on2.

Usage: sh bench/crs.sh (or `make bench-crs`). Environment knobs:
  QUICK=1          1 round, 1.5 s runs, REPLAY_ROUNDS=20, fortio 1 s runs at QPS=300
                   (under two minutes)
  PARTS=a,b        subset of cpu,fortio,memory (all three)
  RATES_GET=a,b    offered request rates per second for get (300), form (RATES_FORM,
  RATES_FORM=..    60) and json (RATES_JSON, 3): the same for every target, and under
  RATES_JSON=..    the slowest one's saturation (one request at a time, so 1 / its CPU
                   time per request: ModSecurity PL2 takes ~2 ms for get, ~10 ms for
                   form, ~220 ms for json on the 2-core VM these were set on)
                   `max` among them: a closed loop (see part 1)
  SIEGE_CONNS=N    connections of a closed-loop run to sluice (32)
  DURATION=S       seconds per part-1 run (6; QUICK 1.5)
  FORTIO_DURATION=S  seconds per fortio run, may be fractional (4; QUICK 1)
  CONNS=a,b        fortio connection counts (1,4)
  QPS=a,b          fortio request rates, for every connection count (100,300; QUICK 300)
  MEM_REQUESTS=N   part 3: requests of each workload before RSS is read (20)
  ROUNDS=N         rounds; each runs every target once per case, rotating the order (3)
  PLS=a,b          paranoia levels (1,2), in every part
  WORKLOADS=a,b    subset of get,form,json
  UA_BYTES=N       length of the random User-Agent (500)
  REPLAY_ROUNDS=N  crs_replay -b (200; QUICK 20)
  PIN=0            do not pin with taskset
  NOISE_PCT=N      others' CPU (% of one CPU) above which a run is marked (25)
  BUILD=dir        where sluice and crs_replay are (build); RESULTS=dir (bench/results)
  BENCH_TS=name    results directory name (default: the UTC start time)
  FORTIO=path      the fortio binary (crs.sh finds or installs it, as inspection.sh does)

Output: RESULTS/<ts>/crs.md, crs.json, crs.png (part 1), crs-fortio.png (part 2), crs/
(configs, the request files, raw client and fortio output, logs, and bin/: the copies of
BUILD's sluice and crs_replay taken at the start, which every part runs, so a rebuild
during the run cannot mix binaries); RESULTS/latest/ gets a copy. Exits non-zero when a
target produced no figures.
"""
import functools
import importlib.util
import json
import os
import random
import re
import shlex
import shutil
import socket
import statistics
import string
import subprocess
import sys
import time
import types
import urllib.parse
import urllib.request

# --client runs in the load process: it needs nothing but the standard library.
if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--client":
    pass
else:
    import benchlib
    from benchlib import (BUILD, CLK_TCK, PIN, QUICK, RESULTS, ROOT, children_cpu, cmd_out, cpuidle_us, descendants, fmt,
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
    # "max": closed loop (siege-style), 0 inside
    RATES = {w: [0 if x.strip() == "max" else int(x) for x in os.environ.get(f"RATES_{w.upper()}", RATES_DEFAULT[w]).split(",")
                 if x.strip()]
             for w in RATES_DEFAULT}
    SIEGE_CONNS = env_int("SIEGE_CONNS", 32, 1)
    DURATION = env_float("DURATION", 1.5 if QUICK else 6.0, 0.2)
    ROUNDS = env_int("ROUNDS", 1 if QUICK else 3, 1)
    PLS = env_list("PLS", "1,2", int)
    WORKLOADS = env_list("WORKLOADS", "get,form,json")
    UA_BYTES = env_int("UA_BYTES", 500, 20)
    REPLAY_ROUNDS = env_int("REPLAY_ROUNDS", 20 if QUICK else 200, 1)
    NOISE_PCT = env_int("NOISE_PCT", 25)
    PARTS = env_list("PARTS", "cpu,fortio,memory")
    FORTIO_DURATION = env_float("FORTIO_DURATION", 1.0 if QUICK else 4.0, 0.2)
    # One connection (the part-1 client's case) and a few: ModSecurity's ~2.4 ms per GET on
    # one CPU caps it near 400/s whatever the connection count, so more connections would
    # only queue. 100/s leaves it ~75 % idle; 300/s is ~75 % busy, where queueing shows.
    CONNS = env_list("CONNS", "1,4", int)
    QPS = env_list("QPS", "300" if QUICK else "100,300", int)
    MEM_REQUESTS = env_int("MEM_REQUESTS", 20, 1)
    FORTIO = os.environ.get("FORTIO", "") or os.path.expanduser("~/go/bin/fortio")
    # where sluice and crs_replay are run from: main() copies BUILD's into the run's directory
    BIN = {"dir": BUILD}
    POOL = 64
    URL_PATH = "/catalog/item?id=4217&page=2&sort=price"
    for p in PLS:
        if p not in (1, 2, 3, 4):
            sys.exit(f"{PROG}: paranoia levels are 1..4, not {p}")
    for w in WORKLOADS:
        if w not in ("get", "form", "json"):
            sys.exit(f"{PROG}: unknown workload {w!r} (get, form, json)")
    for p in PARTS:
        if p not in ("cpu", "fortio", "memory"):
            sys.exit(f"{PROG}: unknown part {p!r} (cpu, fortio, memory)")
    if "fortio" in PARTS and "get" not in WORKLOADS:
        sys.exit(f"{PROG}: the fortio part sends the get workload; add get to WORKLOADS or drop fortio from PARTS")
    TARGETS = (["sluice-allow"] + [f"sluice-crs{p}" for p in PLS]
               + ["modsec-off"] + [f"modsec-on{p}" for p in PLS])
    FORTIO_TARGETS = (["sluice-allow"] + [f"sluice-crs{p}" for p in PLS]
                      + ["modsec-ev-off"] + [f"modsec-ev-on{p}" for p in PLS]) if "fortio" in PARTS else []
    CHECK_TARGETS = TARGETS + [t for t in FORTIO_TARGETS if t not in TARGETS]
    PROXY_PIN, LOAD_PIN, PIN_TEXT = pinning(PIN)
    PROXY_CPUS = {int(x) for x in PROXY_PIN[-1].split(",")} if PROXY_PIN else set()
    PIN_TEXT = PIN_TEXT.replace("wrk and the backend", "the client, the backend and crs_replay's parent")


def log(msg):
    print(f"[crs] {msg}", flush=True)


# ---------------------------------------------------------------- the client (load side)

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

@functools.lru_cache(maxsize=None)       # a second import would find the pytest stand-in and fail
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
        connection for both servers), and ENGINE On or Off. MPM "event" in place of the
        class's prefork (part 2: under -X prefork has one thread for every connection);
        SECURITY2 False leaves mod_security2 out (its IfModule block with the CRS goes too)."""

        def __init__(self, workdir, name, paranoia, engine, mpm="prefork", security2=True):
            super().__init__(workdir, name=name, paranoia=paranoia, blocking=True, debug_level=0)
            self.engine = engine
            self.mpm = mpm
            self.security2 = security2

        def _write_config(self):
            super()._write_config()
            with open(self.conf_path) as f:
                conf = f.read()
            if "KeepAlive Off" not in conf:
                raise RuntimeError("modsec.py's config has no 'KeepAlive Off' line to switch")
            conf = conf.replace("KeepAlive Off", "KeepAlive On\nMaxKeepAliveRequests 0\nKeepAliveTimeout 30")
            for want, mod in ((self.mpm != "prefork", "mpm_prefork"), (not self.security2, "security2")):
                if not want:
                    continue
                line = f"LoadModule {mod}_module {modsec.APACHE_MODULES}/mod_{mod}.so\n"
                if line not in conf:
                    raise RuntimeError(f"modsec.py's config has no {line.strip()!r} line to change")
                conf = conf.replace(line, "" if mod == "security2" else
                                    f"LoadModule mpm_{self.mpm}_module {modsec.APACHE_MODULES}/mod_mpm_{self.mpm}.so\n")
            if not self.security2:      # a per-module log level names a module that must be loaded
                conf = conf.replace("LogLevel info security2:crit\n", "LogLevel info\n")
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

def conf_sluice(d, ports, scripts, error_log=None):
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
    return f"""# sluice, one worker; {', '.join(scripts)}: the same inspect settings
workers: 1
error_log: {error_log or os.path.join(d, 'sluice.error.log')}
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
            "load": children_cpu(), "busy": system_busy_ticks(), "t": time.monotonic(),
            "idle_us": cpuidle_us(PROXY_CPUS) if PROXY_CPUS else None}


def cpu_figures(s0, s1, done):
    dns = sum(v - s0["ns"][k] for k, v in s1["ns"].items() if k in s0["ns"])
    dt = sum(v - s0["ticks"][k] for k, v in s1["ticks"].items() if k in s0["ticks"])
    db = sum(v - s0["backend"][k] for k, v in s1["backend"].items() if k in s0["backend"])
    wall = s1["t"] - s0["t"]
    load_s = s1["load"] - s0["load"]
    busy = None
    if done and s0["idle_us"] is not None and s1["idle_us"] is not None:
        busy = (wall * 1e6 * len(PROXY_CPUS) - (s1["idle_us"] - s0["idle_us"])) / done
    return {"cpu_us": dns / 1e3 / done if done else None,
            "cpu_us_ticks": dt / CLK_TCK * 1e6 / done if done else None,
            "busy_us": busy,
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
        self.sluice_cmd = PROXY_PIN + [os.path.join(BIN["dir"], "sluice"), "-c", self.sluice_conf]
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
        self.cls = bench_modsec_class(ms)
        variants = [("off", 1, "Off")] + [(f"on{p}", p, "On") for p in PLS]
        for pre, mpm in [("", "prefork")] + ([("ev-", "event")] if FORTIO_TARGETS else []):
            for name, pl, engine in variants:
                self.start_modsec(pre + name, pl, engine, mpm=mpm)
        self.versions = ms.package_versions()

    def start_modsec(self, name, pl, engine, **kw):
        t1 = time.monotonic()
        m = self.cls(self.d, f"modsec-{name}", pl, engine, **kw)
        self.modsec[name] = m          # stopped in stop_all() even if start() fails
        m.start(timeout=120.0)
        # after start(): its probe request has been answered, so every thread the event
        # MPM makes exists and is pinned with the rest
        if PROXY_CPUS:
            pin_tree(m.proc.pid, PROXY_CPUS)
        log(f"apache2 -X modsec-{name} (engine {engine}, paranoia {pl}, "
            f"{'mpm_' + kw.get('mpm', 'prefork') if kw.get('security2', True) else 'no mod_security2'}) "
            f"up in {time.monotonic() - t1:.1f} s")
        return m

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


# wrk's request is the workload's bytes as they are; done() prints what run_client reads
WRK_SCRIPT = r"""
local f = assert(io.open(os.getenv("CRS_REQFILE"), "rb"))
local raw = f:read("*a")
f:close()
request = function() return raw end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('{"completed": %d, "wall_s": %.6f, "n_errors": %d, "non2xx": %d, '
    .. '"p50_ms": %.4f, "p99_ms": %.4f, "mean_ms": %.4f}\n', summary.requests, summary.duration / 1e6,
    e.connect + e.read + e.write + e.timeout, e.status, latency:percentile(50) / 1e3,
    latency:percentile(99) / 1e3, latency.mean / 1e3))
end
"""


def rate_label(rate):
    return "max" if rate == 0 else str(rate)


def siege_conns(target):
    """Closed loop: SIEGE_CONNS keep-alive connections for sluice (one worker: it is
    saturated with a few); one for `apache2 -X`, which serves one connection at a time
    (more would only wait in its backlog)."""
    return 1 if target.startswith("modsec") else SIEGE_CONNS


def run_wrk(setup, target, reqfile, d, seconds):
    """wrk closed loop on TARGET: as many requests as it answers, SIEGE_CONNS at a time."""
    script = os.path.join(d, "wrk-request.lua")
    if not os.path.exists(script):
        write(script, WRK_SCRIPT)
    cmd = LOAD_PIN + ["wrk", "-t1", f"-c{siege_conns(target)}", f"-d{max(1, round(seconds))}s", "--timeout", "30s",
                      "-s", script, f"http://127.0.0.1:{setup.port(target)}/"]
    env = dict(os.environ, CRS_REQFILE=os.path.abspath(reqfile))
    cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=seconds + 60, env=env)
    lines = [x for x in cp.stdout.splitlines() if x.startswith("{")]
    if not lines:
        return {}, f"wrk printed no summary: {(cp.stderr or cp.stdout).strip()[-300:]}"
    j = json.loads(lines[-1])
    j["rate"] = j["completed"] / j["wall_s"] if j.get("wall_s") else 0
    j["statuses"] = {"200": j["completed"] - j["non2xx"]} if not j["non2xx"] else {"200": j["completed"] - j["non2xx"],
                                                                                     "other": j["non2xx"]}
    j["late"] = 0
    j["connections"] = siege_conns(target)
    return j, None


def inspect_totals(setup, target):
    """sluice's own inspection histogram for TARGET's listener (its sum in seconds and its
    count, from the admin /metrics), or None: the hook's time per request, as sluice
    measures it around the Lua call."""
    kind, listener = target.split("-", 1)
    if kind != "sluice":
        return None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{setup.sp['admin']}/metrics", timeout=10) as resp:
            text = resp.read().decode("utf-8", "replace")
    except OSError:
        return None
    got = {}
    for line in text.splitlines():
        for k in ("sum", "count"):
            if line.startswith(f'sluice_inspect_seconds_{k}{{listener="{listener}"}} '):
                got[k] = float(line.split()[-1])
    return (got["sum"], got["count"]) if len(got) == 2 else None


def run_client(setup, target, wl, rate, rnd, reqfile, d, seconds=None, raw=True):
    seconds = seconds or DURATION
    pid = setup.pid(target)
    r = {"target": target, "workload": wl, "rate": rate, "round": rnd + 1, "problems": []}
    h0 = inspect_totals(setup, target)
    s0 = snapshot(pid, setup.backend.pid)
    if rate == 0:
        j, err = run_wrk(setup, target, reqfile, d, seconds)
        if err:
            r["problems"].append(err)
    else:
        cmd = client_cmd(setup.port(target), rate, seconds, reqfile)
        cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=seconds + 60)
        try:
            j = json.loads(cp.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            j = {}
            r["problems"].append(f"client printed no summary: {cp.stderr.strip()[-300:]}")
    s1 = snapshot(pid, setup.backend.pid)
    h1 = inspect_totals(setup, target)
    r["hook_us"] = ((h1[0] - h0[0]) / (h1[1] - h0[1]) * 1e6
                    if h0 and h1 and h1[1] > h0[1] else None)
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
        write(os.path.join(d, "raw", f"client-r{rnd + 1}-{wl}-q{rate_label(rate)}-{target}.json"),
              json.dumps(r, indent=1) + "\n")
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
    return PROXY_PIN + [os.path.join(BIN["dir"], "crs_replay"), "-s", "910100", "-s", "910140",
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


# ---------------------------------------------------------------- part 2: fortio

def request_headers(raw):
    """[(name, value)] of a request's header lines, Host included, in order."""
    head = raw.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
    return [tuple(h.split(": ", 1)) for h in head]


def fortio_cmd(port, c, q, headers, out_json, seconds=None):
    hs = []
    for k, v in headers:
        hs += ["-H", f"{k}: {v}"]
    return LOAD_PIN + [FORTIO, "load", "-qps", str(q), "-c", str(c), "-t", f"{seconds or FORTIO_DURATION:g}s",
                       "-uniform", "-r", "0.00001", "-p", "50,90,99", "-loglevel", "Warning", "-json",
                       out_json] + hs + [f"http://127.0.0.1:{port}{URL_PATH}"]


def run_fortio(setup, target, rnd, c, q, headers, d, seconds=None, raw=True):
    seconds = seconds or FORTIO_DURATION
    base = os.path.join(d, "raw", f"fortio-r{rnd + 1}-c{c}-q{q}-{target}" if raw else f"fortio-warmup-{target}")
    cmd = fortio_cmd(setup.port(target), c, q, headers, base + ".json", seconds)
    pid = setup.pid(target)
    s0 = snapshot(pid, setup.backend.pid)
    try:
        cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=seconds + 30)
        out = cp.stdout.decode(errors="replace")
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") + "\n(timed out)"
    s1 = snapshot(pid, setup.backend.pid)
    ua = dict(headers).get("User-Agent", "")
    write(base + ".txt", shlex.join(cmd).replace(ua, "<UA: crs/request-get.http>") + "\n" + out)
    r = {"target": target, "round": rnd + 1, "c": c, "qps": q, "raw": os.path.relpath(base + ".json", d),
         "problems": []}
    benchlib.fortio_result(base + ".json", r, out)
    r.update(cpu_figures(s0, s1, r.get("count") or 0))
    # fortio paces each connection at Q/C per second and catches up after a slow answer,
    # so it only falls short when the server cannot serve Q per second
    if r.get("actual_qps") is not None and r["actual_qps"] < 0.95 * q:
        r["problems"].append(f"achieved {r['actual_qps']:.1f}/s of {q}/s requested: saturated")
        r["saturated"] = True
    if not setup.alive(target):
        r["problems"].append(f"{target} exited")
    r["noisy"] = r["other_pct"] >= NOISE_PCT
    return r


# ---------------------------------------------------------------- part 3: memory and load time

def proc_mem(pid):
    """{VmRSS, RssAnon, RssFile, Threads, Pss} of one process (KiB; Threads a count); {} if gone."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "RssAnon", "RssFile", "Threads"):
                    out[k] = int(v.split()[0])
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    out["Pss"] = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return out


def send_each(port, reqs, n):
    """Each request's bytes N times on one keep-alive connection: {name: {status: count}}."""
    out = {}
    for name, raw in reqs.items():
        st = {}
        s, buf = socket.create_connection(("127.0.0.1", port), timeout=30), b""
        try:
            for _ in range(n):
                s.sendall(raw)
                status, close, buf = read_response(s, buf)
                st[status] = st.get(status, 0) + 1
                if close:
                    s.close()
                    s, buf = socket.create_connection(("127.0.0.1", port), timeout=30), b""
        except (OSError, ValueError, IndexError) as e:
            st[repr(e)[:80]] = st.get(repr(e)[:80], 0) + 1
        finally:
            s.close()
        out[name] = st
    return out


def load_times(cmds, env=None):
    """{name: [wall s of each run]}: 3 runs of every command, interleaved (each must exit 0)."""
    out, bad = {k: [] for k in cmds}, []
    for _ in range(3):
        for name, cmd in cmds.items():
            t0 = time.monotonic()
            cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300,
                                env=(env or {}).get(name))
            dt = time.monotonic() - t0
            if cp.returncode == 0:
                out[name].append(dt)
            else:
                bad.append(f"{' '.join(cmd)}: exit {cp.returncode}: {cp.stdout.decode(errors='replace')[-200:]}")
    return out, bad


def sluice_alone(setup, d, name, script, reqs):
    """sluice with one listener running SCRIPT: its memory after MEM_REQUESTS of each request."""
    ports = {name: free_port(), "admin": free_port(), "backend": setup.bport}
    errlog = os.path.join(d, f"sluice-alone-{name}.error.log")
    conf = write(os.path.join(d, f"sluice-alone-{name}.yaml"), conf_sluice(d, ports, {name: script}, errlog))
    row = {"name": name, "script": os.path.relpath(script, ROOT) if script.startswith(ROOT) else script,
           "conf": conf, "problems": []}
    t0 = time.monotonic()
    p = start([os.path.join(BIN["dir"], "sluice"), "-c", conf], os.path.join(d, f"sluice-alone-{name}.out"))
    try:
        if not wait_port(ports[name], p, deadline=180.0):
            row["problems"].append(f"did not start: {read_tail(errlog, 0)[-300:]}")
            return row
        # the master listens before its worker is up: the first answer is the real start
        status, _ = exchange_once(ports[name], reqs[next(iter(reqs))])
        row["first_answer_s"] = time.monotonic() - t0
        wait_children(p)
        if PROXY_CPUS:
            pin_tree(p.pid, PROXY_CPUS)
        row["statuses"] = send_each(ports[name], reqs, MEM_REQUESTS)
        row["master"] = proc_mem(p.pid)
        row["workers"] = [proc_mem(k) for k in descendants(p.pid)]
        if status != 200 or any(set(st) != {200} for st in row["statuses"].values()):
            row["problems"].append(f"answers: first {status}, then {row['statuses']}")
    finally:
        stop(p)
    m = re.search(r"loaded in ([0-9.]+) ms, Lua memory (\d+) KiB", read_tail(errlog, 0))
    if m:
        row["worker_load_ms"], row["lua_kib"] = float(m.group(1)), int(m.group(2))
    return row


def memory_part(setup, d, reqs):
    """Part 3; every process it starts is stopped before it returns (the bare Apache by stop_all)."""
    res = {"sluice": [], "notes": []}
    for name, script in setup.scripts.items():
        row = sluice_alone(setup, d, name, script, reqs)
        res["notes"] += [f"sluice alone, {name}: {p}" for p in row.pop("problems")]
        res["sluice"].append(row)
        log(f"memory: sluice alone {name}: master {row.get('master', {}).get('VmRSS')} KiB, worker(s) "
            f"{[w.get('VmRSS') for w in row.get('workers', [])]} KiB VmRSS, first answer after "
            f"{fmt(row.get('first_answer_s'), 2)} s")
    sl = os.path.join(BIN["dir"], "sluice")
    t, bad = load_times({r["name"]: PROXY_PIN + [sl, "-t", "-c", r["conf"]] for r in res["sluice"]})
    res["notes"] += bad
    for r in res["sluice"]:
        r["check_s"] = t.get(r["name"])
    res["three"] = {"master": proc_mem(setup.sluice.pid),
                    "workers": [proc_mem(k) for k in descendants(setup.sluice.pid)]}

    bare = setup.start_modsec("bare", 1, "Off", security2=False)
    res["apache_statuses_bare"] = send_each(bare.port, reqs, MEM_REQUESTS)
    res["apache"] = {name: proc_mem(m.proc.pid) for name, m in setup.modsec.items() if m.proc is not None}
    names = [n for n in ["bare", "off"] + [f"on{p}" for p in PLS] if n in setup.modsec]
    ms = modsec_module()
    t, bad = load_times({n: PROXY_PIN + [ms.APACHE2, "-t", "-f", setup.modsec[n].conf_path] for n in names},
                        env={n: setup.modsec[n]._env() for n in names})
    res["notes"] += bad
    res["apache_check_s"] = t
    bare.stop()
    for n, v in res["apache"].items():
        log(f"memory: apache2 -X modsec-{n}: VmRSS {v.get('VmRSS')} KiB; apache2 -t "
            f"{fmt(med(t.get(n) or []), 2)} s")
    return res


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
                            "hook_us": med([r.get("hook_us") for r in rs]),
                            "busy_us": med([r.get("busy_us") for r in rs]),
                            "p50_ms": med([r.get("p50_ms") for r in rs]),
                            "achieved_rate": med([r.get("achieved_rate") for r in rs]),
                            "saturated": any(r.get("saturated") for r in rs),
                            "noisy": sum(1 for r in rs if r.get("noisy"))}
    return summ


def diff(a, b, key):
    """a[key] - b[key] for two summaries, None if either is missing."""
    return a[key] - b[key] if a and b and a.get(key) is not None and b.get(key) is not None else None


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
                         "busy_cost": diff(s_crs, s_allow, "busy_us"), "modsec_busy_cost": diff(m_on, m_off, "busy_us"),
                         "hook_cost": (s_crs["hook_us"] - s_allow["hook_us"]
                                       if s_crs and s_allow and s_crs.get("hook_us") is not None
                                       and s_allow.get("hook_us") is not None else None),
                         "saturated": any(x and x["saturated"] for x in (s_crs, s_allow, m_on, m_off)),
                         "noisy": sum(x["noisy"] for x in (s_crs, s_allow, m_on, m_off) if x)})
    return rows


def table_lines(rows):
    L = ["| workload | rate /s | PL | sluice+crs | sluice+allow_all | ModSec on | ModSec off | "
         "**sluice CRS cost** | **ModSec CRS cost** | **ratio** (cost) | ratio (absolute) | sluice hook µs | "
         "crs_replay µs |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        flag = (" ⚠sat" if r["saturated"] else "") + (" ⚠noise" if r["noisy"] else "")
        L.append(f"| {r['workload']}{flag} | {rate_label(r['rate'])} | {r['pl']} | {fmt(r['sluice_crs'], 1)} | "
                 f"{fmt(r['sluice_allow'], 1)} | {fmt(r['modsec_on'], 1)} | {fmt(r['modsec_off'], 1)} | "
                 f"**{fmt(r['sluice_crs_cost'], 1)}** | **{fmt(r['modsec_crs_cost'], 1)}** | "
                 f"**{fmt(r['ratio_cost'], 2)}** | {fmt(r['ratio_abs'], 2)} | {fmt(r['hook_cost'], 1)} | "
                 f"{fmt(r['replay_us'], 1)} |")
    return L


def busy_table_lines(rows):
    """The CRS costs again, from the proxy CPU's busy time instead of the processes' own."""
    if not any(r.get("busy_cost") is not None for r in rows):
        return []
    L = ["| workload | rate /s | PL | sluice CRS cost (busy) | ModSec CRS cost (busy) | **ratio** (busy) | "
         "sluice hook µs |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        b, m = r.get("busy_cost"), r.get("modsec_busy_cost")
        L.append(f"| {r['workload']} | {rate_label(r['rate'])} | {r['pl']} | {fmt(b, 1)} | {fmt(m, 1)} | "
                 f"**{fmt(b / m if b is not None and m else None, 3)}** | {fmt(r.get('hook_cost'), 1)} |")
    return L


def chart(path, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    lowest = {}
    for r in rows:    # the lowest fixed rate; the closed loop only when there is none
        key = r["rate"] or float("inf")
        if key <= lowest.get(r["workload"], (float("inf"), 0))[0]:
            lowest[r["workload"]] = (key, r["rate"])
    lowest = {w: v[1] for w, v in lowest.items()}
    rs = [r for r in rows if r["rate"] == lowest[r["workload"]]]
    labels = [f"{r['workload']} ({rate_label(r['rate'])}/s)\nPL{r['pl']}" for r in rs]
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
    vals = [r[k] for r in rs for k in ("sluice_crs_cost", "modsec_crs_cost", "replay_us") if r[k] and r[k] > 0]
    if vals and max(vals) > 20 * min(vals):     # a GET's cost beside a JSON body's is invisible otherwise
        ax.set_yscale("log")
        ax.set_ylabel("CPU µs per request attributable to CRS (log scale)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fortio_summary(fruns):
    """{(target, c, q): {"n", "p50", "p90", "p99", "actual_qps", "cpu_us": medians, "saturated", "noisy", "errors"}}"""
    out = {}
    for r in fruns:
        if r.get("p50") is not None:
            out.setdefault((r["target"], r["c"], r["qps"]), []).append(r)
    return {k: {"n": len(rs), **{m: med([r.get(m) for r in rs]) for m in ("p50", "p90", "p99", "actual_qps", "cpu_us")},
                "saturated": any(r.get("saturated") for r in rs), "noisy": sum(1 for r in rs if r.get("noisy")),
                "errors": sum(r.get("errors") or 0 for r in rs)}
            for k, rs in out.items()}


def fortio_rows(fsum):
    """One row per connection count, rate, paranoia level and server: the baseline's and the
    CRS target's percentiles and their difference (of the medians)."""
    rows = []
    for c in CONNS:
        for q in QPS:
            for pl in PLS:
                for server, base, crs in (("sluice", "sluice-allow", f"sluice-crs{pl}"),
                                          ("ModSecurity", "modsec-ev-off", f"modsec-ev-on{pl}")):
                    b, x = fsum.get((base, c, q)), fsum.get((crs, c, q))
                    if not b and not x:
                        continue
                    row = {"c": c, "qps": q, "pl": pl, "server": server, "base": base, "crs": crs}
                    for k in ("p50", "p90", "p99", "actual_qps", "cpu_us"):
                        row[f"base_{k}"] = b[k] if b else None
                        row[f"crs_{k}"] = x[k] if x else None
                    for k in ("p50", "p90", "p99"):
                        row[f"d_{k}"] = x[k] - b[k] if b and x else None
                    row["saturated"] = any(s and s["saturated"] for s in (b, x))
                    row["noisy"] = sum(s["noisy"] for s in (b, x) if s)
                    row["errors"] = sum(s["errors"] for s in (b, x) if s)
                    rows.append(row)
    return rows


def fortio_table_lines(frows):
    L = []
    for c in CONNS:
        rs = [r for r in frows if r["c"] == c]
        if not rs:
            continue
        L += [f"{c} connection{'s' if c > 1 else ''}:", "",
              "| server | QPS | PL | base p50 | base p90 | base p99 | CRS p50 | CRS p90 | CRS p99 | **+p50** | "
              "**+p90** | **+p99** | achieved QPS (base / CRS) | CPU µs/req (base / CRS) |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rs:
            flag = (" ⚠sat" if r["saturated"] else "") + (" ⚠noise" if r["noisy"] else "") + \
                   (f" ⚠{r['errors']} errors" if r["errors"] else "")
            d = [f"**{r[f'd_{k}']:+.3f}**" if r[f"d_{k}"] is not None else "—" for k in ("p50", "p90", "p99")]
            L.append(f"| {r['server']}{flag} | {r['qps']} | {r['pl']} | "
                     + " | ".join(fmt(r[f"base_{k}"], 3) for k in ("p50", "p90", "p99")) + " | "
                     + " | ".join(fmt(r[f"crs_{k}"], 3) for k in ("p50", "p90", "p99")) + " | "
                     + " | ".join(d) + f" | {fmt(r['base_actual_qps'], 1)} / {fmt(r['crs_actual_qps'], 1)} | "
                     f"{fmt(r['base_cpu_us'])} / {fmt(r['crs_cpu_us'])} |")
        L.append("")
    return L


def chart_fortio(path, frows):
    """Absolute percentiles per target (p50 bar, p90 and p99 markers, log scale), each CRS
    bar labelled with its +p50: a stall in one baseline run shows as a high marker, where a
    chart of differences would show it as a large negative bar."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cs = [c for c in CONNS if any(r["c"] == c for r in frows)]
    fig, axes = plt.subplots(1, len(cs), figsize=(max(10, 0.45 * (2 + 2 * len(PLS)) * len(QPS) * len(cs) + 2.5), 5),
                             sharey=True, squeeze=False)
    cols = {("sluice", "base"): "#9ec8e8", ("sluice", "crs"): "#2b7bba",
            ("ModSecurity", "base"): "#f3c09a", ("ModSecurity", "crs"): "#e07b39"}
    lo, hi = 1.0, 1.0
    for ax, c in zip(axes[0], cs):
        ticks, labels, x = [], [], 0.0
        for q in QPS:
            start = x
            for server in ("sluice", "ModSecurity"):
                rs = [r for r in frows if r["c"] == c and r["qps"] == q and r["server"] == server]
                if not rs:
                    continue
                bars = [("base", rs[0], "allow_all" if server == "sluice" else "Off")]
                bars += [("crs", r, f"PL{r['pl']}") for r in rs]
                for kind, r, name in bars:
                    p50, p90, p99 = (r[f"{kind}_{k}"] for k in ("p50", "p90", "p99"))
                    if p50 is None:
                        x += 1
                        continue
                    first = c == cs[0] and q == QPS[0] and (kind == "base" or r["pl"] == PLS[0])
                    ax.bar(x, p50, 0.8, color=cols[(server, kind)],
                           label=f"{server} {'baseline' if kind == 'base' else 'with the CRS'}" if first else None)
                    ax.plot([x, x], [p50, p99], color="#333", lw=0.8)
                    ax.plot(x, p90, marker="_", color="#333", ms=9)
                    ax.plot(x, p99, marker="^", color="#333", ms=4)
                    text = f"{p50:.2f}" if kind == "base" else f"{p50:.2f}\n(+{r['d_p50']:.2f})"
                    ax.annotate(text, (x, p50), xytext=(0, -2), textcoords="offset points", ha="center", va="top",
                                fontsize=5.5, color="white" if kind == "crs" else "#222")
                    ax.annotate(name, (x, 0), xycoords=("data", "axes fraction"), xytext=(0, 2),
                                textcoords="offset points", ha="center", va="bottom", fontsize=6, rotation=90)
                    lo, hi = min(lo, p50), max(hi, p99)
                    x += 1
                x += 0.3
            sat = any(r["saturated"] for r in frows if r["c"] == c and r["qps"] == q)
            ticks.append((start + x - 1.3) / 2)
            labels.append(f"{q}/s" + (" ⚠sat" if sat else ""))
            x += 1
        ax.set_xticks(ticks, labels, fontsize=8)
        ax.set_yscale("log")
        ax.grid(axis="y", which="both", alpha=0.25)
        ax.set_title(f"fortio -c {c}", fontsize=9)
    axes[0][0].set_ylim(lo / 2.5, hi * 1.6)
    axes[0][0].set_ylabel("latency, ms (log scale): bar p50, – p90, ▲ p99")
    axes[0][0].legend(fontsize=7, loc="upper left", ncol=2)
    fig.suptitle(f"OWASP CRS 3.3.4, GET with a {UA_BYTES}-byte User-Agent, fortio -uniform {FORTIO_DURATION:g} s runs, "
                 f"keep-alive: latency with and without the CRS\nmedians of {ROUNDS} round(s); "
                 "(+x): the CRS target's p50 minus its baseline's (sluice allow_all.lua, ModSecurity Off)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def mib(kib):
    return None if kib is None else kib / 1024


def memory_lines(mem):
    L = []
    srows = mem.get("sluice") or []
    if srows:
        L += ["sluice, one process per script with ONE listener (`workers: 1`, otherwise part 1's listener "
              f"config), after {MEM_REQUESTS} requests of each workload; MiB from /proc/PID/status "
              "(VmRSS, RssAnon) and /proc/PID/smaps_rollup (Pss: shared pages split between master and "
              "worker, so master Pss + worker Pss is what the pair holds); `sluice -t -c CONF`: the "
              "master's check of the config, which compiles the script (for crs.lua, the whole CRS) — "
              "the same compile a start does before the worker forks; wall seconds, median of 3 "
              "(interleaved); first answer: from exec to the first response; the worker's script load "
              "and Lua memory: its own log line.", "",
              "| process | master VmRSS | worker VmRSS | worker RssAnon | master Pss | worker Pss | "
              "**Pss total** | `sluice -t` s | exec → first answer s | worker script load ms | Lua KiB |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        label = {"allow": "allow_all.lua"}
        label.update({f"crs{p}": f"crs.lua PL{p}" for p in PLS})
        base = None
        for r in srows:
            ma, ws = r.get("master") or {}, r.get("workers") or [{}]
            wk = ws[0] if ws else {}
            tot = (ma.get("Pss") or 0) + sum(w.get("Pss") or 0 for w in ws) if ma else None
            r["pss_total_kib"] = tot
            if r["name"] == "allow":
                base = r
            L.append(f"| {label.get(r['name'], r['name'])}{'' if len(ws) == 1 else f' ({len(ws)} children)'} | "
                     f"{fmt(mib(ma.get('VmRSS')), 1)} | {fmt(mib(wk.get('VmRSS')), 1)} | "
                     f"{fmt(mib(wk.get('RssAnon')), 1)} | {fmt(mib(ma.get('Pss')), 1)} | {fmt(mib(wk.get('Pss')), 1)} | "
                     f"**{fmt(mib(tot), 1)}** | {fmt(med(r.get('check_s') or []), 3)} | "
                     f"{fmt(r.get('first_answer_s'), 2)} | {fmt(r.get('worker_load_ms'), 1)} | {fmt(r.get('lua_kib'))} |")
        if base and base.get("master"):
            for r in srows:
                if r is base or not r.get("master"):
                    continue
                b_w, r_w = (base.get("workers") or [{}])[0], (r.get("workers") or [{}])[0]
                dm = lambda a, b, k: fmt(mib((a.get(k) or 0) - (b.get(k) or 0)), 1)  # noqa: E731
                dt = (med(r.get("check_s") or []) or 0) - (med(base.get("check_s") or []) or 0)
                L.append(f"| − allow_all: {label.get(r['name'], r['name'])} adds | "
                         f"{dm(r['master'], base['master'], 'VmRSS')} | {dm(r_w, b_w, 'VmRSS')} | "
                         f"{dm(r_w, b_w, 'RssAnon')} | {dm(r['master'], base['master'], 'Pss')} | "
                         f"{dm(r_w, b_w, 'Pss')} | **{fmt(mib((r['pss_total_kib'] or 0) - (base['pss_total_kib'] or 0)), 1)}** | "
                         f"{dt:+.3f} | | | |")
        three = mem.get("three") or {}
        if three.get("master"):
            ws = three.get("workers") or [{}]
            tot = (three["master"].get("Pss") or 0) + sum(w.get("Pss") or 0 for w in ws)
            L.append(f"| part 1's process (allow, {', '.join(f'crs{p}' for p in PLS)}), after all the load | "
                     f"{fmt(mib(three['master'].get('VmRSS')), 1)} | {fmt(mib(ws[0].get('VmRSS')), 1)} | "
                     f"{fmt(mib(ws[0].get('RssAnon')), 1)} | {fmt(mib(three['master'].get('Pss')), 1)} | "
                     f"{fmt(mib(ws[0].get('Pss')), 1)} | **{fmt(mib(tot), 1)}** | | | | |")
        L.append("")
    ap = mem.get("apache") or {}
    if ap:
        chk = mem.get("apache_check_s") or {}
        what = {"bare": "no mod_security2 (no CRS)", "off": "mod_security2 + CRS PL1 parsed, SecRuleEngine Off"}
        what.update({f"on{p}": f"mod_security2 + CRS PL{p}, On" for p in PLS})
        L += ["Apache, one `apache2 -X` process each: VmRSS and RssAnon (MiB) after all the load (`bare`: after "
              f"{MEM_REQUESTS} requests of each workload); `apache2 -t -f CONF`: the parse of the config (for "
              "ModSecurity, the CRS), wall seconds, median of 3 (interleaved).", "",
              "| instance | MPM | what | VmRSS | RssAnon | threads | `apache2 -t` s |", "|---|---|---|---:|---:|---:|---:|"]
        for name in sorted(ap, key=lambda n: (n.startswith("ev-"), n != "bare", n)):
            v = ap[name]
            core = name[3:] if name.startswith("ev-") else name
            L.append(f"| modsec-{name} | {'event' if name.startswith('ev-') else 'prefork'} | {what.get(core, '')} | "
                     f"{fmt(mib(v.get('VmRSS')), 1)} | {fmt(mib(v.get('RssAnon')), 1)} | {fmt(v.get('Threads'))} | "
                     f"{fmt(med(chk.get(name) or []), 3)} |")
        L.append("")
    return L


def main():
    started, outdir, d = results_dirs("crs")
    t0 = time.monotonic()
    for f in ("sluice", "crs_replay"):
        if not os.access(os.path.join(BUILD, f), os.X_OK):
            sys.exit(f"{PROG}: {BUILD}/{f} missing; run bench/crs.sh (or make BUILD=...)")
    # A rebuild of BUILD while this runs (make in another shell) would have the later parts
    # run other binaries than the earlier ones: every part runs these copies.
    BIN["dir"] = os.path.join(d, "bin")
    os.makedirs(BIN["dir"], exist_ok=True)
    built = {}
    for f in ("sluice", "crs_replay"):
        shutil.copy2(os.path.join(BUILD, f), os.path.join(BIN["dir"], f))
        built[f] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(os.path.getmtime(os.path.join(BUILD, f))))
    source = git_describe()
    if not shutil.which("nginx"):
        sys.exit(f"{PROG}: nginx not found; run bench/crs.sh")
    if "fortio" in PARTS and not (os.path.isabs(FORTIO) and os.access(FORTIO, os.X_OK)) \
            and not shutil.which(FORTIO):
        sys.exit(f"{PROG}: fortio not found ({FORTIO}); run bench/crs.sh, set FORTIO=path, "
                 "or leave fortio out of PARTS")
    n_runs = ROUNDS * sum(len(RATES[w]) for w in WORKLOADS) * len(TARGETS) if "cpu" in PARTS else 0
    n_fortio = ROUNDS * len(CONNS) * len(QPS) * len(FORTIO_TARGETS)
    log(f"results in {outdir}; parts {','.join(PARTS)}: {n_runs} client runs of {DURATION:g} s, {n_fortio} fortio "
        f"runs of {FORTIO_DURATION:g} s; {PIN_TEXT}")

    ua = make_ua(0)
    reqs = workloads(ua)
    reqfiles = {}
    for wl, raw in reqs.items():
        reqfiles[wl] = os.path.join(d, f"request-{wl}.http")
        with open(reqfiles[wl], "wb") as f:
            f.write(raw)
    log("workloads: " + ", ".join(f"{wl} {len(raw)} bytes (body {body_len(raw)})" for wl, raw in reqs.items()))
    fheaders = request_headers(reqs["get"]) if "get" in reqs else []

    setup = Setup(d)
    notes, runs, fruns, checks = [], [], [], []
    replay, mem = {}, {}
    try:
        setup.start()
        notes += setup.notes
        # every workload must pass the CRS on both (status 200) before it is measured
        measured = []
        for wl, raw in reqs.items():
            row = {"workload": wl}
            for t in CHECK_TARGETS:
                row[t], head = exchange_once(setup.port(t), raw)
                if row[t] != 200:
                    notes.append(f"check: {wl} on {t}: status {row[t]} ({head.splitlines()[0] if head else '?'})")
            checks.append(row)
            pl1_ok = all(row.get(t) == 200 for t in CHECK_TARGETS if t.endswith(("crs1", "on1", "allow", "off")))
            if pl1_ok:
                measured.append(wl)
            else:
                notes.append(f"workload {wl} is blocked at paranoia 1 (or fails): not measured")
        log("check: " + "; ".join(f"{c['workload']}: " + " ".join(f"{t}={c[t]}" for t in CHECK_TARGETS)
                                  for c in checks))

        if "cpu" in PARTS:
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
                        log(f"r{rnd + 1} {wl:4} {rate_label(rate):>5}/s  cpu µs/req: " + "  ".join(line))

        if FORTIO_TARGETS and "get" in measured:
            # the event-MPM instances are new: one unmeasured run each, every connection open
            for t in FORTIO_TARGETS:
                run_fortio(setup, t, 0, max(CONNS), min(QPS), fheaders, d, seconds=0.5, raw=False)
            for rnd in range(ROUNDS):
                k = rnd % len(FORTIO_TARGETS)
                order = FORTIO_TARGETS[k:] + FORTIO_TARGETS[:k]
                for c in CONNS:
                    for q in QPS:
                        for t in order:
                            r = run_fortio(setup, t, rnd, c, q, fheaders, d)
                            fruns.append(r)
                            notes += [f"fortio round {rnd + 1}, c{c} q{q}, {t}: {p}" for p in r["problems"]]
                        log(f"fortio r{rnd + 1} c{c:<3} q{q:<5} p50/p99 ms: " + "  ".join(
                            f"{r['target']} {fmt(r.get('p50'), 2)}/{fmt(r.get('p99'), 2)}"
                            f"{'(sat)' if r.get('saturated') else ''}" for r in fruns[-len(order):]))
        elif FORTIO_TARGETS:
            notes.append("fortio part not run: the get workload is not measured")

        if "memory" in PARTS and measured:
            mem = memory_part(setup, d, {wl: reqs[wl] for wl in measured})
            notes += mem.pop("notes")
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
    fsum = fortio_summary(fruns)
    frows = fortio_rows(fsum)
    charts = []
    for name, fn, data in (("crs.png", chart, rows), ("crs-fortio.png", chart_fortio, frows)):
        try:
            if data:
                fn(os.path.join(outdir, name), data)
                charts.append(name)
        except Exception as e:  # noqa: BLE001
            notes.append(f"chart {name} not drawn: {e!r}")

    facts = machine_facts([
        ("sluice", f"{cmd_out([os.path.join(BIN['dir'], 'sluice'), '-V']).splitlines()[0]} ({source} at the start; "
                   f"{BUILD}/sluice built {built['sluice']} UTC, crs_replay {built['crs_replay']} UTC; run from "
                   "copies in crs/bin/)"),
        ("Apache / ModSecurity / CRS", "; ".join(f"{k} {v}" for k, v in sorted(setup.versions.items()))),
        ("nginx (origin)", cmd_out(["nginx", "-v"]).replace("nginx version: ", "")),
        ("fortio", cmd_out([FORTIO, "version"]) if FORTIO_TARGETS else "not used"),
    ])
    elapsed = time.monotonic() - t0
    L = ["# CRS: sluice's engine vs ModSecurity", "",
         f"Run {started.strftime('%Y-%m-%d %H:%M:%S')} UTC, {elapsed:.0f} s; {PIN_TEXT}; parts {', '.join(PARTS)}.", ""]
    if "cpu" in PARTS:
        L += ["## Part 1: CPU per request", "",
              f"{ROUNDS} round(s), {DURATION:g} s per run, offered rates "
              + ", ".join(f"{w} {'/'.join(map(str, RATES[w]))}" for w in WORKLOADS) + " req/s on one "
              "keep-alive connection (bench/crs.py's paced client). CPU µs per request of the server's process "
              "tree (sluice master + worker; the `apache2 -X` process), medians over the rounds. "
              "**CRS cost** = sluice+crs − sluice+allow_all and ModSecurity On − Off (same config, "
              "`SecRuleEngine Off`): what evaluating the CRS adds; sluice also proxies to an nginx origin and "
              "Apache serves a static file itself, so only the costs compare like for like. **ratio** = "
              "sluice ÷ ModSecurity (below 1: sluice uses less CPU). sluice hook µs: the inspection hook's "
              "own time per request as sluice measures it (its `sluice_inspect_seconds` histogram, wall "
              "clock around the Lua call), crs.lua − allow_all.lua: the evaluation itself, without what the "
              "rest of the process pays for a busier worker. crs_replay: sluice's engine alone "
              f"(`crs_replay -b {REPLAY_ROUNDS}`), mean µs per evaluation, median of 3.", ""]
        L += table_lines(rows) + [""]
        busy = busy_table_lines(rows)
        if busy:
            L += ["The same costs from the proxy CPU's busy time: wall time minus the time the CPU the "
                  "servers are pinned to spent idle (its cpuidle counters), per request, CRS − base. It "
                  "counts the kernel's work for the requests on that CPU (receive processing, wake-ups) "
                  "whichever account it lands in: a process is charged that work only when it happens "
                  "to be running, so a busier server is charged more of it per request, and a process's "
                  "own figure above grows with its load for no work of its own.", ""] + busy + [""]
        if "crs.png" in charts:
            L += ["![crs](crs.png)", ""]
    if FORTIO_TARGETS:
        L += ["## Part 2: latency percentiles (fortio)", "",
              f"`fortio load -c C -qps Q -t {FORTIO_DURATION:g}s -uniform` on keep-alive connections, the get "
              "workload's request line and header lines (fortio orders them: Host, then alphabetically), "
              "p50/p90/p99 in ms from fortio's JSON, medians over "
              f"{ROUNDS} round(s); **+pNN** = CRS − base (the difference of the medians): sluice crs.lua − "
              "allow_all.lua, ModSecurity On − Off. Apache here is the same config with mpm_event (still "
              "`apache2 -X`, one process: its worker threads serve the connections; prefork under -X would "
              "serve one keep-alive connection and leave the others unanswered). Both servers on one CPU. "
              "⚠sat: fortio achieved under 95 % of the requested rate. CPU µs/req: the server's, over the "
              "fortio run (fortio's requests).", ""]
        L += fortio_table_lines(frows)
        if "crs-fortio.png" in charts:
            L += ["![crs-fortio](crs-fortio.png)", ""]
    if mem:
        L += ["## Part 3: memory and load time", ""] + memory_lines(mem)
    L += ["## Workloads", "", "The exact bytes are in crs/request-*.http:", ""]
    for wl, raw in reqs.items():
        first = raw.split(b"\r\n", 1)[0].decode()
        L.append(f"- `{wl}`: {len(raw)} bytes, body {body_len(raw)} bytes; first line `{first}`")
    L += ["", "Status check before the load (each workload once to each target):", "",
          "| workload | " + " | ".join(CHECK_TARGETS) + " |", "|---|" + "---:|" * len(CHECK_TARGETS)]
    for c in checks:
        L.append(f"| {c['workload']} | " + " | ".join(str(c.get(t)) for t in CHECK_TARGETS) + " |")
    L += ["", "## Problems seen", ""] + [f"- {n}" for n in notes or ["none"]] + [""]
    if runs:
        L += ["## Every run (part 1)", "", "| round | workload | rate | target | completed | achieved /s | p50 ms | "
              "CPU µs/req (schedstat) | CPU µs/req (ticks) | CPU % | others' CPU % |",
              "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in runs:
            L.append(f"| {r['round']} | {r['workload']} | {rate_label(r['rate'])} | {r['target']} | {fmt(r.get('completed'))} | "
                     f"{fmt(r.get('achieved_rate'), 1)} | {fmt(r.get('p50_ms'), 3)} | {fmt(r.get('cpu_us'), 1)} | "
                     f"{fmt(r.get('cpu_us_ticks'), 1)} | {fmt(r.get('cpu_pct'), 1)} | "
                     f"{fmt(r.get('other_pct'))}{' ⚠' if r.get('noisy') else ''} |")
        L.append("")
    if fruns:
        L += ["## Every fortio run (part 2)", "", "| round | C | QPS | target | requests | achieved /s | p50 ms | "
              "p90 ms | p99 ms | max ms | CPU µs/req | others' CPU % | raw |",
              "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in fruns:
            L.append(f"| {r['round']} | {r['c']} | {r['qps']} | {r['target']} | {fmt(r.get('count'))} | "
                     f"{fmt(r.get('actual_qps'), 1)}{' ⚠sat' if r.get('saturated') else ''} | {fmt(r.get('p50'), 3)} | "
                     f"{fmt(r.get('p90'), 3)} | {fmt(r.get('p99'), 3)} | {fmt(r.get('max'), 2)} | "
                     f"{fmt(r.get('cpu_us'), 1)} | {fmt(r.get('other_pct'))}{' ⚠' if r.get('noisy') else ''} | "
                     f"[{os.path.basename(r['raw'])}](crs/{r['raw']}) |")
        L.append("")
    L += [f"⚠: others' CPU at or above {NOISE_PCT}% of one CPU during the run; kept.", "",
          "## Commands", "", "```sh",
          f"# backend\n{setup.backend_cmd}", f"# sluice\n{' '.join(setup.sluice_cmd)}  (pinned once it listens)",
          "# Apache + ModSecurity: apache2 -X -f crs/modsec-{off,on1,on2}-httpd.conf (tests/e2e/modsec.py's "
          "config, SecDebugLogLevel 0, KeepAlive On; off: SecRuleEngine Off; ev-*: the same with mpm_event; "
          "bare: without mod_security2)",
          "# part 1: the client, one run per target",
          " ".join(client_cmd("PORT", "RATE", DURATION, "crs/request-WORKLOAD.http")),
          "# part 1: the engine alone",
          " ".join(replay_cmd("crs/replay-plN.conf")) + " < crs/replay-WORKLOAD.in",
          "# part 2: fortio, one run per target, connection count C and rate Q",
          shlex.join(fortio_cmd("PORT", "C", "Q", [(k, "<UA: crs/request-get.http>" if k == "User-Agent" else v)
                                                 for k, v in fheaders], "out.json")),
          "# part 3: load time (3 runs each, interleaved)",
          f"{' '.join(PROXY_PIN + [os.path.join(BIN['dir'], 'sluice')])} -t -c crs/sluice-alone-{{allow,crs1,crs2}}.yaml",
          f"{' '.join(PROXY_PIN)} /usr/sbin/apache2 -t -f crs/modsec-{{bare,off,on1,on2}}-httpd.conf", "```", ""]
    confs = {"sluice": setup.sluice_conf}
    for name, m in setup.modsec.items():
        if not name.startswith("ev-") and name != "bare":
            confs[f"modsec-{name} ModSecurity"] = m.modsec_conf_path
    if "on1" in setup.modsec:
        confs["Apache (modsec-on1)"] = setup.modsec["on1"].conf_path
    if "ev-on1" in setup.modsec:
        confs["Apache (modsec-ev-on1, part 2)"] = setup.modsec["ev-on1"].conf_path
    report_configs_and_machine(L, confs, facts)
    L += ["Reproduce: `make bench-crs` (or `QUICK=1 make bench-crs`); see docs/bench/inspection.md.", ""]
    write(os.path.join(outdir, "crs.md"), "\n".join(L))
    write(os.path.join(outdir, "crs.json"), json.dumps({
        "started": started.isoformat(), "parts": PARTS, "rounds": ROUNDS, "duration_s": DURATION, "rates": RATES,
        "pls": PLS, "fortio": {"duration_s": FORTIO_DURATION, "conns": CONNS, "qps": QPS, "rows": frows,
                               "summary": {f"{t}@c{c}q{q}": v for (t, c, q), v in fsum.items()}, "runs": fruns},
        "memory": mem,
        "workloads": {wl: {"bytes": len(raw), "body_bytes": body_len(raw)} for wl, raw in reqs.items()},
        "pinning": PIN_TEXT, "headline": rows, "checks": checks,
        "summary": {f"{wl}@{rate}": v for (wl, rate), v in summ.items()},
        "replay": {f"pl{pl}-{wl}": v for (pl, wl), v in replay.items()},
        "runs": runs, "notes": notes, "machine": dict(facts)}, indent=1) + "\n")
    refresh_latest(RESULTS, outdir, "crs", files=["crs.md", "crs.json"] + charts)
    print("\n" + "\n".join((table_lines(rows) + [""] if rows else []) + fortio_table_lines(frows)
                             + memory_lines(mem)) + "\n")
    for n in notes:
        log(f"note: {n}")
    log(f"report: {os.path.join(outdir, 'crs.md')}; elapsed {time.monotonic() - t0:.0f} s")
    missing = [f"{t} {wl}" for wl in WORKLOADS for t in TARGETS if "cpu" in PARTS
               and not any(r["target"] == t and r["workload"] == wl and r.get("cpu_us") for r in runs)]
    missing += [f"{t} c{c} q{q}" for t in FORTIO_TARGETS for c in CONNS for q in QPS if (t, c, q) not in fsum]
    if "memory" in PARTS:
        missing += [f"memory of sluice alone {r['name']}" for r in mem.get("sluice", []) if not r.get("master")]
        if not mem:
            missing.append("memory part")
    if missing:
        log(f"no figures for: {', '.join(missing)}")
        return 1
    return 0


if __name__ == "__main__":
    run_main(main, PROG)
