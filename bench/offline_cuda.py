"""Compile the device probes' CUDA C++ for the H200 (sm_90a) on a machine without a GPU.

Device time is scarce (30 minutes a session) and a probe that does not compile wastes a call.
NVRTC, the compiler `torch.cuda._compile_kernel` uses on the device, needs no GPU: here it runs
from the `nvidia-cuda-nvrtc` wheel with the same options torch passes, plus ptxas's verbose
report, so a CPU test can say that a kernel compiles and what it costs in registers, spills and
shared memory before it ever reaches the device.

    python3 bench/offline_cuda.py FILE.cu KERNEL [--arch 90a]
"""

import ctypes
import glob
import os
import re
import sys
from dataclasses import dataclass, field


@dataclass
class KernelReport:
    """What ptxas said about one entry function."""
    name: str
    registers: int
    spill_stores: int  # bytes
    spill_loads: int  # bytes
    stack_frame: int  # bytes
    static_shared: int  # bytes (dynamic shared memory is the launch's)
    notes: list = field(default_factory=list)  # ptxas info lines with a code, e.g. (C7517)


class CompileError(RuntimeError):
    """NVRTC refused the source; the message is its log."""


def nvrtc_library() -> str:
    """Path of libnvrtc from the nvidia-cuda-nvrtc wheel (or LAMP_NVRTC)."""
    if os.environ.get('LAMP_NVRTC'):
        return os.environ['LAMP_NVRTC']
    for root in sys.path:
        found = sorted(glob.glob(os.path.join(root, 'nvidia', 'cu*', 'lib', 'libnvrtc.so.*')))
        if found:
            return found[-1]
    raise FileNotFoundError('libnvrtc not found: install the nvidia-cuda-nvrtc wheel '
                            '(requirements.txt) or set LAMP_NVRTC to libnvrtc.so')


def torch_options() -> list:
    """The flags torch.cuda._compile_kernel adds after the architecture (torch's NVCC flags
    that NVRTC accepts), so that what compiles here compiles there."""
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS
    return [f for f in COMMON_NVCC_FLAGS if f != '--expt-relaxed-constexpr']


def compile_report(source: str, name: str, arch: str = '90a') -> KernelReport:
    """Compile `source` for sm_`arch` as torch would on the device; report entry `name`."""
    lib = ctypes.CDLL(nvrtc_library())
    prog = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(),
                                       f'{name}.cu'.encode(), 0, None, None))
    try:
        options = [f'--gpu-architecture=sm_{arch}', '--ptxas-options=--verbose'] + \
            torch_options()
        array = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        result = lib.nvrtcCompileProgram(prog, len(options), array)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        text = log.value.decode(errors='replace')
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
    if result != 0:
        raise CompileError(f'{name}: NVRTC failed for sm_{arch}:\n{text}')
    return parse_ptxas(text, name)


def parse_ptxas(log: str, name: str) -> KernelReport:
    """The figures of entry `name` in a ptxas --verbose log."""
    start = log.find(f"Function properties for {name}")
    if start < 0:
        raise CompileError(f'{name}: no such entry in the ptxas report:\n{log}')
    block = log[start:]
    numbers = {key: int(re.search(pattern, block).group(1)) for key, pattern in (
        ('stack_frame', r'(\d+) bytes stack frame'),
        ('spill_stores', r'(\d+) bytes spill stores'),
        ('spill_loads', r'(\d+) bytes spill loads'),
        ('registers', r'Used (\d+) registers'))}
    shared = re.search(r'Used \d+ registers.*?(\d+) bytes smem', block)
    notes = [line.split('ptxas info    : ', 1)[-1] for line in log.splitlines()
             if re.search(r'\(C\d+\)', line) and f"'{name}'" in line]
    return KernelReport(name=name, static_shared=int(shared.group(1)) if shared else 0,
                        notes=notes, **numbers)


def _check(lib, result: int) -> None:
    if result != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise CompileError(f'NVRTC error {result}: {lib.nvrtcGetErrorString(result).decode()}')


def main(argv=None) -> int:
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('source')
    parser.add_argument('kernel')
    parser.add_argument('--arch', default='90a')
    args = parser.parse_args(argv)
    with open(args.source, encoding='utf-8') as f:
        print(compile_report(f.read(), args.kernel, args.arch))
    return 0


if __name__ == '__main__':
    sys.exit(main())
