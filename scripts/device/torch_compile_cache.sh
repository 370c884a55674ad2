#!/usr/bin/env bash
# Run on the H200 machine (device tool) from the repo root, alone in a call: the cold
# torch.compile max-autotune compile of the reference pi05_full (SCOPE=whole or stages, as
# gpu_pi05.py's --compile-scope; default stages), saved as inductor's portable cache in
# $OUT/torch_compile.cache.NNN (+ .json) for full_gpu.sh's COMPILE_CACHE: xz-compressed 15 MiB
# chunks (bench/baselines.py), so that they may come back (8 files, 64 MiB) to be kept in
# .compile_cache/ here and carried to a later call, which then skips this one.
# The cold compile can run past the 10-minute call limit, so it is stopped at LIMIT_S (570 s)
# and, if unfinished, inductor's and Triton's on-disk caches so far are packed into
# $OUT/inductor_partial.tgz.NNN (15 MiB pieces: a larger file does not come back). Copy them
# into .compile_cache/ here, carry it, and pass PARTIAL=.compile_cache/inductor_partial.tgz:
# the next call resumes from the kernels and autotuning results already made.
# SMOKE=1 (scripts/device/lib.sh): gpu_pi05.py --compile-only --smoke, pi05_tiny on the CPU
# through dynamo and AOTAutograd alone (no inductor: its max-autotune kernels are the GPU's),
# which leaves no portable cache, so the partial pack runs too (of an empty cache folder).
# smoke: SMOKE=1 bash scripts/device/torch_compile_cache.sh
set -uo pipefail
. scripts/device/lib.sh
inductor="$work/inductor"
export TORCHINDUCTOR_CACHE_DIR="$inductor" TRITON_CACHE_DIR="$inductor/triton"
mkdir -p "$inductor"
if [ -n "${PARTIAL:-}" ]; then cat "$PARTIAL".[0-9][0-9][0-9] | tar xzf - -C "$inductor"; fi
smoke_flag=""
! smoke || smoke_flag=--smoke
timeout "${LIMIT_S:-570}" python3 bench/gpu_pi05.py --compile-only ${smoke_flag} \
  --compile-scope "${SCOPE:-stages}" --compile-cache "$out/torch_compile.cache" 2>&1 \
  | grep -v '^/opt/' | tee "$out/compile_only.log"
rc=${PIPESTATUS[0]}
echo "compile-only rc $rc" | tee -a "$out/compile_only.log"
if [ ! -f "$out/torch_compile.cache.json" ]; then
  partial="$work/inductor_partial.tgz"
  tar czf "$partial" -C "$inductor" .
  if [ "$(stat -c %s "$partial")" -gt 60000000 ]; then  # over what comes back:
    (cd "$inductor" && find . -type f -size -256k -print0 \
      | tar czf "$partial" --null -T -)              # the small files alone
  fi
  split -b 15M -d -a 3 "$partial" "$out/inductor_partial.tgz."
  ls -l "$out" | tee -a "$out/compile_only.log"
fi
exit "$rc"
