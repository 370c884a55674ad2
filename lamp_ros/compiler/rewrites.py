"""How a policy package adds its own rewrites to a compiler that knows no model.

The compiler's passes and the cuda backend's kernel lowering are model-specific: they rewrite
a model's stage modules, which only the policy package knows. A policy package registers, once
for its policy class, a `Rewrites`:

    register_rewrites(MyPolicy, Rewrites(passes=(fold_this, fuse_that),
                                         cuda_lowering=lower_onto_kernels))

- `passes`: pure functions `pass(modules) -> (modules, PassResult)` over {model node id: stage
  module}, in the order they run; a spec's `passes:` switches each on by its function name.
- `approximate`: the names of passes that change numbers beyond float rounding (their details
  state the error); the others keep the outputs to rounding.
- `cuda_lowering(modules, tuning_out, text_lengths, options, measure_tiles) -> {what: count}`:
  switches a cuda group's stage modules onto lamp's kernels just before export (`options`: the
  spec's build: section; `tuning_out` receives each tuned choice).
- `letterbox_stage(module) -> module`: the stage that reads the stacked camera pixels, in a
  form that takes the cameras' frames and their letterbox tables instead (the spec's
  `fusion.device_letterbox`, compiler/device_letterbox.py); it must not change `module`.
- `low_precision_refusals(modules) -> {name: why}`: the linears (`<node>.<module path>`, or a
  prefix of such names) that the policy's cuda lowering cannot run in low precision, which a
  precision plan keeps (compiler/precision_modules.py).

The compiler finds them by the type of the pipeline's policy (`pipeline.policy`); a policy
that registered nothing compiles as traced.
"""

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class PassResult:
    """Whether a pass changed anything, and per node id what (JSON-ready)."""

    changed: bool
    details: dict = field(default_factory=dict)  # node id -> {what: count or value}


@dataclass(frozen=True)
class Rewrites:
    """A policy package's passes (in run order), cuda lowering, device-letterbox stage and
    the linears its lowering keeps out of a precision plan; see the module doc."""

    passes: tuple = ()
    approximate: tuple = ()
    cuda_lowering: Callable | None = None
    letterbox_stage: Callable | None = None
    low_precision_refusals: Callable | None = None

    @property
    def pass_names(self) -> tuple:
        return tuple(p.__name__ for p in self.passes)


_REGISTERED = {}


def register_rewrites(policy_type: type, rewrites: Rewrites) -> None:
    """Make `rewrites` the compiler's for policies of `policy_type` (and its subclasses)."""
    if not isinstance(rewrites, Rewrites):
        raise TypeError(f'register_rewrites: expected Rewrites, got {type(rewrites).__name__}')
    _REGISTERED[policy_type] = rewrites


def rewrites_for(policy) -> Rewrites:
    """The rewrites registered for the policy's class (the nearest base's), else none."""
    for cls in type(policy).__mro__:
        if cls in _REGISTERED:
            return _REGISTERED[cls]
    return Rewrites()


def enabled_passes(rewrites: Rewrites, enabled: dict) -> tuple:
    """Names switched on in `enabled` ({name: bool}), in run order; unknown names raise."""
    known = rewrites.pass_names
    unknown = sorted(set(enabled) - set(known))
    if unknown:
        raise ValueError(f'passes: unknown {unknown}; known: '
                         f'{", ".join(known) if known else "none (the policy registers none)"}')
    return tuple(name for name in known if enabled.get(name))


def run_passes(rewrites: Rewrites, modules: dict, enabled: dict) -> tuple:
    """Run the enabled passes in order -> (modules, {pass name: PassResult})."""
    results, names = {}, enabled_passes(rewrites, enabled)
    for run in rewrites.passes:
        if run.__name__ in names:
            modules, results[run.__name__] = run(modules)
    return modules, results
