"""The spec's `build:` section: how the backends build (ONNX exporter, cuda kernels).

These were environment variables once; as spec options they are part of what the artifact
records (spec.json, and plan.json `options`), so an artifact says how it was made.
"""

from dataclasses import dataclass


class SpecError(ValueError):
    """A spec key is unknown, missing or holds an impossible value."""


def read_yaml(path: str, what: str):
    """A YAML file's data; an unreadable or malformed file is a SpecError naming `what`."""
    import yaml
    try:
        with open(path, encoding='utf-8') as f:
            return yaml.safe_load(f)
    except OSError as exc:
        raise SpecError(f'{what}: cannot read {path} ({exc})') from exc
    except yaml.YAMLError as exc:
        raise SpecError(f'{what}: {path} is not valid YAML ({exc})') from exc


def check_keys(d, allowed, where):
    """SpecError naming the first key of mapping `d` not in `allowed` (`where`: its path)."""
    if not isinstance(d, dict):
        raise SpecError(f'{where}: expected a mapping, got {type(d).__name__}')
    for key in d:
        if key not in allowed:
            raise SpecError(f'{where}.{key}: unknown key; known: {", ".join(sorted(allowed))}'
                            .lstrip('.'))


ROPE_IN_QKV = ('timed', 'always', 'never')
ONNX_EXPORTERS = ('auto', 'dynamo', 'torchscript')  # backends/onnx_export.py


@dataclass(frozen=True)
class BuildOptions:
    """How the backends build (spec `build:`). The cuda options' defaults are the measured
    best on Hopper GPUs; plan.json records the options a build used.

    onnx_exporter: how the onnxruntime backend exports its groups (backends/onnx_export.py):
      `auto` (the torch.export-based exporter, TorchScript where it fails), `dynamo` or
      `torchscript` (only that one); plan.json's group `build.exporter` says which one wrote it.

    expert_pdl: programmatic dependent launch of the expert layers' lamp kernels, 0 (plain
      stream order), 1 (the next kernel may launch at once) or 2 (after this one's main loop);
      Hopper and later only, 0 elsewhere.
    expert_tma: the expert's fused gated GEMMs load by tensor descriptor; Hopper and later.
    expert_rope_in_qkv: rotate q and k in the expert's qkv GEMM (and read them so in its
      attention): `timed` (the build GPU times the pair against the parts as chosen; off the
      GPU never), `always` (where the chosen forms allow it), `never`.
    gemm_algorithms: store the cuBLASLt algorithm the build GPU ran fastest for each plain
      linear of the vision and prefix (where it beats torch's op); false keeps torch's op.
    """

    expert_pdl: int = 2
    expert_tma: bool = True
    expert_rope_in_qkv: str = 'timed'
    gemm_algorithms: bool = True
    onnx_exporter: str = 'auto'

    def to_dict(self) -> dict:
        return {'expert_pdl': self.expert_pdl, 'expert_tma': self.expert_tma,
                'expert_rope_in_qkv': self.expert_rope_in_qkv,
                'gemm_algorithms': self.gemm_algorithms, 'onnx_exporter': self.onnx_exporter}


def build_options(d) -> BuildOptions:
    """The spec's `build:` mapping, validated (errors name the key)."""
    check_keys(d, set(BuildOptions.__dataclass_fields__), 'build')
    options = BuildOptions(**d)
    if options.expert_pdl not in (0, 1, 2) or isinstance(options.expert_pdl, bool):
        raise SpecError(f'build.expert_pdl: 0, 1 or 2, got {options.expert_pdl!r}')
    for key in ('expert_tma', 'gemm_algorithms'):
        if not isinstance(getattr(options, key), bool):
            raise SpecError(f'build.{key}: expected true or false, got '
                            f'{getattr(options, key)!r}')
    if options.expert_rope_in_qkv not in ROPE_IN_QKV:
        raise SpecError(f'build.expert_rope_in_qkv: one of {", ".join(ROPE_IN_QKV)}, got '
                        f'{options.expert_rope_in_qkv!r}')
    if options.onnx_exporter not in ONNX_EXPORTERS:
        raise SpecError(f'build.onnx_exporter: one of {", ".join(ONNX_EXPORTERS)}, got '
                        f'{options.onnx_exporter!r}')
    return options
