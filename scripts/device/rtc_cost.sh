#!/usr/bin/env bash
# What real-time chunking costs per inference (bench/rtc_cost.py), from the repo root: SPEC
# (default pi05_full; DEVICE cuda) is compiled as plain sampling (merge_mode
# temporal_ensemble), with merge_mode rtc (trained) and with rtc mode guided, then the artifacts
# and the eager pipeline's three modes are timed in one process. On a GPU machine (device tool)
# or, with SPEC=config/specs/pi05_tiny.yaml DEVICE=cpu, here.
#   VARIANTS  the variants to build now (default "plain rtc guided"); the artifacts live in
#             /tmp/rtc_cost_<spec name>_<variant>, so one warm machine can build them over
#             several calls. A guided build may fail without stopping the rest.
#   TIME=0    build only; otherwise time plain and rtc, and guided where its artifact exists.
#   FAST=1    every variant with two parity samples (delays 0 and 5) and one prompt length (no
#             fusion.text_lengths): quicker, the same for all three.
# Guided mode always builds with no fusion.text_lengths: its gradient graph is traced at fixed
# shapes (policies/pi05/rtc.py). Results go to $OUT (or ./out).
set -euo pipefail
spec="${SPEC:-config/specs/pi05_full.yaml}"
device="${DEVICE:-cuda}"
variants="${VARIANTS-plain rtc guided}"
out="$(realpath -m "${OUT:-out}")"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
[ "$device" = cpu ] || nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$out/gpu.txt"
dir="$(dirname "$spec")"
name="$(basename "$spec" .yaml)"
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
    if rtc == 'guided':  # its backward pass exports by torch.export only, at fixed shapes
        variant['build'] = {**data.get('build', {}), 'onnx_exporter': 'dynamo'}
        variant['fusion'] = {**data.get('fusion', {}), 'text_lengths': []}
    yaml.safe_dump(variant, open(f'{folder}/.rtc_cost_{name}.yaml', 'w'), sort_keys=False)
PY
artifact() { echo "/tmp/rtc_cost_${name}_$1"; }
for variant in $variants; do
  rc=0
  start=$(date +%s)
  rm -rf "$(artifact "$variant")"
  python3 -m lamp_ros.cli compile "$dir/.rtc_cost_$variant.yaml" --out "$(artifact "$variant")" \
    > "$out/compile_$variant.log" 2>&1 || rc=$?
  echo "compile $variant: rc $rc, $(( $(date +%s) - start )) s"
  tail -n 4 "$out/compile_$variant.log"
  # a parity failure (3) still leaves the artifact to time; a failed guided build leaves none
  if [ "$rc" = 0 ] || [ "$rc" = 3 ]; then
    cp "$(artifact "$variant")/evidence/parity.json" "$out/parity_$variant.json"
  elif [ "$variant" = guided ]; then
    rm -rf "$(artifact guided)"
  else
    exit "$rc"
  fi
done
[ "${TIME:-1}" != 0 ] || exit 0
guided_arg=()
[ ! -f "$(artifact guided)/manifest.json" ] || guided_arg=(--guided "$(artifact guided)")
python3 bench/rtc_cost.py --spec "$dir/.rtc_cost_plain.yaml" --plain "$(artifact plain)" \
  --rtc "$(artifact rtc)" "${guided_arg[@]}" --device "$device" --runs "${RUNS:-20}" \
  --eager-runs "${EAGER_RUNS:-5}" --out "$out/rtc_cost.json"
