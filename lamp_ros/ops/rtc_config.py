"""Real-time chunking's settings: the spec's `control.chunker.rtc` when `merge_mode: rtc`.

- `mode`: `trained` (hard inpainting of the committed actions with a flow time per action, for a
  policy trained with random delays, as the demo policy is; no backward pass, every backend) or
  `guided` (the RTC paper's guidance with a soft prefix mask, for checkpoints not trained for
  it; a gradient through the model at every step).
- `prefix_schedule`: how the guided mode's weight on the previous chunk decays between the
  delay and the end of the overlap (`linear`, `exp`, `ones`, `zeros`).
- `max_guidance_weight`: the guided mode's clip on the guidance weight (the paper's beta).
- `execution_horizon`: s, the actions executed between two chunks, where the overlap with the
  previous chunk ends (default: the chunker's horizon - replan_at, when it asks again).
"""

from dataclasses import asdict, dataclass, fields

from lamp_ros.ops.state import check_finite_float, check_keys, check_positive_int

MODES = ('trained', 'guided')
PREFIX_SCHEDULES = ('linear', 'exp', 'ones', 'zeros')
WHERE = 'chunker.rtc'


@dataclass(frozen=True)
class RtcConfig:
    mode: str = 'trained'
    prefix_schedule: str = 'linear'
    max_guidance_weight: float = 10.0
    execution_horizon: int | None = None

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f'{WHERE}: mode {self.mode!r} is unknown; known: {MODES}')
        if self.prefix_schedule not in PREFIX_SCHEDULES:
            raise ValueError(f'{WHERE}: prefix_schedule {self.prefix_schedule!r} is unknown; '
                             f'known: {PREFIX_SCHEDULES}')
        weight = check_finite_float(self.max_guidance_weight, 'max_guidance_weight', WHERE)
        if weight <= 0:
            raise ValueError(f'{WHERE}: max_guidance_weight must be > 0, got {weight}')
        object.__setattr__(self, 'max_guidance_weight', weight)
        if self.execution_horizon is not None:
            check_positive_int(self.execution_horizon, 'execution_horizon', WHERE)
            object.__setattr__(self, 'execution_horizon', int(self.execution_horizon))

    @classmethod
    def from_dict(cls, d) -> 'RtcConfig':
        check_keys(d or {}, [f.name for f in fields(cls)], WHERE)
        return cls(**(d or {}))

    def to_dict(self) -> dict:
        return asdict(self)
