"""Element types of a call's parameters, outputs the caller passes, the types a target takes by converting, and
the layout the program is handed tensors in.

An output the caller does not pass takes the type ``septran.dtypes.output_dtype``
says; one the caller passes (``kernel(q, k, v, O=o)``) keeps its own, and the
kernel writes into it. A target that converts a type (bfloat16 computed in
float32) sees float32 copies; the outputs are converted back.
"""
from __future__ import annotations

from septran.dtypes import output_dtype
from septran.errors import CallError


def user_dtypes(kernel, described: dict) -> dict[str, str]:
    """Every parameter's type as the caller sees it: given (inputs, passed outputs) or by the output rule."""
    inputs = {a.name: described[a.name][1] for a in kernel.inputs if a.name in described}
    declared = dict(kernel.graph.entry_task.dtypes)
    return {a.name: described[a.name][1] if a.name in described else output_dtype(a.name, declared, inputs)
            for a in kernel.args}


def program_dtypes(kernel, described: dict) -> dict[str, str]:
    """Every parameter's type as the program sees it: the caller's, with the target's conversions (less those
    the mapping keeps: ``keep_dtypes``)."""
    converts = conversions(kernel.target, kernel.mapping)
    return {n: converts.get(d, d) for n, d in user_dtypes(kernel, described).items()}


def conversions(target, mapping) -> dict[str, str]:
    """The types the target converts for this mapping's programs: its ``converts`` less the mapping's ``keep_dtypes``."""
    kept = {k.value for k in mapping.keep_dtypes}
    return {d: to for d, to in target.converts.items() if d not in kept}


def check_declared(kernel) -> None:
    """``@task.define(dtype=...)`` on the entry names a type or an input (an output has no type of its own yet)."""
    inputs = {a.name for a in kernel.inputs}
    for out, want in kernel.graph.entry_task.dtypes:
        if want not in inputs and want in {a.name for a in kernel.outputs}:
            raise CallError(f"the dtype of {out} is that of {want}, an output; name a type or an input",
                            kernel.graph.entry_task.loc)


def check_passed(tensors: dict, written: list, roles: dict | None = None) -> None:
    """A tensor the kernel writes (``written``: passed outputs and in-out parameters) shares no memory with any
    other tensor of the call (``tensors``: name -> tensor): the kernel reads its inputs while it writes, in an
    order no caller can rely on, and with several programs at once (torch refuses partially overlapping
    in-place ops for the same reason). The same tensor passed twice counts too: a program may read an element
    another program has already written. ``roles``: name -> input, output or inout (for the message)."""
    roles = roles or {}
    for name in written:
        t = tensors[name]
        lo, hi = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
        for other, u in tensors.items():
            if other == name or not u.numel() or not t.numel():
                continue
            ulo = u.data_ptr()
            if ulo < hi and lo < ulo + u.numel() * u.element_size():
                what = "in-out parameter" if roles.get(name) == "inout" else "output"
                same = " (the same elements)" if (ulo, u.shape, u.dtype) == (lo, t.shape, t.dtype) else ""
                raise CallError(f"{what} {name} shares memory with {other}{same}, which the kernel reads while it "
                                f"writes {name}",
                                hint=f"pass a separate tensor as {name} (or {other}.clone() as {other})"
                                     + ("" if what == "in-out parameter" else ", or let the kernel allocate it"))


def check_views(tensors: dict, roles: dict) -> None:
    """A tensor with the negative or conjugate bit (``torch._neg_view``, ``x.conj()``) is a view whose storage
    holds other values than it reads as: the kernel reads storage. An input is materialised per call
    (``resolve_views``); a tensor the kernel writes cannot be, so it is refused."""
    for name, t in tensors.items():
        bit = "negative" if t.is_neg() else "conjugate" if t.is_conj() else None
        if bit is not None and roles.get(name, "input") != "input":
            raise CallError(f"{name} has torch's {bit} bit set (a lazy view): the kernel would write its storage, "
                            f"which reads as other values",
                            hint=f"pass {name}.resolve_neg().resolve_conj() and use that tensor afterwards")


def resolve_views(pool: list, written: frozenset) -> list:
    """``pool`` with every tensor that has the negative or conjugate bit materialised (its values, as torch reads
    them, in fresh memory). ``written``: pool indices the kernel writes, which ``check_views`` refused already."""
    out = list(pool)
    for i, t in enumerate(pool):
        if t.is_neg() or t.is_conj():
            if i in written:
                raise CallError("a tensor the kernel writes has torch's negative or conjugate bit set",
                                hint="pass it resolved (x.resolve_neg().resolve_conj())")
            out[i] = t.resolve_neg().resolve_conj()
    return out


def row_major(t):
    """An empty tensor with the strides TileLang checks (the product of the later extents): torch gives
    (1, 1) for a (5, 0) tensor, TileLang wants (0, 1). It holds no element, so nothing is copied."""
    import torch

    if t.numel():
        return t
    strides, step = [], 1
    for extent in reversed(t.shape):
        strides.append(step)
        step *= extent
    return torch.empty_strided(tuple(t.shape), tuple(reversed(strides)), dtype=t.dtype, device=t.device)
