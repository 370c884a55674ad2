"""The lowering's measured choices: where a build finds them made, what plan.json keeps of them.

Every choice the lowering makes by timing (the expert's parts, the prefix's attention, the plain
linears' layouts and algorithms) is a `tuning.Choice`; a build on a GPU whose choices are in
kernels/tiles/ starts from those (`lamp compile --measure-tiles` times them all again).
"""

import torch

from lamp_ros.kernels import tuning


def recorded(choice: tuning.Choice) -> dict:
    """What plan.json keeps of a choice: the tiles, where they came from, every candidate's
    time and its disagreement with the reference form."""
    return {'tiles': choice.tiles, 'source': choice.source, 'timings': choice.timings,
            'errors': choice.errors}


def tile_cache(device) -> dict:
    """{problem: choice} this GPU's kind made in earlier builds (kernels/tiles/); none off
    the GPU."""
    return tuning.cached_tiles(torch.cuda.get_device_name(device)) if device.type == 'cuda' \
        else {}
