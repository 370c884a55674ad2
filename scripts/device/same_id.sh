#!/usr/bin/env bash
# Run on a GPU machine (device tool) from the repo root: one spec, one artifact id on CUDA.
# pi05_tiny_cuda is built cold (every tiling measured, no tile cache read), its measured choices
# go into this GPU model's tile cache (scripts/update_tile_cache.py, from plan.json and
# evidence/build.json), and it is built again warm from that cache. The two ids, `lamp diff`
# of the two (text and JSON) and both builds' logs go to $OUT (or ./out).
# SMOKE=1 (scripts/device/lib.sh): the same steps on pi0.5's CPU stand-in, where no tiling is
# measured: the cold build (--measure-tiles) and the warm one are two builds of one spec (the
# warm one shared with the other smokes), the cache update finds nothing measured and writes a
# scratch cache ($WORK/tiles.json, not the repository's), and the two ids must agree.
# smoke: SMOKE=1 bash scripts/device/same_id.sh
set -euo pipefail
. scripts/device/lib.sh
card
if smoke; then
  gpu='CPU smoke'
  cache=(--cache "$work/tiles.json")
else
  gpu="$(python3 -c 'import torch; print(torch.cuda.get_device_name())')"
  cache=()
fi
spec="$(smoke_spec config/specs/pi05_tiny_cuda.yaml)"
compile_spec "$spec" "$work/cold" --measure-tiles > "$out/cold.log" 2>&1 \
  || { tail -n 20 "$out/cold.log"; exit 1; }
python3 scripts/update_tile_cache.py "$work/cold/plan.json" "$work/cold/evidence/build.json" \
  "$gpu" "${cache[@]}" | tee "$out/cache.txt"
compile_spec "$spec" "$work/warm" > "$out/warm.log" 2>&1 || { tail -n 20 "$out/warm.log"; exit 1; }
python3 -m lamp_ros.cli diff "$work/cold" "$work/warm" > "$out/diff.txt" 2>&1 \
  || not_in_smoke "$out/diff.txt"
python3 -m lamp_ros.cli diff "$work/cold" "$work/warm" --json > "$out/diff.json" 2>&1 \
  || not_in_smoke "$out/diff.json"
python3 - "$out" "$work" "$(smoke && echo cpu || echo cuda)" <<'PY'
import json, os, sys
from lamp_ros.provenance import provenance
out, work, device = sys.argv[1:]
ids = {name: json.load(open(os.path.join(work, name, 'manifest.json')))['artifact_id']
       for name in ('cold', 'warm')}
sources = {}
for name in ('cold', 'warm'):
    build = json.load(open(os.path.join(work, name, 'evidence', 'build.json')))
    sources[name] = sorted({h.get('source', '?')[:40] for g in build['groups'].values()
                            for h in g.get('tuning', {}).values()})
result = {'ids': ids, 'same_id': ids['cold'] == ids['warm'], 'tuning_sources': sources,
          'provenance': provenance(device, ['bash', 'scripts/device/same_id.sh'])}
print(json.dumps(result, indent=1))
json.dump(result, open(f'{out}/same_id.json', 'w'), indent=1)
PY
if smoke; then  # on the GPU the result is the finding; in a smoke two ids are an error
  python3 -c 'import json, sys; sys.exit(not json.load(open(sys.argv[1]))["same_id"])' \
    "$out/same_id.json"
fi
