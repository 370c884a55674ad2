#!/usr/bin/env bash
# Run on the H200 machine (device tool) from the repo root: Nsight Compute on one expert layer's
# kernels as the artifact's chosen form runs them (scripts/device/expert_chain.py --once, the
# pi05_full shapes): rms_norm, cuBLAS qkv, the attention and its combine, o, rms_norm, cuBLAS
# gate/up, GeGLU, down, each replayed by ncu with the L2 flushed (its default), clocks left
# alone. Speed of light, launch, occupancy, warp stall, memory and scheduler sections, as text,
# in $OUT/ncu_expert_layer.txt (or ./out). Where ncu cannot read the counters (some machines'
# runtime), the file says so and the exit status is ncu's.
set -uo pipefail
out="$(realpath -m "${OUT:-out}")"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
ncu --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy \
  --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats \
  -k 'regex:_mqa_kernel|_mqa_combine_kernel|_expert_gemm_kernel|nvjet|_norm_kernel|_geglu_kernel' \
  --launch-count 9 python3 scripts/device/expert_chain.py --once 2>&1 \
  | grep -v '^/opt/' > "$out/ncu_expert_layer.txt"
rc=${PIPESTATUS[0]}
echo "ncu rc $rc" | tee -a "$out/ncu_expert_layer.txt"
exit "$rc"
