"""cuBLASLt through ctypes: every algorithm cuBLASLt's heuristic ranks for a GEMM, each runnable
and timeable, where torch runs only the first; `lamp::lt_linear` (kernels/operators/) replays the
one a build measured fastest.

Why the artifact has it: the heuristic's first pick is not always the fastest. At the 64-token
prompt graph's 832 rows its first pick for the prefix's o GEMM (2048 -> 2048) was clearly slower
than its second, with the same numbers; elsewhere its first pick was at or near the fastest (the
timings are in docs/notebook/). So the cuda lowering times the heuristic's candidates per GEMM
shape and row count (policies/pi05/cuda/gemms.py: choose_gemm_algorithms) and stores a winner that
beats torch's op as its 64 opaque bytes. Those bytes mean something only to the cuBLASLt version
and the GPU that returned them (`identity`): the operator runs them only there, and torch's op
anywhere else.

What it covers: y = x @ W^T (W stored (N, K) as nn.Linear keeps it, or (K, N)), an optional bias or
GELU(tanh)+bias epilogue, an optional residual (beta = 1), bf16 in and out with float32 sums; and
FP8 (e4m3) x and W with one float32 scale per row of each (cuBLASLt's outer-vector scaling, Hopper
and later) or one scale each (scalar scaling, for which the heuristic offers more than one
algorithm: the row scales are powers of two, so a reader can apply them afterwards bit for bit;
docs/notebook/) and bf16 out; no stage uses the FP8 and residual forms (the probes that did were
removed). The library is the one torch loaded, so there is one cuBLASLt in the process and its
kernels are captured into CUDA graphs like torch's own.
"""

import ctypes
import struct
from dataclasses import dataclass

# cublasLt.h (CUDA 12.9 / 13): the values this module sets
_TRANSA, _TRANSB, _EPILOGUE, _BIAS_POINTER = 3, 4, 7, 8
_A_SCALE_POINTER, _B_SCALE_POINTER, _FAST_ACCUM, _BIAS_DATA_TYPE = 17, 18, 25, 26
_A_SCALE_MODE, _B_SCALE_MODE, _OUTER_VEC_32F = 31, 32, 3
_PREF_MAX_WORKSPACE_BYTES = 1
_OP_N, _OP_T = 0, 1
_COMPUTE_32F, _R_32F, _R_16BF, _R_8F_E4M3 = 68, 0, 14, 28
EPILOGUES = {'none': 1, 'bias': 4, 'gelu_bias': 36}
WORKSPACE_BYTES = 32 << 20  # what cuBLASLt recommends on Hopper


class _Algo(ctypes.Structure):
    _fields_ = [('data', ctypes.c_uint64 * 8)]


class _Heuristic(ctypes.Structure):
    _fields_ = [('algo', _Algo), ('workspace_size', ctypes.c_size_t), ('state', ctypes.c_int),
                ('waves', ctypes.c_float), ('reserved', ctypes.c_int * 4)]


class CublasLtError(RuntimeError):
    """A cuBLASLt call returned an error status (the call and the status in the message)."""


_lib = None
_handle = None


def _library():
    """libcublasLt as torch loaded it (found in this process's mapped files after torch ran a
    GEMM), so that the versions cannot differ."""
    global _lib, _handle
    if _lib is None:
        import torch
        a = torch.ones(8, 8, device='cuda', dtype=torch.bfloat16)
        torch.nn.functional.linear(a, a, a[0])  # torch loads cuBLASLt for the addmm epilogue
        torch.cuda.synchronize()
        with open('/proc/self/maps', encoding='utf-8') as f:
            paths = {line.split()[-1] for line in f if 'libcublasLt.so' in line}
        if not paths:
            raise CublasLtError('libcublasLt is not loaded in this process (torch without CUDA?)')
        _lib = ctypes.CDLL(sorted(paths)[0])
        _prototypes(_lib)
        handle = ctypes.c_void_p()
        _check(_lib.cublasLtCreate(ctypes.byref(handle)), 'cublasLtCreate')
        _handle = handle
    return _lib


def _prototypes(lib) -> None:
    """Argument types, so that sizes and 64-bit integers reach the library intact."""
    p, i, u64, i64, sz = (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_int64,
                          ctypes.c_size_t)
    for name, args in {
            'cublasLtCreate': [p],
            'cublasLtGetVersion': [],
            'cublasLtMatmulDescCreate': [p, i, i],
            'cublasLtMatmulDescSetAttribute': [p, i, p, sz],
            'cublasLtMatrixLayoutCreate': [p, i, u64, u64, i64],
            'cublasLtMatmulPreferenceCreate': [p],
            'cublasLtMatmulPreferenceSetAttribute': [p, i, p, sz],
            'cublasLtMatmulAlgoGetHeuristic': [p, p, p, p, p, p, p, i, p, p],
            'cublasLtMatmulAlgoCheck': [p, p, p, p, p, p, p, p],
            'cublasLtMatmul': [p, p, p, p, p, p, p, p, p, p, p, p, p, p, sz, p]}.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = sz if name == 'cublasLtGetVersion' else i


def version() -> int:
    """cuBLASLt's version number (e.g. 130100): an algorithm is valid only in the version and
    on the GPU that returned it."""
    return int(_library().cublasLtGetVersion())


def identity(device=None) -> dict:
    """What a stored algorithm is valid for: {'cublaslt': version, 'gpu': device name}."""
    import torch
    return {'cublaslt': version(), 'gpu': torch.cuda.get_device_name(device)}


@dataclass(frozen=True)
class Algorithm:
    """One of cuBLASLt's algorithms for a GEMM: its 64 opaque bytes and the workspace bytes the
    heuristic said it needs."""
    data: bytes
    workspace: int

    WORDS = 8  # cublasLtMatmulAlgo_t: uint64_t data[8]

    def words(self) -> list:
        """The bytes as 8 signed 64-bit integers (an exported program's int[] argument)."""
        return list(struct.unpack('<8q', self.data))

    @classmethod
    def from_words(cls, words, workspace: int) -> 'Algorithm':
        if len(words) != cls.WORDS:
            raise ValueError(f'a cuBLASLt algorithm is {cls.WORDS} words, got {len(words)}')
        return cls(struct.pack('<8q', *words), int(workspace))


def _check(status: int, what: str) -> None:
    if status != 0:
        raise CublasLtError(f'{what} returned cuBLAS status {status}')


def _set(desc, attr: int, value) -> None:
    status = _library().cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(value),
                                                       ctypes.sizeof(value))
    _check(status, f'cublasLtMatmulDescSetAttribute({attr})')


def _layout(dtype: int, rows: int, cols: int, ld: int):
    out = ctypes.c_void_p()
    _check(_library().cublasLtMatrixLayoutCreate(ctypes.byref(out), dtype, ctypes.c_uint64(rows),
                                                 ctypes.c_uint64(cols), ctypes.c_int64(ld)),
           'cublasLtMatrixLayoutCreate')
    return out


@dataclass(frozen=True)
class GemmSpec:
    """One GEMM shape and form: y (m, n) = x (m, k) @ W^T, W stored (n, k) or, with
    weight_kn, (k, n); fp8: x and W as e4m3 codes with float32 scales, one per row of each
    (fp8_scale 'row') or one for each operand ('scalar')."""
    m: int
    n: int
    k: int
    epilogue: str = 'none'
    residual: bool = False
    weight_kn: bool = False
    fp8: bool = False
    fast_accumulation: bool = False
    fp8_scale: str = 'row'

    def __post_init__(self):
        if self.epilogue not in EPILOGUES:
            raise ValueError(f'GemmSpec: epilogue {self.epilogue!r} is not one of '
                             f'{sorted(EPILOGUES)}')
        if self.fp8 and (self.weight_kn or self.epilogue != 'none' or self.residual):
            raise ValueError('GemmSpec: the FP8 form takes an (n, k) weight and no epilogue')
        if self.fp8_scale not in ('row', 'scalar'):
            raise ValueError(f"GemmSpec: fp8_scale {self.fp8_scale!r} is not 'row' or 'scalar'")


class Plan:
    """The cuBLASLt descriptors of one GemmSpec (column-major: D (n, m) = op(W) (n, k) @
    x^T (k, m), which is y (m, n) row-major), reused for every call."""

    def __init__(self, spec: GemmSpec):
        lib = _library()
        self.spec = spec
        s = spec
        self.desc = ctypes.c_void_p()
        _check(lib.cublasLtMatmulDescCreate(ctypes.byref(self.desc), _COMPUTE_32F, _R_32F),
               'cublasLtMatmulDescCreate')
        _set(self.desc, _TRANSA, ctypes.c_int32(_OP_N if s.weight_kn else _OP_T))
        _set(self.desc, _TRANSB, ctypes.c_int32(_OP_N))
        _set(self.desc, _EPILOGUE, ctypes.c_uint32(EPILOGUES[s.epilogue]))
        if s.epilogue != 'none':
            _set(self.desc, _BIAS_DATA_TYPE, ctypes.c_int32(_R_16BF))
        operand = _R_8F_E4M3 if s.fp8 else _R_16BF
        if s.fp8 and s.fp8_scale == 'row':  # scalar scaling is cuBLASLt's default mode
            _set(self.desc, _A_SCALE_MODE, ctypes.c_int32(_OUTER_VEC_32F))
            _set(self.desc, _B_SCALE_MODE, ctypes.c_int32(_OUTER_VEC_32F))
        if s.fp8:
            _set(self.desc, _FAST_ACCUM, ctypes.c_int8(1 if s.fast_accumulation else 0))
        self.a = (_layout(operand, s.n, s.k, s.n) if s.weight_kn
                  else _layout(operand, s.k, s.n, s.k))
        self.b = _layout(operand, s.k, s.m, s.k)
        self.d = _layout(_R_16BF, s.n, s.m, s.n)
        self.pref = ctypes.c_void_p()
        _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(self.pref)),
               'cublasLtMatmulPreferenceCreate')
        ws = ctypes.c_uint64(WORKSPACE_BYTES)
        _check(lib.cublasLtMatmulPreferenceSetAttribute(self.pref, _PREF_MAX_WORKSPACE_BYTES,
                                                        ctypes.byref(ws), ctypes.sizeof(ws)),
               'cublasLtMatmulPreferenceSetAttribute')

    def algorithms(self, count: int = 64) -> list:
        """The heuristic's ranked list of Algorithms (its first entry is torch's choice)."""
        results = (_Heuristic * count)()
        returned = ctypes.c_int(0)
        _check(_library().cublasLtMatmulAlgoGetHeuristic(
            _handle, self.desc, self.a, self.b, self.d, self.d, self.pref, count,
            ctypes.byref(results),
            ctypes.byref(returned)), 'cublasLtMatmulAlgoGetHeuristic')
        return [Algorithm(bytes(results[i].algo), int(results[i].workspace_size))
                for i in range(returned.value) if results[i].state == 0]

    def supports(self, algo: Algorithm) -> bool:
        """Whether cuBLASLt accepts `algo` for these descriptors (cublasLtMatmulAlgoCheck):
        bytes from another version or GPU, or a corrupt copy, are not run."""
        result = _Heuristic()
        a = _Algo.from_buffer_copy(algo.data)
        status = _library().cublasLtMatmulAlgoCheck(_handle, self.desc, self.a, self.b, self.d,
                                                    self.d, ctypes.byref(a),
                                                    ctypes.byref(result))
        return status == 0 and result.workspace_size <= algo.workspace

    def scales(self, x_scale, w_scale) -> None:
        """The FP8 form's scales (float32: m and n of them, or one each for scalar scaling);
        the heuristic wants them set before it ranks algorithms."""
        _set(self.desc, _A_SCALE_POINTER, ctypes.c_void_p(w_scale.data_ptr()))
        _set(self.desc, _B_SCALE_POINTER, ctypes.c_void_p(x_scale.data_ptr()))

    def run(self, algo: Algorithm, x, w, out, workspace, bias=None, residual=None,
            x_scale=None, w_scale=None, stream: int = 0) -> None:
        """out (m, n) = x @ W^T [+ bias | gelu(. + bias)] [+ residual] with `algo`."""
        lib = _library()
        if bias is not None:
            _set(self.desc, _BIAS_POINTER, ctypes.c_void_p(bias.data_ptr()))
        if self.spec.fp8:
            self.scales(x_scale, w_scale)
        alpha = ctypes.c_float(1.0)
        beta = ctypes.c_float(1.0 if residual is not None else 0.0)
        c = residual if residual is not None else out
        a = _Algo.from_buffer_copy(algo.data)
        _check(lib.cublasLtMatmul(
            _handle, self.desc, ctypes.byref(alpha), ctypes.c_void_p(w.data_ptr()), self.a,
            ctypes.c_void_p(x.data_ptr()), self.b, ctypes.byref(beta),
            ctypes.c_void_p(c.data_ptr()), self.d, ctypes.c_void_p(out.data_ptr()), self.d,
            ctypes.byref(a), ctypes.c_void_p(workspace.data_ptr()),
            ctypes.c_size_t(workspace.numel() * workspace.element_size()),
            ctypes.c_void_p(stream)), 'cublasLtMatmul')


_plans = {}  # GemmSpec -> Plan: the descriptors, made once per shape and form in a process


def plan_for(spec: GemmSpec) -> Plan:
    """The Plan of `spec`, made on first use (a registry: descriptors are immutable but for the
    pointers `run` sets before each call)."""
    plan = _plans.get(spec)
    if plan is None:
        plan = _plans[spec] = Plan(spec)
    return plan
