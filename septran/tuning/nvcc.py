"""Registers and spills of CUDA kernels without a GPU: nvcc builds the cubin and ptxas reports.

The pruning pass reads this for the points of a space that survive the static
checks; the tests read it to prove that the shipped mappings do not spill.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from septran.build.toolchain import nvcc_path  # noqa: F401  (found where the other compilers are)

_USAGE = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
REGISTERS_PER_SM = 65536  # every NVIDIA architecture SepTran targets (sm_80, sm_90)


def resource_usage(cuda_src: str, arch: str, timeout: float = 300) -> dict:
    """Registers, spills and stack of the kernels in ``cuda_src``, from ptxas (max over kernels).

    nvcc builds the cubin with TileLang's own headers. Dynamic shared memory is
    never reported by ptxas, so it is not returned.
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
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
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
