"""Reading an ONNX model: a path, bytes or an ``onnx.ModelProto``; checked with ``onnx.checker`` so a malformed
model is refused here with onnx's reason, not deep in the import."""
from __future__ import annotations

import os
from typing import Union

from septran.onnx.errors import OnnxError

HINT = "install the ONNX extra: pip install 'septran[onnx]'"


def require_onnx():
    try:
        import onnx
    except ImportError as err:
        raise OnnxError(f"the onnx package is not installed ({err})", hint=HINT) from None
    return onnx


def load(model: Union[str, os.PathLike, bytes, "onnx.ModelProto"]):  # noqa: F821
    """``(ModelProto, name)``: the model and what errors call it (its file name, or ``<bytes>``/``<model>``)."""
    onnx = require_onnx()
    if isinstance(model, onnx.ModelProto):
        proto, name = model, model.graph.name or "<model>"
    elif isinstance(model, (bytes, bytearray)):
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as err:  # noqa: BLE001 - protobuf's DecodeError and others
            raise OnnxError(f"<bytes>: not an ONNX model: {type(err).__name__}: {err}") from None
        name = "<bytes>"
    elif isinstance(model, (str, os.PathLike)):
        name = os.fspath(model)
        if not os.path.isfile(name):
            raise OnnxError(f"{name}: no such file", hint="pass the path of a .onnx file, its bytes or a ModelProto")
        try:
            proto = onnx.load(name)
        except Exception as err:  # noqa: BLE001
            raise OnnxError(f"{name}: not an ONNX model: {type(err).__name__}: {err}") from None
    else:
        raise OnnxError(f"compile_onnx takes a path, bytes or an onnx.ModelProto, not {type(model).__name__}")
    try:
        onnx.checker.check_model(proto)
    except Exception as err:  # noqa: BLE001 - onnx's ValidationError
        raise OnnxError(f"{name}: onnx.checker refuses the model: {err}".rstrip()) from None
    return proto, name
