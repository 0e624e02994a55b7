"""ONNX element types <-> torch dtypes, and NumPy arrays (bfloat16 from ml_dtypes too) <-> torch tensors."""
from __future__ import annotations

import numpy as np
import torch

# TensorProto.DataType numbers (onnx.proto); read here so this module needs no onnx import.
TORCH = {
    1: torch.float32, 2: torch.uint8, 3: torch.int8, 4: torch.uint16, 5: torch.int16, 6: torch.int32,
    7: torch.int64, 9: torch.bool, 10: torch.float16, 11: torch.float64, 12: torch.uint32, 13: torch.uint64,
    16: torch.bfloat16,
}
ONNX = {v: k for k, v in TORCH.items()}
NAMES = {"float32": torch.float32, "float": torch.float32, "float16": torch.float16, "half": torch.float16,
         "bfloat16": torch.bfloat16, "float64": torch.float64, "double": torch.float64, "int64": torch.int64,
         "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}


def to_torch(elem_type: int) -> torch.dtype:
    from septran.onnx.errors import OnnxError

    if elem_type not in TORCH:
        raise OnnxError(f"ONNX element type {elem_type} has no torch dtype SepTran uses",
                        hint="float32, float16, bfloat16, float64 and the integer and bool types are taken")
    return TORCH[elem_type]


def tensor_from_numpy(a) -> torch.Tensor:
    """A torch tensor of ``a`` (a NumPy array or scalar; ml_dtypes' bfloat16 arrays too), on the CPU."""
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":  # ml_dtypes: same bits as torch.bfloat16
        return torch.from_numpy(np.ascontiguousarray(a).view(np.uint16).astype(np.int16)).view(torch.bfloat16)
    if not a.flags.writeable:
        a = a.copy()
    return torch.from_numpy(np.ascontiguousarray(a))


def numpy_from_tensor(t: torch.Tensor):
    """A NumPy array of ``t`` (bfloat16 as ml_dtypes' bfloat16 when it is installed, else float32)."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        try:
            import ml_dtypes

            return t.view(torch.int16).numpy().view(np.uint16).view(ml_dtypes.bfloat16)
        except ImportError:
            return t.float().numpy()
    return t.numpy()
