#!/usr/bin/env bash
# The flake gate: the suite's ROS and timing phase N times in a row (default 5) while a CPU hog
# keeps every core busy, as CI's shared two-core machines are when a neighbour compiles. A test
# that waits on a fixed sleep instead of an observable condition fails here within a few runs.
#
#   bash scripts/run.sh stress [N] [pytest args...]
#
# The hog is one busy-looping process per core at normal priority, started and killed by this
# script (and bounded by `timeout`, should the script itself be killed). Every run's summary
# line goes to stdout; the exit status is non-zero when any run failed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
runs="${1:-5}"
shift || true
python="$root/.venv/bin/python"
[ -x "$python" ] || { echo "no .venv: run 'bash scripts/run.sh test' once first" >&2; exit 2; }

hogs=()
stop_hogs() { [ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null || true; }
builds="$(mktemp -d)"
trap 'stop_hogs; rm -rf "$builds"' EXIT
for _ in $(seq "$(nproc)"); do
  timeout 4h "$python" -c 'while True: pass' &
  hogs+=("$!")
done
echo "[stress] $runs runs of the ros/timing phase, ${#hogs[@]} busy-loop hogs on $(nproc) cores"

# one artifact build for all runs (test/conftest.py: shared_build)
export LAMP_TEST_BUILDS="$builds"
failed=0
for i in $(seq "$runs"); do
  start=$(date +%s)
  set +e
  out="$("$python" -m pytest -q -p no:cacheprovider -m 'ros or timing' test "$@" 2>&1)"
  rc=$?
  set -e
  summary="$(printf '%s\n' "$out" | tail -n 1)"
  echo "[stress] run $i/$runs: rc $rc, $(( $(date +%s) - start )) s: $summary"
  if [ "$rc" -ne 0 ]; then
    failed=$((failed + 1))
    printf '%s\n' "$out" | grep -E '^(FAILED|ERROR)' || true
  fi
done
echo "[stress] $((runs - failed))/$runs loaded runs passed"
[ "$failed" -eq 0 ]
