#!/usr/bin/env bash
# Run on the H200 machine (device tool) from the repo root: `lamp profile` of cuda artifacts, whose
# cuda group gets a kernel table and a kernel timeline (CUPTI through torch's profiler; see
# lamp_ros/whitebox/op_profile.py): pi05_tiny_cuda built here (about a minute), and with FULL=1 also
# pi05_full (built here, about two minutes, unless a previous call left it in $work/pi05_full);
# and the trace child's whole-inference form (bench/gpu_pi05.py --trace-out) on the tiny one
# (TINY=0 skips the tiny artifact).
# Everything lands in $OUT/profiles.tgz (the device tool brings back a few files only) beside
# the printed reports.
# SMOKE=1 (scripts/device/lib.sh): the tiny part on the CPU stand-in (the smoke spec; `lamp
# profile` of its onnxruntime group, a few ticks), up to the whole-inference kernel trace.
# smoke: SMOKE=1 bash scripts/device/profile_cuda_group.sh
set -euo pipefail
. scripts/device/lib.sh
mkdir -p "$out/profiles"
trap 'tar czf "$out/profiles.tgz" -C "$out" profiles && rm -rf "$out/profiles"' EXIT
ticks="--ticks 20"
! smoke || ticks="--ticks 3 --ort-runs 1"
if [ "${TINY:-1}" != 0 ]; then
  compile_spec "$(smoke_spec config/specs/pi05_tiny_cuda.yaml)" "$work/pi05_tiny_cuda" \
    2>&1 | tail -3
  python3 -m lamp_ros.cli profile "$work/pi05_tiny_cuda" --out "$out/profiles/tiny" ${ticks} \
    2>&1 | tee "$out/profile_tiny.txt"
  # one whole inference with the CPU's activity too, as bench/gpu_pi05.py --trace-out takes it
  needs_gpu "the whole-inference kernel trace (CUPTI)"
  python3 -m lamp_ros.whitebox.kernel_profile "$work/pi05_tiny_cuda" \
    "$out/profiles/tiny_inference.json.gz" --cpu 2>&1 | tail -1 | tee -a "$out/profile_tiny.txt"
fi
if [ -n "${FULL:-}" ]; then
  [ -f "$work/pi05_full/manifest.json" ] || compile_spec \
    "$(smoke_spec config/specs/pi05_full.yaml)" "$work/pi05_full" 2>&1 | tail -3
  python3 -m lamp_ros.cli profile "$work/pi05_full" --out "$out/profiles/full" ${ticks} \
    2>&1 | tee "$out/profile_full.txt"
fi
