#!/usr/bin/env bash
# Run on the H200 machine (device tool) from the repo root: the issue-9 measurements in one go.
#   1. the lamp:: kernels against their reference at the policy's shapes (kernels_check.py)
#   2. `lamp compile config/specs/pi05_full.yaml` on the GPU, timed (plan, parity, build times)
#   3. bench/gpu_pi05.py on that artifact (HF eager, eager, eager + CUDA graph, lamp; add
#      --torch-compile through BENCH_ARGS for the max-autotune baseline), with its chart, the
#      kernel table and a Perfetto trace of one inference with its kernel timeline
#   4. a 2-minute async soak at 22 Hz (scripts/device/soak.py; SOAK_SECONDS overrides, 0 skips)
# SKIP_TINY=1 skips the quick fp32 build of pi05_tiny_cuda before the full one; SKIP_CHECK=1
# the kernel check, SKIP_BENCH=1 the bench, and SKIP_BUILD=1 reuses the artifact a previous call
# left in $work/pi05_full (the device tool keeps a warm machine's /tmp for a few seconds only, so
# a 10-minute call limit can still fit build + soak, then bench + torch.compile, back to back).
# torch.compile max-autotune of the reference compiles for longer than one call leaves after the
# rest, so it takes two calls: first, alone (no artifact needed),
#   bash scripts/device/torch_compile_cache.sh        (SCOPE=stages by default; or whole)
# whose files (15 MiB chunks and a .json) come back; copy them into .compile_cache/ here
# (git-ignored) and pass that folder in the device call's `carry`; then this script with
# COMPILE_CACHE=.compile_cache/torch_compile.cache and BENCH_ARGS="--torch-compile
# --compile-scope stages" compiles from the cache in the same run as the other paths.
# DEADLINE_S (seconds from the start of this script; set it ~30 s under the call's limit) stops
# the bench and the soak in time for their partial results to be saved and come back: the bench
# writes gpu_pi05.json after every path, and a call killed at its limit returns only what is
# already under $OUT.
# Results go to $OUT (or ./out when OUT is unset). The device tool brings back at most 8 files,
# so on exit, when there are more, everything is packed into results.tgz with the headline files
# beside it. The pack is written under a temporary name and renamed before anything is deleted,
# so a kill in the middle of it leaves the loose files or the whole pack, never neither (a kill
# during the old delete-then-move pack lost a whole call's results).
# SMOKE=1 (scripts/device/lib.sh) runs every step on the CPU: the kernel check in Triton's
# interpreter at small shapes, the smoke spec for both builds, the bench's --smoke on that CPU
# artifact, and the soak on it; a failing step fails the script (the bench too).
# smoke: SMOKE=1 SOAK_SECONDS=3 bash scripts/device/full_gpu.sh
set -euo pipefail
. scripts/device/lib.sh
script_start=$(date +%s)
pack() {
  [ "$(find "$out" -type f | wc -l)" -le 8 ] && return
  # packed outside $out: tar of a folder that holds its own growing archive stops with "file
  # changed as we read it" (status 1), which once left every file over the 8 behind
  local tmp
  tmp="$(mktemp "$work/results.XXXXXX")"
  tar czf "$tmp" -C "$out" . || return
  mv "$tmp" "$out/pack.part" && mv "$out/pack.part" "$out/results.tgz"
  find "$out" -mindepth 1 ! -name results.tgz -delete
  tar xzf "$out/results.tgz" -C "$out" --wildcards './gpu_pi05.json' './bench.txt' \
    './soak/soak.json' 2>/dev/null || true
}
trap pack EXIT
left() {  # `timeout` for a step: the seconds DEADLINE_S leaves, or a day without it
  local s=$(( ${DEADLINE_S:-86400} - ($(date +%s) - script_start) ))
  echo $(( s > 1 ? s : 1 ))
}
smoke_flag=""  # the Python steps' --smoke in a smoke
! smoke || smoke_flag=--smoke
card
if [ -z "${SKIP_CHECK:-}" ]; then
  python3 scripts/device/kernels_check.py ${smoke_flag} 2>&1 | tee "$out/kernels_check.txt"
fi
if [ -z "${SKIP_TINY:-}" ]; then
  # the whole path at fp32 on the tiny policy first (passes + kernels; parity 1e-4): fails fast
  compile_spec "$(smoke_spec config/specs/pi05_tiny_cuda.yaml)" "$work/pi05_tiny_cuda" \
    2>&1 | tail -5 | tee "$out/compile_tiny.log"
fi
art="$work/pi05_full"
if [ -z "${SKIP_BUILD:-}" ]; then
  start=$(date +%s)
  rc=0
  compile_spec "$(smoke_spec config/specs/pi05_full.yaml)" "$art" 2>&1 \
    | tee "$out/compile_full.log" || rc=$?
  # a parity failure (3) still leaves the artifact: measure it, the log says it failed
  echo "lamp compile pi05_full: rc $rc, $(( $(date +%s) - start )) s wall" \
    | tee -a "$out/compile_full.log"
  [ "$rc" = 0 ] || [ "$rc" = 3 ]
fi
cp "$art/plan.json" "$art/evidence/parity.json" "$art/evidence/build.json" "$out/"
if [ -z "${SKIP_BENCH:-}" ]; then
  # a bench stopped by DEADLINE_S keeps what it saved, and the soak still runs; not in a smoke
  timeout "$(left)" python3 bench/gpu_pi05.py --artifact "$art" --out "$out/gpu_pi05.json" \
    --kernels-out "$out/lamp_kernels.txt" --trace-out "$out/lamp_trace.json.gz" \
    ${COMPILE_CACHE:+--compile-cache "$COMPILE_CACHE"} ${smoke_flag} \
    ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.txt" \
    || { rc=$?; echo "bench stopped: rc $rc" | tee -a "$out/bench.txt"; ! smoke || exit "$rc"; }
fi
if [ "${SOAK_SECONDS:-120}" != 0 ]; then
  timeout "$(left)" python3 scripts/device/soak.py "$art" --seconds "${SOAK_SECONDS:-120}" \
    --out "$out/soak" 2>&1 | tee "$out/soak.txt"
fi
