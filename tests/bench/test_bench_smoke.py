"""Smoke test of the bench scripts (issue 7: "so they do not rot"): run a
scenario in QUICK mode with tiny durations, through its own bench/<name>.sh
as `make bench-<name>` would, and check that it wrote a report whose tables
carry non-zero figures for every row, a PNG chart, and the latest/ links.

Speed is never asserted here: only that the scripts still measure something.
"""
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LIMIT = 240  # seconds per scenario, generous: the machine may be slow

# scenario -> tiny knobs (documented on each scenario's docs/bench/ page)
SCENARIOS = {
    "reuse": {"CLIENTS": "50", "DURATION": "1", "WARMUP": "0",
              "TARGETS": "sluice-hdr,haproxy-hdr,sluice-pp2", "QUIET_BUDGET": "0"},
    "throughput": {"DURATION": "1", "ROUNDS": "3", "CASES": "plain-100,tls-20k"},
    "h2": {"DURATION": "1", "WARMUP": "1", "ROUNDS": "1", "SHAPES": "c100m10", "STEPS": "0,200",
           "MEM_ROUNDS": "1", "QUIET_BUDGET": "0"},
}

NUM = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")


def tables(md):
    """Every markdown table of MD as a list of rows (lists of cells), without
    the header and separator rows."""
    out, cur = [], None
    for line in md.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cur is None:
                cur = {"header": cells, "rows": []}
            elif all(re.fullmatch(r":?-+:?", c) for c in cells if c):
                continue
            else:
                cur["rows"].append(cells)
        elif cur is not None:
            out.append(cur)
            cur = None
    if cur is not None:
        out.append(cur)
    return out


def nonzero_numbers(cells):
    vals = []
    for c in cells:
        for m in NUM.findall(c.replace("**", "")):
            v = float(m.replace(",", ""))
            if v != 0:
                vals.append(v)
    return vals


@pytest.fixture
def results_dir():
    """A results root the peers' worker processes can read: nginx serves
    files from it as its unprivileged worker user, and pytest's tmp_path
    sits below a directory only root may enter."""
    d = tempfile.mkdtemp(prefix="sluice-bench-smoke-")
    os.chmod(d, 0o755)
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_scenario_quick(scenario, results_dir):
    results = results_dir
    env = dict(os.environ, QUICK="1", RESULTS=str(results), BENCH_TS="smoke",
               BUILD=os.environ.get("BUILD", "build"), **SCENARIOS[scenario])
    p = subprocess.run(["sh", f"bench/{scenario}.sh"], cwd=REPO, env=env, timeout=LIMIT,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.returncode == 0, p.stdout[-3000:]
    out = results / "smoke"
    md_path = out / f"{scenario}.md"
    assert md_path.exists(), p.stdout[-2000:]
    md = md_path.read_text()
    tabs = tables(md)
    assert tabs, "no table in the report"
    first = tabs[0]
    assert first["rows"], "the first table has no rows"
    for row in first["rows"]:
        # label cell(s) aside, every row must carry measured, non-zero figures
        assert len(nonzero_numbers(row[1:])) >= 2, f"row without figures: {row}"
    pngs = [f for f in os.listdir(out) if f.endswith(".png") and f.startswith(scenario)]
    assert pngs, "no chart"
    for f in pngs:
        data = (out / f).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, f
    latest = results / "latest"
    assert (latest / f"{scenario}.md").exists()
    assert f"({scenario}.md)" in (latest / "report.md").read_text()


def test_tables_parser_rejects_empty_rows():
    md = "| t | a | b |\n|---|---:|---:|\n| x | 0 | — |\n"
    row = tables(md)[0]["rows"][0]
    assert nonzero_numbers(row[1:]) == []
    md = "| t | a | b |\n|---|---:|---:|\n| **x** | 12,345 (1–2) | 0.5 |\n"
    assert nonzero_numbers(tables(md)[0]["rows"][0][1:]) == [12345, 1, 2, 0.5]
