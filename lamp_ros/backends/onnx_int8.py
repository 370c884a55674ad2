"""An ONNX Runtime group with chosen GEMMs in int8: what a precision plan lowers on the CPU.

A candidate layer is one weight that MatMuls read (directly or through the exporter's
Transpose); every MatMul reading it is lowered together, so the expert's unrolled Euler steps
are one layer, named after the weight (`denoise.layers.0.mlp.down_proj`). A MatMul of two
activations (attention's QK and PV) is no candidate: ONNX Runtime's CPU provider has no int8
kernel that would make it faster.

The quantisation is onnxruntime.quantization's, in QDQ form, which the CPU provider fuses into
integer GEMMs with a float output (MatMulIntegerToFloat): weights symmetric int8 per output
channel; activations asymmetric uint8 per tensor (the U8S8 kernels of x86), from the ranges
ORT's MinMax calibrator measured on the planner's observations (`calibrate`). A chosen layer is
refused by name rather than recorded as int8 where the quantizer leaves its MatMul reading a
float weight, or where ORT's optimised graph would only dequantize its int8 weight and multiply
in float (TensorRT's silent fallback from FP8 is the failure this guards against).

The lowered group keeps the float weights it still reads bound to weights/*.safetensors as
before; what quantisation made (int8 weights, scales, zero points) goes to
groups/<group>/<tag>.safetensors, bound the same way (onnxrt.py `point_at`), beside
groups/<group>/<tag>.onnx. The run side is onnxrt.py's OrtRunner, unchanged.
"""

import dataclasses
from dataclasses import dataclass
import logging
import os
import tempfile

import numpy as np

from lamp_ros.backends.onnxrt import (model_with_weights, OrtRunner, point_at,
                                      safetensors_offsets, WEIGHT_PREFIX)

PRECISION = 'int8'
WEIGHTS = 'symmetric int8 per output channel'
ACTIVATIONS = 'asymmetric uint8 per tensor, MinMax over the calibration observations'


class PrecisionError(ValueError):
    """A requested precision cannot be honoured; the message names the layer."""


@dataclass(frozen=True)
class Candidate:
    name: str       # the layer: its weight's name without the stage prefix and '.weight'
    weight: str     # the ONNX initializer
    nodes: tuple    # the MatMuls that read it
    macs: int = 0   # multiply-adds per call of the group over all those MatMuls, from the
    #                 shapes seen by `Int8Lowering.calibrate`


def named_nodes(model):
    """The model with every node named (`<op type>_<index>` where the exporter left a name
    empty), in place: the quantizer selects nodes by name, and `lamp diff --layers` matches the
    nodes of two artifacts by it."""
    for i, node in enumerate(model.graph.node):
        node.name = node.name or f'{node.op_type}_{i}'
    return model


def candidates(model) -> dict:
    """{layer name: Candidate} of the model's MatMuls that read a weight, in graph order."""
    initializers = {i.name: i for i in model.graph.initializer}
    producer = {out: node for node in model.graph.node for out in node.output}
    found = {}
    for node in model.graph.node:
        if node.op_type != 'MatMul':
            continue
        source = producer.get(node.input[1])
        if node.input[1] in initializers:
            weight = node.input[1]
        elif source is not None and source.op_type == 'Transpose' and \
                source.input[0] in initializers and \
                len(initializers[source.input[0]].dims) == 2:
            weight = source.input[0]
        else:
            continue  # activation x activation
        name = weight.removeprefix(WEIGHT_PREFIX).removesuffix('.weight')
        nodes = found[name].nodes if name in found else ()
        found[name] = Candidate(name, weight, nodes + (node.name,))
    return found


class _Feeds:
    """The group's inputs of each observation, as ORT's calibrator reads them."""

    def __init__(self, feeds):
        self._feeds = iter(feeds)

    def get_next(self):
        return next(self._feeds, None)


class Int8Lowering:
    """The int8 lowering of one built ONNX Runtime group (its plan.json entry `group`)."""

    precision = PRECISION

    def __init__(self, group, root: str):
        import onnx
        meta = group.build
        if meta.get('text_onnx'):
            raise PrecisionError(f'{group.name}: a precision plan for a group built at several '
                                 'prompt lengths (fusion.text_lengths) is not supported; '
                                 'leave fusion.text_lengths empty')
        self.group, self.root = group, root
        self.model = named_nodes(onnx.load(os.path.join(root, meta['onnx']),
                                           load_external_data=False))
        self.bindings = meta['weights']
        self.candidates = candidates(self.model)
        # what each candidate MatMul multiplies its weight with (calibrated, counted)
        nodes = {n.name: n for n in self.model.graph.node}
        self._reads = {n: nodes[n].input[0] for c in self.candidates.values() for n in c.nodes}
        self._ranges = None

    def _with_weights(self, fold=()):
        """A copy of the model with the bound weights inside it; the layers in `fold` read
        their weight already transposed (one initializer `<weight>.t`), as the quantizer
        wants a weight that feeds the MatMul directly."""
        from onnx import numpy_helper
        model = named_nodes(model_with_weights(self.group, self.root))
        weights = {i.name: i for i in model.graph.initializer}
        for name in fold:
            layer = self.candidates[name]
            transposed = f'{layer.weight}.t'
            for node in model.graph.node:
                if node.name not in layer.nodes or node.input[1] == layer.weight:
                    continue
                node.input[1] = transposed
            if transposed not in weights:
                array = numpy_helper.to_array(weights[layer.weight]).T.copy()
                model.graph.initializer.append(numpy_helper.from_array(array, transposed))
                weights[transposed] = model.graph.initializer[-1]
        _drop_unread(model)
        return model

    def calibrate(self, feeds: list, workdir: str) -> dict:
        """Activation ranges of every candidate MatMul's input over `feeds` (the group's
        inputs per observation) -> {tensor: [low, high]}; kept for `lower`."""
        import onnx
        from onnxruntime.quantization import CalibrationMethod, create_calibrator
        from onnxruntime.quantization import save_tensors_data
        path = os.path.join(workdir, 'calibrate.onnx')
        model = self._with_weights()
        onnx.save(model, path)
        calibrator = create_calibrator(path, ['MatMul'],
                                       os.path.join(workdir, 'calibrate.augmented.onnx'),
                                       calibrate_method=CalibrationMethod.MinMax)
        calibrator.collect_data(_Feeds(feeds))
        ranges = calibrator.compute_data()
        del calibrator
        self._ranges = os.path.join(workdir, 'ranges.json')
        save_tensors_data(ranges, self._ranges)
        self._count_macs(model, feeds[0])
        return {t: [float(np.asarray(ranges[t].range_value[0]).min()),
                    float(np.asarray(ranges[t].range_value[1]).max())]
                for t in sorted(set(self._reads.values())) if t in ranges}

    def _count_macs(self, model, feeds: dict) -> None:
        """Each candidate's multiply-adds per call, from the shapes of its MatMuls' inputs in
        one run of the model with those as outputs too."""
        import onnx
        import onnxruntime as ort
        reads = self._reads
        wanted = sorted(set(reads.values()) - {o.name for o in model.graph.output})
        model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(t) for t in wanted)
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=['CPUExecutionProvider'])
        rows = {t: int(np.prod(v.shape[:-1]))
                for t, v in zip(wanted, session.run(wanted, feeds))}
        dims = {i.name: tuple(i.dims) for i in self.model.graph.initializer}
        self.candidates = {
            name: dataclasses.replace(c, macs=sum(rows.get(reads[n], 0) for n in c.nodes)
                                      * int(np.prod(dims[c.weight])))
            for name, c in self.candidates.items()}

    def lower(self, layers, tag: str, folder: str = '') -> dict:
        """Write the group with `layers` in int8 into the artifact as
        groups/<group>/<tag>.onnx (+ .safetensors) -> its plan.json build entry. Needs
        `calibrate` first. `folder`: another artifact-relative folder for the two files (the
        planner's candidates go to a scratch folder it removes, so that the artifact ships
        the chosen model only)."""
        return self.lower_and_load(layers, tag, folder)[0]

    def lower_and_load(self, layers, tag: str, folder: str = '') -> tuple:
        """`lower` -> (its build entry, the group's runner of it on the CPU: the session whose
        optimised graph the integer-kernel check read, which the planner runs its trial on
        rather than loading the model a second time)."""
        import onnx
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
        if self._ranges is None:
            raise RuntimeError('Int8Lowering.lower: calibrate first')
        unknown = sorted(set(layers) - set(self.candidates))
        if unknown:
            raise PrecisionError(f'{self.group.name}: no int8 candidate layer {unknown}')
        base = os.path.join(folder or os.path.join('groups', self.group.name), tag)
        onnx_path = os.path.join(self.root, base + '.onnx')
        os.makedirs(os.path.dirname(onnx_path), exist_ok=True)
        nodes = [n for name in layers for n in self.candidates[name].nodes]
        with _quiet_preprocessing_advice():
            quantize_static(
                self._with_weights(fold=layers), onnx_path, None,
                quant_format=QuantFormat.QDQ, op_types_to_quantize=['MatMul'],
                nodes_to_quantize=nodes, per_channel=True,
                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                # a float output: ORT fuses the MatMul into MatMulIntegerToFloat
                extra_options={'WeightSymmetric': True, 'ActivationSymmetric': False,
                               'OpTypesToExcludeOutputQuantization': ['MatMul']},
                calibration_cache_path=self._ranges)
        model = onnx.load(onnx_path)
        weights = self._check_lowered(model, layers)
        _drop_unread(model)
        bindings = self._bind(model, onnx_path, base + '.safetensors')
        onnx.save(model, onnx_path)
        build = {**self.group.build, 'onnx': base + '.onnx', 'weights': bindings,
                 'int8_layers': sorted(layers), 'disabled_optimizers': list(DISABLED_OPTIMIZERS)}
        runner = _check_integer_kernels(dataclasses.replace(self.group, build=build), self.root,
                                        weights)
        return build, runner

    def _check_lowered(self, model, layers) -> dict:
        """-> {int8 weight initializer: layer}; refuses a layer the quantizer left float."""
        from onnx import TensorProto
        int8 = {i.name for i in model.graph.initializer
                if i.data_type in (TensorProto.INT8, TensorProto.UINT8)}
        producer = {out: node for node in model.graph.node for out in node.output}
        by_name = {n.name: n for n in model.graph.node}
        weights = {}
        for name in layers:
            for node_name in self.candidates[name].nodes:
                node = by_name.get(node_name)
                dq = producer.get(node.input[1]) if node is not None else None
                if dq is None or dq.op_type != 'DequantizeLinear' or dq.input[0] not in int8:
                    raise PrecisionError(
                        f'{self.group.name}: layer {name} was asked for in int8, but ONNX '
                        f'Runtime\'s quantizer left its MatMul {node_name} reading a float '
                        'weight; the build refuses rather than record it as int8')
                weights[dq.input[0]] = name
        return weights

    def _bind(self, model, onnx_path: str, rel: str) -> dict:
        """Every initializer as external data: the float weights still read where they were,
        what quantisation made in `rel` -> {initializer: {'file', 'tensor'}}."""
        from onnx import numpy_helper
        from safetensors.numpy import save_file
        made = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer
                if i.name not in self.bindings}
        save_file({k: np.require(v, requirements='C') for k, v in sorted(made.items())},
                  os.path.join(self.root, rel))
        offsets = {rel: safetensors_offsets(os.path.join(self.root, rel))}
        bindings = {}
        for init in model.graph.initializer:
            ref = self.bindings.get(init.name) or {'file': rel, 'tensor': init.name}
            if ref['file'] not in offsets:
                offsets[ref['file']] = safetensors_offsets(os.path.join(self.root,
                                                                        ref['file']))
            bindings[init.name] = ref
            point_at(init, self.root, onnx_path, ref['file'],
                     offsets[ref['file']][ref['tensor']])
        return dict(sorted(bindings.items()))


# ORT fuses a MatMul and its bias Add into a float Gemm before it fuses the int8 MatMul: a
# lowered group's sessions run without that fusion (plan.json `disabled_optimizers`)
DISABLED_OPTIMIZERS = ('MatMulAddFusion',)
INTEGER_KERNELS = ('MatMulIntegerToFloat', 'QLinearMatMul', 'MatMulInteger',
                   'DynamicQuantizeMatMul', 'QGemm')


def _check_integer_kernels(group, root: str, weights: dict):
    """Refuse, naming the layer, an int8 weight that ONNX Runtime's CPU provider would only
    dequantize and multiply in float (no integer kernel fused): int8 in the file, float in
    the run. `group`: the group with its lowered build (written at `root`, run without the
    graph optimizers its build names); `weights`: {int8 initializer: layer}. The check reads
    the graph that the group's own runner on the CPU optimised -> that runner."""
    import onnx
    with tempfile.TemporaryDirectory(prefix='lamp-int8-') as tmp:
        path = os.path.join(tmp, 'optimized.onnx')
        runner = OrtRunner(group, root, 'cpu', optimized_model=path)
        optimized = onnx.load(path, load_external_data=False)
    for node in optimized.graph.node:
        for name in node.input:
            if name in weights and node.op_type not in INTEGER_KERNELS:
                raise PrecisionError(
                    f'{group.name}: layer {weights[name]} is int8 in the model, but ONNX '
                    f'Runtime runs it as {node.op_type} (dequantized to float, no integer '
                    'kernel); '
                    'the build refuses rather than record it as int8')
    return runner


class _quiet_preprocessing_advice(logging.Filter):
    """Hide the quantizer's advice to run its shape pre-processing (a root-logger warning on
    every call): the weights it needs are folded here, and the plan verifies every result."""

    def filter(self, record) -> bool:
        return 'pre-processing' not in record.getMessage()

    def __enter__(self):
        logging.getLogger().addFilter(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger().removeFilter(self)


def _drop_unread(model) -> None:
    """Remove initializers no node reads (a folded weight's float original, say)."""
    read = {name for node in model.graph.node for name in node.input} | \
        {o.name for o in model.graph.output}
    keep = [i for i in model.graph.initializer if i.name in read]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
