#!/usr/bin/env bash
# Run on the H200 machine (device tool) from the repo root: `lamp profile` of cuda artifacts, whose
# cuda group gets a kernel table and a kernel timeline (CUPTI through torch's profiler; see
# lamp_ros/whitebox/op_profile.py): pi05_tiny_cuda built here (about a minute), and with FULL=1 also
# pi05_full (built here, about two minutes, unless a previous call left it in /tmp/pi05_full);
# and the trace child's whole-inference form (bench/gpu_pi05.py --trace-out) on the tiny one
# (TINY=0 skips the tiny artifact).
# Everything lands in $OUT/profiles.tgz (the device tool brings back a few files only) beside
# the printed reports.
set -euo pipefail
out="$(realpath -m "${OUT:-out}")"
mkdir -p "$out/profiles"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
trap 'tar czf "$out/profiles.tgz" -C "$out" profiles && rm -rf "$out/profiles"' EXIT
if [ "${TINY:-1}" != 0 ]; then
  python3 -m lamp_ros.cli compile config/specs/pi05_tiny_cuda.yaml --out /tmp/pi05_tiny_cuda \
    2>&1 | tail -3
  python3 -m lamp_ros.cli profile /tmp/pi05_tiny_cuda --out "$out/profiles/tiny" --ticks 20 \
    2>&1 | tee "$out/profile_tiny.txt"
  # one whole inference with the CPU's activity too, as bench/gpu_pi05.py --trace-out takes it
  python3 -m lamp_ros.whitebox.kernel_profile /tmp/pi05_tiny_cuda \
    "$out/profiles/tiny_inference.json.gz" --cpu 2>&1 | tail -1 | tee -a "$out/profile_tiny.txt"
fi
if [ -n "${FULL:-}" ]; then
  [ -f /tmp/pi05_full/manifest.json ] || python3 -m lamp_ros.cli compile \
    config/specs/pi05_full.yaml --out /tmp/pi05_full 2>&1 | tail -3
  python3 -m lamp_ros.cli profile /tmp/pi05_full --out "$out/profiles/full" --ticks 20 \
    2>&1 | tee "$out/profile_full.txt"
fi
