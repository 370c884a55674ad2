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
set -uo pipefail
out="$(realpath -m "${OUT:-out}")"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor TRITON_CACHE_DIR=/tmp/inductor/triton
mkdir -p /tmp/inductor
if [ -n "${PARTIAL:-}" ]; then cat "$PARTIAL".[0-9][0-9][0-9] | tar xzf - -C /tmp/inductor; fi
timeout "${LIMIT_S:-570}" python3 bench/gpu_pi05.py --compile-only \
  --compile-scope "${SCOPE:-stages}" --compile-cache "$out/torch_compile.cache" 2>&1 \
  | grep -v '^/opt/' | tee "$out/compile_only.log"
rc=${PIPESTATUS[0]}
echo "compile-only rc $rc" | tee -a "$out/compile_only.log"
if [ ! -f "$out/torch_compile.cache.json" ]; then
  tar czf /tmp/inductor_partial.tgz -C /tmp/inductor .
  if [ "$(stat -c %s /tmp/inductor_partial.tgz)" -gt 60000000 ]; then  # over what comes back:
    (cd /tmp/inductor && find . -type f -size -256k -print0 \
      | tar czf /tmp/inductor_partial.tgz --null -T -)              # the small files alone
  fi
  split -b 15M -d -a 3 /tmp/inductor_partial.tgz "$out/inductor_partial.tgz."
  ls -l "$out" | tee -a "$out/compile_only.log"
fi
exit "$rc"
