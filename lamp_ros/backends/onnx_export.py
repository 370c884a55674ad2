"""torch -> ONNX for the onnxruntime backend, with either of torch's two exporters.

The torch.export-based exporter (`dynamo=True`) is the maintained one: it exports what the
TorchScript exporter cannot (it traces through Python control flow that TorchScript would bake
in or refuse) and runs onnxscript's optimiser on the result (here without folding anything
into a weight, so each weight stays stored once). The TorchScript exporter is
deprecated but exports a large model several times faster (docs/spec.md has pi05_tiny's
figures) and writes the same function. So the spec chooses (`build.onnx_exporter`):

- `auto`: torch.export where it works; where it fails, the TorchScript exporter, the failure
  said at compile time and kept in evidence/build.json;
- `dynamo` / `torchscript`: only that one, a failure is the build's error.

The group's plan.json `build.exporter` says which exporter wrote the file. Either way, the model
comes back in memory with its weights as named initializers (`stages.<node>.<param>`), which
the caller binds to the safetensors files; the torch.export-based exporter's per-node metadata
(source stack traces with the build machine's paths, FX node text) is dropped, so the file
depends on the model, not on where it was built.
"""

from contextlib import contextmanager
import logging
import re
import warnings

from lamp_ros.spec.build_options import ONNX_EXPORTERS


# Loggers of the torch.export-based exporter and its optimiser: info lines per skipped fold,
# warnings for torchvision operators it cannot register. Quiet while exporting.
_CHATTY_LOGGERS = ('torch.onnx', 'torch.export', 'torch._dynamo', 'onnxscript', 'onnx_ir')


class ExportError(ValueError):
    """The chosen exporter could not export the group (the message says which and why)."""


@contextmanager
def without_fastpath(torch):
    """torch.nn's transformer layers, in inference, take a fused "fast path" (nested tensors,
    `aten::_native_multi_head_attention`) that no exporter can write; off, they run as their
    plain operators, the same function. Restored afterwards."""
    was = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(was)


@contextmanager
def _quiet():
    levels = {}
    for name in _CHATTY_LOGGERS:
        logger = logging.getLogger(name)
        levels[name] = logger.level
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _strip_metadata(graph) -> None:
    for node in graph.node:
        del node.metadata_props[:]
        node.doc_string = ''
        for attribute in node.attribute:
            if attribute.HasField('g'):
                _strip_metadata(attribute.g)
            for sub in attribute.graphs:
                _strip_metadata(sub)


def _dynamo(torch, module, args, opset, input_names, output_names, weight_prefix):
    from onnxscript.optimizer import optimize_ir

    program = torch.onnx.export(module, tuple(args), None, dynamo=True, opset_version=opset,
                                input_names=input_names, output_names=output_names,
                                optimize=False, verbose=False, report=False)

    def reads_no_weight(node):
        """Folding an operator on a weight (a transposed projection) would store a second,
        derived copy of it in the ONNX file; ONNX Runtime folds those in memory at load."""
        for value in node.inputs:
            if value is not None and value.is_initializer() and \
                    (value.name or '').startswith(weight_prefix):
                return False
        return None  # the optimiser's own choice
    optimize_ir(program.model, should_fold=reads_no_weight)
    model = program.model_proto
    _strip_metadata(model.graph)
    for function in model.functions:
        for node in function.node:
            del node.metadata_props[:]
    del model.metadata_props[:]
    return model


def _torchscript(torch, module, args, path, opset, input_names, output_names):
    import onnx
    # Without constant folding, so that every weight stays a named initializer.
    torch.onnx.export(module, tuple(args), path, dynamo=False, opset_version=opset,
                      input_names=input_names, output_names=output_names,
                      do_constant_folding=False)
    return onnx.load(path)


def _first_line(exc: BaseException) -> str:
    """The root cause's first line (torch.onnx wraps it in errors about next steps), without
    terminal colours."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = re.sub(r'\x1b\[[0-9;]*m', '', str(exc)).strip().splitlines()
    return f'{type(exc).__name__}: {text[0] if text else ""}'[:300]


def export_model(module, args, path: str, opset: int, input_names: list, output_names: list,
                 weight_prefix: str, exporter: str = 'auto', say=None) -> tuple:
    """Export `module(*args)` -> (onnx.ModelProto with weights as initializers, the exporter
    used, the torch.export-based exporter's failure where `auto` fell back, else None).
    `path`: where the TorchScript exporter may write (the caller saves the final file there);
    `weight_prefix`: the initializer names of weights, which no operator is folded into."""
    import torch

    if exporter not in ONNX_EXPORTERS:
        raise ExportError(f'build.onnx_exporter: {exporter!r} not in {ONNX_EXPORTERS}')
    with torch.no_grad(), without_fastpath(torch), _quiet():
        if exporter in ('auto', 'dynamo'):
            try:
                return (_dynamo(torch, module, args, opset, input_names, output_names,
                                weight_prefix),
                        'dynamo', None)
            except Exception as exc:  # noqa: BLE001 - any export failure: fall back or report
                if exporter == 'dynamo':
                    raise ExportError(f'the torch.export-based ONNX exporter failed '
                                      f'({_first_line(exc)}); build.onnx_exporter: auto or '
                                      f'torchscript would try the TorchScript one') from exc
                failure = _first_line(exc)
                if say:
                    say(f'torch.export-based ONNX export failed ({failure}); exporting with '
                        f'TorchScript')
        else:
            failure = None
        try:
            model = _torchscript(torch, module, args, path, opset, input_names, output_names)
        except Exception as exc:  # noqa: BLE001 - the last exporter: say both failures
            before = f'; the torch.export-based one: {failure}' if failure else \
                ('; build.onnx_exporter: auto or dynamo would try the torch.export-based one'
                 if exporter == 'torchscript' else '')
            raise ExportError(f'the TorchScript ONNX exporter failed ({_first_line(exc)})'
                              f'{before}') from exc
        return model, 'torchscript', failure
