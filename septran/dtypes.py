"""Element types SepTran knows, and the rule that gives an output its type.

A target lists those it supports (target.yaml ``dtypes``); a target may take some
by converting them (``converts: {bfloat16: float32}``: the runtime hands the
program float32 copies and converts the outputs back).
"""
from __future__ import annotations

from typing import Mapping, Optional

DTYPES = ("float16", "bfloat16", "float32", "int32", "int64", "bool")
FLOATS = ("float16", "bfloat16", "float32", "float64")


def output_dtype(name: str, declared: Mapping[str, str], inputs: Mapping[str, str]) -> str:
    """An output's type when the caller does not pass it: ``@task.define(dtype={name: ...})`` on the entry task
    (a type's name, or an input's name: its type), else the first floating-point input's (in parameter order),
    else float32. ``inputs``: name -> dtype, in parameter order."""
    want: Optional[str] = declared.get(name)
    if want is not None:
        return inputs.get(want, want)
    return next((d for d in inputs.values() if d in FLOATS), "float32")
