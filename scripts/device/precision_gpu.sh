#!/usr/bin/env bash
# Issue 54's GPU table, from the repo root on the GPU machine (device tool): pi05_full built
# four ways on one card, then timed and compared with the float32 eager policy in one run
# (bench/precision_gpu.py):
#   auto     config/specs/pi05_full_fp8_auto.yaml (precision plan, budget cosine 0.999 /
#            max rel 0.02 against the bf16 group)
#   hand     config/specs/pi05_full.yaml (the hand-set fp8_prefix_mlp switch)
#   bf16     pi05_full with fp8_prefix_mlp off (every linear bf16)
#   loose    the auto spec at a looser budget (LOOSE_BUDGET, default cosine 0.998 / max rel 0.04)
# The whole job outlasts one device call (10 minutes), so it runs in its own process session
# (setsid), which the device tool leaves running while the machine is held:
#   bash scripts/device/precision_gpu.sh start   # starts the job, then waits like `wait`
#   bash scripts/device/precision_gpu.sh wait    # waits up to WAIT_S (default 540) seconds
# Call `wait` again at once after each call returns (the machine goes back after 30 s idle).
# The job lives in $WORK/precision_gpu (WORK: default /tmp), the bf16 and loose specs in its
# specs/ (their relative paths made absolute). The builds are skipped where
# $WORK/precision_gpu/<variant> already holds an artifact, so a job that died resumes where it
# stopped (`wait` restarts it). VARIANTS (default "auto hand bf16 loose") sets which builds and
# in what order; the bench times those that exist. BENCH_NOW=1 (with `wait`) stops the builds
# and benches what exists. Each call returns, in $OUT, the job's status (its file `done`: 0, or
# the exit status of the last step that failed) and log tail and, once there, the bench's JSON
# and PNG and the plans' evidence.
# SMOKE=1 (scripts/device/lib.sh): the variants come from pi05_full's CPU stand-ins
# (smoke/pi05.yaml; smoke/pi05_auto.yaml, whose plan lowers to int8: FP8 needs the GPU) and
# default to "hand" (shared with the other smokes; on the CPU bf16 would build the same model
# again, the auto plan measures for over a minute): the bf16 and loose specs are written and
# checked (load_spec), and the bench compares the built ones with the float32 eager policy on the
# CPU (--device cpu: whole-inference times, no GPU time). `start` waits for the job's end and
# fails where any step of it failed.
# smoke: SMOKE=1 RUNS=2 bash scripts/device/precision_gpu.sh start
set -euo pipefail
mode="${1:-wait}"
. scripts/device/lib.sh
dir="$work/precision_gpu"
mkdir -p "$dir/specs"
variants="${VARIANTS:-auto hand bf16 loose}"
if smoke; then variants="${VARIANTS:-hand}"; fi
loose="${LOOSE_BUDGET:-0.998 0.04}"
full="$(smoke_spec config/specs/pi05_full.yaml)"
auto="$(smoke_spec config/specs/pi05_full_fp8_auto.yaml scripts/device/smoke/pi05_auto.yaml)"

make_specs() {  # the bf16 and loose variants, in $dir/specs, checked as specs (their paths too)
  python3 - "$loose" "$full" "$auto" "$dir/specs" <<'PY'
import sys
from lamp_ros.spec import load_spec, spec_data, write_spec
budget, full_path, auto_path, specs = sys.argv[1:]
cosine, max_rel = (float(v) for v in budget.split())
full = spec_data(full_path)  # its relative paths made absolute: the variant lives elsewhere
full['name'] = 'pi05_full_bf16'
full['passes']['fp8_prefix_mlp'] = False
write_spec(full, f'{specs}/bf16.yaml')
auto = spec_data(auto_path)
auto['name'] = 'pi05_full_fp8_auto_loose'
auto['precision']['budget'] = {'cosine': cosine, 'max_rel': max_rel}
write_spec(auto, f'{specs}/loose.yaml')
for name in ('bf16', 'loose'):
    load_spec(f'{specs}/{name}.yaml')
PY
}

spec_of() {
  case "$1" in
    auto) echo "$auto" ;;
    hand) echo "$full" ;;
    bf16) echo "$dir/specs/bf16.yaml" ;;
    loose) echo "$dir/specs/loose.yaml" ;;
  esac
}

job() {  # the builds in order, then the bench; resumable. `done` gets its status
  local status=0 v start rc args=() on=()
  make_specs || status=$?
  out="$dir" card > /dev/null || status=$?  # $dir/gpu.txt
  for v in $variants; do
    [ -f "$dir/$v/manifest.json" ] && { echo "$v: built already"; continue; }
    [ -f "$dir/bench_now" ] && break
    start=$(date +%s)
    rc=0
    compile_spec "$(spec_of "$v")" "$dir/$v" > "$dir/compile_$v.log" 2>&1 || rc=$?
    echo "$v: compile rc $rc in $(( $(date +%s) - start )) s"
    tail -n 3 "$dir/compile_$v.log"
    [ "$rc" = 0 ] || [ "$rc" = 3 ] || status=$rc  # a parity failure leaves the artifact
  done
  for v in $variants; do
    [ -f "$dir/$v/manifest.json" ] && args+=(--artifact "$v=$dir/$v")
  done
  if smoke; then on=(--device cpu --held-out 2); fi
  python3 bench/precision_gpu.py --spec "$full" "${args[@]}" --runs "${RUNS:-200}" "${on[@]}" \
    --out "$dir/precision_gpu.json" || status=$?
  echo "$status" > "$dir/done"
}

collect() {
  cp "$dir/gpu.txt" "$out/" 2>/dev/null || true
  { cat "$dir/job.log" 2>/dev/null
    for v in $variants; do
      [ -f "$dir/compile_$v.log" ] && { echo "== compile $v"
        grep -v "^parity sample\|torch.export" "$dir/compile_$v.log" | tail -n 60; }
    done; } > "$out/job.txt"
  for f in precision_gpu.json precision_gpu.png; do cp "$dir/$f" "$out/" 2>/dev/null || true; done
  for v in auto loose; do
    cp "$dir/$v/evidence/precision.json" "$out/${v}_precision.json" 2>/dev/null || true
    cp "$dir/$v/evidence/precision.png" "$out/${v}_precision.png" 2>/dev/null || true
  done
}

running() { [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; }

if [ "$mode" = start ] || { [ "$mode" = wait ] && ! running && [ ! -f "$dir/done" ]; }; then
  if ! running; then
    echo "starting the job (variants: $variants)"
    rm -f "$dir/done" "$dir/bench_now"
    export -f job make_specs spec_of smoke card compile_spec
    export dir variants loose full auto
    setsid bash -c 'job >> "$dir/job.log" 2>&1' < /dev/null > /dev/null 2>&1 &
    echo $! > "$dir/pid"
  fi
fi
if [ "${BENCH_NOW:-0}" = 1 ]; then
  touch "$dir/bench_now"
  pkill -f "lamp_ros.cli compile" || true  # the build under way stops; the job benches
fi
deadline=$(( $(date +%s) + ${WAIT_S:-540} ))
while running && [ ! -f "$dir/done" ] && [ "$(date +%s)" -lt "$deadline" ]; do
  if smoke; then sleep 1; else sleep 5; fi
done
if [ -f "$dir/done" ]; then
  echo "job done (status $(cat "$dir/done"))"
else
  echo "job still running"
fi
tail -n 30 "$dir/job.log" || true
collect
if smoke && [ "$(cat "$dir/done" 2>/dev/null)" != 0 ]; then
  echo "smoke: the job failed or did not finish"
  exit 1
fi
