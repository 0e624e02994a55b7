"""Reading CUDA without a GPU: source-only lowering, comparison up to names, nvcc resource usage."""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path


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


def nvcc_path() -> str | None:
    """nvcc on PATH, else the default CUDA install; None where there is none (tests skip)."""
    found = shutil.which("nvcc")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/nvcc")
    return str(default) if default.exists() else None


_USAGE = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def nvcc_resource_usage(cuda_src: str, arch: str) -> dict:
    """Registers, spills and stack of the kernels in ``cuda_src``, from ptxas (max over kernels).

    This is how register pressure is checked with no GPU: nvcc builds the cubin
    with TileLang's own headers and ptxas reports per kernel. Dynamic shared
    memory is never reported by ptxas, so it is not returned.
    """
    import tilelang

    tl = Path(tilelang.__file__).parent
    nvcc = nvcc_path()
    if nvcc is None:
        raise RuntimeError("nvcc not found")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "x.cu"
        src.write_text(cuda_src)
        cmd = [nvcc, "-cubin", "-O3", "-std=c++20", f"-arch={arch}", "-w", "--resource-usage",
               f"-I{tl / 'src'}", f"-I{tl / '3rdparty' / 'cutlass' / 'include'}", str(src), "-o", str(Path(tmp) / "x.cubin")]
        done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"nvcc failed:\n{done.stderr[-4000:]}")
    text = done.stdout + done.stderr
    regs = [int(m) for m in _USAGE.findall(text)]
    spills = [tuple(map(int, m)) for m in _SPILL.findall(text)]
    if not regs:
        raise RuntimeError(f"no resource usage in nvcc's output:\n{text[-2000:]}")
    return {
        "registers": max(regs),
        "stack": max((s[0] for s in spills), default=0),
        "spill_stores": max((s[1] for s in spills), default=0),
        "spill_loads": max((s[2] for s in spills), default=0),
    }


_IDENT = re.compile(r"[A-Za-z_]\w*")


def canonical_names(src: str) -> str:
    """``src`` with every identifier renamed by order of first appearance (id0, id1, ...).

    Two sources equal after this differ only by a consistent renaming: the same
    statements, in the same order, on the same buffers.
    """
    names: dict[str, str] = {}
    return _IDENT.sub(lambda m: names.setdefault(m.group(0), f"id{len(names)}"), src)
