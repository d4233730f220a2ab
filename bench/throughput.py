#!/usr/bin/env python3
"""Throughput benchmark: keepalive req/s and latency by response size, plain and TLS.

Small (100 B), medium (20 KiB, the reference page size) and large (1 MiB)
responses, each a static file served by one nginx origin (sendfile), through
ONE proxy worker: sluice (workers: 1) vs HAProxy (nbthread 1) vs nginx
(worker_processes 1), plus direct (wrk -> the origin, no proxy), driven by
the same keepalive wrk command, alternating target by target, round after
round.

  plain  wrk -> proxy over HTTP -> origin's plain listener (keepalive pool)
  tls    wrk -> proxy over HTTPS (ECDSA P-256, TLS 1.3, tickets on; wrk
         keeps its connections, so 50 handshakes per run) -> origin's plain
         listener; direct = wrk -> the origin's second, TLS listener (same
         certificate and settings)

Per run: req/s, p50/p99 latency, MB/s of response bodies, and the proxy's
own CPU µs per request (utime+stime of its processes ÷ requests), the fair
headline on a 2-CPU machine where wrk and the origin share the other CPU.

Usage: sh bench/throughput.sh  (or `make bench-throughput`). Knobs:
  QUICK=1          1 s runs, no warm-up, cases plain-100,tls-20k,plain-1m
  DURATION=N       seconds per measured wrk run (2; QUICK 1)
  WARMUP=N         unmeasured wrk seconds before the first size's measured run
                   of each target and mode (1; QUICK 0)
  CONNECTIONS=N    wrk connections (50)
  WRK_THREADS=N    wrk threads (1)
  ROUNDS=N         rounds; each round runs every case on every target once (3)
  CASES=a,b        MODE-SIZE with MODE plain|tls and SIZE 100|20k|1m
                   (all six; QUICK plain-100,tls-20k,plain-1m)
  TARGETS=a,b      subset/order of direct,sluice,haproxy,nginx
  PIN=0            do not pin with taskset
  NOISE_PCT=N      others' CPU (% of one CPU) that makes a run noisy (25)
  QUIET_BUDGET=N   seconds in all for waiting for quiet / re-running (30; QUICK 0)
  BUILD=dir        where sluice is (build)
  RESULTS=dir      results root (bench/results)
  BENCH_TS=name    results directory name (default: UTC timestamp)

Output: RESULTS/<ts>/throughput.md, throughput.png (plain), throughput-tls.png,
throughput/ (files, certificates, configs, raw wrk output, logs, runs.json);
RESULTS/latest/ gets a copy and report.md links it. Every process started
here is stopped by its PID. Exit status 1 if a target produced no figure.
"""
import functools
import json
import os
import sys
import time

import benchlib
from benchlib import (BUILD, CLK_TCK, PIN, QUICK, RESULTS, ROOT, cmd_out, exit_status, fmt, fmt_mmm, free_port,
                      fsize, git_describe, grouped_bars, haproxy_conf, launch_proxy, log_lines_above_info,
                      machine_facts, measure_wrk, need_tools, nginx_main, nginx_temp_paths, nginx_upstream,
                      noise_note, paired, peer_versions, pinning, proxy_errlog, Quiet, read_tail,
                      refresh_latest, report_end, report_list, results_dirs, run_main, run_wrk, show_report,
                      sluice_conf, start, stop, stop_proxy, wait_port, write)
from tlslib import (copy_sluice, haproxy_bind_ssl, haproxy_global_ssl, make_certs, nginx_ssl, probe, sluice_tls)

PROG = "bench/throughput.py"
env_int = functools.partial(benchlib.env_int, prog=PROG)
env_names = functools.partial(benchlib.env_names, prog=PROG)

DURATION = env_int("DURATION", 1 if QUICK else 2, 1)
WARMUP = env_int("WARMUP", 0 if QUICK else 1, 0)
CONNECTIONS = env_int("CONNECTIONS", 50, 1)
WRK_THREADS = env_int("WRK_THREADS", 1, 1)
ROUNDS = env_int("ROUNDS", 3, 1)
NOISE_PCT = env_int("NOISE_PCT", 25)
QUIET_BUDGET = env_int("QUIET_BUDGET", 0 if QUICK else 30)
ATTEMPTS = 2
POOL = 64                     # backend connections each proxy may keep / open
CERT, VER = "ecdsa", "1.3"    # the TLS listeners' certificate and version

SIZES = {"100": 100, "20k": 20 * 1024, "1m": 1024 * 1024}
SIZE_NAME = {"100": "100 B", "20k": "20 KiB", "1m": "1 MiB"}
MODES = ("plain", "tls")
ALL_CASES = [f"{m}-{s}" for m in MODES for s in SIZES]
CASE_KEYS = env_names("CASES", ALL_CASES, "plain-100,tls-20k,plain-1m" if QUICK else None, "case")
TARGETS = env_names("TARGETS", ["direct", "sluice", "haproxy", "nginx"], what="target")
if not TARGETS or not CASE_KEYS:
    sys.exit(f"{PROG}: nothing to measure")
if WRK_THREADS > CONNECTIONS:
    sys.exit(f"{PROG}: WRK_THREADS must not exceed CONNECTIONS")
# Cases in a fixed order: by mode (one proxy start per mode), then size.
CASE_KEYS = [c for c in ALL_CASES if c in CASE_KEYS]
MODES_RUN = [m for m in MODES if any(c.startswith(m + "-") for c in CASE_KEYS)]

PROXY_PIN, LOAD_PIN, PIN_TEXT = pinning(PIN)
SLUICE = {}


def log(msg):
    print(f"[throughput] {msg}", flush=True)


def case_name(key):
    m, s = key.split("-")
    return f"{'TLS' if m == 'tls' else 'plain'} {SIZE_NAME[s]}"


# ---------------------------------------------------------------- configs

def make_files(d):
    """www/<size>: exactly SIZES[size] bytes of printable text."""
    www = os.path.join(d, "www")
    os.makedirs(www, exist_ok=True)
    pat = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-\n"
    for name, n in SIZES.items():
        with open(os.path.join(www, name), "wb") as f:
            f.write((pat * (n // len(pat) + 1))[:n])
    return www


def conf_origin(d, www, port, tls_port, certs):
    return ("# origin: nginx, one worker, static files of 100 B, 20 KiB and 1 MiB (sendfile);\n"
            "# a plain listener (behind the proxies, and direct) and a TLS one (direct over TLS)\n"
            + nginx_main(d, "origin")
            + """    access_log off;
    sendfile on;
    tcp_nopush on;
    open_file_cache max=16 inactive=1h;
    open_file_cache_valid 1h;
    etag off;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
""" + nginx_temp_paths(d, "tmp-origin") + f"""    server {{
        listen 127.0.0.1:{port} backlog=1024;
        listen 127.0.0.1:{tls_port} ssl backlog=1024;
{nginx_ssl(certs, CERT, VER, False)}        root {www};
        default_type application/octet-stream;
    }}
}}
""")


def conf_sluice(d, port, bport, mode, certs):
    tls = sluice_tls(certs, CERT, VER, False) if mode == "tls" else ""
    return sluice_conf(d, f"sluice, one worker, one {mode} listener -> one backend with one server "
                       "(keepalive pool)", port, bport, POOL, tls=tls)


def conf_haproxy(d, port, bport, mode, certs):
    ssl_ = haproxy_bind_ssl(certs, CERT, VER, False) if mode == "tls" else ""
    return haproxy_conf(d, f"HAProxy, one thread, keepalive both sides, backend connections reused; {mode}",
                        port, bport, POOL, global_extra=haproxy_global_ssl(False), bind_extra=ssl_)


def conf_nginx(d, port, bport, mode, certs):
    tls = nginx_ssl(certs, CERT, VER, False) if mode == "tls" else ""
    return (f"# nginx, one worker, upstream keepalive; {mode}. proxy_max_temp_file_size 0:\n"
            "# a large response is relayed through memory buffers, never spooled to disk.\n"
            + nginx_main(d, "nginx")
            + "    access_log off;\n    keepalive_requests 1000000;\n    keepalive_timeout 60s;\n"
            + nginx_temp_paths(d, "tmp-nginx") + nginx_upstream(bport, POOL) + f"""    server {{
        listen 127.0.0.1:{port}{" ssl" if mode == "tls" else ""};
{tls}        location / {{
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_max_temp_file_size 0;
        }}
    }}
}}
""")


CONF = {"sluice": (conf_sluice, "yaml"), "haproxy": (conf_haproxy, "cfg"), "nginx": (conf_nginx, "conf")}


def start_proxy(tgt, d, bport, mode, certs):
    """Returns (Popen or None, port, command line, config path)."""
    port = free_port()
    os.makedirs(os.path.join(d, "configs"), exist_ok=True)
    make, ext = CONF[tgt]
    conf = write(os.path.join(d, "configs", f"{tgt}-{mode}.{ext}"), make(d, port, bport, mode, certs))
    p, cmd = launch_proxy(tgt, d, port, conf, PROXY_PIN, SLUICE.get("path"))
    return p, port, cmd, conf


def start_origin(d, www, certs):
    port, tls_port = free_port(), free_port()
    os.makedirs(os.path.join(d, "tmp-origin"), exist_ok=True)
    conf = write(os.path.join(d, "origin.conf"), conf_origin(d, www, port, tls_port, certs))
    cmd = LOAD_PIN + ["nginx", "-p", d, "-e", os.path.join(d, "origin.error.log"), "-c", conf]
    p = start(cmd, os.path.join(d, "origin.out"))
    if not wait_port(port, p) or not wait_port(tls_port, p):
        sys.exit(f"{PROG}: the nginx origin did not start, see {d}/origin.error.log")
    return p, port, tls_port, " ".join(cmd), conf


# ---------------------------------------------------------------- wrk

def wrk_cmd(port, seconds, mode, size):
    scheme = "https" if mode == "tls" else "http"
    return benchlib.wrk_cmd(LOAD_PIN, WRK_THREADS, CONNECTIONS, seconds, f"{scheme}://127.0.0.1:{port}/{size}")


def measure(tgt, key, rnd, d, port, proxy, origin, warm=True):
    mode, size = key.split("-")
    if WARMUP and warm:
        run_wrk(wrk_cmd(port, WARMUP, mode, size), WARMUP)
    raw = os.path.join(d, "raw", f"r{rnd + 1}-{key}-{tgt}.txt")
    r = measure_wrk(lambda: run_wrk(wrk_cmd(port, DURATION, mode, size), DURATION, raw), proxy, origin)
    r.update(label=tgt, case=key, round=rnd + 1, raw=os.path.relpath(raw, d))
    if not r["requests"]:
        r["cpu_us"] = None
    r["mbps"] = r["rps"] * SIZES[size] / 1e6
    return r


# ---------------------------------------------------------------- report

def summarize(runs, tgt, key):
    return benchlib.summarize(runs, tgt, ("rps", "cpu_us", "cpu_pct", "p50", "p99", "mbps", "backend_cpu_us",
                                          "wrk_cpu_pct"), key)


COLORS = {"sluice": "#2b7bba", "haproxy": "#e07b39", "nginx": "#3a9e4f", "direct": "#999999"}


def chart(path, mode, summ, targets):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in CASE_KEYS if k.startswith(mode + "-")]
    if not keys:
        return False
    panels = [("Requests/s (log scale)", "rps", targets),
              ("Proxy CPU µs per request (log scale, lower is better)", "cpu_us",
               [t for t in targets if t != "direct"]),
              ("p99 latency, ms (log scale)", "p99", targets)]
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    drawn = False
    for ax, (title, metric, tg) in zip(axes, panels):
        drawn |= grouped_bars(ax, keys, tg, lambda t, k: summ[(t, k)][metric] if (t, k) in summ
                              else (None, None, None), COLORS, skip_zero=True)
        ax.set_yscale("log")
        ax.set_xticks(range(len(keys)))
        ax.set_xticklabels([SIZE_NAME[k.split("-")[1]] for k in keys], fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3, which="both")
        ax.set_axisbelow(True)
        ax.legend(fontsize=8)
    fig.suptitle(f"Keepalive throughput by response size, {'HTTPS (ECDSA P-256, TLS 1.3)' if mode == 'tls' else 'plain HTTP'}: "
                 f"one proxy worker, wrk -t{WRK_THREADS} -c{CONNECTIONS} -d{DURATION}s, {ROUNDS} rounds, "
                 "medians (bars: min–max)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn


def write_report(outdir, runs, targets, probes, facts, commands, confs, cert_cmds, origin_cmd, notes,
                 loglines, started_at, elapsed):
    summ = {}
    for k in CASE_KEYS:
        for t in targets:
            s = summarize(runs, t, k)
            if s:
                summ[(t, k)] = s
    charts = {}
    for mode in MODES_RUN:
        name = "throughput.png" if mode == "plain" or "plain" not in MODES_RUN else "throughput-tls.png"
        try:
            if chart(os.path.join(outdir, name), mode, summ, targets):
                charts[mode] = f"![throughput chart, {mode}]({name})"
            else:
                charts[mode] = "(no chart: no figures)"
        except Exception as e:  # noqa: BLE001 — a missing chart must not lose the tables
            charts[mode] = f"(chart not drawn: {e!r})"
    proxies = [t for t in targets if t != "direct"]
    peers = [p for p in ("haproxy", "nginx") if p in targets]
    L = ["# throughput — keepalive req/s and latency by response size, plain and TLS", ""]
    L.append(f"Run {started_at} UTC, {elapsed:.0f} s in all. {'QUICK mode. ' if QUICK else ''}"
             f"{ROUNDS} round(s) × {DURATION} s measured wrk runs ({WARMUP} s of unmeasured warm-up "
             f"before the first size of each target and mode), keepalive `wrk -t{WRK_THREADS} -c{CONNECTIONS}`. Responses: static "
             "files of exactly 100 B, 20 KiB (20,480 B, the reference page size) and 1 MiB "
             "(1,048,576 B) from one nginx origin (sendfile). One proxy worker each: sluice "
             f"`workers: 1` (`{os.path.relpath(SLUICE.get('src', BUILD), ROOT)}`, TLS library "
             f"{SLUICE.get('tls', '?')}), HAProxy `nbthread 1`, nginx `worker_processes 1`; "
             "*direct* = wrk → the origin. TLS: ECDSA P-256, TLS 1.3 at the proxy (plain HTTP to "
             "the origin); direct TLS = the origin's own TLS listener with the same certificate. "
             f"Pinning: {PIN_TEXT}.")
    L.append("")
    L.append("MB/s = req/s × body size ÷ 10⁶ (response bodies only). **Proxy CPU µs/req** = "
             "utime+stime of the proxy's processes ÷ requests, the headline: on 2 CPUs wrk and the "
             "origin share one CPU, so req/s is capped by the load side for every proxy, and "
             "direct has wrk and the origin on one CPU with nothing on the other (so direct is not "
             "an upper bound here). errors = socket errors + non-2xx.")
    L.append("")
    for mode in MODES_RUN:
        keys = [k for k in CASE_KEYS if k.startswith(mode + "-")]
        L.append(f"## {'TLS (HTTPS to the proxy, ECDSA P-256, TLS 1.3)' if mode == 'tls' else 'Plain HTTP'}")
        L.append("")
        L.append("| size | target | runs | req/s median (min–max) | MB/s | p50 ms | p99 ms | "
                 "proxy CPU µs/req median (min–max) | proxy CPU % | origin CPU µs/req | wrk CPU % | errors |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for k in keys:
            for t in targets:
                s = summ.get((t, k))
                if not s:
                    continue
                L.append(f"| {SIZE_NAME[k.split('-')[1]]} | **{t}** | {s['n']}/{s['total']} | "
                         f"{fmt(s['rps'][0])} ({fmt(s['rps'][1])}–{fmt(s['rps'][2])}) | {fmt(s['mbps'][0], 1)} | "
                         f"{fmt(s['p50'][0], 2)} | {fmt(s['p99'][0], 2)} | "
                         + (f"**{fmt(s['cpu_us'][0], 1)}** ({fmt(s['cpu_us'][1], 1)}–{fmt(s['cpu_us'][2], 1)})"
                            if s["cpu_us"][0] is not None else "—")
                         + f" | {fmt(s['cpu_pct'][0])} | {fmt(s['backend_cpu_us'][0], 1)} | "
                           f"{fmt(s['wrk_cpu_pct'][0])} | {s['errors']} |")
        L.append("")
        if "sluice" in targets and (peers or "direct" in targets):
            L.append("Ratios, median (min–max) of the per-round ratios (runs of one round ran seconds "
                     "apart): req/s above 1 = sluice faster; CPU µs/req below 1 = sluice cheaper; "
                     "p99 below 1 = sluice quicker. sluice ÷ direct req/s is what the proxy hop "
                     "keeps of the origin's rate on this machine.")
            L.append("")
            cols = [(p, m) for p in peers for m in ("rps", "cpu_us", "p99")]
            if "direct" in targets:
                cols += [("direct", "rps"), ("direct", "p99")]
            name = {"rps": "req/s", "cpu_us": "CPU µs/req", "p99": "p99"}
            L.append("| size | " + " | ".join(f"sluice ÷ {p} {name[m]}" for p, m in cols) + " |")
            L.append("|---|" + "---:|" * len(cols))
            for k in keys:
                L.append(f"| {SIZE_NAME[k.split('-')[1]]} | "
                         + " | ".join(fmt_mmm(paired(runs, "sluice", p, k, m)) for p, m in cols) + " |")
            L.append("")
        L.append(charts.get(mode, ""))
        L.append("")
    L.append("## Response check")
    L.append("")
    L.append("Before the first measured run of each mode, every target got one `GET` per size "
             "(Python, a new connection each): 200 with exactly the file's size in bytes.")
    L.append("")
    L.append("| target | mode | result |")
    L.append("|---|---|---|")
    for (t, m), res in probes.items():
        L.append(f"| {t} | {m} | {res} |")
    L.append("")
    report_list(L, "Problems seen", notes)
    report_list(L, "Proxy and origin log lines above info level", loglines)
    L.append("## Every run (in the order they ran)")
    L.append("")
    L.append("| round | case | target | req/s | requests | MB/s | p50 ms | p99 ms | proxy CPU µs/req | "
             "proxy CPU % | origin CPU µs/req | wrk CPU % | others' CPU % | socket errors | non-2xx | raw |")
    L.append("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in runs:
        L.append(f"| {r['round']} | {r['case']} | {r['label']} | {fmt(r['rps'])} | {r['requests']} | "
                 f"{fmt(r['mbps'], 1)} | {fmt(r['p50'], 2)} | {fmt(r['p99'], 2)} | {fmt(r['cpu_us'], 1)} | "
                 f"{fmt(r['cpu_pct'])} | {fmt(r['backend_cpu_us'], 1)} | {fmt(r['wrk_cpu_pct'])} | "
                 f"{fmt(r['other_pct'])}{' ⚠' if r['noisy'] else ''} | {r['sock_errors']} | {r['non2xx']} | "
                 f"[{os.path.basename(r['raw'])}](throughput/{r['raw']}) |")
    L.append("")
    L.append("## What was measured")
    L.append("")
    L.append("- Each round runs, per mode (plain, then TLS), every target in an order that rotates "
             "by one each round; a proxy is started fresh for the mode, checked (one GET per size), "
             f"warmed up with an unmeasured {WARMUP} s wrk run on the first size, then measured on "
             "each size in turn (100 B, 20 KiB, 1 MiB), then stopped (SIGTERM). The origin stays "
             "up throughout; direct runs go straight to it.")
    L.append("- Proxies keep up to 64 pooled keepalive connections to the origin (sluice "
             "`idle_max`/`max_connections`, HAProxy `http-reuse always` + `maxconn`, nginx upstream "
             "`keepalive`). nginx is set `proxy_max_temp_file_size 0` so that a 1 MiB response is "
             "relayed through its memory buffers instead of being spooled to a temp file; "
             "otherwise buffers are each proxy's defaults.")
    L.append("- Proxy CPU: utime+stime from `/proc/PID/stat` over the proxy's process tree (sluice "
             "and nginx: master + worker; HAProxy: one process), read just before and after the "
             f"measured run, ÷ requests completed. Clock tick = 1/{CLK_TCK} s. The kernel's work "
             "copying bytes over loopback is charged to whoever makes the syscall, so it is in "
             "the proxy's CPU, as it would be in production.")
    L.append(noise_note(NOISE_PCT, ATTEMPTS, QUIET_BUDGET))
    L.append("")
    L.append("## Commands (exact)")
    L.append("")
    L.append("```sh")
    L.append("# certificates (in throughput/certs/; only ecdsa is used)")
    L.extend(cert_cmds)
    L.append(f"# origin (started once)\n{origin_cmd}")
    for k, v in commands.items():
        L.append(f"# {k}\n{v}")
    L.append(f"# load (PORT: the proxy's or, for direct, the origin's; warm-up uses -d{WARMUP}s)")
    for m in MODES_RUN:
        for s in SIZES:
            if f"{m}-{s}" in CASE_KEYS:
                L.append(" ".join(wrk_cmd("PORT", DURATION, m, s)))
    L.append("```")
    L.append("")
    L.append("Ports are picked free at run time. Configs as used (also in "
             "[throughput/configs/](throughput/configs/)):")
    L.append("")
    report_end(L, outdir, "throughput", confs, facts,
               "`make bench-throughput` (or `QUICK=1 make bench-throughput`); see "
               "docs/bench/throughput.md.")
    return summ


def facts_software():
    sw = []
    if SLUICE.get("path"):
        sw.append(("sluice", f"{os.path.relpath(SLUICE['src'], ROOT)} (run as a copy in throughput/bin/): "
                             f"{cmd_out([SLUICE['path'], '-V']).splitlines()[0]}, TLS {SLUICE['tls']} "
                             f"({git_describe()}; -O2, jemalloc)"))
    return sw + peer_versions()


# ---------------------------------------------------------------- main

def main():
    need_tools(PROG, ("wrk", "nginx", "openssl") + (("haproxy",) if "haproxy" in TARGETS else ())
               + (("taskset",) if PROXY_PIN else ()), "bench/throughput.sh")
    src = os.path.join(BUILD, "sluice")
    if "sluice" in TARGETS and not os.access(src, os.X_OK):
        sys.exit(f"{PROG}: {src} missing: make BUILD={os.path.relpath(BUILD, ROOT)} all")
    started, outdir, d = results_dirs("throughput")
    t_start = time.monotonic()
    if "sluice" in TARGETS:
        dst, lib, tls_line = copy_sluice(src, d)
        SLUICE.update(path=dst, src=src, tls=tls_line or "?")
    log(f"results in {outdir}")
    per = DURATION + WARMUP / 3 + 0.7
    log(f"{ROUNDS} rounds x {len(CASE_KEYS)} cases x {len(TARGETS)} targets x ~{per:.1f} s = about "
        f"{ROUNDS * len(CASE_KEYS) * len(TARGETS) * per:.0f} s of wrk; {PIN_TEXT}")
    facts = machine_facts(facts_software())
    certs, cert_cmds = make_certs(d)
    www = make_files(d)
    origin, bport, tls_bport, origin_cmd, origin_conf = start_origin(d, www, certs)
    for s, n in SIZES.items():
        for port, ver in ((bport, "none"), (tls_bport, VER)):
            err, _ = probe(port, ver, tries=1, size=n, path=f"/{s}")
            if err:
                sys.exit(f"{PROG}: origin check failed: {err}")
    quiet = Quiet(NOISE_PCT, QUIET_BUDGET, ATTEMPTS, log=log)
    runs, notes, loglines, commands, probes = [], [], [], {}, {}
    confs = {"origin": origin_conf}
    origin_err = os.path.join(d, "origin.error.log")

    def check(tgt, port, mode):
        bad = []
        for s, n in SIZES.items():
            err, _ = probe(port, VER if mode == "tls" else "none", tries=1, size=n, path=f"/{s}")
            if err:
                bad.append(f"/{s}: {err}")
        return "; ".join(bad) or "ok: " + ", ".join(f"/{s} {n:,} B" for s, n in SIZES.items())

    def one_target(tgt, mode, rnd):
        keys = [k for k in CASE_KEYS if k.startswith(mode + "-")]
        opos = fsize(origin_err)
        if tgt == "direct":
            proxy, port, errlog, pos = None, (tls_bport if mode == "tls" else bport), None, 0
        else:
            errlog = proxy_errlog(tgt, d)
            pos = fsize(errlog)
            proxy, port, cmd, conf = start_proxy(tgt, d, bport, mode, certs)
            commands.setdefault(f"{tgt}, {mode}", cmd.replace(conf, "CONFIG"))
            confs.setdefault(f"{tgt}, {mode}", conf)
            if proxy is None:
                notes.append(f"round {rnd + 1}, {mode}, {tgt}: did not start; log: "
                             f"{read_tail(errlog, pos).strip()[-500:]!r}")
                log(notes[-1])
                return
        if (tgt, mode) not in probes:
            probes[(tgt, mode)] = check(tgt, port, mode)
            if not probes[(tgt, mode)].startswith("ok"):
                notes.append(f"round {rnd + 1}, {mode}, {tgt}: response check failed: {probes[(tgt, mode)]}")
                log(notes[-1])
        for i, k in enumerate(keys):
            # Warm-up before the first size only: the proxy, its pool of origin
            # connections and the origin are warm for the next sizes.
            r = quiet.run_if_budget(lambda: measure(tgt, k, rnd, d, port, proxy, origin, i == 0),
                                    f"round {rnd + 1}, {k}, {tgt}", DURATION, notes,
                                    lambda x: f"{fmt(x['rps'])} req/s, {fmt(x['cpu_us'], 1)} µs/req")
            runs.append(r)
            for pr in r["problems"]:
                notes.append(f"round {rnd + 1}, {k}, {tgt}: {pr}")
            log(f"r{rnd + 1} {k:9} {tgt:8} {r['rps']:>9,.0f} req/s {r['mbps']:>8,.1f} MB/s  "
                f"cpu {fmt(r['cpu_us'], 1):>6} us/req ({fmt(r['cpu_pct'])}%)  p99 {fmt(r['p99'], 2)} ms"
                + (f"  PROBLEMS: {r['problems']}" if r["problems"] else ""))
        if proxy is not None:
            bad_exit = stop_proxy(tgt, proxy)
            if bad_exit:
                notes.append(f"round {rnd + 1}, {mode}, {tgt}: {bad_exit}")
            for ln in log_lines_above_info(read_tail(errlog, pos))[:10]:
                loglines.append(f"round {rnd + 1}, {mode}, {tgt}, {os.path.basename(errlog)}: {ln.strip()}")
        for ln in [x for x in read_tail(origin_err, opos).splitlines() if x.strip()][:5]:
            loglines.append(f"round {rnd + 1}, {mode}, {tgt}, origin.error.log: {ln.strip()}")

    for rnd in range(ROUNDS):
        k = rnd % len(TARGETS)
        order = TARGETS[k:] + TARGETS[:k]
        for mode in MODES_RUN:
            for tgt in order:
                one_target(tgt, mode, rnd)
    if origin.poll() is not None:
        notes.append(f"the origin exited during the benchmark (status {origin.returncode})")
    stop(origin)
    elapsed = time.monotonic() - t_start
    with open(os.path.join(d, "runs.json"), "w") as f:
        json.dump({"runs": runs, "checks": {f"{t}|{m}": v for (t, m), v in probes.items()}}, f, indent=1)
    summ = write_report(outdir, runs, TARGETS, probes, facts, commands, confs, cert_cmds, origin_cmd, notes,
                        loglines, started.strftime("%Y-%m-%d %H:%M:%S"), elapsed)
    refresh_latest(RESULTS, outdir, "throughput",
                   files=["throughput.md", "throughput.png", "throughput-tls.png"])
    show_report(outdir, "throughput", ["## Response check"], log)
    log(f"elapsed {time.monotonic() - t_start:.0f} s")
    missing = [t for t in TARGETS
               if not any(s and s["rps"][0] and (t == "direct" or s["cpu_us"][0])
                          for (tt, _), s in summ.items() if tt == t)]
    return exit_status(missing, log)


if __name__ == "__main__":
    run_main(main, PROG)
