"""The ONNX front door's user errors: a model SepTran cannot read, a node it cannot import, a call that does
not fit the model. Each names the model and, where there is one, the node (its index, name and op)."""
from __future__ import annotations

from septran.errors import SepTranError


class OnnxError(SepTranError):
    """An ONNX model SepTran cannot import or run as called."""

    stage = "onnx"


def where(model: str, index: int | None = None, node=None) -> str:
    """``model.onnx, node 3 "MatMul_0" (MatMul)``: the place an ONNX error names."""
    if node is None:
        return model
    name = f' "{node.name}"' if node.name else ""
    return f"{model}, node {index}{name} ({node.op_type})"
