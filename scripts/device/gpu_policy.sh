#!/usr/bin/env bash
# Run on a GPU machine (device tool) from the repo root: a policy that is not pi0.5 through the
# cuda backend's generic path. SPEC (default act_small_cuda) is compiled for target cuda, then
# bench/gpu_policy.py times its model stages eager, under torch.compile and as the artifact's
# CUDA graph, in one process. Results go to $OUT (or ./out).
set -euo pipefail
spec="${SPEC:-config/specs/act_small_cuda.yaml}"
out="$(realpath -m "${OUT:-out}")"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
rc=0
python3 -m lamp_ros.cli compile "$spec" --out /tmp/gpu_policy > "$out/compile.log" 2>&1 || rc=$?
tail -n 12 "$out/compile.log"
[ "$rc" = 0 ] || [ "$rc" = 3 ]  # a parity failure still leaves the artifact to time
cp /tmp/gpu_policy/evidence/parity.json "$out/parity.json"
python3 bench/gpu_policy.py --spec "$spec" --artifact /tmp/gpu_policy --runs "${RUNS:-200}" \
  --out "$out/gpu_policy.json" 2>&1 | tail -n 30
