"""ONNX op converters: each turns one ONNX node into torch calls on a ``Builder`` (``septran/onnx/builder.py``).

``CONVERTERS`` maps an op type (default domain) to ``fn(b, n) -> list of output values``, ``n`` being a
``Node`` view (inputs as values, attributes decoded, the opset). The ops are torch functions the SepTran rewrite
knows where one exists (``torch.matmul``, ``F.linear``, ``torch.softmax``, ``F.layer_norm``, ``F.rms_norm``,
``F.scaled_dot_product_attention``, ``F.gelu``, elementwise math), so the same patterns take them.
"""
from __future__ import annotations

from septran.onnx.ops import attention, elementwise, nn, reduce, shape  # noqa: F401 - they fill the table
from septran.onnx.ops.registry import CONVERTERS, op  # noqa: F401
