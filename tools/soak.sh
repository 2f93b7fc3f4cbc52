#!/usr/bin/env bash
# Soak: the whole suite three times in a row while another full run of it runs beside it
# (restarted until the three are done), so the machine stays loaded throughout. Timing
# tests must assert behaviour, not win a race: all three foreground runs must pass.
#
#   tools/soak.sh [RUNS] [-- PYTEST ARGS...]     (make soak; RUNS defaults to 3)
#
# Each run gets its own --basetemp and log under $SOAK_DIR (default /tmp/batchscope-soak);
# PostgreSQL databases are per test already. Exit 0 only when every foreground run passed;
# the side runs' results are printed too; the side run still going when the foreground is
# done is stopped (SIGTERM: what it started dies with it, tests/lifeline.py). About 1½ h on a
# 2-core box: not for a shared machine.
set -uo pipefail
cd "$(dirname "$0")/.."

runs=3
if [[ $# -gt 0 && $1 != "--" ]]; then runs=$1; shift; fi
[[ ${1:-} == "--" ]] && shift
if ! [[ $runs =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: tools/soak.sh [RUNS] [-- PYTEST ARGS...]  (RUNS: a positive integer)" >&2
  exit 2
fi
py=.venv/bin/python
[[ -x $py ]] || { echo "no .venv: run make install (or make test) first" >&2; exit 2; }
dir=${SOAK_DIR:-/tmp/batchscope-soak}
rm -rf "$dir" && mkdir -p "$dir"

suite() {  # suite NAME: one full run, its log in $dir/NAME.log; returns pytest's code
  "$py" -m pytest -p no:cacheprovider --basetemp="$dir/$1.tmp" "${@:2}" >"$dir/$1.log" 2>&1
}

side_suite() {  # as suite, in the background (its pid in $dir/side.pid, to stop it)
  suite "$@" &
  echo $! >"$dir/side.pid"
  wait $!
}

stop_side() {
  touch "$dir/done"
  [[ -e $dir/side.pid ]] && pkill -TERM -P "$(cat "$dir/side.pid")" 2>/dev/null
  kill "$side" 2>/dev/null
}

# The side load: full runs back to back until the foreground is done.
(
  i=1
  while [[ ! -e $dir/done ]]; do
    side_suite "side$i" "$@"
    code=$?
    [[ -e $dir/done ]] && code="stopped when the foreground was done"
    echo "side run $i: exit $code ($(tail -n 1 "$dir/side$i.log"))" >>"$dir/side.txt"
    i=$((i + 1))
  done
) &
side=$!
trap stop_side EXIT

failed=0
for n in $(seq 1 "$runs"); do
  start=$SECONDS
  suite "run$n" "$@"
  code=$?
  echo "run $n of $runs: exit $code in $((SECONDS - start)) s: $(tail -n 1 "$dir/run$n.log")"
  [[ $code -eq 0 ]] || failed=1
done
touch "$dir/done"
[[ -e $dir/side.pid ]] && pkill -TERM -P "$(cat "$dir/side.pid")" 2>/dev/null
wait "$side"
trap - EXIT
cat "$dir/side.txt" 2>/dev/null
echo "logs: $dir"
if [[ $failed -ne 0 ]]; then
  echo "soak FAILED: see the failing run's log (grep -n FAILED $dir/run*.log)"
  exit 1
fi
echo "soak passed: $runs runs in a row under a parallel full run"
