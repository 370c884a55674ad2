"""pi0.5's cuda lowering: its model stages, in the passes' form, onto lamp_ros's GPU kernels.

The cuda backend calls `lowering.use_kernels` (registered in policies/pi05/rewrites.py) on a
group's stages just before export. It turns on every module's kernel switch (lowering.py), then
makes the choices the build GPU decides by timing: the expert's fused layers (expert_layers.py),
the prefix's attention kernel (prefix_attention.py), the plain linears' weight layouts and
cuBLASLt algorithms (gemms.py), each found in or recorded for the tile cache (choices.py).
"""
