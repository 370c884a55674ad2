"""Edge types: what a value is (dtype, shape, device, layout, precision, quantisation) and what
it is for (role) and how long it lives (lifetime).

A shape entry is an int or a symbol (str) for a dimension that varies between calls, e.g. the
height of a raw camera image. `precision` is the arithmetic the producer computes in, which can
differ from the storage dtype (fp32 storage of a bf16 computation); it defaults to the dtype.
"""

from dataclasses import asdict, dataclass

import numpy as np

ROLES = ('input', 'output', 'activation', 'weight', 'state')
LIFETIMES = ('tick', 'episode', 'static')
DTYPES = ('bool', 'uint8', 'int32', 'int64', 'float16', 'bfloat16', 'float32', 'float64',
          'string')


@dataclass(frozen=True)
class TensorType:
    """The type carried by a graph edge."""

    dtype: str
    shape: tuple
    device: str = 'cpu'
    layout: str = 'contiguous'
    precision: str = ''
    quant: dict | None = None
    role: str = 'activation'
    lifetime: str = 'tick'

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ValueError(f'TensorType.dtype: {self.dtype!r} not in {DTYPES}')
        if self.role not in ROLES:
            raise ValueError(f'TensorType.role: {self.role!r} not in {ROLES}')
        if self.lifetime not in LIFETIMES:
            raise ValueError(f'TensorType.lifetime: {self.lifetime!r} not in {LIFETIMES}')
        shape = tuple(self.shape)
        for dim in shape:
            if not (isinstance(dim, str) or (isinstance(dim, int) and dim >= 0)):
                raise ValueError(f'TensorType.shape: bad dimension {dim!r} in {shape}')
        object.__setattr__(self, 'shape', shape)
        if not self.precision:
            object.__setattr__(self, 'precision', self.dtype)

    @property
    def is_static(self) -> bool:
        """True when every dimension is a number (the memory planner can size it)."""
        return all(isinstance(d, int) for d in self.shape)

    @property
    def nbytes(self) -> int:
        """Storage size in bytes; only for static, fixed-width types."""
        if not self.is_static or self.dtype == 'string':
            raise ValueError(f'TensorType.nbytes: {self} has no fixed size')
        itemsize = 2 if self.dtype == 'bfloat16' else np.dtype(self.dtype).itemsize
        return int(np.prod(self.shape, dtype=np.int64)) * itemsize

    def to_dict(self) -> dict:
        d = asdict(self)
        d['shape'] = list(self.shape)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> 'TensorType':
        return cls(**{**d, 'shape': tuple(d['shape'])})

    def __str__(self) -> str:
        dims = ','.join(str(d) for d in self.shape)
        extra = '' if self.role == 'activation' else f' {self.role}'
        extra += '' if self.lifetime == 'tick' else f'/{self.lifetime}'
        dev = '' if self.device == 'cpu' else f'@{self.device}'
        return f'{self.dtype}[{dims}]{dev}{extra}'
