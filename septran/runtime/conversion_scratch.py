"""Scratch tensors for the runtime's conversions on the host: the program's copy of a tensor the target computes
in another type (a bfloat16 tensor computed in float32), and an output the program computes in that type before
it is converted to the caller's.

Both are temporaries of one call. Allocated afresh each call, a large one went back to the OS and was faulted in
again on the next: glibc trims the top of its heap when more than twice its mmap threshold (at most 32 MB) lies
free there, so a call whose temporaries pass that, such as a 4096 x 1024 bfloat16 softmax (a float32 copy of X and
a float32 Y, 32 MB), page-faulted all of them on every call: 8,160 faults and 16 ms a call on AMD EPYC Zen 4 at 2
threads, against 2.5 ms once they stayed. So each thread keeps one buffer per slot, element type and device, grown
to the largest request and reused; a call takes slots 0, 1, ... in order. ``clear()`` lets them go.
"""
from __future__ import annotations

import math
import threading

_local = threading.local()


def take(slot: int, shape: tuple, dtype, device):
    """A tensor of ``shape`` over this thread's buffer ``slot`` (its contents are whatever was there)."""
    import torch

    bufs = getattr(_local, "bufs", None)
    if bufs is None:
        bufs = _local.bufs = {}
    numel = math.prod(shape)
    key = (slot, dtype, device)
    buf = bufs.get(key)
    if buf is None or buf.numel() < numel:
        buf = bufs[key] = torch.empty(numel, dtype=dtype, device=device)
    return buf[:numel].view(shape)


def clear() -> None:
    """Frees this thread's buffers."""
    _local.bufs = {}
