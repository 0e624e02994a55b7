"""The shipped logic files (``examples/<op>/<op>.py``) and mappings the model level compiles.

The model's mappings are the shipped ones with sequence-like dimensions made dynamic (one build serves every
length): the dynamic axes are added to the shipped text here, so that the model follows the shipped tuning
spaces and every target that has the operator's mapping has the model's too.
"""
from __future__ import annotations

import functools
import types
from pathlib import Path

from septran import resources
from septran.errors import MappingError
from septran.mapping.schema import Mapping, parse_mapping
from septran.mapping.yaml_source import read_mapping_text
from septran.runtime.select import load_logic_file

EXAMPLES = resources._packaged("examples")  # noqa: SLF001 - septran/examples in a wheel that ships it, else the tree's


@functools.lru_cache(maxsize=None)
def example(op: str) -> types.ModuleType:
    """The module of ``examples/<op>/<op>.py`` (loaded once)."""
    return load_logic_file(EXAMPLES / op / f"{op}.py")


def mapping_file(target: str, op: str, *fallbacks: str) -> Path:
    """``<target>/<op>.yaml`` (else the first of ``fallbacks`` there: ``gemm_model``, then ``gemm``) from the
    mapping folders (the user's first), or a MappingError naming the op."""
    for name in (op, *fallbacks):
        for folder in resources.mapping_folders():
            path = folder / target / f"{name}.yaml"
            if path.is_file():
                return path
    raise MappingError(f"no mapping of operator {op!r} for target {target!r}: the model level cannot run it there",
                       hint=f"write mappings/{target}/{(op, *fallbacks)[-1]}.yaml")


@functools.lru_cache(maxsize=None)
def mapping(target: str, op: str, dynamic: tuple = ()) -> Mapping:
    """The shipped mapping of ``op`` on ``target`` with ``dynamic`` ((parameter, (axes...)), ...) added."""
    path = mapping_file(target, op)
    text = read_mapping_text(path)
    if dynamic:
        axes = ", ".join(f"{p}: [{', '.join(str(int(a)) for a in dims)}]" for p, dims in dynamic)
        text += "\ndynamic: {" + axes + "}\n"
    return parse_mapping(text, str(path))


def kernel(key: tuple, target: str, op: str, logic, dynamic: tuple = ()):
    """The kernel cached under ``key``: ``logic()`` compiled with ``op``'s shipped mapping on ``target``, ``dynamic``
    added (``logic`` is called only on the first use)."""
    import septran
    from septran.model import kernels

    return kernels.kernel(key, lambda: septran.compile(logic(), mapping(target, op, dynamic), target=target))
