"""Keep the tile choices a GPU build measured, for the next builds on that GPU model.

    python3 scripts/update_tile_cache.py PLAN_JSON BUILD_JSON GPU_NAME [--cache FILE]

PLAN_JSON and BUILD_JSON are the plan.json and evidence/build.json of an artifact built on that
GPU (scripts/device/full_gpu.sh brings both back), GPU_NAME as torch names it ('NVIDIA H200'):
the plan holds the tiles each cuda group chose, the evidence how each choice was made. Every
choice the build measured (not those it took from the cache) replaces the entry in
lamp_ros/kernels/tiles/<gpu>.json, with all candidate timings (lamp_ros/kernels/tuning.py), or
in FILE (--cache: a CPU smoke of scripts/device/same_id.sh leaves the repository's caches alone).
"""

import argparse
import json
import os
import sys

from lamp_ros.kernels import tuning


def measured_tiles(plan_path: str, build_path: str) -> dict:
    """{key: {'tiles', 'source', 'timings', ...}} of every cuda group of one build."""
    with open(plan_path, encoding='utf-8') as f:
        plan = json.load(f)
    with open(build_path, encoding='utf-8') as f:
        evidence = json.load(f).get('groups', {})
    tiles = {}
    for group in plan['groups']:
        how = evidence.get(group['name'], {}).get('tuning', {})
        tiles.update(tuning.join_record(group.get('build', {}).get('tiles', {}), how))
    return tiles


def main(argv: list) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('plan', help='the artifact\'s plan.json')
    parser.add_argument('build', help='the artifact\'s evidence/build.json')
    parser.add_argument('gpu', help='the GPU\'s name as torch gives it')
    parser.add_argument('--cache', help='the cache file (default: the GPU model\'s)')
    args = parser.parse_args(argv)
    path = args.cache or tuning.cache_path(args.gpu)
    written = tuning.record(args.gpu, measured_tiles(args.plan, args.build), path)
    where = path if args.cache else os.path.relpath(path)
    print(f'{where}: ' + (', '.join(written) if written else 'nothing measured'))


if __name__ == '__main__':
    main(sys.argv[1:])
