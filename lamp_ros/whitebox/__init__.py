"""The white box: inspect, diff, verify and profile compiled artifacts.

Everything here reads an artifact directory as plain files (JSON, safetensors) and, for verify
and profile, loads it through the Runtime. Nothing imports torch or the compiler's trace side,
so an operator can answer "what is this artifact, what changed, does it still hold, where does
the time go" on the robot itself.
"""
