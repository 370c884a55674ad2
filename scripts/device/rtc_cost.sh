#!/usr/bin/env bash
# What real-time chunking costs per inference (bench/rtc_cost.py), from the repo root: SPEC
# (default pi05_full; DEVICE cuda) is compiled as plain sampling (merge_mode
# temporal_ensemble), with merge_mode rtc (trained) and with rtc mode guided, then the artifacts
# and the eager pipeline's three modes are timed in one process. On a GPU machine (device tool)
# or, with SPEC=config/specs/pi05_tiny.yaml DEVICE=cpu, here.
#   VARIANTS  the variants to build now (default "plain rtc guided"); the artifacts live in
#             $WORK/rtc_cost_<spec name>_<variant> (WORK: default /tmp), so one warm machine
#             can build them over several calls. A guided build may fail without stopping the
#             rest (not in a smoke: there a failed build is an error).
#   TIME=0    build only; otherwise time plain and rtc, and guided where its artifact exists.
#   FAST=1    every variant with two parity samples (delays 0 and 5) and one prompt length (no
#             fusion.text_lengths): quicker, the same for all three.
# Guided mode always builds with no fusion.text_lengths: its gradient graph is traced at fixed
# shapes (policies/pi05/rtc.py). Results go to $OUT (or ./out). The variants' specs are written
# beside SPEC (its relative paths, e.g. a checkpoint's, name the same files and so the same
# artifact ids) as .rtc_cost_*.yaml, removed when the script ends.
# SMOKE=1 (scripts/device/lib.sh): SPEC defaults to pi05_full's CPU stand-in (smoke/pi05.yaml,
# two Euler steps), DEVICE to cpu and VARIANTS to "plain rtc" (a guided build adds
# half a minute of CPU: VARIANTS names it); the smoke line adds FAST=1 and one timed run each.
# smoke: SMOKE=1 FAST=1 RUNS=1 EAGER_RUNS=1 bash scripts/device/rtc_cost.sh
set -euo pipefail
. scripts/device/lib.sh
spec="${SPEC:-$(smoke_spec config/specs/pi05_full.yaml scripts/device/smoke/pi05.yaml)}"
if smoke; then device="${DEVICE:-cpu}"; else device="${DEVICE:-cuda}"; fi
if smoke; then variants="${VARIANTS-plain rtc}"; else variants="${VARIANTS-plain rtc guided}"; fi
if smoke || [ "$device" != cpu ]; then card; fi
dir="$(dirname "$spec")"
name="$(basename "$spec" .yaml)"
trap 'rm -f "$dir"/.rtc_cost_*.yaml' EXIT  # on an error or a signal too
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
artifact() { echo "$work/rtc_cost_${name}_$1"; }
for variant in $variants; do
  rc=0
  start=$(date +%s)
  rm -rf "$(artifact "$variant")"
  compile_spec "$dir/.rtc_cost_$variant.yaml" "$(artifact "$variant")" \
    > "$out/compile_$variant.log" 2>&1 || rc=$?
  echo "compile $variant: rc $rc, $(( $(date +%s) - start )) s"
  tail -n 4 "$out/compile_$variant.log"
  # a parity failure (3) still leaves the artifact to time; a failed guided build leaves none
  if [ "$rc" = 0 ] || [ "$rc" = 3 ]; then
    cp "$(artifact "$variant")/evidence/parity.json" "$out/parity_$variant.json"
  elif [ "$variant" = guided ] && ! smoke; then
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
