"""The converter table: ``@op("Add", ...)`` registers ``fn(b, n) -> list of output values`` for those op types
(the default ONNX domain). ``septran.onnx.ops`` imports the modules that fill it."""
from __future__ import annotations

from typing import Callable

CONVERTERS: dict[str, Callable] = {}


def op(*names: str):
    def register(fn):
        for name in names:
            CONVERTERS[name] = fn
        return fn

    return register
