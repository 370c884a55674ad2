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
# SMOKE=1 (scripts/device/lib.sh): SPEC defaults to pi0.5's CPU stand-in and BASE to this tree
# itself (the A/B of a tree against itself: one id, the same actions); BASE's build is its own,
# this tree's is shared with the other smokes; artifact_ab.py times both on the CPU.
# smoke: SMOKE=1 RUNS=2 bash scripts/device/refactor_ab.sh
set -euo pipefail
script_start=$(date +%s)
. scripts/device/lib.sh
if smoke; then
  base="$(realpath "${BASE:-$PWD}")"
else
  base="$(realpath "${BASE:?set BASE to the folder with the older code}")"
fi
spec="${SPEC:-$(smoke_spec config/specs/pi05_full.yaml)}"
card
build() {  # build base|new ARTIFACT LOG: BASE's code from BASE's spec, or this tree's
  # (compile_spec: a smoke shares it with the other smokes); a parity failure (exit 3) still
  # leaves the artifact
  local start=$(date +%s) rc=0
  if [ "$1" = base ]; then
    (cd "$base" && PYTHONPATH="$base" python3 -m lamp_ros.cli compile "$spec" --out "$2") \
      > "$3.full" 2>&1 || rc=$?
  else
    compile_spec "$spec" "$2" > "$3.full" 2>&1 || rc=$?
  fi
  tail -n 15 "$3.full" > "$3" && rm "$3.full"
  echo "$(basename "$2"): rc $rc, $(( $(date +%s) - start )) s wall" | tee -a "$3"
  [ "$rc" = 0 ] || [ "$rc" = 3 ]
}
build base "$work/ab_base" "$out/compile_base.log"
build new "$work/ab_new" "$out/compile_new.log"
cp "$work/ab_base/evidence/parity.json" "$out/parity_base.json"
cp "$work/ab_new/evidence/parity.json" "$out/parity_new.json"
python3 -m lamp_ros.cli diff "$work/ab_base" "$work/ab_new" > "$out/diff.txt" 2>&1 \
  || not_in_smoke "$out/diff.txt"
on=()
if smoke; then on=(--device cpu); fi
left=$(( ${DEADLINE_S:-86400} - ($(date +%s) - script_start) ))
timeout "$(( left > 1 ? left : 1 ))" python3 scripts/device/artifact_ab.py "$work/ab_base" \
  "$work/ab_new" --runs "${RUNS:-30}" "${on[@]}" --out "$out/ab.json" 2>&1 | tee "$out/ab.txt"
