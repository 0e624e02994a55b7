"""Where the model level finds the shipped logic files and the mappings its kernels use.

Logic files are the repository's ``examples/<op>/<op>.py`` (``examples/`` sits next to ``septran/``; the wheel
does not ship it yet); a mapping is ``<folder>/<target>/<name>.yaml`` in the folders ``septran.resources`` searches (the user's first), where
``name`` is the model's variant (``gemm_epilogue_model``: dynamic rows) when there is one, else the op's own.
"""
from __future__ import annotations

import functools

from septran import resources
from septran.errors import MappingError
from septran.runtime.select import load_logic_file

EXAMPLES = resources._packaged("examples")  # noqa: SLF001 - septran/examples in a wheel that ships it, else the tree's


@functools.lru_cache(maxsize=None)
def logic_module(op: str):
    """The module of ``examples/<op>/<op>.py``, loaded once."""
    return load_logic_file(EXAMPLES / op / f"{op}.py")


def mapping_file(target: str, *names: str) -> Path:
    """The first of ``names`` that some mapping folder holds for ``target`` (``gemm_model``, then ``gemm``)."""
    for name in names:
        for folder in resources.mapping_folders():
            path = folder / target / f"{name}.yaml"
            if path.is_file():
                return path
    raise MappingError(f"no mapping {' or '.join(n + '.yaml' for n in names)} for the target {target!r}",
                       hint=f"add mappings/{target}/{names[-1]}.yaml")
