"""ONNX models in: ``septran.compile_onnx(model)`` imports an ONNX graph into FX and runs it through the model
level (``septran/model``): the same rewrite, kernels and report as ``torch.compile(backend="septran")``.

Modules: ``load`` (path, bytes or ModelProto; checked), ``graph`` (ONNX graph -> FX, per input signature),
``builder`` (constants folded, shapes known), ``node`` and ``ops/`` (one converter per ONNX op), ``route``
(AOTAutograd and the model level's compiler), ``report`` (per ONNX node), ``api`` (the callable), ``cli``
(``septran run model.onnx``). Needs the ``onnx`` extra; ``import septran`` never imports onnx.
"""
from __future__ import annotations


def compile_onnx(model, example_inputs=None):
    from septran.onnx.api import compile_onnx as _compile

    return _compile(model, example_inputs)


compile_onnx.__doc__ = "See ``septran.onnx.api.compile_onnx``."
__all__ = ["compile_onnx"]
