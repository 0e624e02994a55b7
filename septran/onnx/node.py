"""A view of one ONNX node for the converters: its inputs as builder values, its attributes decoded, its
opset, and located errors."""
from __future__ import annotations

from typing import Any

import torch

from septran.onnx.builder import Builder, is_const
from septran.onnx.errors import OnnxError


class Node:
    def __init__(self, proto, inputs: list, opset: int, where: str, builder: Builder):
        from onnx import helper

        self.proto = proto
        self.op_type = proto.op_type
        self.inputs = inputs  # a value per input; None for an absent (empty-named) one
        self.opset = opset
        self.where = where
        self.b = builder
        self.attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
        self.n_outputs = len(proto.output)

    def attr(self, name: str, default: Any = None) -> Any:
        v = self.attrs.get(name, default)
        return v.decode() if isinstance(v, bytes) else v

    def input(self, i: int):
        return self.inputs[i] if i < len(self.inputs) else None

    def wants(self, i: int) -> bool:
        """Whether output ``i`` is named (an optional output left empty is not computed)."""
        return i < len(self.proto.output) and self.proto.output[i] != ""

    def const(self, i: int) -> torch.Tensor | None:
        """Input ``i`` as a constant (None when absent); refused when it is only known at run time."""
        v = self.input(i)
        if v is None or is_const(v):
            return v
        raise self.error(f"input {i} ({self.proto.input[i]}) must be known when the model is imported (a constant, "
                         "an initializer, or computed from shapes only), but it depends on the model's inputs",
                         hint="SepTran specialises the graph to the input shapes; data-dependent shapes are not taken")

    def ints(self, i: int) -> list[int] | None:
        t = self.const(i)
        return None if t is None else [int(x) for x in t.reshape(-1).tolist()]

    def error(self, message: str, hint: str | None = None) -> OnnxError:
        return OnnxError(f"{self.where}: {message}", hint=hint)

    def shape(self, i: int) -> tuple:
        v = self.inputs[i]
        return tuple((v if is_const(v) else v.meta["val"]).shape)

    def dtype(self, i: int) -> torch.dtype:
        v = self.inputs[i]
        return (v if is_const(v) else v.meta["val"]).dtype

    def call(self, fn, *args, **kwargs):
        return self.b.call(fn, *args, **kwargs)
