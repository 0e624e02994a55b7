"""``septran.compile_onnx(model)``: an ONNX model as a callable on torch tensors or NumPy arrays.

The model is imported per call signature (input shapes, dtypes, device): ``graph.import_graph`` builds an FX
graph of torch calls with shape arithmetic folded, ``route.compile_fx`` takes it the way
``torch.compile(backend="septran")`` takes a captured graph (AOTAutograd, the rewrite, SepTran kernels for what
the patterns know, torch for the rest). ``model.report()`` says, ONNX node by ONNX node, what ran where.
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

import torch

from septran.onnx.errors import OnnxError

log = logging.getLogger(__name__)


class OnnxModel:
    """What ``compile_onnx`` returns. Call it with the graph's inputs, positionally or by name; torch tensors
    give torch tensors, NumPy arrays give NumPy arrays; one output comes back alone, several as a tuple."""

    def __init__(self, proto, name: str):
        from septran.onnx.dtypes import to_torch
        from septran.onnx.graph import graph_inputs, initializers

        self.proto, self.name = proto, name
        self._inputs = graph_inputs(proto)
        self.input_names = [i.name for i in self._inputs]
        self.output_names = [o.name for o in proto.graph.output]
        self._dtypes = [to_torch(i.type.tensor_type.elem_type) for i in self._inputs]
        self._consts = initializers(proto)
        self._compiled: dict = {}
        self._last = None

    # -- the inputs ---------------------------------------------------------------------------------------------

    def input_dtypes(self) -> list[torch.dtype]:
        return list(self._dtypes)

    def _bind(self, args, kwargs) -> tuple[list[torch.Tensor], bool]:
        from septran.onnx.dtypes import tensor_from_numpy

        if len(args) > len(self.input_names):
            raise OnnxError(f"{self.name}: {len(args)} inputs given, the model takes {len(self.input_names)} "
                            f"({', '.join(self.input_names)})")
        given = dict(zip(self.input_names, args))
        for k, v in kwargs.items():
            if k not in self.input_names:
                raise OnnxError(f"{self.name}: the model has no input {k!r}", hint=f"its inputs: {', '.join(self.input_names)}")
            if k in given:
                raise OnnxError(f"{self.name}: input {k!r} given twice")
            given[k] = v
        missing = [n for n in self.input_names if n not in given]
        if missing:
            raise OnnxError(f"{self.name}: input {missing[0]!r} is missing", hint=f"its inputs: {', '.join(self.input_names)}")
        numpy_in = False
        tensors = []
        for name, want, shape in zip(self.input_names, self._dtypes, self.static_shapes_any()):
            v = given[name]
            if not isinstance(v, torch.Tensor):
                numpy_in = True
                v = tensor_from_numpy(v)
            if v.dtype != want:
                raise OnnxError(f"{self.name}: input {name!r} is {str(v.dtype).removeprefix('torch.')}, the model "
                                f"declares {str(want).removeprefix('torch.')}")
            if shape is not None and not (v.numel() == 1 and len(shape) <= 1):  # a scalar as one element: taken
                if len(shape) != v.dim() or any(s is not None and s != d for s, d in zip(shape, v.shape)):
                    text = "x".join("?" if s is None else str(s) for s in shape)
                    raise OnnxError(f"{self.name}: input {name!r} has shape {tuple(v.shape)}, the model declares {text}")
            tensors.append(v)
        return tensors, numpy_in

    def static_shapes_any(self) -> list[Optional[tuple]]:
        """Each input's declared shape with None for a dimension left free; None when the rank is not declared."""
        out = []
        for i in self._inputs:
            tt = i.type.tensor_type
            out.append(tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
                       if tt.HasField("shape") else None)
        return out

    # -- compiling and running ----------------------------------------------------------------------------------

    def _entry(self, tensors: list[torch.Tensor]):
        key = tuple((tuple(t.shape), t.dtype, t.device) for t in tensors)
        entry = self._compiled.get(key)
        if entry is None:
            entry = self._compile(tensors)
            self._compiled[key] = entry
        self._last = entry
        return entry

    def _compile(self, tensors):
        from septran.onnx.graph import import_graph
        from septran.onnx.report import onnx_report
        from septran.onnx.route import compile_fx

        imported = import_graph(self.proto, self.name, tensors, self._consts)
        device = tensors[0].device if tensors else torch.zeros(()).cpu().device  # no inputs: the host
        gm = imported.module.to(device)
        run, aten, origin = compile_fx(gm, list(tensors), imported.labels)
        report = onnx_report(self.name, self.proto.graph.node, aten, origin, imported.folded)
        log.info("septran: %s", report.summary())
        return run, report

    def compile(self, *args, **kwargs) -> "OnnxModel":
        """Imports and builds for these inputs now (the first call would), without running."""
        tensors, _ = self._bind(args, kwargs)
        self._entry(tensors)
        return self

    def __call__(self, *args, **kwargs):
        from septran.onnx.dtypes import numpy_from_tensor

        tensors, numpy_in = self._bind(args, kwargs)
        run, _ = self._entry(tensors)
        with torch.no_grad():
            outs = list(run(*tensors))
        if numpy_in:
            outs = [numpy_from_tensor(o) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def report(self):
        """The report of the signature compiled last (``OnnxReport``): one row per ONNX node."""
        if self._last is None:
            raise OnnxError(f"{self.name}: nothing compiled yet", hint="call the model (or .compile(...)) first")
        return self._last[1]

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {str(d).removeprefix('torch.')}" for n, d in zip(self.input_names, self._dtypes))
        return f"<septran.OnnxModel {self.name} ({ins}) -> {', '.join(self.output_names)}; {len(self._compiled)} compiled>"


def compile_onnx(model, example_inputs: Optional[Sequence] = None) -> OnnxModel:
    """An ONNX model (a path, bytes or an ``onnx.ModelProto``) as a callable on torch tensors or NumPy arrays.

    Nodes SepTran's patterns know (Gemm and MatMul with their epilogues, Softmax, LogSoftmax, LayerNormalization,
    RMSNormalization, Attention, Conv, chains of elementwise math) run as SepTran kernels; the rest in torch.
    Each new input signature is imported and built at its first call, or now for ``example_inputs``.
    ``model.report()`` says which ONNX nodes ran in SepTran kernels.
    """
    from septran.onnx.load import load

    proto, name = load(model)
    compiled = OnnxModel(proto, name)
    if example_inputs is not None:
        compiled.compile(*example_inputs)
    return compiled
