#!/usr/bin/env python3
"""What the Lua inspection hook costs, measured two ways in the same run:
from outside (wrk req/s, latency, and sluice's CPU per request) and from
inside (sluice's own inspect_seconds histogram, read from /status).

One sluice worker (pinned), the static nginx origin, wrk keepalive with a
random ~500-byte User-Agent on every request (the WAF-latency reference
experiment's shape, as a wrk Lua script), for these variants:

  off        inspection configured but switched off (`inspection: off`)
  allow_all  lua/allow_all.lua: the bare cost of calling into Lua
  waf        lua/waf.lua: the CRS-inspired ruleset (300+ rules), no match

Usage: sh bench/inspection.sh (or `make bench-inspection`). Environment knobs:
  QUICK=1          3 s runs, 2 rounds (default 10 s, 3 rounds)
  DURATION=N, WARMUP=N, CONNECTIONS=N, WRK_THREADS=N, PIN=0   as bench/core.py
  ROUNDS=N         rounds; each round runs every variant once, rotating the order
  VARIANTS=a,b     subset/order of off,allow_all,waf
  BUILD=dir        where sluice is (build); RESULTS=dir (bench/results)

Output: RESULTS/<UTC timestamp>/inspection.md, inspection.png, inspection/ (configs,
raw wrk output, logs); RESULTS/latest/ gets a copy plus report.md.
"""
import datetime
import json
import os
import re
import sys
import time
import urllib.request

QUICK = os.environ.get("QUICK", "") not in ("", "0")
os.environ.setdefault("ROUNDS", "2" if QUICK else "3")
import core  # noqa: E402  (reads the shared knobs from the environment)
from benchlib import (mmm as mmm_of, run_main, ROOT, cmd_out, fmt, free_port, fsize, git_describe,  # noqa: E402
                      machine_facts as base_facts, read_tail, refresh_latest, report_configs_and_machine,
                      start, stop, stop_all, wait_children, wait_port, write)

PROG = "bench/inspection.py"
ROUNDS, DURATION, BUILD, RESULTS = core.ROUNDS, core.DURATION, core.BUILD, core.RESULTS
SCRIPTS = {"off": "lua/allow_all.lua", "allow_all": "lua/allow_all.lua", "waf": "lua/waf.lua"}
VARIANTS = [v for v in os.environ.get("VARIANTS", "off,allow_all,waf").split(",") if v]
for v in VARIANTS:
    if v not in SCRIPTS:
        sys.exit(f"{PROG}: unknown variant {v!r} (off, allow_all, waf)")

WRK_SCRIPT = """-- random ~500-byte User-Agent per request, from 1,000 made up front
-- (making them per request would make wrk the bottleneck)
local chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "
local uas = {}
math.randomseed(42)
for i = 1, 1000 do
  local t = {}
  for k = 1, 480 + math.random(40) do
    local c = math.random(#chars)
    t[k] = chars:sub(c, c)
  end
  uas[i] = "Mozilla/5.0 " .. table.concat(t)
end
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/catalog/item?id=" .. n .. "&page=2&sort=price",
                    { ["User-Agent"] = uas[n % 1000 + 1], ["Accept"] = "text/html" })
end
"""


def log(msg):
    print(f"[inspection] {msg}", flush=True)


def conf(d, variant, port, bport, aport):
    return f"""# sluice, one worker; inspection variant: {variant}
workers: 1
error_log: {d}/sluice.error.log
access_log: off
inspection: {"off" if variant == "off" else "on"}
admin:
  address: 127.0.0.1:{aport}
timeouts:
  drain: 0
listeners:
  - name: http
    address: 127.0.0.1:{port}
    backend: app
    inspect:
      script: {os.path.join(ROOT, SCRIPTS[variant])}
backends:
  - name: app
    idle_max: {core.POOL}
    servers:
      - name: s1
        address: 127.0.0.1:{bport}
        max_connections: {core.POOL}
"""


def start_sluice(variant, d, bport):
    port, aport = free_port(), free_port()
    path = write(os.path.join(d, f"sluice-{variant}.yaml"), conf(d, variant, port, bport, aport))
    cmd = core.PROXY_PIN + [os.path.join(BUILD, "sluice"), "-c", path]
    p = start(cmd, os.path.join(d, f"sluice-{variant}.out"))
    # The master compiles the WAF's databases before it listens: allow for it.
    if not wait_port(port, p, deadline=60.0):
        stop(p)
        return None, port, aport, " ".join(cmd), path
    wait_children(p)
    return p, port, aport, " ".join(cmd), path


def inspect_figures(aport):
    """sluice's own inspection histogram (listener http) from /status."""
    with urllib.request.urlopen(f"http://127.0.0.1:{aport}/status", timeout=5) as r:
        st = json.load(r)
    li = st["listeners"][0]
    h = li["latency_us"]["inspect_seconds"]
    # The exact mean from the Prometheus sum (seconds, fractional) and count.
    with urllib.request.urlopen(f"http://127.0.0.1:{aport}/metrics", timeout=5) as r:
        text = r.read().decode()
    sm = re.search(r'^sluice_inspect_seconds_sum\{[^}]*listener="http"[^}]*\} (\S+)$', text, re.M)
    cm = re.search(r'^sluice_inspect_seconds_count\{[^}]*listener="http"[^}]*\} (\S+)$', text, re.M)
    mean = float(sm.group(1)) * 1e6 / float(cm.group(1)) if sm and cm and float(cm.group(1)) else None
    return {"insp_count": h["count"], "insp_mean": mean, "insp_p50": h["p50"], "insp_p90": h["p90"],
            "insp_p99": h["p99"], "insp_p999": h["p999"], "allow": (li["inspect"] or {}).get("allow"),
            "deny": (li["inspect"] or {}).get("deny"), "error": (li["inspect"] or {}).get("error")}


def summarize(runs, v):
    allr = [r for r in runs if r["variant"] == v]
    if not allr:
        return None
    rs = [r for r in allr if not r["noisy"]] or allr

    def mmm(k):
        return mmm_of([r.get(k) for r in rs])
    return {"n": len(rs), "total": len(allr), **{k: mmm(k) for k in (
        "rps", "p50", "p99", "cpu_us", "insp_mean", "insp_p50", "insp_p90", "insp_p99", "insp_p999")},
        "errors": sum(r["sock_errors"] + r["non2xx"] for r in allr),
        "insp_errors": sum(r.get("error") or 0 for r in allr), "denied": sum(r.get("deny") or 0 for r in allr)}


def chart(path, summ):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    vs = [v for v in VARIANTS if v in summ]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    colors = {"off": "#999999", "allow_all": "#2b7bba", "waf": "#e07b39"}
    for ax, key, title in ((axes[0], "rps", "Requests/s (median, bars: min–max)"),
                           (axes[1], "cpu_us", "sluice CPU µs per request")):
        med = [summ[v][key][0] for v in vs]
        err = [[summ[v][key][0] - summ[v][key][1] for v in vs], [summ[v][key][2] - summ[v][key][0] for v in vs]]
        bars = ax.bar(vs, med, yerr=err, capsize=5, color=[colors[v] for v in vs])
        for b, val in zip(bars, med):
            ax.annotate(f"{val:,.0f}" if key == "rps" else f"{val:.2f}", (b.get_x() + b.get_width() / 2, val),
                        xytext=(0, 3), textcoords="offset points", ha="center", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    ax = axes[2]
    on = [v for v in vs if v != "off"]
    x = range(len(on))
    for k, (q, c) in enumerate((("insp_p50", "#2b7bba"), ("insp_p90", "#3a9e4f"), ("insp_p99", "#e07b39"))):
        ax.bar([i + (k - 1) * 0.25 for i in x], [summ[v][q][0] for v in on], width=0.25, color=c,
               label=q.replace("insp_", ""))
    ax.set_xticks(list(x), on)
    ax.set_title("sluice's own inspect_seconds histogram, µs", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"Inspection cost — wrk -c{core.CONNECTIONS} -d{DURATION}s, random 500-byte User-Agent, "
                 f"one worker, {ROUNDS} rounds", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(outdir, runs, facts, commands, confs, backend_cmd, notes, started_at, elapsed):
    summ = {v: summarize(runs, v) for v in VARIANTS}
    summ = {k: s for k, s in summ.items() if s}
    try:
        chart(os.path.join(outdir, "inspection.png"), summ)
        chart_line = "![inspection chart](inspection.png)"
    except Exception as e:  # noqa: BLE001
        chart_line = f"(chart not drawn: {e!r})"
    L = ["# Inspection cost — the Lua hook off, calling an empty function, and running the WAF", ""]
    L.append(f"Run {started_at} UTC, {elapsed:.0f} s in all. {'QUICK mode. ' if QUICK else ''}{ROUNDS} rounds, "
             f"the variant order rotating each round; {DURATION} s measured runs after {core.WARMUP} s of "
             f"warm-up; wrk `-t{core.WRK_THREADS} -c{core.CONNECTIONS}` with a random ~500-byte User-Agent per "
             f"request; one sluice worker; backend: **{core.BACKEND_DESC}**. Pinning: {core.PIN_TEXT}.")
    L.append("")
    L.append("| variant | runs used | req/s median | req/s min–max | wrk p50 ms | wrk p99 ms | sluice CPU µs/req | "
             "inspect mean µs | inspect p50 | p90 | p99 | p99.9 | errors | script errors | denied |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for v, s in summ.items():
        L.append(f"| **{v}** | {s['n']}/{s['total']} | {fmt(s['rps'][0])} | {fmt(s['rps'][1])}–{fmt(s['rps'][2])} | "
                 f"{fmt(s['p50'][0], 3)} | {fmt(s['p99'][0], 3)} | {fmt(s['cpu_us'][0], 2)} | "
                 + (" | ".join(fmt(s[k][0], 2 if k == "insp_mean" else 0) for k in
                               ("insp_mean", "insp_p50", "insp_p90", "insp_p99", "insp_p999"))
                    if v != "off" else "— | — | — | — | —")
                 + f" | {s['errors']} | {s['insp_errors']} | {s['denied']} |")
    L.append("")
    if "off" in summ:
        L += ["## Deltas against `off`", "",
              "| variant | req/s ratio | CPU µs/req added | wrk p50 added, ms | wrk p99 added, ms |",
              "|---|---:|---:|---:|---:|"]
        o = summ["off"]
        for v, s in summ.items():
            if v == "off":
                continue
            L.append(f"| {v} | {s['rps'][0] / o['rps'][0]:.3f} | {s['cpu_us'][0] - o['cpu_us'][0]:+.2f} | "
                     f"{s['p50'][0] - o['p50'][0]:+.3f} | {s['p99'][0] - o['p99'][0]:+.3f} |")
        L.append("")
    L.append("The inspect columns are sluice's own measurement: the wall time of each `inspect()` call, "
             "from the `inspect_seconds` histogram (log-linear buckets, whole microseconds: values are "
             "bucket upper edges, and a call under 1 µs counts as 0 or 1 µs), read from `/status` at the "
             "end of each run (a fresh sluice per run), medians over the runs. The mean is the histogram's "
             "sum over its count; timestamps are whole microseconds, so per call it is exact on average.")
    L.append("")
    L.append(chart_line)
    L.append("")
    if notes:
        L += ["## Problems seen", ""] + [f"- {n}" for n in notes] + [""]
    L += ["## Every run", "", "| round | variant | req/s | p50 ms | p99 ms | CPU µs/req | inspect mean µs | "
          "p50 | p99 | others' CPU % | raw |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in runs:
        L.append(f"| {r['round']} | {r['variant']} | {fmt(r['rps'])} | {fmt(r['p50'], 3)} | {fmt(r['p99'], 3)} | "
                 f"{fmt(r['cpu_us'], 2)} | {fmt(r.get('insp_mean'), 2)} | {fmt(r.get('insp_p50'))} | "
                 f"{fmt(r.get('insp_p99'))} | {fmt(r['other_pct'])}{' ⚠' if r['noisy'] else ''} | "
                 f"[{os.path.basename(r['raw'])}](inspection/{r['raw']}) |")
    L += ["", "## Commands (exact)", "", "```sh", f"# backend (started once)\n{backend_cmd}"]
    for k, v in commands.items():
        L.append(f"# sluice, {k}\n{v}")
    L.append("# load (warm-up uses -d%ds); inspection/wrk-random-ua.lua is below" % core.WARMUP)
    L.append(" ".join(core.wrk_cmd("PORT", DURATION, ("-s", "inspection/wrk-random-ua.lua"))))
    L += ["```", "", "`wrk-random-ua.lua`:", "", "```lua", WRK_SCRIPT.rstrip(), "```", ""]
    report_configs_and_machine(L, confs, facts)
    L.append("Reproduce: `make bench-inspection` (or `QUICK=1 make bench-inspection`); see docs/benchmarking.md.")
    L.append("")
    write(os.path.join(outdir, "inspection.md"), "\n".join(L))
    return summ


def main():
    started = datetime.datetime.now(datetime.timezone.utc)
    outdir = os.path.join(RESULTS, started.strftime("%Y%m%dT%H%M%SZ"))
    d = os.path.join(outdir, "inspection")
    os.makedirs(os.path.join(d, "raw"), exist_ok=True)
    wrk_lua = write(os.path.join(d, "wrk-random-ua.lua"), WRK_SCRIPT)
    t_start = time.monotonic()
    log(f"results in {outdir}; {ROUNDS} rounds x {len(VARIANTS)} variants; {core.PIN_TEXT}")
    facts = base_facts([
        ("sluice", f"{cmd_out([os.path.join(BUILD, 'sluice'), '-V']).splitlines()[0]} ({git_describe()})"),
        ("wrk", (cmd_out(["wrk", "--version"]).splitlines() or ["?"])[0]),
    ])
    runs, notes, commands, confs = [], [], {}, {}
    backend, bport, backend_cmd = core.start_backend(d)
    if core.BACKEND == "nginx":
        confs["backend"] = os.path.join(d, "backend-nginx.conf")
    for rnd in range(ROUNDS):
        k = rnd % len(VARIANTS)
        for v in VARIANTS[k:] + VARIANTS[:k]:
            errlog = os.path.join(d, "sluice.error.log")
            pos = fsize(errlog)
            proxy, port, aport, cmd, path = start_sluice(v, d, bport)
            commands[v] = cmd
            confs[v] = path
            if proxy is None:
                notes.append(f"round {rnd + 1}: {v} did not start: {read_tail(errlog, pos)[-400:]!r}")
                log(notes[-1])
                continue
            r = core.QUIET.run(lambda: core.measure(v, rnd, d, port, proxy, backend, ("-s", wrk_lua)),
                               f"round {rnd + 1}, {v}", DURATION, notes, lambda r: f"{fmt(r['rps'])} req/s")
            r.update(variant=v)
            try:
                r.update(inspect_figures(aport))
            except (OSError, ValueError, KeyError) as e:
                notes.append(f"round {rnd + 1}, {v}: /status unreadable: {e!r}")
            runs.append(r)
            stop(proxy)
            for pr in r["problems"]:
                notes.append(f"round {rnd + 1}, {v}: {pr}")
            log(f"round {rnd + 1} {v:9}: {r['rps']:>9,.0f} req/s  p99 {fmt(r['p99'], 3)} ms  "
                f"cpu {fmt(r['cpu_us'], 2)} us/req  inspect mean {fmt(r.get('insp_mean'), 2)} us "
                f"p99 {fmt(r.get('insp_p99'))} us")
    stop(backend)
    summ = write_report(outdir, runs, facts, commands, confs, backend_cmd, notes,
                        started.strftime("%Y-%m-%d %H:%M:%S"), time.monotonic() - t_start)
    refresh_latest(RESULTS, outdir, "inspection")
    with open(os.path.join(outdir, "inspection.md")) as f:
        print("\n" + f.read().split("The inspect columns")[0].rstrip() + "\n")
    log(f"report: {os.path.join(outdir, 'inspection.md')}")
    return 0 if summ else 1


if __name__ == "__main__":
    run_main(main, PROG)
