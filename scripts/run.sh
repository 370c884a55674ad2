#!/usr/bin/env bash
# One entry point for a fresh machine: `bash scripts/run.sh demo` or `bash scripts/run.sh test`.
# It creates .venv/ at the project root from the project's own pinned files, skipping the install
# when nothing that decides it changed, then runs the chosen job inside the venv.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

job="${1:-demo}"
shift || true

python="${LAMP_PYTHON:-python3}"
venv="$root/.venv"
stamp="$venv/.lamp-install-stamp"
want="$(cat requirements.txt constraints.txt setup.py setup.cfg package.xml | sha256sum | cut -d' ' -f1)"

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] installing pinned dependencies into .venv (first run takes a few minutes)"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt -c constraints.txt
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
  echo "$want" > "$stamp"
fi

# The venv is the install prefix: ament_index finds the package's share/ there.
export AMENT_PREFIX_PATH="$venv${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
export PATH="$venv/bin:$PATH"

case "$job" in
  demo) exec "$venv/bin/lamp" demo "$@" ;;
  test)
    # with ARGS: pytest once with them (no path given: setup.cfg testpaths, the whole test/)
    if [ $# -gt 0 ]; then exec "$venv/bin/python" -m pytest -q "$@"; fi
    # The whole suite in two phases: what does not time anything on pytest-xdist workers (one
    # per core, at most 4), then the ROS and timing tests alone, so that no rate they assert
    # shares its cores with a compile. Both phases share each compiled tiny artifact
    # (test/conftest.py: shared_build) through one temporary folder. Files are handed out in
    # collection order, the longest first (test/conftest.py: LONG_FILES), not by their count
    # of tests (xdist's default put the one-test doc files last).
    workers="$(nproc)"; [ "$workers" -le 4 ] || workers=4
    LAMP_TEST_BUILDS="$(mktemp -d)"; export LAMP_TEST_BUILDS
    trap 'rm -rf "$LAMP_TEST_BUILDS"' EXIT
    rc=0
    "$venv/bin/python" -m pytest -q -n "$workers" --dist loadfile --no-loadscope-reorder \
      -m 'not (ros or timing)' test || rc=$?
    "$venv/bin/python" -m pytest -q -m 'ros or timing' test || rc=$?
    exit "$rc"
    ;;
  # the flake gate (test/stress.sh): the ros/timing phase N times under a CPU hog
  stress) exec bash "$root/test/stress.sh" "$@" ;;
  *) echo "usage: bash scripts/run.sh {demo|test|stress} [args...]" >&2; exit 2 ;;
esac
