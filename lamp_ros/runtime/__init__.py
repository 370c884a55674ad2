"""The unified runtime: load a verified artifact, run its groups, keep state, profile.

Never imports torch or the compiler: a robot runs artifacts without either installed.
"""

from lamp_ros.runtime.runtime import Runtime  # noqa: F401
