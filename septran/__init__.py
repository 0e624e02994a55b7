"""SepTran: an operator's logic written once, mapped to each target by a YAML file.

    from septran import task          # write the logic
    kernel = septran.compile(logic_file="examples/gemm/gemm.py", mapping_file="mappings/sm90/gemm.yaml")
    c = kernel(a, b)
"""
import logging

from septran.errors import (
    BuildError,
    CallError,
    DeviceError,
    FrontendError,
    InternalError,
    LoweringError,
    MappingError,
    SepTranError,
    SourceLoc,
)
from septran.frontend import task
from septran.api import JITKernel, compile, jit
from septran.runtime.kernel import Kernel
from septran.runtime.variant import Variant
from septran.target import available_targets
from septran.tuning.api import TuneResult, tune

from septran.version import __version__

_MODEL = ("compile_model", "explain_model")  # the model level imports torch._dynamo: only when asked for


def __getattr__(name: str):
    if name == "compile_onnx":  # septran.onnx imports onnx only when a model is compiled
        from septran.onnx import compile_onnx

        return compile_onnx
    if name in _MODEL:
        from septran.model import api

        return getattr(api, name)
    if name == "profile":
        from septran.model.profile import profile

        return profile
    if name in ("precompile", "load_precompiled"):
        from septran.model import precompile

        return getattr(precompile, name)
    raise AttributeError(f"module 'septran' has no attribute {name!r}")

__all__ = [
    "task", "compile", "jit", "tune", "TuneResult", "Kernel", "JITKernel", "Variant", "available_targets",
    "SepTranError", "FrontendError", "MappingError", "LoweringError", "BuildError", "CallError", "DeviceError",
    "InternalError", "SourceLoc", "__version__", "compile_model", "explain_model", "compile_onnx", "profile",
    "precompile", "load_precompiled",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
