"""The spec's `precision:` section: how the build chooses each layer's precision.

    precision:
      plan: auto                 # manual (default): the stages' precisions as written
      budget: {cosine: 0.999, max_rel: 2.0e-2}
      calibration: {source: parity, samples: 8}   # or {source: npz, path: obs/, samples: 32}
      lower_loop_state: false    # the layers that read or write the denoise loop's state

`plan: auto` measures, per candidate layer (a GEMM with a weight, in a group whose backend can
lower it: ONNX Runtime to int8), the action error that lowering it alone causes on the
calibration observations, picks the set that moves the most work to low precision within the
budget, and verifies the set (compiler/precision_plan.py). The budget is on the actions in the
robot's units, against the artifact built at the stages' own precisions: the lowest cosine of
any observation's chunk and the largest |error| / max |reference| over all of them.
"""

from dataclasses import dataclass, field

from lamp_ros.spec.build_options import check_keys, SpecError
from lamp_ros.spec.keys import SPEC_KEYS

PLANS = ('manual', 'auto')
CALIBRATION_SOURCES = ('parity', 'npz')


@dataclass(frozen=True)
class Budget:
    cosine: float = 0.999
    max_rel: float = 2.0e-2

    def allows(self, cosine: float, max_rel: float) -> bool:
        return cosine >= self.cosine and max_rel <= self.max_rel

    def to_dict(self) -> dict:
        return {'cosine': self.cosine, 'max_rel': self.max_rel}


@dataclass(frozen=True)
class Calibration:
    """Observations to calibrate and measure on: the parity samples' (the default), or every
    `.npz` file of a folder (arrays `state`, `images.<camera slot>` uint8 (H, W, 3), and
    `prompt` where the policy reads one; `lamp calibration-set` writes them from a bag)."""

    source: str = 'parity'
    path: str = ''          # the folder of a source npz, as written (Spec.resolve reads it)
    samples: int = 8

    def to_dict(self) -> dict:
        return {'source': self.source, **({'path': self.path} if self.path else {}),
                'samples': self.samples}


@dataclass(frozen=True)
class PrecisionPlan:
    plan: str = 'manual'
    budget: Budget = field(default_factory=Budget)
    calibration: Calibration = field(default_factory=Calibration)
    lower_loop_state: bool = False

    @property
    def auto(self) -> bool:
        return self.plan == 'auto'

    def to_dict(self) -> dict:
        return {'plan': self.plan, 'budget': self.budget.to_dict(),
                'calibration': self.calibration.to_dict(),
                'lower_loop_state': self.lower_loop_state}


def _number(value, where: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not low <= value <= high:
        raise SpecError(f'{where}: a number in [{low}, {high}], got {value!r}')
    return float(value)


def precision_plan(d: dict) -> PrecisionPlan:
    """Validate the `precision:` mapping; errors name the key path."""
    check_keys(d, SPEC_KEYS['precision'], 'precision')
    plan = d.get('plan', 'manual')
    if plan not in PLANS:
        raise SpecError(f'precision.plan: one of {", ".join(PLANS)}, got {plan!r}')
    budget = d.get('budget') or {}
    check_keys(budget, SPEC_KEYS['precision.budget'], 'precision.budget')
    budget = Budget(_number(budget.get('cosine', Budget.cosine), 'precision.budget.cosine',
                            -1.0, 1.0),
                    _number(budget.get('max_rel', Budget.max_rel), 'precision.budget.max_rel',
                            0.0, 1e9))
    cal = d.get('calibration') or {}
    check_keys(cal, SPEC_KEYS['precision.calibration'], 'precision.calibration')
    source = cal.get('source', 'parity')
    if source not in CALIBRATION_SOURCES:
        raise SpecError(f'precision.calibration.source: one of '
                        f'{", ".join(CALIBRATION_SOURCES)}, got {source!r}')
    samples = cal.get('samples', Calibration.samples)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise SpecError(f'precision.calibration.samples: an integer >= 1, got {samples!r}')
    path = cal.get('path', '')
    if source == 'npz':
        if not isinstance(path, str) or not path:
            raise SpecError('precision.calibration.path: the folder of .npz observations '
                            '(source npz)')
    elif path:
        raise SpecError(f'precision.calibration.path: only for source npz (source is '
                        f'{source})')
    loop = d.get('lower_loop_state', False)
    if not isinstance(loop, bool):
        raise SpecError(f'precision.lower_loop_state: true or false, got {loop!r}')
    return PrecisionPlan(plan, budget, Calibration(source, path, samples), loop)
