#!/usr/bin/env bash
# Run on the H200 machine (device tool) from the repo root: compile pi05_tiny for target cuda,
# load it through the Runtime, check parity and time it against the CPU ONNX Runtime artifact.
# Results go to $OUT (or ./out when OUT is unset).
# SMOKE=1 (scripts/device/lib.sh): the same steps on the CPU stand-in (the smoke spec), timed
# over a few runs.
# smoke: SMOKE=1 bash scripts/device/cuda_tiny.sh
set -euo pipefail
. scripts/device/lib.sh
card
art="$work/pi05_tiny_cuda"
compile_spec "$(smoke_spec config/specs/pi05_tiny_cuda.yaml)" "$art" \
  2>&1 | tee "$out/compile_cuda.log"
cp "$art/evidence/parity.json" "$out/parity_cuda.json"
cp "$art/plan.json" "$out/plan_cuda.json"
runs=""  # time_runtime.py's defaults (200 runs after 10), or a few in a smoke
! smoke || runs="--n 5 --warmup 2"
python3 scripts/device/time_runtime.py "$art" ${runs} 2>&1 | tee "$out/time_cuda.txt"
