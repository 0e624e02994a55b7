"""An ONNX graph -> an FX ``GraphModule`` of torch calls, specialised to the shapes and dtypes of one call.

Initializers become constants; each node goes through its converter (``septran/onnx/ops``) in graph order
(ONNX requires a topological order). What the converters compute from constants only folds at import.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from septran.onnx.builder import Builder
from septran.onnx.errors import OnnxError, where
from septran.onnx.node import Node


@dataclass(frozen=True)
class Imported:
    module: torch.fx.GraphModule
    labels: dict  # stack_trace label -> ONNX node index
    folded: frozenset  # indices of ONNX nodes computed at import (constants only)


def opset_of(model) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return 1


def initializers(model) -> dict:
    from onnx import numpy_helper

    from septran.onnx.dtypes import tensor_from_numpy

    return {t.name: tensor_from_numpy(numpy_helper.to_array(t)) for t in model.graph.initializer}


def graph_inputs(model) -> list:
    """The graph's inputs a caller passes (those that are not initializers)."""
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def label(index: int, node) -> str:
    return f'ONNX node {index} "{node.name}" ({node.op_type})'


def import_graph(model, name: str, inputs: list[torch.Tensor], consts: dict) -> Imported:
    from septran.onnx.ops import CONVERTERS

    b = Builder()
    values: dict = dict(consts)
    for vi, x in zip(graph_inputs(model), inputs):
        values[vi.name] = b.input(vi.name, x)
    opset = opset_of(model)
    labels, folded = {}, set()
    for index, proto in enumerate(model.graph.node):
        here = where(name, index, proto)
        if proto.domain not in ("", "ai.onnx"):
            raise OnnxError(f"{here}: ops of domain {proto.domain!r} are not taken", hint="only the default ONNX domain")
        convert = CONVERTERS.get(proto.op_type)
        if convert is None:
            raise OnnxError(f"{here}: SepTran's ONNX importer does not know {proto.op_type}",
                            hint="known ops: " + ", ".join(sorted(CONVERTERS)))
        missing = [i for i in proto.input if i and i not in values]
        if missing:
            raise OnnxError(f"{here}: input {missing[0]!r} is computed by no earlier node",
                            hint="ONNX graphs list nodes in topological order; subgraphs are not taken")
        args = [values[i] if i else None for i in proto.input]
        b.label = label(index, proto)
        labels[b.label] = index
        try:
            outs = convert(b, Node(proto, args, opset, here, b))
        except OnnxError:
            raise
        except Exception as err:  # a converter's torch call refused what the model gives it
            raise OnnxError(f"{here}: could not be imported: {type(err).__name__}: {err}",
                            hint="check the node against the ONNX operator's specification") from err
        if all(isinstance(o, torch.Tensor) or o is None for o in outs):
            folded.add(index)
        for out_name, v in zip(proto.output, outs):
            if out_name:
                values[out_name] = v
    b.label = ""
    try:
        results = [values[o.name] for o in model.graph.output]
    except KeyError as err:
        raise OnnxError(f"{name}: graph output {err.args[0]!r} is computed by no node") from None
    return Imported(b.output(results), labels, frozenset(folded))
