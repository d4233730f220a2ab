#!/usr/bin/env python3
"""What sluice's statistics cost: the same sluice, built with the stats calls
(build/sluice) and without them (`make STATS=0`: build-nostats/sluice, every
stats_add/stats_observe_us compiled out), run alternately through the core
benchmark's setup (bench/core.py: one worker, the static nginx origin, wrk,
proxy pinned to its own CPU), for two workloads:

  keepalive  wrk keepalive connections: the per-request path (counters and
             four histogram observations per request, per listener, backend
             and server);
  close      the same with `Connection: close` on every request: adds the
             per-connection counters and gauges (accept, clients) and makes
             the kernel's connection work part of each request.

Both builds serve the admin listener, and /metrics is scraped once a second
during every measured run (SCRAPE=0: no scrape), as a monitoring system would.
Headline: stats-on req/s divided by stats-off req/s (median of the runs, and
the median of each round's adjacent pair), and the same for proxy CPU µs per
request. The issue's bar: within 2%.

Usage: sh bench/stats.sh (or `make bench-stats`). Environment knobs:
  QUICK=1          3 s runs, 3 rounds (default 10 s, 5 rounds)
  DURATION=N, WARMUP=N, CONNECTIONS=N, WRK_THREADS=N, PIN=0   as bench/core.py
  ROUNDS=N         rounds; each round runs both builds once per workload
  WORKLOADS=a,b    subset/order of keepalive,close
  SCRAPE=N         seconds between /metrics scrapes (1; 0 = none)
  BUILD=dir        the stats-on build (build); NOSTATS_BUILD=dir (build-nostats)
  RESULTS=dir      results root (bench/results)

Output: RESULTS/<UTC timestamp>/stats.md, stats.png, stats/ (configs, raw wrk
output, logs); RESULTS/latest/ gets a copy plus report.md linking them.
"""
import datetime
import os
import shutil
import statistics
import sys
import threading
import time
import urllib.request

QUICK = os.environ.get("QUICK", "") not in ("", "0")
os.environ.setdefault("ROUNDS", "3" if QUICK else "5")
# stats measures with wrk's closed loop only (its report prints wrk's commands): core's
# RATE (h2load open loop) is not one of its knobs
os.environ["RATE"] = "0"
import core  # noqa: E402  (reads the shared knobs from the environment)
from benchlib import (CLK_TCK, ROOT, cmd_out, fmt, free_port, fsize, git_describe,  # noqa: E402
                      machine_facts as base_facts, mmm as mmm_of, read_tail, refresh_latest, report_end, run_main,
                      start, stop, stop_all, wait_children, wait_port, write)

PROG = "bench/stats.py"
ROUNDS = core.ROUNDS
DURATION = core.DURATION
BUILD = core.BUILD
NOSTATS_BUILD = os.path.join(ROOT, os.environ.get("NOSTATS_BUILD", "build-nostats"))
RESULTS = core.RESULTS
SCRAPE = core.env_int("SCRAPE", 1, 0)
WORKLOADS = [w for w in os.environ.get("WORKLOADS", "keepalive,close").split(",") if w]
WRK_EXTRA = {"keepalive": (), "close": ("-H", "Connection: close")}
VARIANTS = {"stats": BUILD, "nostats": NOSTATS_BUILD}
BAR = 0.02

for w in WORKLOADS:
    if w not in WRK_EXTRA:
        sys.exit(f"{PROG}: unknown workload {w!r} in WORKLOADS (keepalive, close)")


def log(msg):
    print(f"[stats] {msg}", flush=True)


class Scraper:
    """GET /metrics every SCRAPE seconds from a thread while a run is on."""

    def __init__(self, port):
        self.port, self.n, self.failed, self.bytes = port, 0, 0, 0
        self.done = threading.Event()
        self.t = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while not self.done.wait(SCRAPE):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                    self.bytes += len(r.read())
                    self.n += 1
            except OSError:
                self.failed += 1

    def __enter__(self):
        if SCRAPE:
            self.t.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        if SCRAPE:
            self.t.join(10)


def start_sluice(variant, d, bport):
    """Returns (Popen or None, port, admin port, command line, config path)."""
    port, aport = free_port(), free_port()
    conf = write(os.path.join(d, f"sluice-{variant}.yaml"), core.conf_sluice(d, port, bport, aport))
    cmd = core.PROXY_PIN + [os.path.join(d, "bin", f"sluice-{variant}"), "-c", conf]
    p = start(cmd, os.path.join(d, f"sluice-{variant}.out"))
    if not wait_port(port, p):
        stop(p)
        return None, port, aport, " ".join(cmd), conf
    wait_children(p)
    return p, port, aport, " ".join(cmd), conf


def summarize(runs, workload, variant):
    allr = [r for r in runs if r["workload"] == workload and r["variant"] == variant]
    if not allr:
        return None
    rs = [r for r in allr if not r["noisy"]] or allr

    def mmm(k):
        return mmm_of([r[k] for r in rs])

    return {"n": len(rs), "total": len(allr), "rps": mmm("rps"), "p50": mmm("p50"), "p99": mmm("p99"),
            "cpu_us": mmm("cpu_us"), "cpu_pct": mmm("cpu_pct"),
            "errors": sum(r["sock_errors"] + r["non2xx"] for r in allr),
            "scrapes": sum(r["scrapes"] for r in allr), "scrape_failed": sum(r["scrape_failed"] for r in allr)}


def paired(runs, workload, key):
    """stats/nostats of KEY for each round where both runs are clean."""
    out = []
    for rnd in range(1, ROUNDS + 1):
        pair = {r["variant"]: r for r in runs
                if r["workload"] == workload and r["round"] == rnd and not r["noisy"]}
        if len(pair) == 2 and pair["stats"][key] and pair["nostats"][key]:
            out.append(pair["stats"][key] / pair["nostats"][key])
    return out


def chart(path, summ, pairs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"stats": "#2b7bba", "nostats": "#aaaaaa"}
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    for ax, key, title in ((axes[0], "rps", "Requests/s (median, bars: min–max)"),
                           (axes[1], "cpu_us", "Proxy CPU µs per request")):
        xs, med, lo, hi, col = [], [], [], [], []
        for w in WORKLOADS:
            for v in VARIANTS:
                s = summ.get((w, v))
                if not s or s[key][0] is None:
                    continue
                xs.append(f"{w}\n{'stats on' if v == 'stats' else 'STATS=0'}")
                med.append(s[key][0])
                lo.append(s[key][0] - s[key][1])
                hi.append(s[key][2] - s[key][0])
                col.append(colors[v])
        bars = ax.bar(xs, med, yerr=[lo, hi], capsize=5, color=col)
        for b, v in zip(bars, med):
            ax.annotate(f"{v:,.0f}" if key == "rps" else f"{v:.2f}", (b.get_x() + b.get_width() / 2, v),
                        xytext=(0, 3), textcoords="offset points", ha="center", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    ax = axes[2]
    for i, w in enumerate(WORKLOADS):
        for j, (key, mark) in enumerate((("rps", "o"), ("cpu_us", "s"))):
            ys = pairs.get((w, key), [])
            ax.scatter([i + (j - 0.5) * 0.25] * len(ys), ys, marker=mark,
                       color="#2b7bba" if key == "rps" else "#e07b39",
                       label=("req/s" if key == "rps" else "CPU µs/req") if i == 0 else None)
    ax.axhspan(1 - BAR, 1 + BAR, color="#3a9e4f", alpha=0.12, label="±2%")
    ax.axhline(1, color="#555", lw=0.8)
    ax.set_xticks(range(len(WORKLOADS)), WORKLOADS)
    ax.set_xlim(-0.7, len(WORKLOADS) - 0.3)
    ax.set_title("stats on / STATS=0, each round's adjacent pair", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"What sluice's statistics cost — wrk -c{core.CONNECTIONS} -d{DURATION}s, one worker, "
                 f"{ROUNDS} rounds", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def verdict(ratio_rps, ratio_cpu):
    ok = ratio_rps is not None and ratio_rps >= 1 - BAR
    return ("**within 2%**" if ok else "**NOT within 2%**") + (
        f" (req/s {100 * (ratio_rps - 1):+.2f}%" if ratio_rps else " (req/s —") + (
        f", CPU µs/req {100 * (ratio_cpu - 1):+.2f}%)" if ratio_cpu else ")")


def write_report(outdir, runs, facts, commands, confs, backend_cmd, notes, started_at, elapsed):
    summ = {(w, v): summarize(runs, w, v) for w in WORKLOADS for v in VARIANTS}
    summ = {k: s for k, s in summ.items() if s}
    pairs = {(w, k): paired(runs, w, k) for w in WORKLOADS for k in ("rps", "cpu_us")}
    try:
        chart(os.path.join(outdir, "stats.png"), summ, pairs)
        chart_line = "![stats chart](stats.png)"
    except Exception as e:  # noqa: BLE001 — a missing chart must not lose the table
        chart_line = f"(chart not drawn: {e!r})"
    L = ["# Stats cost — sluice with statistics vs the same code built with STATS=0", ""]
    L.append(f"Run {started_at} UTC, {elapsed:.0f} s in all. {'QUICK mode. ' if QUICK else ''}{ROUNDS} rounds; "
             f"each round runs both builds once per workload, the order swapped every round. "
             f"{DURATION} s measured runs after {core.WARMUP} s of warm-up, wrk `-t{core.WRK_THREADS} "
             f"-c{core.CONNECTIONS}`, one sluice worker, backend: **{core.BACKEND_DESC}**. "
             f"Pinning: {core.PIN_TEXT}. "
             + (f"`GET /metrics` on the admin listener every {SCRAPE} s during each measured run, in "
                "both builds." if SCRAPE else "No /metrics scraping (SCRAPE=0)."))
    L.append("")
    L.append("## Verdict")
    L.append("")
    L.append("| workload | req/s: stats on / STATS=0 (medians) | per-round pairs: median (min–max) | "
             "CPU µs/req: stats on / STATS=0 (medians) | per-round pairs: median (min–max) | within 2%? |")
    L.append("|---|---:|---:|---:|---:|---|")
    for w in WORKLOADS:
        a, b = summ.get((w, "stats")), summ.get((w, "nostats"))
        if not a or not b:
            L.append(f"| {w} | — | — | — | — | not measured |")
            continue
        rr = a["rps"][0] / b["rps"][0] if b["rps"][0] else None
        rc = a["cpu_us"][0] / b["cpu_us"][0] if b["cpu_us"][0] else None
        pr, pc = pairs[(w, "rps")], pairs[(w, "cpu_us")]

        def pfmt(v):
            return f"{statistics.median(v):.4f} ({min(v):.4f}–{max(v):.4f})" if v else "—"
        L.append(f"| {w} | {fmt(rr, 4)} | {pfmt(pr)} | {fmt(rc, 4)} | {pfmt(pc)} | {verdict(rr, rc)} |")
    L.append("")
    L.append("req/s ratio above 1 - 2% = 0.98 is the bar; the CPU ratio says the same thing from the "
             "proxy's side (above 1: the stats build spends more CPU per request). A run's "
             "noise (others' CPU, see bench/core.py) is of the same order as the difference measured, "
             "so the per-round pairs, which ran back to back, are shown with the medians.")
    L.append("")
    L.append("## Per build")
    L.append("")
    L.append("| workload | build | runs used | req/s median | req/s min–max | p50 ms | p99 ms | "
             "proxy CPU µs/req median | µs/req min–max | proxy CPU % of a core | errors | /metrics scrapes (failed) |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (w, v), s in summ.items():
        L.append(f"| {w} | {'stats on' if v == 'stats' else 'STATS=0'} | {s['n']}/{s['total']} | "
                 f"{fmt(s['rps'][0])} | {fmt(s['rps'][1])}–{fmt(s['rps'][2])} | {fmt(s['p50'][0], 3)} | "
                 f"{fmt(s['p99'][0], 3)} | {fmt(s['cpu_us'][0], 2)} | {fmt(s['cpu_us'][1], 2)}–"
                 f"{fmt(s['cpu_us'][2], 2)} | {fmt(s['cpu_pct'][0])} | {s['errors']} | "
                 f"{s['scrapes']} ({s['scrape_failed']}) |")
    L.append("")
    L.append(chart_line)
    L.append("")
    if notes:
        L += ["## Problems seen", ""] + [f"- {n}" for n in notes] + [""]
    L += ["## Every run (in the order they ran)", ""]
    L.append("| round | workload | build | req/s | requests | p50 ms | p99 ms | proxy CPU µs/req | "
             "proxy CPU % | others' CPU % | errors | raw |")
    L.append("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in runs:
        L.append(f"| {r['round']} | {r['workload']} | {r['variant']} | {fmt(r['rps'])} | {r['requests']} | "
                 f"{fmt(r['p50'], 3)} | {fmt(r['p99'], 3)} | {fmt(r['cpu_us'], 2)} | {fmt(r['cpu_pct'])} | "
                 f"{fmt(r['other_pct'])}{' ⚠' if r['noisy'] else ''} | {r['sock_errors'] + r['non2xx']} | "
                 f"[{os.path.basename(r['raw'])}](stats/{r['raw']}) |")
    L.append("")
    L.append("## What was measured")
    L.append("")
    L.append("- The two binaries come from the same commit; `STATS=0` defines SLUICE_NO_STATS, which turns "
             "every stats_add, stats_gauge_add, stats_reason and stats_observe_us call into nothing "
             "(src/stats.h). The clock reads stay in both: the access log needs them.")
    L.append("- Each run starts that build fresh, checks one `GET /`, warms up, measures one wrk run and "
             "stops it. Proxy CPU is utime+stime of sluice's process tree over the measured run divided "
             f"by the requests wrk completed (clock tick 1/{CLK_TCK} s). Noisy runs (others' CPU at or "
             f"above {core.NOISE_PCT}% of a CPU) are re-run, as in bench/core.py.")
    L.append("")
    L.append("## Commands (exact)")
    L.append("")
    L.append("```sh")
    L.append(f"make all && make STATS=0 all\n# backend (started once)\n{backend_cmd}")
    for k, v in commands.items():
        L.append(f"# {k}\n{v}")
    for w in WORKLOADS:
        L.append(f"# load, {w} (warm-up uses -d{core.WARMUP}s)")
        L.append(" ".join(core.wrk_cmd("PORT", DURATION, WRK_EXTRA[w])).replace(
            "-H Connection: close", "-H 'Connection: close'"))
    if SCRAPE:
        L.append(f"# every {SCRAPE} s during each measured run\ncurl -s http://127.0.0.1:ADMIN_PORT/metrics")
    L.append("```")
    L.append("")
    report_end(L, outdir, "stats", confs, facts,
               "`make bench-stats` (or `QUICK=1 make bench-stats`); see docs/benchmarking.md.")
    return summ


def main():
    for v, b in VARIANTS.items():
        if not os.access(os.path.join(b, "sluice"), os.X_OK):
            sys.exit(f"{PROG}: {b}/sluice missing (make all && make STATS=0 all)")
    started = datetime.datetime.now(datetime.timezone.utc)
    outdir = os.path.join(RESULTS, started.strftime("%Y%m%dT%H%M%SZ"))
    d = os.path.join(outdir, "stats")
    os.makedirs(os.path.join(d, "raw"), exist_ok=True)
    # Run copies, so a rebuild during the benchmark cannot change what is measured.
    os.makedirs(os.path.join(d, "bin"), exist_ok=True)
    for v, b in VARIANTS.items():
        shutil.copy2(os.path.join(b, "sluice"), os.path.join(d, "bin", f"sluice-{v}"))
    t_start = time.monotonic()
    per_run = DURATION + core.WARMUP + 1.5
    log(f"results in {outdir}")
    log(f"{ROUNDS} rounds x {len(WORKLOADS) * 2} runs x ~{per_run:.0f} s = about "
        f"{ROUNDS * len(WORKLOADS) * 2 * per_run:.0f} s; {core.PIN_TEXT}")
    facts = base_facts([
        ("sluice (stats on)", f"{cmd_out([os.path.join(BUILD, 'sluice'), '-V']).splitlines()[0]} ({git_describe()})"),
        ("sluice (STATS=0)", cmd_out([os.path.join(NOSTATS_BUILD, 'sluice'), '-V']).splitlines()[0]),
        ("wrk", (cmd_out(["wrk", "--version"]).splitlines() or ["?"])[0]),
    ])
    runs, notes, commands, confs = [], [], {}, {}
    backend, bport, backend_cmd = core.start_backend(d)
    if core.BACKEND == "nginx":
        confs["backend"] = os.path.join(d, "backend-nginx.conf")
    for rnd in range(ROUNDS):
        for w in WORKLOADS:
            order = ["stats", "nostats"] if rnd % 2 == 0 else ["nostats", "stats"]
            for v in order:
                errlog = os.path.join(d, "sluice.error.log")
                pos = fsize(errlog)
                proxy, port, aport, cmd, conf = start_sluice(v, d, bport)
                commands[f"sluice, {'stats on' if v == 'stats' else 'STATS=0'}"] = cmd
                confs[v] = conf
                if proxy is None:
                    notes.append(f"round {rnd + 1}: {v} did not start: {read_tail(errlog, pos)[-400:]!r}")
                    log(notes[-1])
                    continue
                err = core.http_check(port)
                if err:
                    notes.append(f"round {rnd + 1}, {w}, {v}: sanity check failed: {err}")
                with Scraper(aport) as sc:
                    r = core.QUIET.run(lambda: core.measure(f"{w}-{v}", rnd, d, port, proxy, backend,
                                                            WRK_EXTRA[w]),
                                       f"round {rnd + 1}, {w}, {v}", DURATION, notes,
                                       lambda r: f"{fmt(r['rps'])} req/s")
                r.update(workload=w, variant=v, scrapes=sc.n, scrape_failed=sc.failed)
                runs.append(r)
                rc = stop(proxy)
                if rc not in (0, None):
                    r["problems"].append(f"exit status {rc} after SIGTERM")
                for pr in r["problems"]:
                    notes.append(f"round {rnd + 1}, {w}, {v}: {pr}")
                log(f"round {rnd + 1} {w:9} {v:7}: {r['rps']:>10,.0f} req/s  p99 {fmt(r['p99'], 3)} ms  "
                    f"cpu {fmt(r['cpu_us'], 2)} us/req  scrapes {sc.n}"
                    + (f"  PROBLEMS: {r['problems']}" if r["problems"] else ""))
    stop(backend)
    summ = write_report(outdir, runs, facts, commands, confs, backend_cmd, notes,
                        started.strftime("%Y-%m-%d %H:%M:%S"), time.monotonic() - t_start)
    refresh_latest(RESULTS, outdir, "stats")
    with open(os.path.join(outdir, "stats.md")) as f:
        print("\n" + f.read().split("## Per build")[0].rstrip() + "\n")
    log(f"report: {os.path.join(outdir, 'stats.md')}")
    return 0 if summ else 1


if __name__ == "__main__":
    run_main(main, PROG)
