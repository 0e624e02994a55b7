"""Reading CUDA without a GPU: source-only lowering, comparison up to names, nvcc resource usage."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

from septran.tuning.nvcc import nvcc_path, resource_usage  # noqa: F401  (the tests' names)


# nvcc's answers recorded in the repository, as goldens are: CI's fresh clone has no cache, and nvcc (not the code
# under test) was a fifth of the suite's time. A record holds only for the exact source, arch, nvcc and TileLang
# versions (its name is their hash): a changed kernel runs nvcc again. SEPTRAN_TEST_NVCC=record writes the records a
# run asks for (then commit tests/golden/nvcc/); =fresh ignores them. test_nvcc_records.py checks a record against
# a fresh nvcc run.
RECORDS = Path(__file__).resolve().parents[1] / "golden" / "nvcc"


def nvcc_resource_usage(cuda_src, arch: str, fresh: bool = False) -> dict:
    """``septran.tuning.nvcc.resource_usage``, remembered by content: several tests ask nvcc about the same kernel
    (a shipped mapping's, a hand-written one), and one nvcc run takes seconds. The answer is read from the
    repository's records (tests/golden/nvcc/), else from SEPTRAN_CACHE_DIR/test-nvcc/, keyed by the source, the
    arch, nvcc's version and TileLang's (whose headers it compiles with), so it holds within a run (xdist workers
    share it) and across runs. Failures are not kept. ``fresh``: run nvcc whatever is recorded.

    A septran Variant may be passed for ``cuda_src``: its answer is then also found by the variant's build key
    (``Job.key``: SepTran's emitted source, the builder's flags, the versions; known before TileLang lowers
    anything), so a recorded kernel skips TileLang's device lowering too, which took longer than nvcc's record."""
    if isinstance(cuda_src, str):
        return _usage(_key(cuda_src, arch), lambda: cuda_src, arch, fresh)
    variant = cuda_src
    by_build = _key("build key " + variant.job.key, arch)
    return _usage(by_build, lambda: variant.device_source, arch, fresh,
                  then=lambda src: nvcc_resource_usage(src, arch, fresh))


def _key(text: str, arch: str) -> str:
    from septran.version import tilelang_version

    return hashlib.sha256("\0".join((text, arch, _nvcc_version(), tilelang_version())).encode()).hexdigest()[:32]


def _usage(key: str, source, arch: str, fresh: bool, then=None) -> dict:
    """The answer recorded under ``key``, else ``then(source())`` (or nvcc on it), remembered under ``key``."""
    from septran import env

    mode = os.environ.get("SEPTRAN_TEST_NVCC", "")
    record = RECORDS / f"{key}.json"
    path = env.cache_dir() / "test-nvcc" / f"{key}.json"
    if not fresh and mode != "fresh":
        for known in (record, path):
            try:
                return json.loads(known.read_text())
            except (OSError, ValueError):
                pass
    usage = (then or (lambda src: resource_usage(src, arch)))(source())
    for where in (path, record) if mode == "record" else (path,):
        _write(where, usage)
    return usage


def _write(path: Path, usage: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump(usage, f, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)  # a concurrent reader sees the whole answer or none


@functools.lru_cache(maxsize=None)
def _nvcc_version() -> str:
    nvcc = nvcc_path()
    return "" if nvcc is None else subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout


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
