#!/bin/sh
# The whole bench suite (`make bench`): every scenario named on the command
# line, one after the other, all writing into one results directory
# bench/results/<BENCH_TS>/, then bench/suite.py writes report.md there (and
# in bench/results/latest/) linking every scenario's tables and charts.
#
# One scenario failing does not stop the others: its exit status and the tail
# of its output go into the report, and the suite exits non-zero at the end.
# SCENARIO_LIMIT (seconds, default 600; 120 with QUICK=1) stops a scenario
# that overruns, so the whole suite stays bounded.
set -u
cd "$(dirname "$0")/.."

. bench/deps.sh
# The whole toolbox up front (each scenario still checks for its own): the
# load generators the scenarios use (wrk, siege, fortio, and the bench/*.c
# clients, built with gcc against libssl), h2load and httperf for reproducing
# a run by hand with another client, the peers and the app server.
EXTRA_TOOLS="h2load:nghttp2-client siege:siege httperf:httperf openssl:openssl cc:gcc \
	java:default-jre-headless" bench_install_deps bench/all.sh
for pkg in tomcat10 libssl-dev; do
	dpkg -s "$pkg" >/dev/null 2>&1 && continue
	echo "bench/all.sh: installing: $pkg" >&2
	SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "$pkg" >&2 ||
		echo "bench/all.sh: could not install $pkg" >&2
done
bench_fortio bench/all.sh >/dev/null || true

[ $# -gt 0 ] || set -- offload inspection churn throughput memory reuse
RESULTS=${RESULTS:-bench/results}
BENCH_TS=${BENCH_TS:-$(date -u +%Y%m%dT%H%M%SZ)}
export RESULTS BENCH_TS
quick=${QUICK:-}
[ "$quick" = 0 ] && quick=
if [ -n "$quick" ]; then limit=${SCENARIO_LIMIT:-120}; else limit=${SCENARIO_LIMIT:-600}; fi

out="$RESULTS/$BENCH_TS"
mkdir -p "$out/suite"
status="$out/suite/status.tsv"
: > "$status"
suite_start=$(date +%s)
rc=0
for s in "$@"; do
	if [ ! -f "bench/$s.sh" ]; then
		echo "bench/all.sh: no scenario '$s' (bench/$s.sh)" >&2
		printf '%s\t%s\t%s\n' "$s" 127 0 >> "$status"
		rc=1
		continue
	fi
	echo "== bench $s ($(date -u +%H:%M:%S) UTC, limit ${limit}s)"
	t0=$(date +%s)
	# Own process group, so the limit stops the scenario and everything it
	# started (its own PID-based clean-up runs on SIGTERM first).
	timeout --kill-after=20 "$limit" sh "bench/$s.sh" > "$out/suite/$s.log" 2>&1
	src=$?
	t1=$(date +%s)
	tail -n 3 "$out/suite/$s.log"
	printf '%s\t%s\t%s\n' "$s" "$src" "$((t1 - t0))" >> "$status"
	echo "== bench $s: exit $src after $((t1 - t0)) s"
	[ "$src" -eq 0 ] || rc=1
done
echo "== suite: $(( $(date +%s) - suite_start )) s in all"

"$(py)" bench/suite.py "$out" || rc=1
exit $rc
