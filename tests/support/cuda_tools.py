"""Reading CUDA without a GPU: source-only lowering, comparison up to names, nvcc resource usage."""
from __future__ import annotations

import re

from septran.tuning.nvcc import nvcc_path, resource_usage as nvcc_resource_usage  # noqa: F401  (the tests' names)


def lower_device_source(prim_func, target_dict) -> str:
    """The device source TileLang generates for ``prim_func`` (no build, no GPU).

    Source-only lowering needs the target as the current context, else TileLang
    stops with "Target context required"; ``target_dict`` is a dict because string
    targets with options are rejected.
    """
    import tilelang
    import tvm

    t = tvm.target.Target(target_dict)
    with tvm.transform.PassContext(opt_level=3), t:
        return tilelang.lower(prim_func, target=t).kernel_source


_KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(")


def normalize_cuda(src: str) -> str:
    """Two sources equal after this differ at most in comments, kernel names and trailing blanks.

    Kernel names follow the prim_func's name (``main_kernel``, ``gemm_host_kernel``),
    which says nothing about the code; everything else (bounds, instructions,
    buffer sizes) is left as it is.
    """
    names = set(_KERNEL.findall(src))
    out = []
    for line in src.splitlines():
        if line.lstrip().startswith("//"):
            continue
        for name in names:
            line = re.sub(rf"\b{re.escape(name)}\b", "KERNEL", line)
        out.append(line.rstrip())
    return "\n".join(out).strip() + "\n"


_IDENT = re.compile(r"[A-Za-z_]\w*")


def canonical_names(src: str) -> str:
    """``src`` with every identifier renamed by order of first appearance (id0, id1, ...).

    Two sources equal after this differ only by a consistent renaming: the same
    statements, in the same order, on the same buffers.
    """
    names: dict[str, str] = {}
    return _IDENT.sub(lambda m: names.setdefault(m.group(0), f"id{len(names)}"), src)
