"""`lamp inspect` and `lamp profile` on the compiled tiny artifact."""

import json
import os
import shutil

from lamp_ros.cli import main
from lamp_ros.whitebox.op_profile import hint, kernel_events, trt_layer_profile
from lamp_ros.whitebox.profile import op_table_title

PNG = b'\x89PNG\r\n\x1a\n'


def test_inspect_json_has_the_contract_keys(tiny_artifact, capsys):
    assert main(['inspect', tiny_artifact, '--json']) == 0
    report = json.loads(capsys.readouterr().out)
    assert {'artifact_id', 'target', 'created_by', 'abi', 'groups', 'coverage', 'memory',
            'parity'} <= set(report)
    ort = [g for g in report['groups'] if g['backend'] == 'onnxruntime']
    assert ort[0]['nodes'] == ['vision', 'prefix', 'denoise'] and ort[0]['node_count'] == 3
    assert ort[0]['precision'] == 'fp32' and ort[0]['device'] == 'cpu'
    assert ort[0]['side_stages'] == []  # only cuda groups capture stages on a second stream
    summary = report['memory']['summary']
    assert summary['arena_bytes'] >= summary['lower_bound_bytes'] > 0
    assert report['parity']['passed'] and report['profile'] is None


def test_inspect_tables(tiny_artifact, capsys):
    assert main(['inspect', tiny_artifact]) == 0
    out = capsys.readouterr().out
    assert 'g03_onnxruntime' in out and 'lower bound' in out and 'parity' in out


def test_profile_writes_files_and_saves_evidence(tiny_artifact, tmp_path, capsys):
    art = tmp_path / 'a'
    shutil.copytree(tiny_artifact, art)
    folder = tmp_path / 'out' / 'prof'  # made, parents and all; the files go inside it
    assert main(['profile', str(art), '--out', str(folder), '--ticks', '4', '--ort-runs', '2',
                 '--save']) == 0
    out = capsys.readouterr().out
    assert 'top 10 nodes' in out and 'denoise' in out and 'bound' in out
    # a CPU artifact: the op table holds ONNX Runtime op types, no CUDA kernel
    assert 'top ONNX Runtime op types (kernel time per run)' in out and 'CUDA' not in out
    assert sorted(os.listdir(folder)) == ['hist.png', 'ops.json', 'profile.json', 'timeline.png',
                                          'trace.json']
    assert sorted(os.listdir(tmp_path / 'out')) == ['prof']
    assert f'wrote into {folder}: trace.json' in out
    trace = json.loads((folder / 'trace.json').read_text())
    assert isinstance(trace, dict) and isinstance(trace['traceEvents'], list)
    assert {'name', 'ph', 'ts', 'dur', 'pid', 'tid'} <= set(trace['traceEvents'][0])
    for name in ('hist.png', 'timeline.png'):
        data = (folder / name).read_bytes()
        assert len(data) > 1000 and data.startswith(PNG)
    profile = json.loads((folder / 'profile.json').read_text())
    assert profile['ticks'] == 4 and len(profile['top_nodes']) == 10
    assert profile['top_ops'][0]['hint'] in ('compute-bound', 'memory-bound')
    assert profile['top_ops'][0]['backends'] == ['onnxruntime']
    ops = json.loads((folder / 'ops.json').read_text())
    assert set(ops['g03_onnxruntime']['stages']) >= {'vision', 'prefix', 'denoise'}
    # --save: the profile is evidence now, the id is unchanged and the artifact still verifies.
    assert main(['inspect', str(art), '--json']) == 0
    report = json.loads(capsys.readouterr().out)
    assert report['profile']['ticks'] == 4
    assert report['artifact_id'] == json.load(open(f'{tiny_artifact}/manifest.json'))[
        'artifact_id']
    assert main(['verify', str(art)]) == 0


def test_hints_and_ort_run_selection():
    assert hint('MatMul') == 'compute-bound' and hint('Transpose') == 'memory-bound'
    events = [{'name': 'model_run', 'ts': 0, 'dur': 10}, {'name': 'model_run', 'ts': 20, 'dur': 5},
              {'cat': 'Node', 'name': 'a_kernel_time', 'ts': 1, 'dur': 9},
              {'cat': 'Node', 'name': 'a_kernel_time', 'ts': 21, 'dur': 4}]
    kernels, runs = kernel_events(events)
    assert runs == 1 and [k['dur'] for k in kernels] == [4]  # the warm-up run is dropped


def test_tensorrt_inspector_layers(tmp_path):
    from lamp_ros.artifact.plan import GroupSpec
    (tmp_path / 'g').mkdir()
    (tmp_path / 'g' / 'inspector.json').write_text(json.dumps({'Layers': [
        {'Name': 'a', 'LayerType': 'CaskGemmMatrixMultiply'}, {'Name': 'b',
                                                               'LayerType': 'Reformat'},
        {'Name': 'c', 'LayerType': 'Reformat'}]}))
    group = GroupSpec('g', 'tensorrt', 'fp16', 'cuda:0', ('vision',), (), (),
                      build={'inspector': 'g/inspector.json'})
    layers = trt_layer_profile(group, str(tmp_path))
    assert layers['layer_count'] == 3
    assert layers['layers'][0] == {'layer_type': 'Reformat', 'count': 2, 'hint': 'memory-bound'}
    assert layers['layers'][1]['hint'] == 'compute-bound'


def test_members_name_the_side_stream():
    from lamp_ros.whitebox.inspect import _members
    group = {'nodes': ['vision', 'prefix', 'denoise'], 'side_stages': ['denoise']}
    assert _members(group) == 'vision, prefix, denoise (side stream)'
    group['text_lengths'] = [64, 128, 200]
    assert _members(group) == 'vision, prefix, denoise (side stream); prompt lengths 64, 128, 200'
    group['gemm_algorithms'] = {'cublaslt': 130100, 'gpu': 'NVIDIA H200', 'linears': 34,
                                'rows': {'832': 34}}
    assert _members(group).endswith('; 34 linears on stored cuBLASLt algorithms (cuBLASLt '
                                    '130100, NVIDIA H200)')


def test_the_op_table_says_what_its_rows_are(tiny_artifact, tmp_path, capsys):
    onnx = {'op_type': 'MatMul', 'backends': ['onnxruntime']}
    cuda = {'op_type': '_mqa_kernel', 'backends': ['cuda']}
    assert op_table_title([onnx]) == 'top ONNX Runtime op types (kernel time per run)'
    assert op_table_title([cuda]) == 'top CUDA kernels (kernel time per run)'
    assert op_table_title([onnx, cuda]) == \
        'top CUDA kernels and ONNX Runtime op types (kernel time per run)'
    assert op_table_title([{'op_type': 'MatMul'}]) == 'top op types (kernel time per run)'
    a_file = tmp_path / 'taken'
    a_file.write_text('')
    assert main(['profile', tiny_artifact, '--out', str(a_file)]) == 2
    assert f'--out {a_file}: a file; lamp profile writes its files into a folder' in \
        capsys.readouterr().err
