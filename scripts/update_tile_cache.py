"""Keep the tile choices a GPU build measured, for the next builds on that GPU model.

    python3 scripts/update_tile_cache.py PLAN_JSON GPU_NAME      e.g. plan.json 'NVIDIA H200'

PLAN_JSON is the plan.json of an artifact built on that GPU (the device tool brings it back);
every choice it measured (not those it took from the cache) replaces the entry in
lamp_ros/kernels/tiles/<gpu>.json, with all candidate timings (lamp_ros/kernels/tuning.py).
"""

import json
import sys

from lamp_ros.kernels import tuning


def main(argv: list) -> None:
    if len(argv) != 2:
        raise SystemExit(__doc__)
    plan_path, gpu = argv
    with open(plan_path, encoding='utf-8') as f:
        plan = json.load(f)
    tiles = {}
    for group in plan['groups']:
        tiles.update(group.get('build', {}).get('tiles', {}))
    written = tuning.record(gpu, tiles)
    print(f'{tuning.cache_path(gpu)}: ' + (', '.join(written) if written else 'nothing measured'))


if __name__ == '__main__':
    main(sys.argv[1:])
