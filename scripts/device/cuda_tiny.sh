#!/usr/bin/env bash
# Run on the H200 machine (device tool) from the repo root: compile pi05_tiny for target cuda,
# load it through the Runtime, check parity and time it against the CPU ONNX Runtime artifact.
# Results go to $OUT (or ./out when OUT is unset).
set -euo pipefail
out="${OUT:-out}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
python3 -m lamp_ros.cli compile config/specs/pi05_tiny_cuda.yaml --out /tmp/pi05_tiny_cuda \
  2>&1 | tee "$out/compile_cuda.log"
cp /tmp/pi05_tiny_cuda/evidence/parity.json "$out/parity_cuda.json"
cp /tmp/pi05_tiny_cuda/plan.json "$out/plan_cuda.json"
python3 scripts/device/time_runtime.py /tmp/pi05_tiny_cuda 2>&1 | tee "$out/time_cuda.txt"
