"""What every example script does: compile a logic file for this machine, run it, check it, time it.

The mapping is chosen the way a notebook user's would be: SEPTRAN_MAPPING, else
mappings/<target>/<op>.yaml, with the target from SEPTRAN_TARGET or the
detected GPU (cpu where there is none). Where the target's device is absent
(SEPTRAN_TARGET=sm90 on a laptop), only the generated code is shown.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

import septran

# The last run's errors (max |out - ref|, septran's and torch's own in the same dtype): what the GPU tests hold to the
# FlashAttention rule.
LAST_ERRORS: dict = {}


def device_present(kind: str) -> bool:
    return kind == "cpu" or (kind == "cuda" and torch.cuda.is_available())


def median_seconds(fn, repeats: int, device: str) -> float:
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(logic, title: str, make_inputs: Callable[[str, torch.dtype], dict], reference: Callable, flops: float,
        dtype: str | None = None, show_source: bool = True, repeats: int = 5, unit: str = "GFLOP/s",
        scalars: dict | None = None) -> float:
    """Runs one operator (``logic``: a logic file, an entry task, or a compiled kernel); returns max |out - reference|
    (nan where nothing could run). ``scalars``: the logic's scalar arguments (eps=...). ``flops``: the work per call, in units of ``unit`` x 1e9 per second
    (floating-point operations for GFLOP/s, bytes moved for GB/s).

    ``dtype`` defaults to float16 on GPUs and float32 on the CPU and the DSAs.
    """
    if hasattr(logic, "specialize"):  # compiled already (an operator made of several kernels)
        kernel = logic
    elif isinstance(logic, septran.task.TaskFunction):
        kernel = septran.compile(logic)
    else:
        kernel = septran.compile(logic_file=logic)
    target = kernel.target
    dtype = dtype or ("float32" if target.torch_device == "cpu" else "float16")
    print(f"target {target.name} ({target.description}); mapping {kernel.mapping.file}")
    device = target.torch_device
    inputs = make_inputs("cpu", getattr(torch, dtype))
    if not device_present(device):
        variant = kernel.specialize(**inputs, **(scalars or {}))
        print(f"no {device} device here: showing the generated code only\n")
        print(variant.tilelang_source)
        print(variant.device_source if show_source else "")
        return float("nan")
    inputs = {k: v.to(device) for k, v in inputs.items()}
    start = time.perf_counter()
    out = kernel(**inputs, **(scalars or {}))
    first_call = time.perf_counter() - start
    ref = reference(*(v.double() for v in inputs.values()))
    err = (out.double() - ref).abs().max().item()
    torch_err = (reference(*inputs.values()).double() - ref).abs().max().item()
    LAST_ERRORS.update(septran=err, torch=torch_err)
    t_septran = median_seconds(lambda: kernel(**inputs, **(scalars or {})), repeats, device)
    t_torch = median_seconds(lambda: reference(*inputs.values()), repeats, device)
    if show_source:
        print(kernel.tilelang_source)
    print(f"{title}, {dtype}")
    print(f"  max |out - ref|  septran {err:.3e}   torch {torch_err:.3e}   (ref in float64)")
    print(f"  first call (compile + run) {first_call:.2f} s")
    print(f"  septran {t_septran * 1e3:8.3f} ms  {flops / t_septran / 1e9:8.2f} {unit}")
    print(f"  torch   {t_torch * 1e3:8.3f} ms  {flops / t_torch / 1e9:8.2f} {unit}")
    return err
