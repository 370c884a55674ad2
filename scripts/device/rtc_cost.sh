#!/usr/bin/env bash
# What real-time chunking costs per inference (bench/rtc_cost.py), from the repo root: SPEC
# (default pi05_full; DEVICE cuda) is compiled as plain sampling (merge_mode
# temporal_ensemble), with merge_mode rtc (trained) and, unless GUIDED=0, rtc mode guided (its
# build may fail without stopping the rest), then the artifacts and the eager pipeline's three
# modes are timed in one process. On a GPU machine (device tool) or, with
# SPEC=config/specs/pi05_tiny.yaml DEVICE=cpu, here. FAST=1 builds every variant with two
# parity samples (delays 0 and 5) and one prompt length (no fusion.text_lengths): quicker, the
# same for all three.
# Results go to $OUT (or ./out).
set -euo pipefail
spec="${SPEC:-config/specs/pi05_full.yaml}"
device="${DEVICE:-cuda}"
out="$(realpath -m "${OUT:-out}")"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
[ "$device" = cpu ] || nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$out/gpu.txt"
dir="$(dirname "$spec")"
trap 'rm -f "$dir"/.rtc_cost_*.yaml' EXIT
python3 - "$spec" "$dir" "${FAST:-0}" <<'PY'
import sys, yaml
spec, folder, fast = sys.argv[1], sys.argv[2], sys.argv[3] == '1'
data = yaml.safe_load(open(spec))
if fast:
    data['parity'] = {**data.get('parity', {}), 'samples': 2}
    data['fusion'] = {**data.get('fusion', {}), 'text_lengths': []}
for name, mode, rtc in (('plain', 'temporal_ensemble', None), ('rtc', 'rtc', 'trained'),
                        ('guided', 'rtc', 'guided')):
    chunker = dict(data['control'].get('chunker', {}))
    chunker.pop('rtc', None)
    chunker['merge_mode'] = mode
    if rtc:
        chunker['rtc'] = {'mode': rtc}
    variant = {**data, 'name': f"{data['name']}_{name}",
               'control': {**data['control'], 'chunker': chunker}}
    if rtc == 'guided':  # its backward pass exports by torch.export only
        variant['build'] = {**data.get('build', {}), 'onnx_exporter': 'dynamo'}
    yaml.safe_dump(variant, open(f'{folder}/.rtc_cost_{name}.yaml', 'w'), sort_keys=False)
PY
guided_arg=()
for name in plain rtc guided; do
  [ "$name" != guided ] || [ "${GUIDED:-1}" != 0 ] || continue
  rc=0
  start=$(date +%s)
  python3 -m lamp_ros.cli compile "$dir/.rtc_cost_$name.yaml" --out "/tmp/rtc_cost_$name" \
    > "$out/compile_$name.log" 2>&1 || rc=$?
  echo "compile $name: rc $rc, $(( $(date +%s) - start )) s"
  tail -n 4 "$out/compile_$name.log"
  if [ "$name" = guided ]; then  # optional: the others are timed whatever it does
    [ "$rc" = 0 ] || [ "$rc" = 3 ] || continue
    guided_arg=(--guided /tmp/rtc_cost_guided)
  else
    [ "$rc" = 0 ] || [ "$rc" = 3 ]  # a parity failure still leaves the artifact to time
  fi
  cp "/tmp/rtc_cost_$name/evidence/parity.json" "$out/parity_$name.json"
done
python3 bench/rtc_cost.py --spec "$dir/.rtc_cost_plain.yaml" --plain /tmp/rtc_cost_plain \
  --rtc /tmp/rtc_cost_rtc "${guided_arg[@]}" --device "$device" --runs "${RUNS:-20}" \
  --eager-runs "${EAGER_RUNS:-5}" --out "$out/rtc_cost.json"
