#!/usr/bin/env bash
# Run on a GPU machine (device tool) from the repo root: did a change of the code change the
# artifact a spec builds, or its speed? BASE is a folder with the code from before the change
# (lamp_ros/, config/, bench/), made here with e.g.
#   mkdir -p .ab_base && git archive <commit> lamp_ros config bench | tar -x -C .ab_base
# and passed in the device call's `carry` (.ab_base is git-ignored). SPEC (default pi05_full)
# is built by each code from its own copy of the spec; `lamp diff` names what differs between
# the two artifacts, and scripts/device/artifact_ab.py times them in turns in one process (the
# current runtime loads both) and compares their actions. Results go to $OUT (or ./out); the
# builds' logs keep their last lines. DEADLINE_S (seconds from the start; set it ~20 s under
# the call's limit) stops the timing in time for its finished turns (ab.txt) to come back.
set -euo pipefail
script_start=$(date +%s)
base="$(realpath "${BASE:?set BASE to the folder with the older code}")"
spec="${SPEC:-config/specs/pi05_full.yaml}"
out="$(realpath -m "${OUT:-out}")"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
build() {  # build CODE_ROOT ARTIFACT LOG (a parity failure, exit 3, still leaves the artifact)
  local start=$(date +%s) rc=0
  (cd "$1" && PYTHONPATH="$1" python3 -m lamp_ros.cli compile "$spec" --out "$2") > "$3.full" \
    2>&1 || rc=$?
  tail -n 15 "$3.full" > "$3" && rm "$3.full"
  echo "$(basename "$2"): rc $rc, $(( $(date +%s) - start )) s wall" | tee -a "$3"
  [ "$rc" = 0 ] || [ "$rc" = 3 ]
}
build "$base" /tmp/ab_base "$out/compile_base.log"
build "$PWD" /tmp/ab_new "$out/compile_new.log"
cp /tmp/ab_base/evidence/parity.json "$out/parity_base.json"
cp /tmp/ab_new/evidence/parity.json "$out/parity_new.json"
export PYTHONPATH="$PWD"
python3 -m lamp_ros.cli diff /tmp/ab_base /tmp/ab_new > "$out/diff.txt" 2>&1 || true
left=$(( ${DEADLINE_S:-86400} - ($(date +%s) - script_start) ))
timeout "$(( left > 1 ? left : 1 ))" python3 scripts/device/artifact_ab.py /tmp/ab_base \
  /tmp/ab_new --out "$out/ab.json" 2>&1 | tee "$out/ab.txt"
