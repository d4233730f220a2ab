"""Smoke test of `make bench-tier` (bench/tier.sh): the tier benchmark in
QUICK mode with 1 s runs, churn and keepalive through the three topologies
(direct, HAProxy -> A, HAProxy -> A + B), churn at a fixed offered rate,
and the rate-limit part. Checks
that it measured something for every instance, that HAProxy alternated
between the two, that no request failed, and that its report, chart and
latest/ entry exist. Speed is never asserted.
"""
import json
import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest

from test_bench_smoke import nonzero_numbers, tables

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LIMIT = 240  # seconds, generous: the machine may be slow (about 45 s here)

KNOBS = {"QUICK": "1", "DURATION": "1", "WARMUP": "0", "ROUNDS": "1", "SCENARIOS": "churn,keepalive",
         "QUIET_BUDGET": "0"}


@pytest.fixture(scope="module")
def tier_run():
    d = tempfile.mkdtemp(prefix="sluice-bench-tier-")
    os.chmod(d, 0o755)
    env = dict(os.environ, RESULTS=d, BENCH_TS="smoke", BUILD=os.environ.get("BUILD", "build"), **KNOBS)
    p = subprocess.run(["sh", "bench/tier.sh"], cwd=REPO, env=env, timeout=LIMIT,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    yield p, pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


def test_tier_quick_report(tier_run):
    p, results = tier_run
    assert p.returncode == 0, p.stdout[-3000:]
    out = results / "smoke"
    md = (out / "tier.md").read_text()
    tabs = tables(md)
    first = tabs[0]
    # 2 scenarios x 3 topologies, each row with measured figures
    assert [(r[0], r[1].split()[0]) for r in first["rows"]] == [
        (s, t) for s in ("churn", "keepalive") for t in ("direct", "tier1", "tier2")]
    for row in first["rows"]:
        assert len(nonzero_numbers(row[2:])) >= 3, f"row without figures: {row}"
    headline = tabs[1]
    assert [r[0] for r in headline["rows"]] == ["churn", "keepalive"]
    for row in headline["rows"]:
        assert all(nonzero_numbers([c]) for c in row[1:7]), f"headline figure missing: {row}"
    assert "absolute rate cannot double" in md
    data = (out / "tier.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    latest = results / "latest"
    assert (latest / "tier.md").exists()
    assert "(tier.md)" in (latest / "report.md").read_text()


def test_tier_quick_runs(tier_run):
    """Every run: no error, each instance served and was charged CPU, the
    instances' own counts match wrk's, and HAProxy alternated."""
    p, results = tier_run
    assert p.returncode == 0, p.stdout[-3000:]
    runs = json.loads((results / "smoke" / "tier" / "runs.json").read_text())
    seen = {(r["case"], r["label"]) for r in runs}
    assert {(s, t) for s in ("churn", "keepalive") for t in ("direct", "tier1", "tier2")} <= seen
    assert {("fixed", t) for t in ("tier1-half", "tier1", "tier2")} <= seen
    for r in runs:
        what = f"{r['case']}/{r['label']}"
        assert r["errors"] == 0 and r["requests"] > 0, what
        assert [x["name"] for x in r["inst"]] == (["A", "B"] if r["label"] == "tier2" else ["A"]), what
        for x in r["inst"]:
            assert x["served"] > 0 and x["cpu_us"] and x["r4xx"] == 0 and x["r5xx"] == 0, (what, x)
        assert abs(r["served"] - r["requests"]) <= max(100, r["requests"] // 100), what
        if r["label"] == "tier2":
            assert 0.4 <= r["share_A"] <= 0.6, (what, r["share_A"])
        assert (r["lb_cpu_us"] is None) == (r["label"] == "direct"), what
        if r["case"] in ("churn", "fixed"):
            # tickets off: every connection a full handshake, none resumed
            for x in r["inst"]:
                assert x["resumed"] == 0 and x["full"] >= x["served"] * 0.9, (what, x)


def test_tier_quick_rate_limit(tier_run):
    """The rate-limit part: measured (nothing refused, one Redis script call
    per request at most) or skipped with the reason in the report."""
    p, results = tier_run
    assert p.returncode == 0, p.stdout[-3000:]
    md = (results / "smoke" / "tier.md").read_text()
    section = md.split("## The cost of a rate limit per request")[1].split("\n## ")[0]
    if "**Not measured:" in section:
        pytest.skip("rate limits not in this binary: " + section.split("**Not measured:")[1].split("**")[0])
    runs = json.loads((results / "smoke" / "tier" / "runs.json").read_text())
    rl = {r["case"]: r for r in runs if r["case"].startswith("rl-")}
    assert sorted(rl) == ["rl-local", "rl-none", "rl-redis"]
    for case, r in rl.items():
        assert r["errors"] == 0 and all(x["r4xx"] == 0 for x in r["inst"]), case
    assert 0 < rl["rl-redis"]["redis_cmds_per_req"] <= 1.05   # one round trip per decision at most
    assert (results / "smoke" / "tier-ratelimit.png").read_bytes()[:4] == b"\x89PNG"
