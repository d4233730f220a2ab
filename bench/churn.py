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

Per run: connections (= handshakes = requests) per second, mean and p99
time per request, failure rate (wrk socket errors + non-2xx responses over
all attempts), and the headline: the proxy's own CPU µs per handshake
(utime+stime of its processes ÷ handshakes), because the client (wrk, which
verifies each handshake's signature) saturates before the proxy does.
Scaling: the SCALE cases run again with 2 workers (sluice `workers: 2`,
HAProxy `nbthread 2`, nginx `worker_processes 2`), the proxy then allowed on
every CPU (taskset) while wrk and the backend stay where they were.
With BASELINE=/path/to/another/sluice, target sluice-base runs sluice's
config with that binary in the same rounds, and the report gives
sluice/sluice-base of the proxy CPU µs per handshake for every case.

Usage: sh bench/churn.sh  (or `make bench-churn`). Environment knobs:
  QUICK=1          1 s runs, no warm-up, cases ecdsa-1.3,rsa-1.3 (+ scaling)
  DURATION=N       seconds per measured wrk run (4; QUICK 1)
  WARMUP=N         unmeasured wrk seconds before each measured run (1; QUICK 0)
  CONNECTIONS=N    wrk connections (50)
  WRK_THREADS=N    wrk threads (1)
  ROUNDS=N         rounds; each round runs every case on every target once (3)
  CASES=a,b        1-worker cases, CERT-VERSION with CERT ecdsa|rsa, VERSION 1.2|1.3
                   (ecdsa-1.2,ecdsa-1.3,rsa-1.2,rsa-1.3; QUICK ecdsa-1.3,rsa-1.3)
  SCALE=a,b        cases also run with 2 workers (ecdsa-1.3; empty: none)
  TARGETS=a,b      subset/order of sluice,haproxy,nginx (and sluice-base)
  SLUICE=path      the sluice binary measured as "sluice" (BUILD/sluice)
  BASELINE=path    another sluice binary, measured as "sluice-base" with the
                   same configs (added after sluice unless TARGETS names it)
  PIN=0            do not pin with taskset
  NOISE_PCT=N      others' CPU (% of one CPU) that makes a run noisy (25)
  QUIET_BUDGET=N   seconds in all for waiting for quiet / re-running (30; QUICK 0)
  BUILD=dir        where sluice is (build: the default TLS library, BoringSSL);
                   relative BUILD, SLUICE, BASELINE: from the repository root
  RESULTS=dir      results root (bench/results)
  BENCH_TS=name    results directory name (default: UTC timestamp)

Output: RESULTS/<ts>/churn.md, churn.png, churn/ (certificates, configs,
raw wrk output, logs, runs.json); RESULTS/latest/ gets a copy and
report.md links it. Every process started here is stopped by its PID.
Exit status 1 if a target produced no figure.
"""
import functools
import json
import os
import re
import ssl
import sys
import time

import benchlib
from benchlib import (BASELINE, BODY_SIZE, CLK_TCK, PIN, QUICK, RESULTS, ROOT, SLUICE_BIN, STATIC_BODY,
                      baseline_binaries, cmd_out, exit_status, fmt, fmt_mmm, free_port, fsize, grouped_bars,
                      haproxy_conf, kind_of, launch_proxy, need_sluice_bins, sluice_describe, with_baseline,
                      machine_facts, measure_wrk, need_tools, nginx_main, nginx_temp_paths, noise_note, paired,
                      parse_wrk, peer_versions, pinning, proxy_errlog, Quiet, read_tail, refresh_latest,
                      report_end, report_list, results_dirs, run_main, run_wrk, runs_of, show_report,
                      sluice_conf, start, stop, wait_port, write)
from tlslib import (CERT_NAME, copy_sluice, haproxy_bind_ssl, haproxy_global_ssl, make_certs, nginx_ssl, probe,
                    sluice_tls, stop_tls_proxy)

PROG = "bench/churn.py"
env_int = functools.partial(benchlib.env_int, prog=PROG)
env_names = functools.partial(benchlib.env_names, prog=PROG)

DURATION = env_int("DURATION", 1 if QUICK else 4, 1)
WARMUP = env_int("WARMUP", 0 if QUICK else 1, 0)
CONNECTIONS = env_int("CONNECTIONS", 50, 1)
WRK_THREADS = env_int("WRK_THREADS", 1, 1)
ROUNDS = env_int("ROUNDS", 3, 1)
NOISE_PCT = env_int("NOISE_PCT", 25)
QUIET_BUDGET = env_int("QUIET_BUDGET", 0 if QUICK else 30)
ATTEMPTS = 2
POOL = 64                      # backend connections each proxy may open

ALL_CASES = ["ecdsa-1.2", "ecdsa-1.3", "rsa-1.2", "rsa-1.3"]
CASE_KEYS = env_names("CASES", ALL_CASES, "ecdsa-1.3,rsa-1.3" if QUICK else None, "case")
SCALE_KEYS = env_names("SCALE", ALL_CASES, "ecdsa-1.3", "case")
TARGETS = with_baseline(env_names("TARGETS", ["sluice", "sluice-base", "haproxy", "nginx"],
                                  "sluice,haproxy,nginx", what="target"), PROG, "TARGETS")
if not TARGETS or not (CASE_KEYS or SCALE_KEYS):
    sys.exit(f"{PROG}: nothing to measure")
if WRK_THREADS > CONNECTIONS:
    sys.exit(f"{PROG}: WRK_THREADS must not exceed CONNECTIONS")

# Every measured case: certificate, TLS version, workers. A SCALE case runs
# with 1 worker too (as a CASES case if listed there, else on its own).
CASES = []
for k in dict.fromkeys(CASE_KEYS + SCALE_KEYS):
    cert, ver = k.split("-")
    CASES.append({"cert": cert, "ver": ver, "workers": 1, "key": f"{k}-w1"})
for k in SCALE_KEYS:
    cert, ver = k.split("-")
    CASES.append({"cert": cert, "ver": ver, "workers": 2, "key": f"{k}-w2"})

PROXY_PIN, LOAD_PIN, PIN_TEXT = pinning(PIN)
ALL_CPUS = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
PROXY_PIN2 = ["taskset", "-c", ALL_CPUS] if PROXY_PIN else []
OCI = {"cps": 60000, "mean_ms": 17, "fail_pct": 0.001}


def log(msg):
    print(f"[churn] {msg}", flush=True)


def case_name(c, workers=True):
    s = f"{CERT_NAME[c['cert']]} TLS {c['ver']}"
    return s + (f", {c['workers']} worker{'s' if c['workers'] > 1 else ''}" if workers else "")


SLUICE = {}                   # path, TLS line, where it was copied from
BASE = {}                     # the same for sluice-base (BASELINE)


def shown(path):
    """PATH relative to the repository when it is inside it."""
    rel = os.path.relpath(path, ROOT)
    return path if rel.startswith("..") else rel


def sluice_of(tgt):
    """The SLUICE or BASE dict of a sluice target."""
    return BASE if tgt == "sluice-base" else SLUICE


# ---------------------------------------------------------------- configs

def conf_origin(d, pp_port, plain_port):
    return (f"# origin: nginx, one worker, {BODY_SIZE}-byte body; it echoes what it learnt of the client\n"
            + nginx_main(d, "origin")
            + "    access_log off;\n    keepalive_requests 1000000;\n    keepalive_timeout 60s;\n"
            + nginx_temp_paths(d, "tmp-origin") + f"""    server {{
        # sluice and HAProxy: every connection must start with a PROXY header
        listen 127.0.0.1:{pp_port} proxy_protocol backlog=1024;
        # nginx (cannot send one): plain, the client in X-Forwarded-For
        listen 127.0.0.1:{plain_port} backlog=1024;
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
                       server_extra="        proxy_protocol: v2\n")


def conf_haproxy(d, port, pp_port, c, certs):
    return haproxy_conf(d, f"HAProxy, {c['workers']} thread(s); tickets and session cache off; PROXY v2 "
                        "to the server", port, pp_port, POOL, nbthread=c["workers"],
                        global_extra=haproxy_global_ssl(True),
                        bind_extra=haproxy_bind_ssl(certs, c["cert"], c["ver"], True),
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
        listen 127.0.0.1:{port} ssl reuseport backlog=1024;
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
                          sluice_of(tgt).get("path"), name=tgt, workers=c["workers"])
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


# ---------------------------------------------------------------- wrk

def wrk_cmd(port, seconds):
    return benchlib.wrk_cmd(LOAD_PIN, WRK_THREADS, CONNECTIONS, seconds, f"https://127.0.0.1:{port}/",
                            ["-H", "Connection: close"])


def wrk_mean_ms(out):
    m = re.search(r"^\s+Latency\s+([\d.]+)(us|ms|s|m)\s", out, re.M)
    return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[m.group(2)] if m else None


def measure(tgt, c, rnd, d, port, proxy, origin):
    if WARMUP:
        run_wrk(wrk_cmd(port, WARMUP), WARMUP)
    raw = os.path.join(d, "raw", f"r{rnd + 1}-{c['key']}-{tgt}.txt")
    r = measure_wrk(lambda: run_wrk(wrk_cmd(port, DURATION), DURATION, raw), proxy, origin,
                    parse=lambda out: dict(parse_wrk(out), mean=wrk_mean_ms(out)))
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


COLORS = {"sluice": "#2b7bba", "sluice-base": "#8cc0e8", "haproxy": "#e07b39", "nginx": "#3a9e4f"}


def chart(path, summ, targets):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    w1 = [c["key"] for c in CASES if c["workers"] == 1]
    panels = [("Proxy CPU µs per full handshake (lower is better)", w1, "cpu_us"),
              ("Connections (= full handshakes) per second", w1, "rps"),
              ("Mean time per request, ms (wrk)", w1, "mean")]
    if SCALE_KEYS:
        panels.append(("Scaling: CPS with 1 and 2 workers",
                       [k for s in SCALE_KEYS for k in (f"{s}-w1", f"{s}-w2")], "rps"))
    ncol = 2 if len(panels) == 4 else len(panels)
    nrow = (len(panels) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.2 * ncol, 4.4 * nrow + 0.4), squeeze=False)
    drawn = False
    for ax, (title, keys, metric) in zip(axes.flat, panels):
        drawn |= grouped_bars(ax, keys, targets, lambda t, k: summ[(t, k)][metric] if (t, k) in summ
                              else (None, None, None), COLORS)
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
                 f"(nginx: X-Forwarded-For)\nwrk -t{WRK_THREADS} -c{CONNECTIONS} -d{DURATION}s, "
                 f"{ROUNDS} rounds, medians (bars: min–max)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn


def write_report(outdir, d, runs, targets, idents, facts, commands, confs, cert_cmds, origin_cmd,
                 notes, loglines, started_at, elapsed):
    summ = {}
    for c in CASES:
        for t in targets:
            s = summarize(runs, t, c["key"])
            if s:
                summ[(t, c["key"])] = s
    try:
        drawn = chart(os.path.join(outdir, "churn.png"), summ, targets)
        chart_line = "![churn chart](churn.png)" if drawn else "(no chart: no figures)"
    except Exception as e:  # noqa: BLE001 — a missing chart must not lose the tables
        chart_line = f"(chart not drawn: {e!r})"
    peers = [p for p in ("sluice-base", "haproxy", "nginx") if p in targets]
    L = ["# churn — connection churn with TLS offload (a full handshake per request, PROXY v2 to the backend)", ""]
    L.append(f"Run {started_at} UTC, {elapsed:.0f} s in all. {'QUICK mode. ' if QUICK else ''}"
             f"{ROUNDS} round(s) × {DURATION} s measured wrk runs (after {WARMUP} s of unmeasured "
             f"warm-up each), `wrk -t{WRK_THREADS} -c{CONNECTIONS} -H \"Connection: close\"` over "
             f"https: every request is a new TCP connection and a full TLS handshake (tickets and "
             f"session caches off on every server). {BODY_SIZE}-byte responses from one nginx "
             f"origin. sluice: `{shown(SLUICE['src'])}`, TLS library "
             f"**{SLUICE['tls']}** (the default build)"
             + (f"; sluice-base (BASELINE): `{BASE['src']}`, TLS **{BASE['tls']}**, same configs"
                if "sluice-base" in targets else "")
             + f". Pinning: {PIN_TEXT}; with 2 workers the "
             f"proxy may use every CPU ({ALL_CPUS}) while wrk and the origin stay where they are.")
    L.append("")
    L.append(f"Reference (OCI Flexible Load Balancer, Locust): {OCI['cps']:,} CPS per load balancer "
             f"at {OCI['mean_ms']} ms mean, 120,000 with two (linear scale-out), failures ≤ "
             f"{OCI['fail_pct']}%. Here the whole test (client, proxy, origin) shares one "
             f"{os.cpu_count()}-CPU machine, so absolute CPS are far lower; compare the proxies "
             "with each other, in proxy CPU µs per handshake first.")
    L.append("")
    L.append("## Results")
    L.append("")
    if "sluice" in targets and "sluice-base" in targets:
        cells = []
        for c in CASES:
            a, b = summ.get(("sluice", c["key"])), summ.get(("sluice-base", c["key"]))
            if a and b and a["cpu_us"][0] and b["cpu_us"][0]:
                cells.append(f"{case_name(c)} **{a['cpu_us'][0] / b['cpu_us'][0]:.3f}** "
                             f"({a['cpu_us'][0]:.1f} vs {b['cpu_us'][0]:.1f} µs/hs; per round "
                             f"{fmt_mmm(paired(runs, 'sluice', 'sluice-base', c['key'], 'cpu_us'), 3)})")
        L.append("**sluice ÷ sluice-base, proxy CPU µs per handshake** (medians; below 1 = sluice needs "
                 "less): " + ("; ".join(cells) or "— (no figure for one of them)") + ". "
                 + baseline_binaries())
        L.append("")
    L.append("CPS = connections per second = handshakes/s = requests/s. **Proxy CPU µs/hs** = "
             "utime+stime of the proxy's processes ÷ handshakes (the headline: lower = more "
             "handshakes per core); *at 100% CPU* = 10⁶ ÷ that, the CPS one worker would reach "
             "if the client kept up. Failure rate = (wrk socket errors + non-2xx) ÷ attempts "
             "(completed requests + socket errors), summed over all runs. mean and p99 leave "
             "out connect and handshake; *cycle ms* = connections ÷ CPS includes them (see "
             "[What was measured](#what-was-measured)). wrk CPU % near 100 means the client was "
             "the limit.")
    L.append("")
    L.append("| case | target | runs | CPS median (min–max) | proxy CPU µs/hs median (min–max) | "
             "at 100% CPU | proxy CPU % | mean ms | p99 ms | cycle ms | failures | failure rate | "
             "≤ 0.001% | wrk CPU % |")
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
    if "sluice" in targets and peers:
        L.append("### sluice ÷ peer")
        L.append("")
        L.append("Median (min–max) of the per-round ratios (the runs of one round ran seconds apart; "
                 "rounds where both runs were clean, all rounds if none was). "
                 "CPS: above 1 = sluice faster; CPU µs/hs: below 1 = sluice cheaper per handshake; "
                 "p99: below 1 = sluice quicker.")
        L.append("")
        L.append("| case | " + " | ".join(f"÷ {p} CPS | ÷ {p} CPU µs/hs | ÷ {p} p99" for p in peers) + " |")
        L.append("|---|" + "---:|" * (3 * len(peers)))
        for c in CASES:
            cells = []
            for p in peers:
                cells += [fmt_mmm(paired(runs, "sluice", p, c["key"], m)) for m in ("rps", "cpu_us", "p99")]
            L.append(f"| {case_name(c)} | " + " | ".join(cells) + " |")
        L.append("")
    # ECDSA vs RSA
    pairs = [(f"rsa-{v}-w1", f"ecdsa-{v}-w1", v) for v in ("1.2", "1.3")
             if any(c["key"] == f"rsa-{v}-w1" for c in CASES) and any(c["key"] == f"ecdsa-{v}-w1" for c in CASES)]
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
                 f"to itself; with 2 it may run on every CPU ({ALL_CPUS}), including the one wrk and the "
                 "origin are pinned to. On a 2-CPU machine that second CPU is not free: wrk (which "
                 "does a full handshake per request too, verifying each server signature) and the "
                 "origin already use most of it. So CPS cannot double here: the second worker takes "
                 "CPU away from the client that drives it. The OCI figure scaled linearly because "
                 "each load balancer had its own machines. Proxy CPU µs per handshake should stay "
                 "about flat from 1 to 2 workers (each handshake costs the same wherever it runs); "
                 "a rise means the workers got in each other's way (locks, a shared accept queue) "
                 "or the CPUs ran slower when both were busy.")
        L.append("")
        L.append("| case | target | CPS 1 worker | CPS 2 workers | scale factor (per round) | "
                 "CPU µs/hs 1 worker | CPU µs/hs 2 workers | 2 ÷ 1 CPU µs/hs | proxy CPU % 1 → 2 | "
                 "wrk CPU % 1 → 2 | mean ms 1 → 2 |")
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
    # identity check
    L.append("## PROXY v2 / client identity check")
    L.append("")
    L.append("Before each target's first run of each case, one HTTPS `GET /` through the proxy "
             "(Python `ssl`, same TLS version): the origin answers with `X-PP-Client: "
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
    report_list(L, "Problems seen", notes)
    report_list(L, "Proxy and origin log lines above info level (and sluice's TLS failures)", loglines)
    L.append("## Every run (in the order they ran)")
    L.append("")
    L.append("| round | case | target | CPS | requests | mean ms | p50 ms | p99 ms | proxy CPU µs/hs | "
             "proxy CPU % | origin CPU µs/req | wrk CPU % | others' CPU % | socket errors | non-2xx | raw |")
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
    L.append("- Each round runs every case, and within a case every target once, the target order "
             "rotating by one each round. Each target is started fresh for its run with only that "
             "case's certificate and `min_version = max_version` = the case's version, checked "
             f"(identity probe, first run of each case), warmed up ({WARMUP} s of wrk, unmeasured), "
             "measured, stopped (SIGTERM). The origin stays up throughout.")
    L.append("- Servers: tickets and session caches off everywhere (sluice `tickets: off`, "
             "`session_cache: 0`; HAProxy `no-tls-tickets`, `tune.ssl.cachesize 0`; nginx "
             "`ssl_session_tickets off; ssl_session_cache off;`), so wrk cannot resume: every "
             "connection is a full handshake (bench/tls.py checks this with a request log of the "
             "resumed flag). Ciphers, groups and signature algorithms are each server's defaults.")
    L.append("- Proxy CPU: utime+stime from `/proc/PID/stat` over the proxy's process tree (sluice "
             "and nginx: master + workers; HAProxy: one process), read just before and after the "
             f"measured run, ÷ requests completed. Clock tick = 1/{CLK_TCK} s.")
    L.append("- Times: wrk times a request from its write to the end of its response, once the "
             "connection is up and the handshake done, so *mean* (wrk `Latency Avg`) and *p99* "
             "(`--latency` 99%) leave out the TCP connect and the TLS handshake. *cycle ms* adds "
             "them back on average: each of the N connections wrk keeps busy goes through connect, "
             "handshake, request, response and close one after the other, so by Little's law a "
             "cycle takes N ÷ CPS on average.")
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
    L.append(f"# load (warm-up uses -d{WARMUP}s)")
    L.append(" ".join(wrk_cmd("PORT", DURATION)))
    L.append("```")
    L.append("")
    L.append("Ports are picked free at run time. Every config used is in [churn/configs/](churn/configs/); "
             "the ECDSA TLS 1.3 ones (others differ in the certificate, the version and the "
             "worker count) and the origin's:")
    L.append("")
    report_end(L, outdir, "churn", confs, facts,
               "`make bench-churn` (or `QUICK=1 make bench-churn`); see docs/bench/churn.md.")
    return summ


def facts_software():
    return [(t, f"{shown(x['src'])} (run as a copy in churn/bin/): "
                f"{sluice_describe(x['path'] or x['src'])}, TLS {x['tls']}")
            for t, x in (("sluice", SLUICE), ("sluice-base", BASE)) if x] + peer_versions(haproxy_ssl=True) + [
            ("openssl", cmd_out(["openssl", "version"])),
            ("python3 ssl", f"{sys.version.split()[0]}, {ssl.OPENSSL_VERSION}")]


# ---------------------------------------------------------------- main

def main():
    need_tools(PROG, ("wrk", "haproxy", "nginx", "openssl") + (("taskset",) if PROXY_PIN else ()),
               "bench/churn.sh")
    need_sluice_bins(PROG, TARGETS)
    src = SLUICE_BIN
    started, outdir, d = results_dirs("churn")
    t_start = time.monotonic()
    if "sluice" in TARGETS:
        dst, lib, tls_line = copy_sluice(src, d)
        SLUICE.update(path=dst, src=src, tls=tls_line or "?", lib=lib)
    else:
        SLUICE.update(path="", src=src, tls="(not run)", lib=None)
    if "sluice-base" in TARGETS:
        dst, lib, tls_line = copy_sluice(BASELINE, d, "sluice-base")
        BASE.update(path=dst, src=BASELINE, tls=tls_line or "?", lib=lib)
    log(f"results in {outdir}")
    per = DURATION + WARMUP + 0.8
    log(f"{ROUNDS} rounds x {len(CASES)} cases x {len(TARGETS)} targets x ~{per:.1f} s = about "
        f"{ROUNDS * len(CASES) * len(TARGETS) * per:.0f} s; {PIN_TEXT}")
    facts = machine_facts(facts_software())
    certs, cert_cmds = make_certs(d)
    origin, ports, origin_cmd, origin_conf = start_origin(d)
    err, _ = probe(ports["plain"], "none", tries=1, size=BODY_SIZE)
    if err:
        sys.exit(f"{PROG}: origin check failed: {err}")
    quiet = Quiet(NOISE_PCT, QUIET_BUDGET, ATTEMPTS, log=log)
    runs, notes, loglines, commands, confs, idents = [], [], [], {}, {}, {}
    confs["origin"] = origin_conf
    origin_err = os.path.join(d, "origin.error.log")

    def one_run(tgt, c, rnd):
        errlog = proxy_errlog(kind_of(tgt), d, name=tgt)
        pos, opos = fsize(errlog), fsize(origin_err)
        proxy, port, cmd, conf = start_proxy(tgt, d, ports, c, certs)
        commands.setdefault(f"{tgt}, {c['workers']} worker(s)", cmd.replace(conf, "CONFIG"))
        if c["key"] in ("ecdsa-1.3-w1", "ecdsa-1.3-w2"):
            confs.setdefault(f"{tgt}, {c['key']}", conf)
        if proxy is None:
            notes.append(f"round {rnd + 1}, {c['key']}, {tgt}: did not start; log: "
                         f"{read_tail(errlog, pos).strip()[-500:]!r}")
            log(notes[-1])
            return
        if (tgt, c["key"]) not in idents:
            idents[(tgt, c["key"])] = check_identity(tgt, port, c)
            if idents[(tgt, c["key"])][0]:
                notes.append(f"round {rnd + 1}, {c['key']}, {tgt}: {idents[(tgt, c['key'])][0]}")
                log(notes[-1])
        r = quiet.run_if_budget(lambda: measure(tgt, c, rnd, d, port, proxy, origin),
                                f"round {rnd + 1}, {c['key']}, {tgt}", DURATION, notes,
                                lambda x: f"{fmt(x['rps'])} CPS, {fmt(x['cpu_us'], 1)} µs/hs")
        bad = stop_tls_proxy(kind_of(tgt), proxy, errlog, pos, r)
        obad = [ln for ln in read_tail(origin_err, opos).splitlines() if ln.strip()]
        if any("broken header" in ln for ln in obad):
            r["problems"].append("the origin logged connections without a valid PROXY header")
        for ln in bad[:10]:
            loglines.append(f"round {rnd + 1}, {c['key']}, {tgt}, {os.path.basename(errlog)}: {ln.strip()}")
        for ln in obad[:5]:
            loglines.append(f"round {rnd + 1}, {c['key']}, {tgt}, origin.error.log: {ln.strip()}")
        for pr in r["problems"]:
            notes.append(f"round {rnd + 1}, {c['key']}, {tgt}: {pr}")
        runs.append(r)
        log(f"r{rnd + 1} {c['key']:12} {tgt:8} {r['rps']:>8,.0f} CPS  cpu {fmt(r['cpu_us'], 1):>6} us/hs "
            f"({fmt(r['cpu_pct'])}%)  wrk {fmt(r['wrk_cpu_pct'])}%  mean {fmt(r['mean'], 2)} ms  "
            f"p99 {fmt(r['p99'], 2)} ms  fail {r['failures']}"
            + (f"  PROBLEMS: {r['problems']}" if r["problems"] else ""))

    for rnd in range(ROUNDS):
        k = rnd % len(TARGETS)
        order = TARGETS[k:] + TARGETS[:k]
        for c in CASES:
            for tgt in order:
                one_run(tgt, c, rnd)
    if origin.poll() is not None:
        notes.append(f"the origin exited during the benchmark (status {origin.returncode})")
    stop(origin)
    elapsed = time.monotonic() - t_start
    with open(os.path.join(d, "runs.json"), "w") as f:
        json.dump({"runs": runs, "identity": {f"{t}|{k}": v for (t, k), v in idents.items()}},
                  f, indent=1, default=str)
    summ = write_report(outdir, d, runs, TARGETS, idents, facts, commands, confs, cert_cmds, origin_cmd,
                        notes, loglines, started.strftime("%Y-%m-%d %H:%M:%S"), elapsed)
    refresh_latest(RESULTS, outdir, "churn")
    show_report(outdir, "churn", ["![churn chart]", "## PROXY v2"], log)
    log(f"elapsed {time.monotonic() - t_start:.0f} s")
    missing = [t for t in TARGETS
               if not any(s and s["rps"][0] and s["cpu_us"][0] for (tt, _), s in summ.items() if tt == t)]
    return exit_status(missing, log)


if __name__ == "__main__":
    run_main(main, PROG)
