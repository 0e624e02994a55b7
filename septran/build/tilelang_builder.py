"""The ``tilelang`` builder (GPUs, DSAs): TileLang lowers the program to device source and builds it.

The device source (CUDA, HIP, or a DSA's C) is a stage of its own, cached
under the build key, so ``kernel.device_source`` in a warm process needs no
TileLang. The binary goes through ``tilelang.compile`` and TileLang's own
kernel cache (``tl_cache`` checks its entries); the device source TileLang's
compile prints is kept as the device stage when none is cached yet.
"""
from __future__ import annotations

from septran.build import tilelang_api
from septran.build.stages import Builder, Stage


def _device(job, tilelang_source: str) -> str:
    return tilelang_api.device_source_of(job)


def _binary(job, _):
    compiled = tilelang_api.compile_kernel(job.prim_func(), job.target, str(job.path("tilelang")))
    job.keep("device", compiled.get_kernel_source())
    return compiled


BUILDER = Builder(
    name="tilelang",
    stages=(
        Stage("tile", "txt", "tile program", lambda job, _: job.text("tile")),
        Stage("tilelang", "py", "TileLang source", lambda job, _: job.text("tilelang")),
        Stage("device", "device", "device source", _device),  # .cu, .hip or .c: the target's device_source_ext
        Stage("binary", "", "kernel", _binary),  # kept by TileLang's cache
    ),
    device="device",
    runs_compiler=False,
)
