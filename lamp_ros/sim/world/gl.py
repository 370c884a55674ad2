"""The one place lamp imports MuJoCo: its rendering backend is chosen when it is first
imported, so offscreen EGL (Mesa's software rasteriser on a machine without a GPU) is selected
first, unless the user chose a backend (MUJOCO_GL) already."""

import os


def mujoco_module():
    os.environ.setdefault('MUJOCO_GL', 'egl')
    import mujoco
    return mujoco
