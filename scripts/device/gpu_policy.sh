#!/usr/bin/env bash
# Run on a GPU machine (device tool) from the repo root: a policy that is not pi0.5 through the
# cuda backend's generic path. SPEC (default act_small_cuda) is compiled for target cuda, then
# bench/gpu_policy.py times its model stages eager, under torch.compile and as the artifact's
# CUDA graph, in one process. Results go to $OUT (or ./out).
# SMOKE=1 (scripts/device/lib.sh): act_small, its CPU twin, compiled for the CPU and the bench's
# path on the CPU (--device cpu: eager, torch.compile's capture by its eager backend, the whole
# inference; no GPU time).
# smoke: SMOKE=1 RUNS=2 bash scripts/device/gpu_policy.sh
set -euo pipefail
. scripts/device/lib.sh
spec="${SPEC:-$(smoke_spec config/specs/act_small_cuda.yaml config/specs/act_small.yaml)}"
card
rc=0
compile_spec "$spec" "$work/gpu_policy" > "$out/compile.log" 2>&1 || rc=$?
tail -n 12 "$out/compile.log"
[ "$rc" = 0 ] || [ "$rc" = 3 ]  # a parity failure still leaves the artifact to time
cp "$work/gpu_policy/evidence/parity.json" "$out/parity.json"
on=()
if smoke; then on=(--device cpu --compile-backend eager); fi
python3 bench/gpu_policy.py --spec "$spec" --artifact "$work/gpu_policy" --runs "${RUNS:-200}" \
  "${on[@]}" --out "$out/gpu_policy.json" 2>&1 | tail -n 30
