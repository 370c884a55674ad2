# shellcheck shell=bash
# What every device script shares, sourced from the repo root (`. scripts/device/lib.sh`): where
# results go ($out: $OUT, or ./out), scratch space ($work: $WORK, or /tmp), the import path,
# the card a run used, and the CPU smoke.
#
# SMOKE=1 runs a script's own steps on the CPU at smoke size (the specs in scripts/device/smoke/:
# tiny widths, two Euler steps, target cpu, one parity sample), so that a Python error in a script, or in a bench
# it calls, shows up here and in CI (test/benchmarks/test_device_smoke.py runs each) and not in a
# device call, whose time is scarce and whose starts often fail. A step only a GPU can take (a
# CUDA graph, a GPU timing, a kernel trace) is not faked: the smoke stops before it and says so
# (`needs_gpu`). SMOKE_BUILDS=DIR lets the smokes of one test run share their builds: a spec file
# compiled once (same bytes, same folder, same flags) is copied, not compiled again.
out="$(realpath -m "${OUT:-out}")"
work="$(realpath -m "${WORK:-/tmp}")"  # where builds and scratch files go (a test: its own)
mkdir -p "$out" "$work"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

smoke() { [ "${SMOKE:-0}" = 1 ]; }

card() {  # the card this run used, on screen and in $out/gpu.txt (a smoke: the CPU's model)
  if smoke; then
    echo "CPU smoke (SMOKE=1): $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)," \
      "$(nproc) cores" | tee "$out/gpu.txt"
  else
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
  fi
}

needs_gpu() {  # needs_gpu WHAT: a smoke ends here, exit 0, saying that WHAT needs the GPU
  if smoke; then
    echo "smoke: stops before $* (needs the GPU)"
    exit 0
  fi
}

not_in_smoke() {  # `cmd > LOG || not_in_smoke LOG`: a device run goes on past a failed cmd
  # (what it did leave is still worth bringing back); a smoke shows the log's end and fails
  if smoke; then tail -n 20 "$1"; return 1; fi
}

smoke_spec() {  # smoke_spec SPEC [CPU_SPEC]: SPEC, or in a smoke its CPU stand-in
  if smoke; then echo "${2:-scripts/device/smoke/pi05.yaml}"; else echo "$1"; fi
}

compile_spec() {  # compile_spec SPEC OUT [ARGS...]: `lamp compile`; its exit status (3: parity
  # failed, the artifact is left). In a smoke with SMOKE_BUILDS set, shared as the header says.
  local spec="$1" dest="$2"
  shift 2
  if smoke && [ -n "${SMOKE_BUILDS:-}" ]; then
    local key cached rc=0
    key="$( { realpath "$spec"; cat "$spec"; echo "$*"; } | sha256sum | cut -c1-16)"
    cached="$SMOKE_BUILDS/$key"
    mkdir -p "$SMOKE_BUILDS"
    (
      flock 9
      if [ ! -f "$cached.rc" ]; then
        python3 -m lamp_ros.cli compile "$spec" --out "$cached" "$@" > "$cached.log" 2>&1 \
          || rc=$?
        echo "$rc" > "$cached.rc"
      fi
    ) 9> "$cached.lock"
    cat "$cached.log"
    rc="$(cat "$cached.rc")"
    rm -rf "$dest"
    [ ! -d "$cached" ] || cp -r "$cached" "$dest"
    return "$rc"
  fi
  python3 -m lamp_ros.cli compile "$spec" --out "$dest" "$@"
}
