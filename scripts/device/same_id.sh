#!/usr/bin/env bash
# Run on a GPU machine (device tool) from the repo root: one spec, one artifact id on CUDA.
# pi05_tiny_cuda is built cold (every tiling measured, no tile cache read), its measured choices
# go into this GPU model's tile cache (scripts/update_tile_cache.py, from plan.json and
# evidence/build.json), and it is built again warm from that cache. The two ids, `lamp diff`
# of the two (text and JSON) and both builds' logs go to $OUT (or ./out).
set -euo pipefail
out="${OUT:-out}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
gpu="$(python3 -c 'import torch; print(torch.cuda.get_device_name())')"
spec=config/specs/pi05_tiny_cuda.yaml
python3 -m lamp_ros.cli compile "$spec" --out /tmp/cold --measure-tiles > "$out/cold.log" 2>&1
python3 scripts/update_tile_cache.py /tmp/cold/plan.json /tmp/cold/evidence/build.json "$gpu" \
  | tee "$out/cache.txt"
python3 -m lamp_ros.cli compile "$spec" --out /tmp/warm > "$out/warm.log" 2>&1
python3 -m lamp_ros.cli diff /tmp/cold /tmp/warm > "$out/diff.txt" 2>&1 || true
python3 -m lamp_ros.cli diff /tmp/cold /tmp/warm --json > "$out/diff.json" 2>&1 || true
python3 - "$out" <<'PY'
import json, sys
ids = {name: json.load(open(f'/tmp/{name}/manifest.json'))['artifact_id'] for name in ('cold', 'warm')}
sources = {}
for name in ('cold', 'warm'):
    build = json.load(open(f'/tmp/{name}/evidence/build.json'))
    sources[name] = sorted({h.get('source', '?')[:40] for g in build['groups'].values()
                            for h in g.get('tuning', {}).values()})
result = {'ids': ids, 'same_id': ids['cold'] == ids['warm'], 'tuning_sources': sources}
print(json.dumps(result, indent=1))
json.dump(result, open(f'{sys.argv[1]}/same_id.json', 'w'), indent=1)
PY
