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
# The builds are skipped where /tmp/precision_gpu/<variant> already holds an artifact, so a job
# that died resumes where it stopped (`wait` restarts it). VARIANTS (default "auto hand bf16
# loose") sets which builds and in what order; the bench times those that exist. BENCH_NOW=1
# (with `wait`) stops the builds and benches what exists. Each call returns, in $OUT, the job's
# status and log tail and, once there, the bench's JSON and PNG and the plans' evidence.
set -euo pipefail
mode="${1:-wait}"
work=/tmp/precision_gpu
out="$(realpath -m "${OUT:-out}")"
mkdir -p "$work" "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
variants="${VARIANTS:-auto hand bf16 loose}"
loose="${LOOSE_BUDGET:-0.998 0.04}"

make_specs() {  # the bf16 and loose variants, written beside the specs they come from
  python3 - "$loose" <<'PY'
import sys, yaml
cosine, max_rel = (float(v) for v in sys.argv[1].split())
full = yaml.safe_load(open('config/specs/pi05_full.yaml'))
full['name'] = 'pi05_full_bf16'
full['passes']['fp8_prefix_mlp'] = False
yaml.safe_dump(full, open('config/specs/.precision_gpu_bf16.yaml', 'w'), sort_keys=False)
auto = yaml.safe_load(open('config/specs/pi05_full_fp8_auto.yaml'))
auto['name'] = 'pi05_full_fp8_auto_loose'
auto['precision']['budget'] = {'cosine': cosine, 'max_rel': max_rel}
yaml.safe_dump(auto, open('config/specs/.precision_gpu_loose.yaml', 'w'), sort_keys=False)
PY
}

spec_of() {
  case "$1" in
    auto) echo config/specs/pi05_full_fp8_auto.yaml ;;
    hand) echo config/specs/pi05_full.yaml ;;
    bf16) echo config/specs/.precision_gpu_bf16.yaml ;;
    loose) echo config/specs/.precision_gpu_loose.yaml ;;
  esac
}

job() {  # the builds in order, then the bench; resumable
  make_specs
  nvidia-smi --query-gpu=name,memory.total --format=csv > "$work/gpu.txt"
  for v in $variants; do
    [ -f "$work/$v/manifest.json" ] && { echo "$v: built already"; continue; }
    [ -f "$work/bench_now" ] && break
    start=$(date +%s)
    rc=0
    python3 -m lamp_ros.cli compile "$(spec_of "$v")" --out "$work/$v" \
      > "$work/compile_$v.log" 2>&1 || rc=$?
    echo "$v: compile rc $rc in $(( $(date +%s) - start )) s"
    tail -n 3 "$work/compile_$v.log"
  done
  args=()
  for v in $variants; do
    [ -f "$work/$v/manifest.json" ] && args+=(--artifact "$v=$work/$v")
  done
  python3 bench/precision_gpu.py --spec config/specs/pi05_full.yaml "${args[@]}" \
    --runs "${RUNS:-200}" --out "$work/precision_gpu.json"
  echo done > "$work/done"
}

collect() {
  cp "$work/gpu.txt" "$out/" 2>/dev/null || true
  { cat "$work/job.log" 2>/dev/null
    for v in $variants; do
      [ -f "$work/compile_$v.log" ] && { echo "== compile $v"; grep -v "^parity sample\|torch.export" \
        "$work/compile_$v.log" | tail -n 60; }
    done; } > "$out/job.txt"
  for f in precision_gpu.json precision_gpu.png; do cp "$work/$f" "$out/" 2>/dev/null || true; done
  for v in auto loose; do
    cp "$work/$v/evidence/precision.json" "$out/${v}_precision.json" 2>/dev/null || true
    cp "$work/$v/evidence/precision.png" "$out/${v}_precision.png" 2>/dev/null || true
  done
}

running() { [ -f "$work/pid" ] && kill -0 "$(cat "$work/pid")" 2>/dev/null; }

if [ "$mode" = start ] || { [ "$mode" = wait ] && ! running && [ ! -f "$work/done" ]; }; then
  if ! running; then
    echo "starting the job (variants: $variants)"
    rm -f "$work/done" "$work/bench_now"
    export -f job make_specs spec_of
    export work variants loose
    setsid bash -c 'job >> "$work/job.log" 2>&1' < /dev/null > /dev/null 2>&1 &
    echo $! > "$work/pid"
  fi
fi
if [ "${BENCH_NOW:-0}" = 1 ]; then
  touch "$work/bench_now"
  pkill -f "lamp_ros.cli compile" || true  # the build under way stops; the job benches
fi
deadline=$(( $(date +%s) + ${WAIT_S:-540} ))
while running && [ ! -f "$work/done" ] && [ "$(date +%s)" -lt "$deadline" ]; do
  sleep 5
done
[ -f "$work/done" ] && echo "job done" || echo "job still running"
tail -n 30 "$work/job.log" || true
collect
