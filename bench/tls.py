#!/usr/bin/env python3
"""TLS benchmark: TLS termination through ONE proxy worker.

sluice built with OpenSSL 3 and with AWS-LC, the default (workers: 1), vs
HAProxy (nbthread 1) vs nginx (worker_processes 1), all on the same
certificate files, in front of the same backend (nginx, static 128-byte
body), alternating target by target, round after round:

  plain      baseline: the same Connection: close load over plain HTTP, to
             tell the TLS part of a handshake's cost from the TCP/HTTP part
  full       full handshakes: a new connection per request over https, tickets
             and session caches OFF on every server; ECDSA P-256 vs RSA-2048
             certificate (one per run), TLS 1.2 vs 1.3 (min = max version)
  resumed    the same with tickets ON (and each server's default session
             cache): what the client resumes, and what it costs; ECDSA, 1.2 and 1.3
  keepalive  wrk keepalive over https (ECDSA, TLS 1.3)
  memory     RSS growth of the proxy's processes over N idle TLS connections
             (handshake done, one request each, then idle), per connection
  speed      signing limits for one core: openssl speed ecdsap256 rsa2048;
             AWS-LC has no speed tool here (the crate builds only the
             libraries)

Headline for handshakes: the proxy's own CPU time per handshake (utime+stime
from /proc/PID/stat over its process tree ÷ completed requests); handshakes/s
is reported too. The Connection: close cases (plain, full, resumed) are
driven by bench/tlsload.c (CLIENT=tlsload, the default): one thread on
AWS-LC that costs 2-3x less CPU per TLS connection than wrk and, with -x,
skips checking the server's handshake signature, so on two cores the proxy
saturates before the client does (with wrk, which verifies every signature,
the client was the limit and the proxies ran at 60-90% of a core).
Keepalive runs on wrk (tlsload opens a connection per request). The report ends with
issue 21's targets for sluice-awslc (proxy CPU per handshake or request as a
share of HAProxy's, memory per idle TLS connection), met or missed.

Usage: sh bench/tls.sh  (or `make bench-tls`). Environment knobs:
  QUICK=1          1 round, 2 s runs, resumption samples only where resumed
  DURATION=N       seconds per measured load run (3; QUICK 2)
  WARMUP=N         unmeasured load seconds before each measured run (1)
  CONNECTIONS=N    client connections (50)
  CLIENT=tlsload|wrk  the client of the Connection: close cases (tlsload;
                   wrk when build/tlsload is missing, with a note)
  CLIENT_VERIFY=1  tlsload verifies the server's handshake signature (off:
                   -x, the server's work is the same either way)
  RATES=case=N,..  open loop for those cases: a Connection: close case gets
                   N new connections a second (tlsload -R), keepalive N requests
                   a second over CONNECTIONS connections (h2load --h1 --rps,
                   instead of wrk), offered to every target, so CPU per
                   connection or request is compared at the same load rather
                   than with the cheapest proxy idling while the client is the
                   limit (e.g. RATES=plain-close=15000,keepalive-ecdsa-1.3=30000);
                   a run that achieves under 97% of N is flagged saturated
  ROUNDS=N         rounds; each round runs every target once per case (3; QUICK 1)
  IDLE_CONNS=N     idle TLS connections for the memory part (2000)
  SPEED_SECONDS=N  seconds per openssl speed test (3; QUICK 1)
  PARTS=a,b        subset of plain,full,resumed,keepalive,memory,speed
  TARGETS=a,b      subset/order of sluice-openssl,sluice-awslc,haproxy,nginx
  SLUICE_OPENSSL=path, SLUICE_AWSLC=path
                   the sluice binaries (default: the newest found among
                   build/, build-openssl/, build-awslc/ by what `sluice -V`
                   says)
  PIN=0            do not pin with taskset
  NOISE_PCT=N      others' CPU (% of one CPU) that makes a run noisy (25)
  QUIET_BUDGET=N   seconds in all for waiting for quiet / re-running (60; QUICK 15)
  RESULTS=dir      results root (bench/results)

Output: RESULTS/<UTC timestamp>/tls.md, tls.png, tls/ (certificates,
configs, raw client output, logs); RESULTS/latest/ gets a copy and report.md
links it. Every process started here is stopped by its PID on exit.
"""
import datetime
import functools
import json
import os
import re
import resource
import shutil
import ssl
import statistics
import subprocess
import sys
import time

import benchlib
from benchlib import (BODY_SIZE, CLK_TCK, CONF_EXT, PIN, QUICK, RESULTS, ROOT, STARTED, cmd_out, fmt, fmt_mmm,
                      free_port, fsize, git_describe, grouped_bars, haproxy_conf, haproxy_version, launch_proxy,
                      machine_facts, measure_wrk, mmm, need_tools, nginx_main, nginx_temp_paths, nginx_upstream,
                      pinning, proxy_errlog, Quiet, ratio, read_tail, refresh_latest, report_configs_and_machine,
                      run_main, run_wrk, show_report, sluice_conf, start_backend_nginx, stop, tree_rss_kb, write,
                      wrk_version)
from tlslib import (CERT_NAME, LIB_NAME, find_sluice, haproxy_bind_ssl, haproxy_global_ssl, make_certs,
                    nginx_ssl, sluice_tls, sluice_tls_failures, stop_tls_proxy)
from tlslib import probe as tlslib_probe

PROG = "bench/tls.py"
env_int = functools.partial(benchlib.env_int, prog=PROG)

DURATION = env_int("DURATION", 2 if QUICK else 3, 1)
WARMUP = env_int("WARMUP", 1, 0)
CONNECTIONS = env_int("CONNECTIONS", 50, 1)
ROUNDS = env_int("ROUNDS", 1 if QUICK else 3, 1)
IDLE_CONNS = env_int("IDLE_CONNS", 2000, 1)
SPEED_SECONDS = env_int("SPEED_SECONDS", 1 if QUICK else 3, 1)
ALL_PARTS = ["plain", "full", "resumed", "keepalive", "memory", "speed"]
PARTS = [p for p in os.environ.get("PARTS", ",".join(ALL_PARTS)).split(",") if p]
ALL_TARGETS = ["sluice-openssl", "sluice-awslc", "haproxy", "nginx"]
TARGETS = [t for t in os.environ.get("TARGETS", ",".join(ALL_TARGETS)).split(",") if t]
NOISE_PCT = env_int("NOISE_PCT", 25)
QUIET_BUDGET = env_int("QUIET_BUDGET", 15 if QUICK else 60)
ATTEMPTS = 3
POOL = 64                     # backend connections each proxy may keep / open
MEM_CONCURRENCY = 50          # handshakes in flight while the memory client opens connections

CLIENT = os.environ.get("CLIENT", "tlsload")
CLIENT_VERIFY = os.environ.get("CLIENT_VERIFY", "") not in ("", "0")
if CLIENT not in ("tlsload", "wrk"):
    sys.exit(f"{PROG}: CLIENT must be tlsload or wrk, not {CLIENT!r}")

for p in PARTS:
    if p not in ALL_PARTS:
        sys.exit(f"{PROG}: unknown part {p!r} in PARTS (known: {','.join(ALL_PARTS)})")
for t in TARGETS:
    if t not in ALL_TARGETS:
        sys.exit(f"{PROG}: unknown target {t!r} in TARGETS (known: {','.join(ALL_TARGETS)})")

PROXY_PIN, LOAD_PIN, PIN_TEXT = pinning(PIN)

# The cases measured. mode: full (no resumption possible), resumed
# (tickets on), keepalive (no Connection: close).
CASES = []
if "plain" in PARTS:
    CASES += [{"mode": "plain", "cert": "none", "ver": "none"}]
if "full" in PARTS:
    CASES += [{"mode": "full", "cert": c, "ver": v} for c in ("ecdsa", "rsa") for v in ("1.2", "1.3")]
if "resumed" in PARTS:
    CASES += [{"mode": "resumed", "cert": "ecdsa", "ver": v} for v in ("1.2", "1.3")]
if "keepalive" in PARTS:
    CASES += [{"mode": "keepalive", "cert": "ecdsa", "ver": "1.3"}]
for c in CASES:
    c["key"] = "plain-close" if c["mode"] == "plain" else f"{c['mode']}-{c['cert']}-{c['ver']}"


def parse_rates(text):
    rates = {}
    for item in (x for x in text.split(",") if x):
        key, _, n = item.partition("=")
        if not n.isdigit() or int(n) <= 0:
            sys.exit(f"{PROG}: RATES wants case=connections-per-second items, not {item!r}")
        if key not in {c["key"] for c in CASES}:
            sys.exit(f"{PROG}: RATES names {key!r}, not a case of this run "
                     f"({', '.join(c['key'] for c in CASES)})")
        rates[key] = int(n)
    if any(not k.startswith("keepalive") for k in rates) and CLIENT != "tlsload":
        sys.exit(f"{PROG}: RATES for a Connection: close case needs CLIENT=tlsload (wrk has no open loop)")
    return rates


RATES = parse_rates(os.environ.get("RATES", ""))
MODE_NAME = {"full": "full handshakes", "resumed": "resumed handshakes (tickets on)",
             "keepalive": "keepalive", "plain": "no TLS"}


def rate_unit(c):
    return "requests/s" if c["mode"] == "keepalive" else "connections/s"


def case_short(c):
    rate = f", {RATES[c['key']]:,}/s offered" if c["key"] in RATES else ""
    if c["mode"] == "plain":
        return "no TLS (plain HTTP)" + rate
    return f"{CERT_NAME[c['cert']]} TLS {c['ver']}" + rate


def case_title(c):
    rate = f", open loop at {RATES[c['key']]:,} {rate_unit(c)} offered" if c["key"] in RATES else ""
    if c["mode"] == "plain":
        return "no TLS: plain HTTP, Connection: close (baseline)" + rate
    return f"{MODE_NAME[c['mode']]}, {CERT_NAME[c['cert']]}, TLS {c['ver']}" + rate


def log(msg):
    print(f"[tls] {msg}", flush=True)


# ---------------------------------------------------------------- binaries

SLUICE = find_sluice(PROG)
SLUICE_SRC = {}               # where the run copies in tls/bin/ came from


# ---------------------------------------------------------------- configs

def conf_sluice(d, tgt, port, bport, case, certs, access_log):
    full = case["mode"] == "full"
    tls = "" if case["mode"] == "plain" else sluice_tls(certs, case["cert"], case["ver"], full)
    return sluice_conf(d, f"{tgt}: one worker, one {'plain' if not tls else 'TLS'} listener -> one backend "
                       "with one server", port, bport, POOL, listener="https", tls=tls, name=tgt,
                       access_log=access_log or "off")


def conf_haproxy(d, port, bport, case, certs, access_log):
    full = case["mode"] == "full"
    ssl_ = "" if case["mode"] == "plain" else haproxy_bind_ssl(certs, case["cert"], case["ver"], full)
    g_extra = haproxy_global_ssl(full)
    if access_log:
        g_extra += "    log stdout format raw local0\n"
        fe_log = "    log global\n    log-format \"resumed=%[ssl_fc_is_resumed] status=%ST\"\n"
    else:
        fe_log = ""
    what = "no TLS" if not ssl_ else "tickets and session cache off" if full else \
        "tickets and session cache on (defaults)"
    return haproxy_conf(d, f"HAProxy, one thread; {what}", port, bport, POOL, global_extra=g_extra,
                        bind_extra=ssl_, frontend_extra=fe_log)


def conf_nginx(d, port, bport, case, certs, access_log):
    full = case["mode"] == "full"
    plain = case["mode"] == "plain"
    if access_log:
        alog = (f"    log_format r 'resumed=$ssl_session_reused status=$status';\n"
                f"    access_log {access_log} r;\n")
    else:
        alog = "    access_log off;\n"
    tls = "" if plain else nginx_ssl(certs, case["cert"], case["ver"], full)
    what = "no TLS" if plain else "tickets and session cache off" if full else "tickets on"
    return (f"# nginx, one worker, upstream keepalive; {what}\n" + nginx_main(d, "nginx")
            + alog + "    keepalive_requests 1000000;\n    keepalive_timeout 60s;\n"
            + nginx_temp_paths(d, "tmp-nginx") + nginx_upstream(bport, POOL) + f"""    server {{
        listen 127.0.0.1:{port}{"" if plain else " ssl"};
{tls}        location / {{
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
""")


def errlog_of(tgt, d):
    """Where the proxy's own error/alert messages go."""
    return proxy_errlog(tgt.split("-")[0], d, tgt)


def start_proxy(tgt, d, bport, case, certs, access_log=None):
    """Returns (Popen or None, port, command line, config path). access_log:
    a file to log every request's resumed flag to (samples only)."""
    port = free_port()
    tag = "-sample" if access_log else ""
    cfgdir = os.path.join(d, "configs")
    os.makedirs(cfgdir, exist_ok=True)
    kind = tgt.split("-")[0]
    if kind == "sluice":
        text = conf_sluice(d, tgt, port, bport, case, certs, access_log)
    else:
        text = {"haproxy": conf_haproxy, "nginx": conf_nginx}[kind](d, port, bport, case, certs, access_log)
    conf = write(os.path.join(cfgdir, f"{tgt}-{case['key']}{tag}.{CONF_EXT[kind]}"), text)
    # In a sample HAProxy's request log goes to its output: keep it apart from the error log.
    sluice_bin = SLUICE[tgt.split("-", 1)[1]][0] if kind == "sluice" else None
    p, cmd = launch_proxy(kind, d, port, conf, PROXY_PIN, sluice_bin, name=tgt, out=access_log)
    return p, port, cmd, conf


# ---------------------------------------------------------------- TLS probe (Python ssl)

def probe(port, ver, tries=3):
    """tlslib.probe, answers must be 200 with BODY_SIZE bytes."""
    err, facts = tlslib_probe(port, ver, tries, size=BODY_SIZE)
    facts.pop("last", None)
    return err, facts


# ---------------------------------------------------------------- load runs

def uses_tlsload(case):
    return CLIENT == "tlsload" and case["mode"] != "keepalive"


def load_cmd(port, seconds, case):
    """The client command of CASE: tlsload for a Connection: close case
    (unless CLIENT=wrk), wrk for keepalive (h2load when RATES names it)."""
    scheme = "http" if case["mode"] == "plain" else "https"
    url = f"{scheme}://127.0.0.1:{port}/"
    if uses_tlsload(case):
        return benchlib.tlsload_cmd(LOAD_PIN, CONNECTIONS, seconds, url, version=case["ver"],
                                    resume=case["mode"] == "resumed", verify=CLIENT_VERIFY,
                                    rate=RATES.get(case["key"]))
    if uses_h2load(case):
        return benchlib.h2load_rate_cmd(LOAD_PIN, CONNECTIONS, RATES[case["key"]], seconds, url)
    return benchlib.wrk_cmd(LOAD_PIN, 1, CONNECTIONS, seconds, url,
                            ["-H", "Connection: close"] if case["mode"] != "keepalive" else [])


def uses_h2load(case):
    return case["mode"] == "keepalive" and case.get("key") in RATES


def client_name(case):
    return "tlsload" if uses_tlsload(case) else "h2load" if uses_h2load(case) else "wrk"


def close_client():
    """The Connection: close cases' client, for the report."""
    if CLIENT == "tlsload":
        return "tlsload" + ("" if CLIENT_VERIFY else " -x") + ", one thread, a new connection per request"
    return "wrk `-t1 -H \"Connection: close\"`"


def client_text():
    keep = any(c["mode"] == "keepalive" for c in CASES)
    if CLIENT == "wrk":
        return "wrk `-t1` for every case"
    keep_client = ("h2load `--h1 -t1 --rps`, open loop," if any(uses_h2load(c) for c in CASES)
                   else "wrk `-t1`")
    return "tlsload for the Connection: close cases" + (f", {keep_client} for keepalive" if keep else "")


def measure(tgt, case, rnd, d, port, proxy, backend):
    if WARMUP:
        run_wrk(load_cmd(port, WARMUP, case), WARMUP)
    raw = os.path.join(d, "raw", f"r{rnd + 1}-{case['key']}-{tgt}.txt")
    if uses_h2load(case):
        r = measure_wrk(lambda: benchlib.run_h2load(load_cmd(port, DURATION, case), DURATION, raw), proxy, backend,
                        parse=benchlib.parse_h2load_wrk)
    else:
        r = measure_wrk(lambda: run_wrk(load_cmd(port, DURATION, case), DURATION, raw), proxy, backend,
                        parse=benchlib.parse_tlsload if uses_tlsload(case) else benchlib.parse_wrk)
    if case["key"] in RATES:
        benchlib.flag_saturated(r, RATES[case["key"]], rate_unit(case))
    r.update(label=tgt, case=case["key"], round=rnd + 1, raw=os.path.relpath(raw, d))
    return r


def sample_resumption(tgt, case, d, bport, certs, notes):
    """A short run of the case's client against a proxy started with a
    request log that records whether each TLS session was resumed. Returns
    (resumed, total)."""
    logf = os.path.join(d, "samples", f"{tgt}-{case['key']}.log")
    os.makedirs(os.path.dirname(logf), exist_ok=True)
    proxy, port, _, _ = start_proxy(tgt, d, bport, case, certs, access_log=logf)
    if proxy is None:
        notes.append(f"{tgt}, {case['key']}: the sample proxy (with a request log) did not start")
        return None
    run_wrk(load_cmd(port, 1, case), 1,
            os.path.join(d, "samples", f"{tgt}-{case['key']}.{client_name(case)}.txt"))
    stop(proxy)
    time.sleep(0.1)
    text = read_tail(logf, 0)
    flags = re.findall(r"resumed=(\S+)", text)
    yes = sum(1 for f in flags if f in ("1", "r"))
    return yes, len(flags)


# ---------------------------------------------------------------- memory

MEM_CLIENT = r'''
import asyncio, resource, ssl, sys
port, n, conc = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
conns, errors = [], []
async def one(sem):
    async with sem:
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
            w.write(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            head = await r.readuntil(b"\r\n\r\n")
            cl = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    cl = int(line.split(b":")[1])
            await r.readexactly(cl)
            if not head.startswith(b"HTTP/1.1 200"):
                errors.append(head[:40])
            conns.append((r, w))
        except Exception as e:
            errors.append(repr(e)[:100])
async def main():
    sem = asyncio.Semaphore(conc)
    await asyncio.gather(*(one(sem) for _ in range(n)))
    print(f"open {len(conns)} errors {len(errors)} {errors[:3]}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    for r, w in conns:
        w.close()
    await asyncio.sleep(0.5)
    print("closed", flush=True)
asyncio.run(main())
'''


def measure_memory(tgt, rnd, d, port, proxy):
    """RSS of the proxy's processes before, with IDLE_CONNS idle TLS
    connections open, and after they closed."""
    before = tree_rss_kb(proxy.pid)
    cmd = LOAD_PIN + [sys.executable, "-c", MEM_CLIENT, str(port), str(IDLE_CONNS), str(MEM_CONCURRENCY)]
    t0 = time.monotonic()
    cl = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    STARTED.append(cl)
    r = {"label": tgt, "round": rnd + 1, "problems": []}
    line = cl.stdout.readline().strip()
    r["open_secs"] = time.monotonic() - t0
    m = re.match(r"open (\d+) errors (\d+)(.*)", line)
    if not m:
        r["problems"].append(f"memory client: {line!r} {cl.stdout.read()[:300]!r}")
        stop(cl)
        return r
    r["open"], r["client_errors"] = int(m.group(1)), int(m.group(2))
    if r["client_errors"]:
        r["problems"].append(f"memory client: {r['client_errors']} connections failed: {m.group(3).strip()}")
    time.sleep(1.0)
    during = tree_rss_kb(proxy.pid)
    cl.stdin.write("\n")
    cl.stdin.flush()
    cl.stdout.readline()
    try:
        cl.wait(10)
    except subprocess.TimeoutExpired:
        pass
    stop(cl)
    time.sleep(0.5)
    after = tree_rss_kb(proxy.pid)
    r["rss_before"], r["rss_during"], r["rss_after"] = (sum(before.values()), sum(during.values()),
                                                        sum(after.values()))
    r["per_proc"] = {q: (before.get(q), during.get(q)) for q in sorted(set(before) | set(during))}
    r["kib_per_conn"] = (r["rss_during"] - r["rss_before"]) / max(1, r["open"])
    if proxy.poll() is not None:
        r["problems"].append(f"proxy exited during the memory run (status {proxy.returncode})")
    return r


# ---------------------------------------------------------------- signing limits

def speed_tests(d):
    """Sign/s for one core (pinned like the proxy): OpenSSL. AWS-LC has
    none: the aws-lc-sys crate builds its libraries but not its `bssl` tool,
    and no package installs one; a note says so rather than borrowing
    another library's figure."""
    out = {"openssl": {}, "commands": [], "notes": []}
    if "sluice-awslc" in TARGETS:
        out["notes"].append("AWS-LC: no speed tool is installed here (the aws-lc-sys crate builds only "
                            "libssl/libcrypto, not AWS-LC's `bssl` tool), so there is no AWS-LC signing "
                            "limit and sluice-awslc's ÷ sign/s is —")
    cmd = PROXY_PIN + ["openssl", "speed", "-seconds", str(SPEED_SECONDS), "ecdsap256", "rsa2048"]
    log("signing limits: " + " ".join(cmd))
    text = cmd_out(cmd, timeout=SPEED_SECONDS * 8 + 60)
    write(os.path.join(d, "raw", "openssl-speed.txt"), " ".join(cmd) + "\n" + text)
    out["commands"].append(" ".join(cmd))
    m = re.search(r"^rsa 2048 bits\s+\S+\s+\S+\s+([\d.]+)\s+([\d.]+)", text, re.M)
    if m:
        out["openssl"]["rsa"] = float(m.group(1))
    m = re.search(r"256 bits ecdsa \(nistp256\)\s+\S+\s+\S+\s+([\d.]+)\s+([\d.]+)", text)
    if m:
        out["openssl"]["ecdsa"] = float(m.group(1))
    out["openssl_version"] = cmd_out(["openssl", "version"])
    return out


def sign_limit(speed, tgt, cert):
    """Sign/s of the library TGT uses (HAProxy and nginx: Debian's OpenSSL);
    None where there is no figure (AWS-LC: no speed tool)."""
    lib = tgt.split("-", 1)[1] if tgt.startswith("sluice-") else "openssl"
    return (speed or {}).get(lib, {}).get(cert)


# ---------------------------------------------------------------- report

def summarize(runs, tgt, key):
    s = benchlib.summarize(runs, tgt, ("rps", "cpu_us", "cpu_pct", "p50", "p99", "backend_cpu_us", "wrk_cpu_pct"),
                           key)
    if s:
        s["tls_fail"] = sum(r.get("tls_fail", 0) for r in runs if r["label"] == tgt and r["case"] == key)
    return s


def chart(path, summ, mem, targets):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"sluice-openssl": "#2b7bba", "sluice-awslc": "#7b4fb0",
              "haproxy": "#e07b39", "nginx": "#3a9e4f"}
    panels = []
    for title, keys, metric in (
            ("Full handshakes, ECDSA P-256: proxy CPU µs/handshake",
             ["plain-close", "full-ecdsa-1.2", "full-ecdsa-1.3"], "cpu_us"),
            ("Full handshakes, RSA-2048: proxy CPU µs/handshake", ["full-rsa-1.2", "full-rsa-1.3"], "cpu_us"),
            ("Full handshakes/s (Connection: close)", ["full-ecdsa-1.2", "full-ecdsa-1.3",
                                                       "full-rsa-1.2", "full-rsa-1.3"], "rps"),
            ("Resumed (tickets on): proxy CPU µs/handshake", ["resumed-ecdsa-1.2", "resumed-ecdsa-1.3"], "cpu_us"),
            ("Keepalive TLS 1.3: req/s", ["keepalive-ecdsa-1.3"], "rps"),
            ("Keepalive TLS 1.3: proxy CPU µs/request", ["keepalive-ecdsa-1.3"], "cpu_us")):
        keys = [k for k in keys if any(summ.get((t, k)) for t in targets)]
        if keys:
            panels.append((title, keys, metric))
    if mem:
        panels.append(("Memory per idle TLS connection (KiB)", ["memory"], "mem"))
    if not panels:
        return False
    ncol = 4
    nrow = (len(panels) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(19, 4.5 * nrow), squeeze=False)
    for ax, (title, keys, metric) in zip(axes.flat, panels):
        def value(t, k):
            if metric == "mem":
                return mmm([r["kib_per_conn"] for r in mem if r["label"] == t and "kib_per_conn" in r])
            return summ[(t, k)][metric] if (t, k) in summ else (None, None, None)
        grouped_bars(ax, keys, targets, value, colors, fontsize=6,
                     label=lambda v: f"{v:,.0f}" if v >= 100 else f"{v:.1f}")
        ax.set_xticks(range(len(keys)))
        ax.set_xticklabels([f"{IDLE_CONNS} idle connections" if k == "memory" else
                            "no TLS (plain)" if k == "plain-close" else
                            f"{CERT_NAME[k.split('-')[1]]}\nTLS {k.split('-')[2]}" for k in keys], fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"sluice TLS: one proxy worker, {client_text()}, -c{CONNECTIONS} -d{DURATION}s, "
                 f"{ROUNDS} rounds, medians (bars: min–max)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def paired(runs, a, b, key, metric):
    """(median, min, max) over rounds of a's metric ÷ b's in the same round."""
    return benchlib.paired(runs, a, b, key, metric, clean=False)


def geomean(xs):
    return statistics.geometric_mean(xs) if xs else float("nan")


def lib_of(tgt):
    """'AWS-LC' for sluice-awslc, 'OpenSSL' for sluice-openssl."""
    return LIB_NAME[tgt.split("-", 1)[1]]


def cheapest(runs, builds, key):
    """Which of the sluice BUILDS spent the least proxy CPU per handshake or
    request in case KEY: the one cheapest in the most rounds (rounds where
    every build has a run: runs of one round are seconds apart, so machine
    drift between rounds cannot pick the winner); a tie goes to the lower
    median. Returns (target, rounds won, rounds) or None."""
    per = {}
    for r in runs:
        if r["label"] in builds and r["case"] == key and r.get("cpu_us"):
            per.setdefault(r["round"], {})[r["label"]] = r["cpu_us"]
    rounds = [v for v in per.values() if len(v) == len(builds)]
    if not rounds:
        return None
    wins = {t: sum(1 for v in rounds if min(v, key=v.get) == t) for t in builds}
    med = {t: statistics.median(v[t] for v in rounds) for t in builds}
    best = min(builds, key=lambda t: (-wins[t], med[t]))
    return best, wins[best], len(rounds)


def report_libraries(L, runs, summ, targets):
    """The sluice builds against each other: the measurement that decides
    sluice's default TLS library. Medians side by side with the cheapest
    build per case, then the per-round ratios of the pair (AWS-LC ÷ OpenSSL,
    the default over the distribution build, in ALL_TARGETS order), then
    which library wins how many cases."""
    builds = sorted((t for t in targets if t.startswith("sluice-")), key=ALL_TARGETS.index)
    if len(builds) < 2:
        return
    pairs = [(b, a) for i, a in enumerate(builds) for b in builds[i + 1:]]
    names = [lib_of(t) for t in builds]
    L.append(f"## sluice: {', '.join(names[:-1])} and {names[-1]} builds compared")
    L.append("")
    L.append("Medians of each build, and the build that spent the least proxy CPU per handshake or "
             "request: the one cheapest in the most rounds (*won/rounds*), comparing runs of the "
             "same round, which ran seconds apart. The second table gives, for each pair of "
             "builds, the median (min–max) of the per-round ratios: handshakes/s or req/s above 1 "
             "means the first build is faster, proxy CPU µs below 1 that it is cheaper. Per-round "
             "ratios are immune to the machine getting faster or slower between rounds, which "
             "the ratio of the overall medians is not.")
    L.append("")
    L.append("| case | " + " | ".join(f"{n} hs/s or req/s | {n} proxy CPU µs" for n in names)
             + " | cheapest in proxy CPU (won/rounds) |")
    L.append("|---|" + "---:|" * (2 * len(builds)) + "---|")
    wins = dict.fromkeys(builds, 0)
    decided = 0
    for c in CASES:
        ss = [summ.get((t, c["key"])) for t in builds]
        if not all(ss):
            continue
        best = cheapest(runs, builds, c["key"])
        if best and c["mode"] in ("full", "keepalive"):
            wins[best[0]] += 1
            decided += 1
        L.append(f"| {case_title(c)} | "
                 + " | ".join(f"{fmt(s['rps'][0])} | {fmt(s['cpu_us'][0], 1)}" for s in ss)
                 + f" | {f'**{lib_of(best[0])}** ({best[1]}/{best[2]})' if best else '—'} |")
    L.append("")
    L.append("| case | " + " | ".join(f"{lib_of(b)} ÷ {lib_of(a)} hs/s or req/s | {lib_of(b)} ÷ {lib_of(a)} "
                                      "proxy CPU µs" for b, a in pairs) + " |")
    L.append("|---|" + "---:|" * (2 * len(pairs)))
    for c in CASES:
        if not all(summ.get((t, c["key"])) for t in builds):
            continue
        L.append(f"| {case_title(c)} | " + " | ".join(
            f"{fmt_mmm(paired(runs, b, a, c['key'], 'rps'), collapse=True)} | "
            f"{fmt_mmm(paired(runs, b, a, c['key'], 'cpu_us'), collapse=True)}" for b, a in pairs) + " |")
    L.append("")
    if decided:
        L.append(f"**Cheapest in proxy CPU**, of the {decided} full-handshake and keepalive cases: "
                 + ", ".join(f"{lib_of(t)} in {wins[t]}" for t in builds) + ".")
        L.append("")
    means = []
    for title, keys in (("full handshakes, ECDSA (TLS 1.2 and 1.3)",
                         [c["key"] for c in CASES if c["mode"] == "full" and c["cert"] == "ecdsa"]),
                        ("full handshakes, RSA (TLS 1.2 and 1.3)",
                         [c["key"] for c in CASES if c["mode"] == "full" and c["cert"] == "rsa"]),
                        ("full handshakes, all four", [c["key"] for c in CASES if c["mode"] == "full"]),
                        ("keepalive", [c["key"] for c in CASES if c["mode"] == "keepalive"])):
        parts = []
        for b, a in pairs:
            rr = [x for x in (paired(runs, b, a, k, "rps")[0] for k in keys) if x]
            cc = [x for x in (paired(runs, b, a, k, "cpu_us")[0] for k in keys) if x]
            if rr and cc:
                parts.append(f"{lib_of(b)} ÷ {lib_of(a)} = {geomean(rr):.2f} in "
                             f"{'req/s' if title == 'keepalive' else 'handshakes/s'}, {geomean(cc):.2f} in "
                             "proxy CPU µs")
        if parts:
            means.append(f"- **{title}**: " + "; ".join(parts) + ".")
    if means:
        L += ["Geometric means of the per-round medians:", ""] + means + [""]


# Issue 21's targets for sluice-awslc: (what, case, most proxy CPU µs per
# handshake or request as a share of HAProxy's in the same round). The issue
# names the version for the ECDSA handshake only (TLS 1.3); the others are
# taken at TLS 1.3 too, so the four ratios compare the same protocol.
ISSUE21 = [("full handshake, ECDSA P-256, TLS 1.3: proxy CPU µs ÷ HAProxy's", "full-ecdsa-1.3", 0.5),
           ("full handshake, RSA-2048, TLS 1.3: proxy CPU µs ÷ HAProxy's", "full-rsa-1.3", 0.8),
           ("resumed handshake (tickets), ECDSA, TLS 1.3: proxy CPU µs ÷ HAProxy's", "resumed-ecdsa-1.3", 0.5),
           ("keepalive, ECDSA, TLS 1.3: proxy CPU µs per request ÷ HAProxy's", "keepalive-ecdsa-1.3", 0.7)]
ISSUE21_MEM_KB = 6            # most memory per idle TLS connection, KB of 1,000 bytes


def report_issue21(L, runs, mem, samples, targets, tgt="sluice-awslc", ref="sluice-openssl"):
    """Issue 21's targets for TGT (the default build): each ratio to HAProxy
    (median of the per-round ratios, which drift between rounds cannot move)
    and the memory per idle connection, met or missed; REF (the OpenSSL 3
    distribution build) alongside, for comparison. A target whose case,
    HAProxy or TGT was not run says so instead of a verdict."""
    L.append("## Issue 21's targets")
    L.append("")
    if tgt not in targets:
        L += [f"{tgt} was not run: no verdict.", ""]
        return
    ref = ref if ref in targets else None
    L.append(f"For {tgt}; ratios are the median (min–max) of the per-round ratios to HAProxy's run of "
             "the same round, the verdict is on the median. With `Connection: close` one request is "
             "one connection and one handshake."
             + (f" {ref} (the OpenSSL 3 distribution build) for comparison." if ref else "")
             + (" QUICK mode: one short round, so the verdicts are indicative only." if QUICK else ""))
    L.append("")
    L.append(f"| target | {tgt} | limit | verdict |" + (f" {ref} |" if ref else ""))
    L.append("|---|---:|---:|---|" + ("---:|" if ref else ""))
    met, measured, missing = 0, 0, []
    for what, key, limit in ISSUE21:
        if "haproxy" not in targets or key not in {c["key"] for c in CASES}:
            missing.append(what.split(":")[0])
            L.append(f"| {what} | not measured in this run | ≤ {limit} | — |" + (" — |" if ref else ""))
            continue
        pr = paired(runs, tgt, "haproxy", key, "cpu_us")
        if pr[0] is None:
            missing.append(what.split(":")[0])
            L.append(f"| {what} | no run of both | ≤ {limit} | — |" + (" — |" if ref else ""))
            continue
        ok = pr[0] <= limit
        met, measured = met + int(ok), measured + 1
        L.append(f"| {what} | {fmt_mmm(pr, collapse=True)} | ≤ {limit} | **{'met' if ok else 'missed'}** |"
                 + (f" {fmt_mmm(paired(runs, ref, 'haproxy', key, 'cpu_us'), collapse=True)} |" if ref else ""))

    def kib(t):
        return mmm([r["kib_per_conn"] for r in mem if r["label"] == t and "kib_per_conn" in r])

    what = "memory per idle TLS 1.3 connection (VmRSS growth)"
    limit = f"≤ {ISSUE21_MEM_KB} KB ({ISSUE21_MEM_KB * 1000 / 1024:.2f} KiB)"
    k = kib(tgt)
    if k[0] is None:
        missing.append(what)
        L.append(f"| {what} | not measured in this run | {limit} | — |" + (" — |" if ref else ""))
    else:
        ok = k[0] * 1.024 <= ISSUE21_MEM_KB
        met, measured = met + int(ok), measured + 1
        kr = kib(ref) if ref else None
        L.append(f"| {what} | {fmt_mmm(k, collapse=True)} KiB | {limit} | "
                 f"**{'met' if ok else 'missed'}** |"
                 + (f" {fmt(kr[0], 2)} KiB |" if ref else ""))
    L.append("")
    L.append((f"Met: {met} of the {measured} measured." if measured else "No target measured in this run.")
             + (f" Not measured in this run (PARTS or TARGETS left out its case or HAProxy, or its runs "
                f"failed): {'; '.join(missing)}." if missing else ""))
    sm = {t: samples.get((t, "resumed-ecdsa-1.3")) for t in (tgt, "haproxy")}
    if all(v and v[1] for v in sm.values()):
        share = {t: v[0] / v[1] * 100 for t, v in sm.items()}
        L.append("")
        L.append(f"Resumed share in the TLS 1.3 client sample: {tgt} {share[tgt]:.0f}%, HAProxy "
                 f"{share['haproxy']:.0f}%"
                 + (": they differ, so the resumed ratio compares different mixes of full and "
                    "resumed handshakes." if abs(share[tgt] - share["haproxy"]) > 10 else "."))
    L.append("")


def write_report(outdir, d, runs, mem, speed, samples, probes, targets, facts, commands, confs,
                 cert_cmds, backend_cmd, notes, loglines, started_at, elapsed):
    summ = {}
    for c in CASES:
        for t in targets:
            s = summarize(runs, t, c["key"])
            if s:
                summ[(t, c["key"])] = s
    try:
        drawn = chart(os.path.join(outdir, "tls.png"), summ, mem, targets)
        chart_line = "![tls chart](tls.png)" if drawn else ""
    except Exception as e:  # noqa: BLE001 — a missing chart must not lose the tables
        chart_line = f"(chart not drawn: {e!r})"

    def us(s):
        return (f"**{fmt(s['cpu_us'][0], 1)}** ({fmt(s['cpu_us'][1], 1)}–{fmt(s['cpu_us'][2], 1)})"
                if s else "—")

    def rps(s):
        return f"{fmt(s['rps'][0])} ({fmt(s['rps'][1])}–{fmt(s['rps'][2])})" if s else "—"

    L = []
    L.append("# TLS benchmark — TLS termination through one proxy worker")
    L.append("")
    L.append(f"Run {started_at} UTC, {elapsed:.0f} s in all. {'QUICK mode. ' if QUICK else ''}"
             f"{ROUNDS} round(s) × {DURATION} s measured load runs (after {WARMUP} s of unmeasured "
             f"warm-up each), {CONNECTIONS} client connections ({client_text()}), {BODY_SIZE}-byte "
             "responses from "
             f"one nginx origin (static `return 200`) behind every proxy. Pinning: {PIN_TEXT}. "
             f"Targets: {', '.join(targets)}; sluice with `workers: 1`, HAProxy `nbthread 1`, "
             "nginx `worker_processes 1`, all on the same certificate files.")
    L.append("")
    # ------------------------------------------------ verdict
    report_libraries(L, runs, summ, targets)
    # ------------------------------------------------ full handshakes
    sp = speed or {}
    plain_us = {t: summ[(t, "plain-close")]["cpu_us"][0] for t in targets if (t, "plain-close") in summ}
    for mode in ("full", "resumed", "keepalive"):
        cs = [c for c in CASES if c["mode"] == mode or (mode == "full" and c["mode"] == "plain")]
        if not cs:
            continue
        if mode == "full":
            L.append("## Full handshakes (Connection: close; tickets and session caches off)")
            L.append("")
            L.append("Every request is a new TCP connection and a full TLS handshake "
                     f"({close_client()}); no server can resume (checked below). "
                     "**Proxy CPU µs per handshake** is the headline: utime+stime of the proxy's "
                     "processes ÷ handshakes completed. *TLS part* subtracts the same proxy's CPU "
                     "per connection for the same load over plain HTTP (the *no TLS* rows: TCP "
                     "accept and close, the HTTP request, the backend exchange), leaving what TLS "
                     "adds. *at 100% CPU* = 10⁶ ÷ µs/handshake, the rate one core would reach if "
                     "the proxy were the bottleneck; *÷ sign/s* divides handshakes/s (and, in "
                     "brackets, the at-100% rate) by the signing limit of the proxy's TLS library "
                     "on one core (see [Signing limits](#signing-limits)). Client CPU % near 100 "
                     "means the client was the limit; proxy CPU % near 100, the proxy.")
        elif mode == "resumed":
            L.append("## Resumed handshakes (Connection: close; tickets on)")
            L.append("")
            L.append("Same load, with session tickets on (HAProxy and nginx defaults, sluice "
                     f"`tickets: on`). The client ({close_client()}) offers each connection slot's "
                     "last session on its next connection; "
                     "the share of handshakes that were really resumed is in the "
                     "[resumption check](#resumption-check).")
        else:
            L.append("## Keepalive TLS (no Connection: close)")
            L.append("")
            L.append(f"wrk keeps its connections: {CONNECTIONS} handshakes, then requests only.")
        L.append("")
        unit = "req" if mode == "keepalive" else "hs"
        L.append(f"| case | target | runs | {unit}/s median (min–max) | proxy CPU µs/{unit} median "
                 f"(min–max) | proxy CPU % of a core | p50 ms | p99 ms | "
                 + ("TLS part µs/hs | at 100% CPU | ÷ sign/s | " if mode == "full" else "")
                 + ("resumed (client sample) | " if mode == "resumed" else "")
                 + "client CPU % | errors |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if mode == "full" else "")
                 + ("---:|" if mode == "resumed" else "") + "---:|---:|")
        for c in cs:
            for t in targets:
                s = summ.get((t, c["key"]))
                if not s:
                    continue
                extra = ""
                if mode == "full" and c["mode"] == "plain":
                    extra = "— | — | — | "
                elif mode == "full":
                    lim = sign_limit(sp, t, c["cert"])
                    cap = 1e6 / s["cpu_us"][0] if s["cpu_us"][0] else None
                    tlsp = s["cpu_us"][0] - plain_us[t] if t in plain_us else None
                    extra = (f"{fmt(tlsp, 1)} | {fmt(cap)} | "
                             + (f"{s['rps'][0] / lim:.2f} ({cap / lim:.2f})" if lim and cap else "—")
                             + " | ")
                if mode == "resumed":
                    sm = samples.get((t, c["key"]))
                    extra = (f"{sm[0] / sm[1] * 100:.0f}% | " if sm and sm[1] else "— | ")
                err = s["errors"] + s["tls_fail"]
                L.append(f"| {case_short(c)} | **{t}** | {s['n']}/{s['total']} | "
                         f"{rps(s)} | {us(s)} | {fmt(s['cpu_pct'][0])} | {fmt(s['p50'][0], 2)} | "
                         f"{fmt(s['p99'][0], 2)} | {extra}{fmt(s['wrk_cpu_pct'][0])} | {err} |")
        L.append("")
        # ratios sluice / peers
        peers = [p for p in ("haproxy", "nginx") if p in targets]
        sl = [t for t in targets if t.startswith("sluice")]
        if peers and sl:
            L.append(f"Ratios sluice ÷ peer, median (min–max) of the per-round ratios ({unit}/s: "
                     "above 1 = sluice faster; CPU µs: below 1 = sluice cheaper):")
            L.append("")
            hdr = "| case | " + " | ".join(f"{a} ÷ {p} {unit}/s | {a} ÷ {p} CPU µs" for a in sl for p in peers) + " |"
            L.append(hdr)
            L.append("|---|" + "---:|" * (2 * len(sl) * len(peers)))
            for c in cs:
                cells = []
                for a in sl:
                    for p in peers:
                        cells.append(fmt_mmm(paired(runs, a, p, c["key"], "rps"), collapse=True))
                        cells.append(fmt_mmm(paired(runs, a, p, c["key"], "cpu_us"), collapse=True))
                L.append(f"| {case_short(c)} | " + " | ".join(cells) + " |")
            L.append("")
    # ------------------------------------------------ resumption check
    if samples or probes:
        L.append("## Resumption check")
        L.append("")
        L.append("*Python probe*: three HTTPS requests on three connections, each offering the "
                 "previous connection's session (Python `ssl`, `session=`); how many of the last "
                 "two resumed. *client sample*: a separate 1 s run of the case's client (same "
                 "command) against the "
                 "same configuration plus a request log of the TLS resumed flag (sluice access "
                 "log `resumed=`, HAProxy `%[ssl_fc_is_resumed]`, nginx `$ssl_session_reused`), "
                 "run once per case in round 1: resumed / logged requests.")
        L.append("")
        L.append("| case | target | negotiated | Python probe: resumed | client sample: resumed |")
        L.append("|---|---|---|---:|---:|")
        for c in CASES:
            if c["mode"] == "plain":
                continue
            for t in targets:
                pr = probes.get((t, c["key"]))
                sm = samples.get((t, c["key"]))
                if not pr and not sm:
                    continue
                neg = f"{pr.get('version', '?')} {pr.get('cipher', '')}" if pr else "—"
                pcell = f"{pr['reused']}/{pr['reuse_tries']}" if pr and "reused" in pr else "—"
                scell = (f"{sm[0]:,}/{sm[1]:,} ({sm[0] / sm[1] * 100:.0f}%)" if sm and sm[1] else
                         ("no line logged" if sm else "—"))
                L.append(f"| {case_title(c)} | {t} | {neg} | {pcell} | {scell} |")
        L.append("")
    # ------------------------------------------------ memory
    if mem:
        L.append("## Memory per idle TLS connection")
        L.append("")
        L.append(f"{IDLE_CONNS} connections opened by a Python asyncio client ({MEM_CONCURRENCY} "
                 "handshakes in flight, ECDSA P-256, TLS 1.3, tickets on), one `GET /` each "
                 "(answer read in full), then left idle. RSS = VmRSS from `/proc/PID/status` summed "
                 "over the proxy's processes (sluice and nginx: master + worker; HAProxy: one "
                 "process), read after the proxy's first few connections (the checks), 1 s after "
                 f"all {IDLE_CONNS} were open, and 0.5 s after the client closed them. Kernel socket "
                 "buffers are not in RSS.")
        L.append("")
        L.append("| target | runs | KiB per idle connection median (min–max) | RSS before MiB | "
                 f"RSS with {IDLE_CONNS} idle MiB | RSS after close MiB | open s | problems |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---|")
        for t in targets:
            rs = [r for r in mem if r["label"] == t and "kib_per_conn" in r]
            if not rs:
                continue
            k = mmm([r["kib_per_conn"] for r in rs])
            L.append(f"| **{t}** | {len(rs)} | **{fmt(k[0], 1)}** ({fmt(k[1], 1)}–{fmt(k[2], 1)}) | "
                     f"{fmt(statistics.median([r['rss_before'] for r in rs]) / 1024, 1)} | "
                     f"{fmt(statistics.median([r['rss_during'] for r in rs]) / 1024, 1)} | "
                     f"{fmt(statistics.median([r['rss_after'] for r in rs]) / 1024, 1)} | "
                     f"{fmt(statistics.median([r['open_secs'] for r in rs]), 1)} | "
                     f"{sum(len(r['problems']) for r in mem if r['label'] == t)} |")
        L.append("")
        peers = [p for p in ("haproxy", "nginx") if p in targets]
        for a in [t for t in targets if t.startswith("sluice")]:
            ka = mmm([r["kib_per_conn"] for r in mem if r["label"] == a and "kib_per_conn" in r])[0]
            for p in peers:
                kp = mmm([r["kib_per_conn"] for r in mem if r["label"] == p and "kib_per_conn" in r])[0]
                L.append(f"- {a} ÷ {p}: {ratio(ka, kp)} (below 1 = sluice holds less per connection)")
        L.append("")
    # ------------------------------------------------ signing limits
    if speed:
        L.append("## Signing limits")
        L.append("")
        L.append("Private-key signatures per second on one core (the proxy's CPU), the ceiling of "
                 "full handshakes/s for a server that does nothing else. A full handshake also "
                 "costs a key exchange (X25519), hashing, the record layer, two TCP connections' "
                 "worth of syscalls and the HTTP request.")
        L.append("")
        L.append("| library | ECDSA P-256 sign/s | RSA-2048 sign/s | used by |")
        L.append("|---|---:|---:|---|")
        L.append(f"| {speed.get('openssl_version', 'OpenSSL')} (`openssl speed`) | "
                 f"{fmt(speed['openssl'].get('ecdsa'))} | {fmt(speed['openssl'].get('rsa'))} | "
                 "sluice-openssl, HAProxy, nginx |")
        if "sluice-awslc" in targets:
            L.append(f"| {SLUICE.get('awslc', ('', 'AWS-LC'))[1]} (no speed tool installed) | — | — "
                     "| sluice-awslc |")
        L.append("")
        for n in speed.get("notes", []):
            L.append(f"- {n}")
        L.append("```sh")
        L.extend(speed.get("commands", []))
        L.append("```")
        L.append("")
    L.append(chart_line)
    L.append("")
    # ------------------------------------------------ problems, logs
    L.append("## Problems seen")
    L.append("")
    for n in notes or ["none"]:
        L.append(f"- {n}")
    L.append("")
    L.append("## Proxy log lines above info level (and sluice's TLS failures)")
    L.append("")
    for ln in loglines or ["none"]:
        L.append(f"- {ln}")
    L.append("")
    # ------------------------------------------------ every run
    L.append("## Every run (in the order they ran)")
    L.append("")
    L.append("| round | case | target | req/s | requests | p50 ms | p99 ms | proxy CPU µs/req | "
             "proxy CPU % | client CPU % | client µs/conn | others' CPU % | socket errors | non-2xx | raw |")
    L.append("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in runs:
        L.append(f"| {r['round']} | {r['case']} | {r['label']} | {fmt(r['rps'])} | {r['requests']} | "
                 f"{fmt(r['p50'], 2)} | {fmt(r['p99'], 2)} | {fmt(r['cpu_us'], 1)} | {fmt(r['cpu_pct'])} | "
                 f"{fmt(r['wrk_cpu_pct'])} | {fmt(r.get('client_us'), 1)} | "
                 f"{fmt(r['other_pct'])}{' ⚠' if r['noisy'] else ''} | "
                 f"{r['sock_errors']} | {r['non2xx']} | [{os.path.basename(r['raw'])}](tls/{r['raw']}) |")
    L.append("")
    if mem:
        L.append("Memory runs:")
        L.append("")
        L.append("| round | target | open | KiB/conn | RSS before KiB | RSS idle KiB | RSS after KiB | per process (before → idle KiB) |")
        L.append("|---:|---|---:|---:|---:|---:|---:|---|")
        for r in mem:
            if "kib_per_conn" not in r:
                L.append(f"| {r['round']} | {r['label']} | — | — | — | — | — | {'; '.join(r['problems'])} |")
                continue
            pp = ", ".join(f"{q}: {a} → {b}" for q, (a, b) in r["per_proc"].items())
            L.append(f"| {r['round']} | {r['label']} | {r['open']} | {r['kib_per_conn']:.1f} | "
                     f"{r['rss_before']} | {r['rss_during']} | {r['rss_after']} | {pp} |")
        L.append("")
    # ------------------------------------------------ method
    L.append("## What was measured")
    L.append("")
    L.append("- Each round runs every case (full: ECDSA/RSA × TLS 1.2/1.3; resumed: TLS 1.2/1.3; "
             "keepalive), and within a case every target once, the target order rotating by one "
             "each round. Each target is started fresh for its run with only that case's "
             "certificate and `min_version = max_version`, checked with the Python probe (must "
             f"answer 200 with {BODY_SIZE} bytes), warmed up with an unmeasured load run, measured, "
             "stopped (SIGTERM). The origin stays up throughout.")
    L.append("- Proxy CPU: utime+stime from `/proc/PID/stat` over the proxy's process tree, read "
             "just before and after the measured run, ÷ requests the client completed (with "
             "`Connection: close`, one request = one handshake). Clock tick = "
             f"1/{CLK_TCK} s. Client CPU % is the client's own CPU (of one core): near 100% means "
             "the client was the limit, not the proxy; proxy CPU % near 100% means the proxy was. "
             "*client µs/conn*: tlsload's own CPU (getrusage) per connection.")
    L.append(f"- Clients: {client_text()}. tlsload (bench/tlsload.c) is one thread on epoll linked "
             "against AWS-LC: connect, handshake (TLS version pinned to the case's, X25519 key "
             "share), one `GET /` with `Connection: close`, read to EOF, close, next; no chain "
             "verification (as wrk)"
             + ("." if CLIENT_VERIFY else
                ", and `-x`: the server's handshake signature is not checked either, which saves "
                "the client an ECDSA verify per handshake and leaves the server's work unchanged.")
             + " Resumed cases use `-r` (each connection slot offers its last session).")
    L.append(f"- Noise: others' CPU (all CPUs' busy time minus proxy, origin and client) at or above "
             f"{NOISE_PCT}% of a CPU, or a load run lasting over 10% longer than asked, makes a run "
             f"noisy; the script waits for quiet before each run and re-runs a noisy one up to "
             f"{ATTEMPTS - 1} times within {QUIET_BUDGET} s in all; medians use clean runs only.")
    drift = []
    for rnd in sorted({r["round"] for r in runs}):
        v = [r["cpu_us"] for r in runs if r["round"] == rnd and r["case"] == "plain-close"]
        if v:
            drift.append(f"round {rnd}: {statistics.median(v):.1f}")
    if drift:
        L.append("- Machine drift: median proxy CPU µs per connection of the no-TLS runs, per round — "
                 + ", ".join(drift) + ". The same work costing more in one round than in another "
                 "means the machine (shared caches, SMT siblings, the hypervisor) slowed down for "
                 "everyone; the per-round ratios are immune to it.")
    L.append("- errors = client socket errors + non-2xx responses + (sluice only) TLS handshake "
             "failures/errors sluice logged at info level.")
    L.append("")
    L.append("## Commands (exact)")
    L.append("")
    L.append("```sh")
    L.append("# certificates (in tls/certs/)")
    L.extend(cert_cmds)
    L.append(f"# origin (started once)\n{backend_cmd}")
    for k, v in commands.items():
        L.append(f"# {k}\n{v}")
    L.append("# load, full/resumed (warm-up uses -d" + str(WARMUP) + "s)")
    for c in CASES:
        if c["mode"] != "keepalive" and (c["cert"] == "ecdsa" or c["mode"] == "plain"):
            L.append(f"# {c['key']} (rsa: the same)" if c["mode"] == "full" else f"# {c['key']}")
            L.append(" ".join(load_cmd("PORT", DURATION, c)))
    L.append("# load, keepalive")
    L.append(" ".join(load_cmd("PORT", DURATION, {"mode": "keepalive", "cert": "ecdsa", "ver": "1.3",
                                                     "key": "keepalive-ecdsa-1.3"})))
    L.append("# memory: Python asyncio client, source in bench/tls.py (MEM_CLIENT)")
    L.append(" ".join(LOAD_PIN + ["/usr/bin/python3", "-c", "MEM_CLIENT", "PORT", str(IDLE_CONNS),
                                  str(MEM_CONCURRENCY)]))
    L.append("```")
    L.append("")
    L.append("Ports are picked free at run time. Configs: every one used is in "
             "[tls/configs/](tls/configs/); the full-handshake ECDSA TLS 1.3 ones and the "
             "resumed ECDSA TLS 1.3 ones (the other cases change only the certificate, the "
             "versions and the ticket/cache lines) are:")
    L.append("")
    report_configs_and_machine(L, confs, facts)
    # Last, so the verdict on issue 21 is where a reader looks for the bottom line.
    report_issue21(L, runs, mem, samples, targets)
    L += ["Reproduce: `make bench-tls` (or `QUICK=1 make bench-tls`); see docs/bench/tls.md.", ""]
    write(os.path.join(outdir, "tls.md"), "\n".join(L))
    return summ


def facts_software():
    wrk_ssl = re.search(r"libssl\.so\S*", cmd_out(["ldd", shutil.which("wrk") or "wrk"]))
    sw = []
    for lib in (t.split("-", 1)[1] for t in ALL_TARGETS if t.startswith("sluice-")):
        if lib in SLUICE:
            path, tlsv = SLUICE[lib]
            src = SLUICE_SRC.get(lib, path)
            built = datetime.datetime.fromtimestamp(os.path.getmtime(src), datetime.timezone.utc)
            sw.append((f"sluice-{lib}", f"{os.path.relpath(src, ROOT)} (built {built:%H:%M:%S} UTC, "
                       f"run as a copy in tls/bin/): "
                       f"{cmd_out([path, '-V']).splitlines()[0]}, TLS {tlsv} ({git_describe()}; -O2, jemalloc)"))
    sw += [("haproxy", haproxy_version(with_ssl=True)),
           ("nginx", cmd_out(["nginx", "-V"]).splitlines()[0].replace("nginx version: ", "")
            + ", " + next((ln for ln in cmd_out(["nginx", "-V"]).splitlines() if "OpenSSL" in ln), "")),
           ("wrk", wrk_version() + f" (linked to {wrk_ssl.group(0) if wrk_ssl else '?'})"),
           ("tlsload", f"{os.path.relpath(benchlib.TLSLOAD, ROOT)} (bench/tlsload.c, AWS-LC)"
            if CLIENT == "tlsload" else "not used (CLIENT=wrk)"),
           ("openssl", cmd_out(["openssl", "version"])),
           ("python3 ssl", f"{sys.version.split()[0]}, {ssl.OPENSSL_VERSION}"),
           ("RLIMIT_NOFILE", " ".join(str(x) for x in resource.getrlimit(resource.RLIMIT_NOFILE)))]
    return sw


# ---------------------------------------------------------------- main

def main():
    need_tools(PROG, ("wrk", "haproxy", "nginx", "openssl") + (("taskset",) if PROXY_PIN else ())
               + (("h2load",) if any(uses_h2load(c) for c in CASES) else ()),
               "bench/tls.sh")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < IDLE_CONNS * 2 + 200 and "memory" in PARTS:
        sys.exit(f"{PROG}: RLIMIT_NOFILE hard limit {hard} is too low for IDLE_CONNS={IDLE_CONNS}")

    started = datetime.datetime.now(datetime.timezone.utc)
    ts = started.strftime("%Y%m%dT%H%M%SZ")
    outdir = os.path.join(RESULTS, ts)
    d = os.path.join(outdir, "tls")
    os.makedirs(os.path.join(d, "raw"), exist_ok=True)
    t_start = time.monotonic()
    notes, loglines, commands, confs = [], [], {}, {}
    targets = []
    for t in TARGETS:
        if t.startswith("sluice") and t.split("-", 1)[1] not in SLUICE:
            notes.append(f"{t}: no sluice binary built with that library was found "
                         f"(make TLS={t.split('-', 1)[1]} all) — left out")
            log(notes[-1])
            continue
        targets.append(t)
    if not targets:
        sys.exit(f"{PROG}: nothing to measure")
    global CLIENT
    if CLIENT == "tlsload" and not benchlib.have_tlsload():
        notes.append(f"no {os.path.relpath(benchlib.TLSLOAD, ROOT)} (make build/tlsload): wrk drives "
                     "every case, and on two cores it saturates before the proxies on TLS")
        log(notes[-1])
        CLIENT = "wrk"
        if any(not k.startswith("keepalive") for k in RATES):
            sys.exit(f"{PROG}: RATES for a Connection: close case needs tlsload's open loop: make build/tlsload")
    # Run copies: others may rebuild build*/ while the benchmark runs.
    os.makedirs(os.path.join(d, "bin"), exist_ok=True)
    for t in targets:
        if t.startswith("sluice"):
            lib = t.split("-", 1)[1]
            src, tls_line = SLUICE[lib]
            dst = os.path.join(d, "bin", t)
            shutil.copy2(src, dst)
            SLUICE_SRC[lib] = src
            SLUICE[lib] = (dst, tls_line)
    log(f"results in {outdir}")
    load_runs = ROUNDS * len(CASES) * len(targets)
    log(f"{load_runs} load runs of ~{DURATION + WARMUP + 1.5:.0f} s, "
        f"{ROUNDS * len(targets) if 'memory' in PARTS else 0} memory runs; {PIN_TEXT}")
    facts = machine_facts(facts_software())
    certs, cert_cmds = make_certs(d)

    speed = speed_tests(d) if "speed" in PARTS else None
    if speed:
        log(f"sign/s: openssl {speed['openssl']}  awslc: no speed tool")

    backend, bport, backend_cmd = start_backend_nginx(d, LOAD_PIN, prog=PROG)
    quiet = Quiet(NOISE_PCT, QUIET_BUDGET, ATTEMPTS, log=log)
    runs, mem, samples, probes = [], [], {}, {}

    def one_run(tgt, case, rnd):
        errlog = errlog_of(tgt, d)
        pos = fsize(errlog)
        proxy, port, cmd, conf = start_proxy(tgt, d, bport, case, certs)
        commands.setdefault(tgt, cmd.replace(conf, "CONFIG"))
        # One sluice config is shown: the builds' configs differ only in their name.
        if case["key"] in ("full-ecdsa-1.3", "resumed-ecdsa-1.3") and \
                (not tgt.startswith("sluice") or tgt == next(t for t in targets if t.startswith("sluice"))):
            confs.setdefault(f"{tgt}, {case['key']}", conf)
        if proxy is None:
            notes.append(f"round {rnd + 1}, {case['key']}, {tgt}: did not start; log: "
                         f"{read_tail(errlog, pos).strip()[-500:]!r}")
            log(notes[-1])
            return
        err, facts_ = probe(port, case["ver"])
        if err:
            notes.append(f"round {rnd + 1}, {case['key']}, {tgt}: probe failed: {err}")
            log(notes[-1])
        elif (tgt, case["key"]) not in probes:
            probes[(tgt, case["key"])] = facts_
            if case["mode"] == "full" and facts_.get("reused"):
                notes.append(f"{case['key']}, {tgt}: the Python probe RESUMED a session although "
                             "tickets and caches are off")
        r = quiet.run(lambda: measure(tgt, case, rnd, d, port, proxy, backend),
                      f"round {rnd + 1}, {case['key']}, {tgt}", DURATION, notes,
                      lambda x: f"{fmt(x['rps'])} req/s, {fmt(x['cpu_us'], 1)} µs/req")
        for ln in stop_tls_proxy(tgt.split("-")[0], proxy, errlog, pos, r)[:10]:
            loglines.append(f"round {rnd + 1}, {case['key']}, {tgt}, {os.path.basename(errlog)}: {ln.strip()}")
        for pr in r["problems"]:
            notes.append(f"round {rnd + 1}, {case['key']}, {tgt}: {pr}")
        runs.append(r)
        log(f"r{rnd + 1} {case['key']:19} {tgt:16} {r['rps']:>9,.0f} req/s  cpu {fmt(r['cpu_us'], 1):>7} "
            f"us/req ({fmt(r['cpu_pct'])}%)  {client_name(case)} {fmt(r['wrk_cpu_pct'])}%  p99 {fmt(r['p99'], 2)} ms"
            + (f"  PROBLEMS: {r['problems']}" if r["problems"] else ""))

    for rnd in range(ROUNDS):
        k = rnd % len(targets)
        order = targets[k:] + targets[:k]
        for case in CASES:
            for tgt in order:
                one_run(tgt, case, rnd)
            # Resumption sample (round 1): does the client resume against this config?
            if rnd == 0 and case["cert"] == "ecdsa" and case["mode"] != "keepalive" and \
                    (case["mode"] == "resumed" or not QUICK):
                for tgt in order:
                    sm = sample_resumption(tgt, case, d, bport, certs, notes)
                    if sm:
                        samples[(tgt, case["key"])] = sm
                        log(f"   sample {case['key']} {tgt}: {client_name(case)} resumed {sm[0]}/{sm[1]}")
        if "memory" in PARTS:
            mcase = {"mode": "memory", "cert": "ecdsa", "ver": "1.3", "key": "memory-ecdsa-1.3"}
            for tgt in order:
                errlog = errlog_of(tgt, d)
                pos = fsize(errlog)
                proxy, port, cmd, conf = start_proxy(tgt, d, bport, mcase, certs)
                if proxy is None:
                    notes.append(f"round {rnd + 1}, memory, {tgt}: did not start")
                    continue
                err, _ = probe(port, "1.3")
                if err:
                    notes.append(f"round {rnd + 1}, memory, {tgt}: probe failed: {err}")
                time.sleep(0.3)
                r = measure_memory(tgt, rnd, d, port, proxy)
                stop(proxy)
                new = read_tail(errlog, pos)
                fails = sluice_tls_failures(new) if tgt.startswith("sluice") else []
                if fails:
                    r["problems"].append(f"{len(fails)} TLS failures in sluice's log, first: "
                                         f"{fails[0].strip()}")
                for pr in r["problems"]:
                    notes.append(f"round {rnd + 1}, memory, {tgt}: {pr}")
                mem.append(r)
                log(f"r{rnd + 1} memory {tgt:16} "
                    + (f"{r['kib_per_conn']:.1f} KiB/conn ({r['rss_before']} -> {r['rss_during']} KiB, "
                       f"after close {r['rss_after']} KiB, {r['open']} open in {r['open_secs']:.1f} s)"
                       if "kib_per_conn" in r else f"FAILED {r['problems']}"))
    if backend.poll() is not None:
        notes.append(f"the origin exited during the benchmark (status {backend.returncode})")
    stop(backend)
    elapsed = time.monotonic() - t_start
    with open(os.path.join(d, "runs.json"), "w") as f:
        json.dump({"runs": runs, "memory": mem, "speed": speed,
                   "samples": {f"{t}|{k}": v for (t, k), v in samples.items()},
                   "probes": {f"{t}|{k}": v for (t, k), v in probes.items()}}, f, indent=1, default=str)
    write_report(outdir, d, runs, mem, speed, samples, probes, targets, facts, commands, confs,
                 cert_cmds, backend_cmd, notes, loglines, started.strftime("%Y-%m-%d %H:%M:%S"), elapsed)
    refresh_latest(RESULTS, outdir, "tls")
    show_report(outdir, "tls", ["![tls chart]", "## Problems seen"], log)
    # The targets close the report, past what show_report prints: print them too.
    with open(os.path.join(outdir, "tls.md")) as f:
        tail = f.read().partition("## Issue 21's targets")
    if tail[1]:
        print(tail[1] + tail[2].split("Reproduce:")[0].rstrip())
        print()
    return 0 if runs or mem else 1


if __name__ == "__main__":
    run_main(main, PROG)
