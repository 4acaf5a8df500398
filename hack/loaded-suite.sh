#!/usr/bin/env bash
# Runs a make target K times in a row with N CPU-bound busy loops beside it,
# to show that the suite holds on a loaded machine (docs/reliability.md,
# "Under load"). Prints each run's result and duration, and the load average
# before and after it; exits non-zero if any run failed. The loops are
# always killed, also on Ctrl-C or a failed run.
#
#   hack/loaded-suite.sh                  # 2 loops, `make unit`, 3 runs
#   LOOPS=2 RUNS=3 hack/loaded-suite.sh test
#   LOOPS=0 hack/loaded-suite.sh unit     # no loops: the baseline
#
# Each run's output goes to ${LOGDIR:-/tmp/loaded-suite}/run-<i>.log.
set -u

target="${1:-unit}"
loops="${LOOPS:-2}"
runs="${RUNS:-3}"
logdir="${LOGDIR:-/tmp/loaded-suite}"
mkdir -p "$logdir"

pids=()
run_pgid="" # the make run in progress: a process group of its own
stop_run() {
	if [ -n "$run_pgid" ]; then
		kill -TERM -- "-$run_pgid" 2>/dev/null
		run_pgid=""
	fi
}
stop_loops() {
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null
	done
	pids=()
}
trap stop_loops EXIT
# The run goes on in the background, waited for, so that a signal is handled
# at once: the run (make and every test binary under it) is stopped with it.
trap 'stop_run; stop_loops; exit 130' INT TERM

for _ in $(seq 1 "$loops"); do
	( while :; do :; done ) &
	pids+=("$!")
done

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

echo "loaded-suite: make $target, $runs runs, $loops busy loops (pids ${pids[*]:-none}), $(nproc) CPUs"
failed=0
for i in $(seq 1 "$runs"); do
	before="$(loadavg)"
	start=$(date +%s)
	setsid make "$target" >"$logdir/run-$i.log" 2>&1 &
	run_pgid=$!
	if wait "$run_pgid"; then
		result=pass
	else
		result=FAIL
		failed=$((failed + 1))
	fi
	run_pgid=""
	took=$(($(date +%s) - start))
	printf 'run %d: %s in %dm%02ds (load before %s, after %s) %s\n' \
		"$i" "$result" $((took / 60)) $((took % 60)) "$before" "$(loadavg)" "$logdir/run-$i.log"
	if [ "$result" = FAIL ]; then
		grep -E '^(--- FAIL|FAIL|panic:)' "$logdir/run-$i.log" | head -20 | sed 's/^/    /'
	fi
done
echo "loaded-suite: $((runs - failed)) of $runs runs passed"
[ "$failed" -eq 0 ]
