"""Calls in C: a kernel's plans handed to the C entry (``septran/build/fast_call.cpp``) once they repeat.

A plan whose tensors go untouched to a compiled C function (``Plan.fast_left``: nothing converted, zeroed,
reshaped or copied back, the host's tensors, no workspace and no vendor error channel) runs through Python
``Plan.fast_left`` times; then ``offer`` hands it to the kernel's C entry (``Kernel._fast``), built on a
background thread the first time (``septran.build.pyext``). From then on ``Kernel.__call__`` asks the C entry
first: it checks the call as ``Plan.run`` does and returns NotImplemented where anything differs (another
shape, a non-contiguous tensor, a written tensor sharing memory with another...), and the Python path runs
and says what is wrong. A 16x16 GEMM call goes from about 17 us to about 5 on a slow core.
"""
from __future__ import annotations

import ctypes
import logging

from septran.build import pyext
from septran.errors import DeviceError

log = logging.getLogger(__name__)

CALLS_BEFORE = 16  # calls of a signature through Python before it goes to C: a once-called kernel never builds it


def eligible(plan) -> int:
    """``Plan.fast_left``'s first value: CALLS_BEFORE for a plan the C entry can run, else 0."""
    fn = plan.fn
    ok = (plan._direct and plan._cpu and plan.check_errors is None and not plan.workspaces
          and hasattr(fn, "function") and hasattr(fn, "order") and hasattr(fn, "sizes"))
    return CALLS_BEFORE if ok else 0


def offer(kernel, plan, args: tuple, kwargs: dict) -> None:
    """Called after ``plan`` ran a call through Python: the plan goes to the kernel's C entry on its
    CALLS_BEFORE-th call (the entry built first, in the background; until it is loaded, it is asked again)."""
    plan.fast_left -= 1
    if plan.fast_left > 1:
        return
    mod = pyext.module()
    if mod is None:
        if pyext.why() is not None:  # it cannot be built here (logged once, at debug level)
            plan.fast_left = 0
        else:
            pyext.start()
            plan.fast_left = 1
        return
    plan.fast_left = 0
    if not hold(kernel, plan, args, kwargs, mod):
        log.debug("%s: this call's plan stays in Python (an argument the C entry does not check)", kernel.graph.entry)


def hold(kernel, plan, args: tuple, kwargs: dict, mod=None) -> bool:
    """Hands ``plan`` (the plan of the call ``args, kwargs``) to the kernel's C entry now; False if the entry
    is not loaded or cannot check such a call."""
    mod = mod or pyext.module()
    if mod is None or not eligible(plan):
        return False
    calls = kernel.__dict__.get("_fast")
    if calls is None:
        calls = mod.Calls(kernel.__dict__, DeviceError)
    lay, fn = plan.layout, plan.fn
    import torch

    allocate = tuple((make is torch.zeros, tuple(shape), torch.empty(0, dtype=dtype))  # (zero-filled, shape, dtype)
                     for make, shape, dtype in lay.allocate)
    widths = fn.function.argtypes[len(fn.order):] if fn.function.argtypes else ()
    dims = tuple((k, axis, int(width is ctypes.c_int64)) for (k, axis), width in zip(fn.sizes, widths))
    if len(dims) != len(fn.sizes):
        return False
    took = calls.add(args, kwargs, lay.take, lay.nbytes, lay.overlap_pairs, allocate,
                     ctypes.cast(fn.function, ctypes.c_void_p).value, tuple(fn.order), dims,
                     tuple(i for i, _ in lay.results), plan._single is not None, plan.variant,
                     getattr(fn.function, "__name__", "the kernel"), plan, plan.threads)
    if took:
        kernel._fast = calls
        _install(type(kernel), mod)
    return bool(took)


def _install(cls, mod) -> None:
    """``Kernel.__call__`` (found on ``cls``'s MRO: this module is below kernel.py and does not import it)
    becomes the C entry's Dispatch around the Python one (once): a call it holds the plan of then runs without
    a Python frame. Not while something else wraps it (a model profile), which restores what it found; the next
    plan handed over installs it then. ``install`` also gives the class a call slot in C, which takes a keyword
    call's dict as CPython built it (through the Dispatch alone, a keyword call cost 80 ns more than a positional
    one)."""
    owner = next((c for c in cls.__mro__ if c.__name__ == "Kernel" and "__call__" in c.__dict__), None)
    if owner is None:
        return
    current = owner.__dict__["__call__"]
    if getattr(current, "__qualname__", None) == "Kernel.__call__" and not isinstance(current, mod.Dispatch):
        owner.__call__ = mod.Dispatch(current)
    mod.install(owner)
