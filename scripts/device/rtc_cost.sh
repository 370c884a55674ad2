#!/usr/bin/env bash
# What real-time chunking costs per inference (bench/rtc_cost.py), from the repo root: SPEC
# (default pi05_full; DEVICE cuda) is compiled twice, as plain sampling (merge_mode
# temporal_ensemble) and with merge_mode rtc (trained), then both artifacts and the eager
# pipeline's three modes are timed in one process. On a GPU machine (device tool) or, with
# SPEC=config/specs/pi05_tiny.yaml DEVICE=cpu, here. Results go to $OUT (or ./out).
set -euo pipefail
spec="${SPEC:-config/specs/pi05_full.yaml}"
device="${DEVICE:-cuda}"
out="$(realpath -m "${OUT:-out}")"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
[ "$device" = cpu ] || nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$out/gpu.txt"
dir="$(dirname "$spec")"
trap 'rm -f "$dir/.rtc_cost_plain.yaml" "$dir/.rtc_cost_rtc.yaml"' EXIT
python3 - "$spec" "$dir" <<'PY'
import sys, yaml
spec, folder = sys.argv[1], sys.argv[2]
data = yaml.safe_load(open(spec))
for name, mode in (('plain', 'temporal_ensemble'), ('rtc', 'rtc')):
    chunker = dict(data['control'].get('chunker', {}))
    chunker.pop('rtc', None)
    chunker['merge_mode'] = mode
    variant = {**data, 'name': f"{data['name']}_{name}",
               'control': {**data['control'], 'chunker': chunker}}
    yaml.safe_dump(variant, open(f'{folder}/.rtc_cost_{name}.yaml', 'w'), sort_keys=False)
PY
for name in plain rtc; do
  rc=0
  start=$(date +%s)
  python3 -m lamp_ros.cli compile "$dir/.rtc_cost_$name.yaml" --out "/tmp/rtc_cost_$name" \
    > "$out/compile_$name.log" 2>&1 || rc=$?
  echo "compile $name: rc $rc, $(( $(date +%s) - start )) s"
  tail -n 4 "$out/compile_$name.log"
  [ "$rc" = 0 ] || [ "$rc" = 3 ]  # a parity failure still leaves the artifact to time
  cp "/tmp/rtc_cost_$name/evidence/parity.json" "$out/parity_$name.json"
done
python3 bench/rtc_cost.py --spec "$dir/.rtc_cost_plain.yaml" --plain /tmp/rtc_cost_plain \
  --rtc /tmp/rtc_cost_rtc --device "$device" --runs "${RUNS:-20}" \
  --eager-runs "${EAGER_RUNS:-5}" --out "$out/rtc_cost.json"
