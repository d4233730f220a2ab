#!/usr/bin/env python3
"""Core benchmark: plain HTTP/1.1 keepalive through ONE proxy worker.

sluice (workers: 1) vs HAProxy (nbthread 1, http-reuse always) vs nginx
(worker_processes 1, upstream keepalive), in front of the same backend, driven
by the same wrk command, alternating proxy by proxy, round after round.
With BASELINE=/path/to/another/sluice, a fourth proxy, sluice-base, runs
sluice's config with that binary in the same rounds, and the report's
ratios start with sluice/sluice-base of CPU µs per request (old vs new
build side by side, under the same load and noise).

For every run we record wrk's requests/s, p50 and p99 latency, its error
lines, and the proxy's own CPU time (utime+stime from /proc/PID/stat, summed
over the proxy's process tree: master and worker) divided by the requests
completed: CPU microseconds per request, the fairest headline on a small
machine where wrk and the backend compete with the proxy for cores.

Usage: sh bench/core.sh  (or `make bench-core`). Environment knobs:
  QUICK=1          3 s runs (default 10 s)
  DURATION=N       seconds per measured run (overrides QUICK)
  WARMUP=N         unmeasured wrk seconds before each measured run (1)
  CONNECTIONS=N    wrk connections (50)
  WRK_THREADS=N    wrk threads (1)
  ROUNDS=N         rounds; each round runs every proxy once (3)
  BACKEND=nginx|demo  the origin: nginx static 128-byte body (default, the
                   faster one) or build/demo_backend --threads 64
  PROXIES=a,b,c    subset/order of sluice,haproxy,nginx (and sluice-base)
  SLUICE=path      the sluice binary measured as "sluice" (BUILD/sluice)
  BASELINE=path    another sluice binary, measured as "sluice-base" with the
                   same config (added after sluice unless PROXIES names it)
  REQUEST=browser  every request carries a browser's headers (about 516 bytes
                   in all, as a Firefox page load) instead of wrk's bare GET
  ROUTES=N         N content routes that the request does not match: sluice
                   gets N `routes` (path prefixes /app<i>; sluice-base none,
                   so BASELINE=build/sluice measures what routing costs),
                   HAProxy a map of N prefixes (`use_backend
                   %[path,map_beg(...)]`), nginx N prefix locations (0)
  ROUTES_HAPROXY=rules  HAProxy gets N `use_backend ... if { path_beg }`
                   rules instead of the map (evaluated one by one)
  RATE=N           open loop instead of wrk's closed loop: h2load --h1 offers N
                   requests/s in all (N/CONNECTIONS per connection, --rps) to
                   every proxy, so each does the same work per second and CPU per
                   request is compared at equal load, not with the fastest proxy
                   idling while the others saturate (0: wrk, the default). A run
                   that achieves under 97% of N is flagged saturated
  DIRECT=0         skip the wrk -> backend baseline run of each round
  PIN=0            do not pin with taskset
  BUILD=dir        where sluice and demo_backend are (build); relative
                   paths in BUILD, SLUICE, BASELINE: from the repository root
  RESULTS=dir      results root (bench/results)

Output: RESULTS/<UTC timestamp>/core.md, core.png, core/ (configs, raw wrk
output, logs); RESULTS/latest/ gets a copy plus report.md linking them.
Every process started here is stopped by its PID on exit.
"""
import datetime
import functools
import http.client
import os
import shlex
import statistics
import sys
import time

import benchlib
from benchlib import (BASELINE, BODY_SIZE, BUILD, CLK_TCK, PIN, QUICK, RESULTS, SLUICE_BIN,
                      baseline_ratio_line, fmt, free_port, fsize, haproxy_conf, kind_of, launch_proxy, log_lines_above_info, machine_facts as
                      base_facts, measure_wrk, need_tools, nginx_main, nginx_temp_paths, nginx_upstream,
                      peer_versions, pinning, proxy_errlog, Quiet, read_tail, refresh_latest as
                      base_refresh_latest, h2load_log_percentiles, parse_h2load_wrk, report_end, report_list,
                      run_h2load, run_main, run_wrk, show_report, sluice_conf,
                      need_sluice_bins, sluice_describe, start_backend_nginx, start_demo_backend, stop, stop_proxy, with_baseline,
                      write)

env_int = functools.partial(benchlib.env_int, prog="bench/core.py")

DURATION = env_int("DURATION", 3 if QUICK else 10, 1)
WARMUP = env_int("WARMUP", 1, 0)
CONNECTIONS = env_int("CONNECTIONS", 50, 1)
WRK_THREADS = env_int("WRK_THREADS", 1, 1)
ROUNDS = env_int("ROUNDS", 3, 1)
RATE = env_int("RATE", 0, 0)
LOAD = "h2load" if RATE else "wrk"
# Default origin: nginx serving a static 128-byte body. It is the faster of the
# two here (direct wrk -> origin, same pinning: ~148k req/s at 3.3 us/req of
# origin CPU vs ~122k req/s at 4.3 us/req for demo_backend), so it leaves more
# of the load CPU to wrk and hides less of the proxies' differences.
BACKEND = os.environ.get("BACKEND", "nginx") or "nginx"
PROXIES = with_baseline([p for p in os.environ.get("PROXIES", "sluice,haproxy,nginx").split(",") if p],
                        "bench/core.py", "PROXIES")
DIRECT = os.environ.get("DIRECT", "1") != "0"
ROUTES = int(os.environ.get("ROUTES", "0") or 0)
ROUTES_HAPROXY = os.environ.get("ROUTES_HAPROXY", "map") or "map"
if ROUTES_HAPROXY not in ("map", "rules"):
    sys.exit("bench/core.py: ROUTES_HAPROXY must be map or rules")
REQUEST = os.environ.get("REQUEST", "minimal") or "minimal"
if REQUEST not in ("minimal", "browser"):
    sys.exit("bench/core.py: REQUEST must be minimal or browser")
# A Firefox page load's headers: with wrk's request line and Host, 516 bytes.
BROWSER_HEADERS = (
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8",
    "Accept-Language: en-US,en;q=0.5",
    "Accept-Encoding: gzip, deflate, br, zstd",
    "Cookie: session=3f9a1c77e2b04d6c; theme=dark; lang=en",
    "Referer: http://127.0.0.1/home.html",
    "Upgrade-Insecure-Requests: 1",
    "Sec-Fetch-Dest: document",
    "Sec-Fetch-Mode: navigate",
    "Sec-Fetch-Site: same-origin",
    "Priority: u=0, i",
)
REQUEST_EXTRA = [a for h in BROWSER_HEADERS for a in ("-H", h)] if REQUEST == "browser" else []

NOISE_PCT = env_int("NOISE_PCT", 25)          # others' CPU (% of one CPU) that makes a run noisy
QUIET_BUDGET = env_int("QUIET_BUDGET", 75)    # seconds in all for waiting/re-running when noisy
ATTEMPTS = 3                                  # measured attempts per run while runs are noisy

BACKEND_THREADS = 64
BACKEND_DESC = {"nginx": "nginx, 1 worker, static `return 200` of 128 bytes (BACKEND=nginx)",
                "demo": "build/demo_backend, 64 threads (BACKEND=demo)"}.get(BACKEND, BACKEND)
POOL = 64                     # backend connections each proxy may keep / open

if BACKEND not in ("demo", "nginx"):
    sys.exit("bench/core.py: BACKEND must be demo or nginx")
for p in PROXIES:
    if p not in ("sluice", "sluice-base", "haproxy", "nginx"):
        sys.exit(f"bench/core.py: unknown proxy {p!r} in PROXIES")
if WRK_THREADS > CONNECTIONS:
    sys.exit("bench/core.py: WRK_THREADS must not exceed CONNECTIONS")

# ---------------------------------------------------------------- processes

def log(msg):
    print(f"[core] {msg}", flush=True)


def http_check(port):
    """One GET / with a fresh connection; returns None if 200 with a
    BODY_SIZE body, else a description of what came back."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/")
        r = c.getresponse()
        body = r.read()
        c.close()
    except (OSError, http.client.HTTPException) as e:
        return f"GET / failed: {e!r}"
    if r.status != 200 or len(body) != BODY_SIZE:
        return f"GET / -> {r.status}, {len(body)} body bytes"
    return None


# ---------------------------------------------------------------- pinning

PROXY_PIN, LOAD_PIN, PIN_TEXT = pinning(PIN)

# ---------------------------------------------------------------- configs

def conf_sluice(d, port, bport, admin_port=None, name="sluice"):
    admin = f"admin:\n  address: 127.0.0.1:{admin_port}\n" if admin_port else ""
    routes = ""
    if ROUTES and name == "sluice":
        routes = "    routes:\n" + "".join(f"      - {{name: r{i}, match: {{path: {{prefix: /app{i}}}}}, backend: app}}\n"
                                           for i in range(ROUTES))
    return sluice_conf(d, f"{name}, one worker, one listener -> one backend with one server"
                       + (f", {ROUTES} routes" if routes else ""), port, bport, POOL,
                       listener="http", admin=admin, name=name, listener_extra=routes)


def conf_sluice_base(d, port, bport):
    """sluice's config for the BASELINE binary (its own error log)."""
    return conf_sluice(d, port, bport, name="sluice-base")


def conf_haproxy(d, port, bport):
    acls, what = "", ""
    if ROUTES and ROUTES_HAPROXY == "rules":
        acls = "".join(f"    use_backend be if {{ path_beg /app{i}/ }} || {{ path /app{i} }}\n" for i in range(ROUTES))
        what = f", {ROUTES} use_backend rules"
    elif ROUTES:
        mp = write(os.path.join(d, "routes.map"), "".join(f"/app{i}/ be\n" for i in range(ROUTES)))
        acls = f"    use_backend %[path,map_beg({mp},be)]\n"
        what = f", use_backend through a map of {ROUTES} prefixes"
    return haproxy_conf(d, "HAProxy, one thread, keepalive both sides, backend connections reused" + what,
                        port, bport, POOL, maxconn=4096, frontend_extra=acls)


def conf_nginx(d, port, bport):
    return ("# nginx, one worker, upstream keepalive\n" + nginx_main(d, "nginx", rlimit=None, conns=4096)
            + "    access_log off;\n    keepalive_requests 1000000;\n    keepalive_timeout 60s;\n"
            + nginx_temp_paths(d, "tmp-nginx") + nginx_upstream(bport, POOL) + f"""    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
{nginx_locations()}}}
""")


def nginx_locations():
    """ROUTES prefix locations inside the server block (all to the same
    upstream), closed by the server's brace."""
    return "".join(f"""        location /app{i}/ {{
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
""" for i in range(ROUTES)) + "    }\n"


# ---------------------------------------------------------------- backend

def start_backend(d):
    """Returns (Popen, port, command line)."""
    if BACKEND == "demo":
        cmd = LOAD_PIN + [os.path.join(BUILD, "demo_backend"), "--listen", "127.0.0.1:0",
                          "--threads", str(BACKEND_THREADS), "--backlog", "256",
                          "--size", str(BODY_SIZE), "--quiet"]
        return start_demo_backend(cmd, os.path.join(d, "backend-demo.log"), prog="bench/core.py")
    return start_backend_nginx(d, LOAD_PIN, prog="bench/core.py")


# ---------------------------------------------------------------- proxies

CONF = {"sluice": (conf_sluice, "sluice.yaml"), "sluice-base": (conf_sluice_base, "sluice-base.yaml"),
        "haproxy": (conf_haproxy, "haproxy.cfg"), "nginx": (conf_nginx, "nginx.conf")}
BINARY = {"sluice": SLUICE_BIN, "sluice-base": BASELINE}


def start_proxy(name, d, bport):
    """Returns (Popen or None, port, command line, config path)."""
    port = free_port()
    make, fname = CONF[name]
    conf = write(os.path.join(d, fname), make(d, port, bport))
    p, cmd = launch_proxy(kind_of(name), d, port, conf, PROXY_PIN, BINARY.get(name), name=name)
    return p, port, cmd, conf


# ---------------------------------------------------------------- wrk

def wrk_cmd(port, seconds, extra=()):
    return benchlib.wrk_cmd(LOAD_PIN, WRK_THREADS, CONNECTIONS, seconds, f"http://127.0.0.1:{port}/",
                            [*REQUEST_EXTRA, *extra])


# ---------------------------------------------------------------- one run

def h2load_cmd(port, seconds, logf=None):
    """RATE's open loop: every connection sends RATE/CONNECTIONS requests a
    second, one at a time, whatever the server's speed."""
    return benchlib.h2load_rate_cmd(LOAD_PIN, CONNECTIONS, RATE, seconds, f"http://127.0.0.1:{port}/",
                                    REQUEST_EXTRA, logf)


def load_cmd(port, seconds):
    return h2load_cmd(port, seconds) if RATE else wrk_cmd(port, seconds)


def measure_rate(label, rnd, d, port, proxy, backend):
    """measure() with RATE's open loop: p50/p99 from h2load's per-request
    log; a run that could not keep up with the offered rate is a problem
    (its CPU per request is then not measured at the load the others had)."""
    raw = os.path.join(d, "raw", f"r{rnd + 1}-{label}.txt")
    if WARMUP:
        run_h2load(h2load_cmd(port, WARMUP), WARMUP, raw + ".warmup")
    logf = raw + ".log"

    def parse(out):
        r = parse_h2load_wrk(out)
        pct = h2load_log_percentiles(logf)
        r["p50"], r["p99"] = pct[50], pct[99]
        return r
    r = measure_wrk(lambda: run_h2load(h2load_cmd(port, DURATION, logf), DURATION, raw), proxy, backend,
                    log_ticks=log, parse=parse)
    if os.path.exists(logf):
        os.unlink(logf)  # some MB per run; the percentiles are in the report
    benchlib.flag_saturated(r, RATE)
    r.update(label=label, round=rnd + 1, raw=os.path.relpath(raw, d))
    return r


def measure(label, rnd, d, port, proxy, backend, wrk_extra=()):
    """Warm up, then one measured wrk run; proxy is a Popen or None (direct).
    wrk_extra: more wrk arguments (bench/stats.py: -H 'Connection: close').
    With RATE, h2load's open loop instead (measure_rate)."""
    if RATE and not wrk_extra:
        return measure_rate(label, rnd, d, port, proxy, backend)
    if WARMUP:
        run_wrk(wrk_cmd(port, WARMUP, wrk_extra), WARMUP)
    raw = os.path.join(d, "raw", f"r{rnd + 1}-{label}.txt")
    r = measure_wrk(lambda: run_wrk(wrk_cmd(port, DURATION, wrk_extra), DURATION, raw), proxy, backend,
                    log_ticks=log)
    r.update(label=label, round=rnd + 1, raw=os.path.relpath(raw, d))
    return r


QUIET = Quiet(NOISE_PCT, QUIET_BUDGET, ATTEMPTS, log=log)


def measure_quiet(label, rnd, d, port, proxy, backend, notes):
    """measure(), but first wait (within QUIET_BUDGET) until other people's
    processes leave the CPUs alone, and re-run it if they interfered."""
    return QUIET.run(lambda: measure(label, rnd, d, port, proxy, backend),
                     f"round {rnd + 1}, {label}", DURATION, notes,
                     lambda r: f"{fmt(r['rps'])} req/s, {fmt(r['cpu_us'], 2)} µs/req"
                     + (f", {r['sock_detail']}" if r["sock_errors"] else ""))


# ---------------------------------------------------------------- report

def machine_facts():
    sl = [(x, f"{BINARY[x]}: {sluice_describe(BINARY[x], detail=True)}")
          for x in ("sluice", "sluice-base") if x in PROXIES]
    return base_facts(sl + peer_versions())


def summarize(runs, label):
    """Medians/min/max over the target's clean runs (all of them if none is clean)."""
    allr = [r for r in runs if r["label"] == label]
    if not allr:
        return None
    rs = [r for r in allr if not r["noisy"]] or allr

    def col(k):
        return [r[k] for r in rs if r[k] is not None]

    def mmm(k):
        v = col(k)
        return (statistics.median(v), min(v), max(v)) if v else (None, None, None)

    return {
        "n": len(rs), "total": len(allr),
        "rps": mmm("rps"), "p50": mmm("p50"), "p99": mmm("p99"),
        "cpu_us": mmm("cpu_us"), "cpu_pct": mmm("cpu_pct"), "backend_cpu_us": mmm("backend_cpu_us"),
        "cpu_user_us": mmm("cpu_user_us"), "cpu_sys_us": mmm("cpu_sys_us"),
        "errors": sum(r["sock_errors"] + r["non2xx"] for r in allr),
        "problems": sum(len(r["problems"]) for r in rs),
    }


def per_round_ratios(runs, a, b, key):
    """(median, min, max) over rounds of A's KEY ÷ B's in the same round
    (rounds where both runs were clean; all rounds if none was)."""
    def ratios(clean):
        va = {r["round"]: r[key] for r in runs if r["label"] == a and r[key] and not (clean and r["noisy"])}
        vb = {r["round"]: r[key] for r in runs if r["label"] == b and r[key] and not (clean and r["noisy"])}
        return [va[k] / vb[k] for k in va if k in vb]
    v = ratios(True) or ratios(False)
    return (statistics.median(v), min(v), max(v)) if v else (None, None, None)


def chart(path, labels, summ):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"sluice": "#2b7bba", "sluice-base": "#8cc0e8", "haproxy": "#e07b39", "nginx": "#3a9e4f",
              "direct": "#999999"}
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, title, lab in (
            (a1, "rps", "Requests/s (median, bars: min–max)", labels),
            (a2, "cpu_us", "Proxy CPU µs per request (lower is better)",
             [x for x in labels if x != "direct"])):
        med = [summ[x][key][0] for x in lab]
        lo = [summ[x][key][0] - summ[x][key][1] for x in lab]
        hi = [summ[x][key][2] - summ[x][key][0] for x in lab]
        names = [x if x != "direct" else "direct\n(no proxy)" for x in lab]
        bars = ax.bar(names, med, yerr=[lo, hi], capsize=6,
                      color=[colors.get(x, "#777") for x in lab])
        for b, v, top in zip(bars, med, [summ[x][key][2] for x in lab]):
            ax.annotate(f"{v:,.0f}" if key == "rps" else f"{v:.2f}",
                        (b.get_x() + b.get_width() / 2, top),
                        xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                        fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    fig.suptitle(f"sluice core: HTTP keepalive through one proxy worker — "
                 + (f"h2load -c{CONNECTIONS} at {RATE:,} req/s offered, " if RATE else f"wrk -c{CONNECTIONS} ")
                 + f"-d{DURATION}s, backend {BACKEND}, {ROUNDS} rounds", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(outdir, d, runs, labels, facts, commands, confs, backend_cmd, notes, loglines,
                 started_at, elapsed):
    summ = {x: summarize(runs, x) for x in labels}
    summ = {k: v for k, v in summ.items() if v}
    labels = [x for x in labels if x in summ]
    try:
        chart(os.path.join(outdir, "core.png"), labels, summ)
        chart_line = "![core chart](core.png)"
    except Exception as e:  # noqa: BLE001 — a missing chart must not lose the table
        chart_line = f"(chart not drawn: {e!r})"

    L = []
    L.append("# Core benchmark — plain HTTP/1.1 keepalive through one proxy worker")
    L.append("")
    L.append(f"Run {started_at} UTC, {elapsed:.0f} s in all. {'QUICK mode. ' if QUICK else ''}"
             f"{ROUNDS} rounds × {DURATION} s measured runs (after {WARMUP} s of unmeasured warm-up "
             f"each), "
             + (f"**open loop at {RATE:,} requests/s offered to every proxy** (h2load `--h1 -t1 "
                f"-c{CONNECTIONS} --rps={RATE / CONNECTIONS:g}`, RATE={RATE})" if RATE else
                f"wrk `-t{WRK_THREADS} -c{CONNECTIONS}`")
             + f", {BODY_SIZE}-byte responses, backend: "
             f"**{BACKEND_DESC}**. Pinning: {PIN_TEXT}.")
    L.append("")
    L.append("| | runs used | req/s median | req/s min–max | p50 ms | p99 ms | proxy CPU µs/req median | "
             "µs/req min–max | user / system µs/req | proxy CPU % of a core | backend CPU µs/req | errors |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for x in labels:
        s = summ[x]
        name = f"direct ({LOAD} → backend, no proxy)" if x == "direct" else f"**{x}**"
        L.append(f"| {name} | {s['n']}/{s['total']} | {fmt(s['rps'][0])} | {fmt(s['rps'][1])}–{fmt(s['rps'][2])} | "
                 f"{fmt(s['p50'][0], 3)} | {fmt(s['p99'][0], 3)} | {fmt(s['cpu_us'][0], 2)} | "
                 + (f"{fmt(s['cpu_us'][1], 2)}–{fmt(s['cpu_us'][2], 2)}" if s['cpu_us'][0] else "—")
                 + (f" | {fmt(s['cpu_user_us'][0], 2)} / {fmt(s['cpu_sys_us'][0], 2)}" if s['cpu_us'][0] else " | —")
                 + f" | {fmt(s['cpu_pct'][0])} | {fmt(s['backend_cpu_us'][0], 2)} | {s['errors']} |")
    L.append("")
    L.append("Medians, minima and maxima are over the runs used: the clean runs (others' CPU "
             f"below {NOISE_PCT}% of a CPU, see below), or every run if none was clean. "
             + ("p50/p99 are medians of the runs' percentiles of h2load's per-request times (its "
                "`--log-file`). errors = requests h2load got no answer to + "
                if RATE else "p50/p99 are medians of wrk's `--latency` percentiles. errors = wrk socket errors + ")
             + "non-2xx/3xx responses, summed over all runs.")
    L.append("")
    if "sluice" in summ:
        L.append("## Ratios")
        L.append("")
        if "sluice-base" in summ:
            pr = per_round_ratios(runs, "sluice", "sluice-base", "cpu_us")
            L.append(baseline_ratio_line(
                "proxy CPU µs per request (medians)", summ["sluice"]["cpu_us"], summ["sluice-base"]["cpu_us"],
                f"; best runs {summ['sluice']['cpu_us'][1] / summ['sluice-base']['cpu_us'][1]:.3f}"
                + (f", per-round ratios median {pr[0]:.3f} ({pr[1]:.3f}–{pr[2]:.3f})" if pr[0] else "")
                + f"; req/s {summ['sluice']['rps'][0] / summ['sluice-base']['rps'][0]:.3f}"))
            L.append("")
        L.append("Medians, and the best runs (max req/s, min µs/req; noise only ever makes a run "
                 "slower, so the best run is the least disturbed one).")
        L.append("")
        L.append("| | req/s median (>1: sluice faster) | req/s best | proxy CPU µs/req median "
                 "(<1: sluice cheaper) | µs/req best | p99 median (<1: sluice lower) |")
        L.append("|---|---:|---:|---:|---:|---:|")
        for peer in ("sluice-base", "haproxy", "nginx"):
            if peer in summ:
                a, b = summ["sluice"], summ[peer]
                L.append(f"| sluice / {peer} | {a['rps'][0] / b['rps'][0]:.3f} | "
                         f"{a['rps'][2] / b['rps'][2]:.3f} | "
                         f"{a['cpu_us'][0] / b['cpu_us'][0]:.3f} | {a['cpu_us'][1] / b['cpu_us'][1]:.3f} | "
                         + (f"{a['p99'][0] / b['p99'][0]:.3f} |" if a['p99'][0] and b['p99'][0] else "— |"))
        L.append("")
    L.append(chart_line)
    L.append("")
    if notes:
        report_list(L, "Problems seen", notes)
    L.append("## Proxy log lines above info level")
    L.append("")
    L.append("Lines from the proxies' own error logs other than info/notice, per run (these are "
             "reported, not counted as errors):")
    L.append("")
    for ln in loglines or ["none"]:
        L.append(f"- {ln}")
    L.append("")
    L.append("## Every run (in the order they ran)")
    L.append("")
    L.append("| round | target | req/s | requests | p50 ms | p99 ms | proxy CPU µs/req | user / system | "
             "proxy CPU % | backend CPU µs/req | others' CPU % | socket errors | non-2xx | raw |")
    L.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in runs:
        L.append(f"| {r['round']} | {r['label']} | {fmt(r['rps'])} | {r['requests']} | {fmt(r['p50'], 3)} | "
                 f"{fmt(r['p99'], 3)} | {fmt(r['cpu_us'], 2)} | "
                 + (f"{fmt(r['cpu_user_us'], 2)} / {fmt(r['cpu_sys_us'], 2)}" if r['cpu_us'] is not None else "—")
                 + f" | {fmt(r['cpu_pct'])} | "
                 f"{fmt(r['backend_cpu_us'], 2)} | {fmt(r['other_pct'])}{' ⚠' if r['noisy'] else ''} | "
                 f"{r['sock_errors']} | {r['non2xx']} | "
                 f"[{os.path.basename(r['raw'])}](core/{r['raw']}) |")
    L.append("")
    L.append("## What was measured")
    L.append("")
    L.append("- Each round runs the direct baseline (when enabled) and then every proxy once, the "
             "proxy order rotating by one each round so that no proxy always goes first. Each proxy "
             "is started fresh for its run, checked with one `GET /` (must be 200 with a "
             f"{BODY_SIZE}-byte body), warmed up with an unmeasured wrk run, measured, then "
             "stopped (SIGTERM). The backend stays up for the whole benchmark.")
    if "sluice-base" in labels:
        L.append("- sluice-base (BASELINE): sluice's config, run by another sluice binary "
                 f"(`{BASELINE}`, {sluice_describe(BASELINE)}; sluice is `{SLUICE_BIN}`, "
                 f"{sluice_describe(SLUICE_BIN)}). Its per-round ratio compares two runs seconds apart, "
                 "under the same load and the same noise.")
    L.append("- Proxy CPU: utime+stime from `/proc/PID/stat` of the proxy's whole process tree "
             "(sluice: master + its one worker; nginx: master + its one worker; HAProxy: its "
             "single process), read just before and just after the measured wrk run, divided by "
             f"the requests wrk completed. Clock tick = 1/{CLK_TCK} s, so with ~"
             f"{statistics.median([r['requests'] for r in runs]):,.0f} requests per run one tick "
             f"is ~{1e6 / CLK_TCK / max(1, statistics.median([r['requests'] for r in runs])):.3f} "
             "µs/req; the masters are idle and add nothing measurable.")
    L.append("- backend CPU µs/req: the same measure for the backend process, for context (it "
             "shares its CPU with wrk).")
    L.append("- others' CPU %: busy time of all CPUs during the run (/proc/stat user+nice+system+"
             "irq+softirq) minus the proxy, the backend and wrk, in % of one CPU: other people's "
             f"processes, plus a few % of kernel work charged to nobody. A run at or above "
             f"{NOISE_PCT}%, or whose wrk run lasted over 10% longer than asked (the machine "
             "was not scheduled), is noisy: the script waits for a quiet machine before each run and "
             f"re-runs a noisy run up to {ATTEMPTS - 1} times, within {QUIET_BUDGET} s in all; medians use "
             "the clean runs only; noisy runs still kept "
             "are marked ⚠ and listed under Problems seen.")
    L.append("- Request: " + ("a browser's (REQUEST=browser): wrk's GET / and Host plus "
                              f"{len(BROWSER_HEADERS)} headers of a Firefox page load, 516 bytes"
                              if REQUEST == "browser" else "wrk's bare `GET /` with Host (REQUEST=minimal)") + ".")
    if ROUTES:
        L.append(f"- Routes (ROUTES={ROUTES}): sluice has {ROUTES} `routes` (path prefixes `/app0` … "
                 f"`/app{ROUTES - 1}`, none of which the request matches; sluice-base has none, so "
                 "sluice ÷ sluice-base with BASELINE=build/sluice is what routing costs); HAProxy "
                 + (f"{ROUTES} `use_backend be if {{ path_beg /appN/ }} || {{ path /appN }}` rules"
                    if ROUTES_HAPROXY == "rules" else
                    f"`use_backend %[path,map_beg(routes.map,be)]` over a map of {ROUTES} prefixes `/appN/`")
                 + f"; nginx {ROUTES} `location /appN/` blocks.")
    L.append(f"- Pinning: {PIN_TEXT}. On a 2-CPU machine wrk and the backend share one CPU, so "
             "req/s is capped by the load side for every proxy and differences in req/s are "
             "compressed; proxy CPU µs/req is the fair comparison.")
    L.append("")
    L.append("## Commands (exact)")
    L.append("")
    L.append("```sh")
    L.append(f"# backend (started once)\n{backend_cmd}")
    for k, v in commands.items():
        L.append(f"# {k}\n{v}")
    L.append(f"# load (per run; warm-up uses -d{WARMUP}s, raw output has no warm-up)")
    L.append(shlex.join(load_cmd("PORT", DURATION)))
    L.append("```")
    L.append("")
    L.append("Ports are picked free at run time (bind to port 0). Configs as used (also in "
             "[core/](core/)):")
    L.append("")
    report_end(L, outdir, "core", confs, facts,
               "`make bench-core` (or `QUICK=1 make bench-core`); see docs/benchmarking.md.")
    return summ


def refresh_latest(outdir):
    base_refresh_latest(RESULTS, outdir, "core")


# ---------------------------------------------------------------- main

def main():
    need_tools("bench/core.py", (LOAD, "haproxy", "nginx") + (("taskset",) if PROXY_PIN else ()),
               "bench/core.sh")
    need_sluice_bins("bench/core.py", PROXIES)
    if BACKEND == "demo" and not os.access(os.path.join(BUILD, "demo_backend"), os.X_OK):
        sys.exit(f"bench/core.py: {BUILD}/demo_backend missing: make {BUILD}/demo_backend")

    started = datetime.datetime.now(datetime.timezone.utc)
    ts = started.strftime("%Y%m%dT%H%M%SZ")
    outdir = os.path.join(RESULTS, ts)
    d = os.path.join(outdir, "core")
    os.makedirs(os.path.join(d, "raw"), exist_ok=True)
    t_start = time.monotonic()
    labels = (["direct"] if DIRECT else []) + PROXIES
    per_run = DURATION + WARMUP + 1.5
    log(f"results in {outdir}")
    log(f"{ROUNDS} rounds x {len(labels)} runs x ~{per_run:.0f} s = about "
        f"{ROUNDS * len(labels) * per_run:.0f} s; backend {BACKEND}; {PIN_TEXT}")
    facts = machine_facts()

    runs, notes, loglines, commands, confs = [], [], [], {}, {}
    backend, bport, backend_cmd = start_backend(d)
    err = http_check(bport)
    if err:
        sys.exit(f"bench/core.py: backend check failed: {err}")
    if BACKEND == "nginx":
        confs["backend"] = os.path.join(d, "backend-nginx.conf")
    for rnd in range(ROUNDS):
        k = rnd % len(PROXIES)
        order = (["direct"] if DIRECT else []) + PROXIES[k:] + PROXIES[:k]
        for label in order:
            if label == "direct":
                r = measure_quiet("direct", rnd, d, bport, None, backend, notes)
                runs.append(r)
                log(f"round {rnd + 1} direct : {r['rps']:>10,.0f} req/s  p99 {fmt(r['p99'], 3)} ms")
                continue
            errlog = proxy_errlog(kind_of(label), d, name=label)
            pos = fsize(errlog)
            proxy, port, cmd, conf = start_proxy(label, d, bport)
            commands[label] = cmd
            confs[label] = conf
            if proxy is None:
                notes.append(f"round {rnd + 1}: {label} did not start; log: "
                             f"{read_tail(errlog, pos).strip()[-500:]!r}")
                log(notes[-1])
                continue
            err = http_check(port)
            if err:
                notes.append(f"round {rnd + 1}: {label}: sanity check failed: {err}")
                log(notes[-1])
            r = measure_quiet(label, rnd, d, port, proxy, backend, notes)
            runs.append(r)
            bad_exit = stop_proxy(label, proxy)
            if bad_exit:
                r["problems"].append(bad_exit)
            # Anything but [info] lines in the proxy's own log is worth reporting.
            for ln in log_lines_above_info(read_tail(errlog, pos))[:10]:
                loglines.append(f"round {rnd + 1}, {label}, {os.path.basename(errlog)}: {ln.strip()}")
            for pr in r["problems"]:
                notes.append(f"round {rnd + 1}, {label}: {pr}")
            log(f"round {rnd + 1} {label:7}: {r['rps']:>10,.0f} req/s  p50 {fmt(r['p50'], 3)} ms  "
                f"p99 {fmt(r['p99'], 3)} ms  cpu {fmt(r['cpu_us'], 2)} us/req ({fmt(r['cpu_pct'])}%)"
                + (f"  PROBLEMS: {r['problems']}" if r["problems"] else ""))
    if backend.poll() is not None:
        notes.append(f"the backend exited during the benchmark (status {backend.returncode})")
    stop(backend)
    elapsed = time.monotonic() - t_start
    summ = write_report(outdir, d, runs, labels, facts, commands, confs, backend_cmd, notes, loglines,
                        started.strftime("%Y-%m-%d %H:%M:%S"), elapsed)
    refresh_latest(outdir)
    show_report(outdir, "core", ["![core chart]"], log)
    return 0 if summ else 1


if __name__ == "__main__":
    run_main(main, "bench/core.py")
