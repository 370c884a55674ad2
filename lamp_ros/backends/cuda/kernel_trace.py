"""A Chrome trace of GPU work as CUPTI reports it: every kernel, memset and copy with its
stream and duration, the kernels of CUDA-graph replays one by one.

torch's profiler (Kineto over CUPTI) is the one tool here that sees inside a graph replay: the
runtime's own profiler times a group by CUDA events around the replay, which sums the kernels but
cannot say which. lamp_ros/whitebox/kernel_profile.py calls this in a process of its own for
`lamp profile`'s kernel table and timeline of a cuda group and for bench/gpu_pi05.py's trace of
one whole inference. Beside the cuda backend's run side, so torch is allowed; imported only
when a trace is asked for.
"""

import gzip
import os
import shutil


def write_kernel_trace(fn, path: str, runs: int = 1, cpu: bool = False) -> None:
    """Call `fn` once unprofiled (steady state: lazy set-ups and caches are not in the trace),
    then `runs` times under the profiler with CUDA activity (and the CPU's with `cpu`), and
    write the Chrome trace to `path`, gzipped when it ends in .gz (Perfetto opens either)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    if runs < 1:
        raise ValueError(f'runs must be >= 1, got {runs}')
    if not torch.cuda.is_available():
        raise RuntimeError('a kernel trace needs a CUDA GPU, and torch sees none here')
    activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if cpu else [])
    fn()
    torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    raw = path[:-3] if path.endswith('.gz') else path
    prof.export_chrome_trace(raw)
    if raw != path:
        with open(raw, 'rb') as src, gzip.open(path, 'wb') as dst:
            shutil.copyfileobj(src, dst)
        os.remove(raw)
