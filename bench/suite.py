#!/usr/bin/env python3
"""The suite report: bench/all.sh runs the scenarios into one directory
RESULTS/<ts>/ and then this writes RESULTS/<ts>/report.md (and the same in
RESULTS/latest/report.md): one line per scenario (exit status, time taken,
link), then each scenario's headline (its report's "## Headline" section if it
has one, else its first table) and its charts.

Usage: bench/suite.py RESULTS/<ts>
"""
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import git_describe, machine_facts, write  # noqa: E402

TITLES = {
    "offload": "Tomcat behind a proxy: clients without keepalive, plain and TLS (the WebLogic experiment)",
    "inspection": "what the Lua hook costs: siege and fortio, sluice vs HAProxy Lua",
    "churn": "a full TLS handshake per request: CPS, proxy CPU per handshake, 1 vs 2 workers",
    "throughput": "keepalive req/s for 100 B, 20 KB and 1 MB, plain and TLS",
    "memory": "RSS vs open connections, and with the WAF on",
    "reuse": "backend connections opened per 1,000 requests, header vs PROXY v2 identity",
}


def headline(md_path):
    """The '## Headline' section of a scenario report, else its first table."""
    with open(md_path) as f:
        lines = f.read().splitlines()
    for i, ln in enumerate(lines):
        if ln.strip().lower() == "## headline":
            out = []
            for ln2 in lines[i + 1:]:
                if ln2.startswith("## "):
                    break
                out.append(ln2)
            return out
    out, in_table = [], False
    for ln in lines:
        if ln.startswith("|"):
            in_table = True
            out.append(ln)
        elif in_table:
            break
    return out


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: bench/suite.py RESULTS/<ts>")
    out = os.path.abspath(sys.argv[1])
    ts = os.path.basename(out)
    status = []
    st_path = os.path.join(out, "suite", "status.tsv")
    if os.path.exists(st_path):
        for ln in open(st_path):
            parts = ln.rstrip("\n").split("\t")
            if len(parts) == 3:
                status.append((parts[0], int(parts[1]), int(parts[2])))
    quick = os.environ.get("QUICK", "") not in ("", "0")
    total = sum(s[2] for s in status)
    L = [f"# sluice bench suite — {ts}", ""]
    L.append(f"sluice at {git_describe()}; {'QUICK mode; ' if quick else ''}"
             f"{len(status)} scenario(s), {total // 60} min {total % 60} s in all. "
             "Each scenario ran sluice, HAProxy and nginx (where the scenario has them) side by side "
             "in the same run, alternating; figures are medians of the rounds with min–max. On a "
             "shared or small machine trust the ratios of one run over absolute numbers across runs.")
    L.append("")
    L += ["| scenario | what | exit | time | report |", "|---|---|---:|---:|---|"]
    for name, rc, secs in status:
        md = f"{name}.md"
        link = f"[{md}]({md})" if os.path.exists(os.path.join(out, md)) else "— (no report)"
        L.append(f"| {name} | {TITLES.get(name, '')} | {'ok' if rc == 0 else rc} | "
                 f"{secs // 60}:{secs % 60:02d} | {link} |")
    L.append("")
    for name, rc, _ in status:
        md = os.path.join(out, f"{name}.md")
        L.append(f"## {name}")
        L.append("")
        if not os.path.exists(md):
            L.append(f"No report: the scenario exited with status {rc}. Last lines of its output "
                     f"([suite/{name}.log](suite/{name}.log)):")
            L.append("")
            log = os.path.join(out, "suite", f"{name}.log")
            tail = open(log, errors="replace").read().splitlines()[-8:] if os.path.exists(log) else []
            L += ["```"] + tail + ["```", ""]
            continue
        L += headline(md)
        L.append("")
        L.append(f"Full report: [{name}.md]({name}.md).")
        L.append("")
        pngs = sorted(p for p in os.listdir(out)
                      if p.endswith(".png") and (p == f"{name}.png" or p.startswith(f"{name}-")))
        for p in pngs:
            L.append(f"![{p[:-4]}]({p})")
            L.append("")
    L += ["## Machine", "", "| | |", "|---|---|"]
    L += [f"| {k} | {v.replace('|', '/')} |" for k, v in machine_facts([])]
    L.append("")
    text = "\n".join(L)
    write(os.path.join(out, "report.md"), text)
    # latest/ holds a copy of every scenario's report and charts (each
    # scenario's refresh_latest put them there); make sure those of this run
    # are there, then the suite report beside them.
    latest = os.path.join(os.path.dirname(out), "latest")
    os.makedirs(latest, exist_ok=True)
    for f in os.listdir(out):
        if re.search(r"\.(md|png)$", f) and f != "report.md":
            shutil.copy2(os.path.join(out, f), os.path.join(latest, f))
    write(os.path.join(latest, "report.md"), text.replace("](suite/", f"](../{ts}/suite/"))
    print(f"suite report: {os.path.join(out, 'report.md')} (and {os.path.join(latest, 'report.md')})")


if __name__ == "__main__":
    main()
