"""Model spec validation: unknown keys and impossible choices name the key."""

import pytest

from lamp_ros.spec import load_spec, parse_spec, SpecError
from lamp_ros.spec import spec_data

SPEC = 'config/specs/pi05_tiny_random.yaml'


def _raw():
    return spec_data(SPEC)


def test_committed_spec_loads():
    spec = load_spec(SPEC)
    assert spec.target == 'cpu'
    assert spec.choice('vision').backend == 'onnxruntime'
    assert spec.choice('tokenize').backend == 'host'
    assert spec.parity['atol'] == 1e-4


@pytest.mark.parametrize('edit,key', [
    (lambda d: d.update(colour='red'), 'colour: unknown key'),
    (lambda d: d['policy'].update(presett='x'), 'policy.presett: unknown key'),
    (lambda d: d['policy'].update(entry='no_function'), "policy.entry: 'module:function'"),
    (lambda d: d['policy'].update(options=[1]), 'policy.options: a mapping'),
    (lambda d: d['control'].update(rate=3), 'control.rate: unknown key'),
    (lambda d: d['stages']['vision'].update(backend='tensorrt'),
     "stages.vision.backend: 'tensorrt' is not available for target 'cpu'"),
    (lambda d: d['stages']['vision'].update(backend='tvm'),
     "stages.vision.backend: unknown backend 'tvm'"),
    (lambda d: d['stages']['prefix'].update(precision='bf16'),
     'stages.prefix.precision: bf16 needs a GPU target'),
    (lambda d: d['stages']['default'].update(precision='fp16'),
     'stages.default.precision: fp16 on target cpu only with the onnxruntime backend'),
    (lambda d: d['stages']['prefix'].update(precision='int3'), 'stages.prefix.precision'),
    (lambda d: d.update(target='fpga'), "target: 'fpga'"),
    (lambda d: d['weights'].update(file='w.safetensors'),
     'weights: give one of seed/stage_seeds, file, or a checkpoint (format, path), not seed and '
     'file'),
    (lambda d: d.update(weights={'format': 'lerobot'}),
     'weights: a checkpoint needs both format and path'),
    (lambda d: d['parity'].update(samples=0), 'parity.samples'),
    (lambda d: d.pop('policy'), 'policy: missing'),
    (lambda d: d.update(build={'expert_pdl': 3}), 'build.expert_pdl: 0, 1 or 2'),
    (lambda d: d.update(build={'expert_tma': 'yes'}), 'build.expert_tma: expected true'),
    (lambda d: d.update(build={'expert_rope_in_qkv': 'sometimes'}),
     'build.expert_rope_in_qkv: one of timed, always, never'),
    (lambda d: d.update(build={'measure_tiles': True}), 'build.measure_tiles: unknown key'),
    (lambda d: d['fusion'].update(side_stream='denoise'), 'fusion.side_stream: a list'),
    (lambda d: d['fusion'].update(side_streams=['denoise']), 'fusion.side_streams: unknown'),
    (lambda d: d['fusion'].update(text_lengths=64), 'fusion.text_lengths: prompt lengths'),
    (lambda d: d['fusion'].update(text_lengths=[128, 64]), 'fusion.text_lengths: prompt'),
    (lambda d: d['fusion'].update(text_lengths=[1]), 'fusion.text_lengths: prompt lengths'),
    (lambda d: d['fusion'].update(text_lengths=[True]), 'fusion.text_lengths: prompt lengths'),
])
def test_bad_spec_names_the_key(edit, key):
    d = _raw()
    edit(d)
    with pytest.raises(SpecError) as err:
        parse_spec(d)
    assert key in str(err.value)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_spec(str(tmp_path / 'nope.yaml'))
    bad = tmp_path / 'bad.yaml'
    bad.write_text('name: [unclosed')
    with pytest.raises(SpecError, match='not valid YAML'):
        load_spec(str(bad))


def test_full_and_gpu_specs_load():
    full = load_spec('config/specs/pi05_full.yaml')
    assert full.target == 'cuda' and full.policy['options']['preset'] == 'pi05_full'
    assert {full.choice(op).precision for op in ('vision', 'prefix', 'denoise')} == {'bf16'}
    from lamp_ros.policies.pi05.passes import PASS_NAMES
    assert full.passes == {name: True for name in PASS_NAMES}  # fp8_prefix_mlp included
    assert load_spec('config/specs/pi05_tiny_cuda.yaml').choice('denoise').backend == 'cuda'
    assert full.fusion['side_stream'] == ['denoise']
    assert load_spec(SPEC).fusion['side_stream'] == []  # off unless a spec names stages
    assert full.fusion['text_lengths'] == [64, 128]
    assert load_spec(SPEC).fusion['text_lengths'] == [48, 64]  # the demo's prompt runs at 64
    raw = _raw()
    del raw['fusion']['text_lengths']
    assert parse_spec(raw).fusion['text_lengths'] == []  # one prompt length unless asked


def test_build_options_default_to_the_measured_best_and_reach_the_spec_copy():
    """The spec's `build:` (how the backends build) has the cuda defaults measured best on
    Hopper and the torch.export-based ONNX exporter where it works (pi05_tiny names
    TorchScript); the artifact's spec.json and plan.json record the options a build used."""
    assert load_spec(SPEC).build.to_dict() == {
        'expert_pdl': 2, 'expert_tma': True, 'expert_rope_in_qkv': 'timed',
        'gemm_algorithms': True, 'onnx_exporter': 'torchscript'}
    d = _raw()
    del d['build']
    assert parse_spec(d).build.onnx_exporter == 'auto'
    with pytest.raises(SpecError, match="build.onnx_exporter: one of auto, dynamo, torchscript, "
                                        "got 'jit'"):
        parse_spec({**d, 'build': {'onnx_exporter': 'jit'}})
    d['build'] = {'expert_pdl': 0, 'gemm_algorithms': False}
    edited = parse_spec(d)
    assert edited.build.expert_pdl == 0 and not edited.build.gemm_algorithms
    assert edited.to_dict()['build']['expert_tma'] is True
