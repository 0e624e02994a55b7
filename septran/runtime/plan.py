"""A call's plan: what a call with one signature does, worked out once and then run per call.

A signature is what the variant depends on: each argument's place (its position or its keyword), each
tensor's shape and dtype, each scalar's type and exact value (``call_key``). ``Kernel.plan`` binds and checks
the first call of a signature, chooses its variant and builds it; the plan it returns holds the rest as
indices: which passed tensor is which parameter, which are converted to the program's type, which outputs are
allocated (and zero-filled), what is copied back. A later call of the signature only checks what the
signature does not fix (each tensor's device and layout, that a tensor the kernel writes shares no memory
with another argument, and that no tensor is a lazy negative view, which is materialised), allocates, and
calls the built function: positional and keyword calls alike. A plan whose tensors go untouched to a compiled C
function is handed to the kernel's C entry after a few calls (``runtime/fast_call.py``), which makes the same
checks in C and sends every call it cannot take back here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from septran.runtime import conversion_scratch, fast_call

Source = Union[int, str]  # a positional argument's index, or a keyword


def call_key(args: tuple, kwargs: dict) -> tuple:
    """A call's signature: tensors' shapes and dtypes, other values' types and exact text (True != 1, -0.0 != 0.0).

    TypeError for an unhashable argument (then the call is bound and checked from scratch, and says what is wrong).
    """
    key = [(a.shape, a.dtype) if hasattr(a, "data_ptr") else (type(a), repr(a)) for a in args]
    if kwargs:
        key += [(k, (v.shape, v.dtype) if hasattr(v, "data_ptr") else (type(v), repr(v))) for k, v in kwargs.items()]
    return tuple(key)


@dataclass(frozen=True)
class Layout:
    """Where each of the program's tensors comes from, as indices into the call's pool of tensors.

    The pool is: the passed tensors (``take``, in the order listed), then the ones allocated (``allocate``).
    """

    take: tuple[Source, ...]  # passed tensors, from the call's arguments
    allocate: tuple[tuple[Callable, tuple, Any], ...]  # (torch.empty or torch.zeros, shape, torch dtype)
    order: Optional[tuple[int, ...]]  # the program's parameters as pool indices (None: the pool's order)
    convert: tuple[tuple[int, Any, bool], ...] = ()  # (pool index, program dtype, fresh: written only, so not copied)
    zero: tuple[int, ...] = ()  # passed outputs the program reads before writing: they start from zeros
    reshape: tuple[tuple[int, str], ...] = ()  # (parameter index, "scalar" or "empty"): how TileLang takes it
    write_back: tuple[int, ...] = ()  # pool indices of converted tensors the program writes: copied back
    results: tuple[tuple[int, Any], ...] = ()  # per output: pool index, and the caller's dtype where it differs
    # (a passed output is returned itself; an allocated one the program computes in another type, converted)
    outputs_passed: tuple[tuple[str, int], ...] = ()  # (name, pool index) of each passed tensor the kernel writes
    # (outputs and in-out parameters): checked for shared memory per call
    names: tuple[str, ...] = ()  # the passed tensors' names (for the shared-memory check's message)
    nbytes: tuple[int, ...] = ()  # the passed tensors' sizes in bytes
    overlap_pairs: tuple[tuple[int, int], ...] = ()  # (written tensor, other passed tensor), both nonempty
    roles: tuple[str, ...] = ()  # the passed tensors' roles (input, output, inout)


class Plan:
    """A signature's plan: ``run(args, kwargs)`` per call; None when a tensor's device or layout is not the plan's
    (the caller then binds and checks the call from scratch, which says what is wrong)."""

    def __init__(self, layout: Layout, fn, device, workspaces: tuple, check_errors: Optional[Callable[[], None]], variant):
        self.layout, self.fn, self.device, self.variant = layout, fn, device, variant
        self.workspaces = workspaces  # (shape, torch dtype): zero-filled per call
        self.check_errors = check_errors
        self.threads = -1  # the thread count the plan was chosen for (Kernel._by_threads), -1: any
        lay = layout
        # the passed tensors are the call's first positional arguments, in order (a positional call)
        self._leading = len(lay.take) if lay.take == tuple(range(len(lay.take))) else None
        # nothing converted, zeroed, reshaped or copied back, and the pool in the program's order: most calls
        self._direct = (fn is not None and lay.order is None and not lay.convert and not lay.zero and not lay.reshape
                        and not lay.write_back and all(dtype is None for _, dtype in lay.results))
        self._single = lay.results[0][0] if len(lay.results) == 1 else None
        # pool indices of allocated outputs returned only as a converted copy (so their own tensor may be scratch)
        returned = {i for i, dtype in lay.results if dtype is None}
        self._converted_results = {i for i, dtype in lay.results if dtype is not None} - returned
        self._cpu = getattr(device, "type", None) == _host_type()
        # calls through Python before the kernel's C entry takes this plan (0: never; runtime/fast_call.py)
        self.fast_left = fast_call.eligible(self)

    def run(self, args: tuple, kwargs: dict):
        lay, device = self.layout, self.device
        if self._leading is not None:
            pool = list(args[: self._leading])
        else:
            pool = [args[s] if s.__class__ is int else kwargs[s] for s in lay.take]
        # Each tensor: on the plan's device, contiguous, and no lazy negative view (torch._neg_view: its storage
        # holds the values negated; conjugate views are complex, which no target takes, refused by dtype when the
        # plan is made). On the host, `is_cpu` pays for `is_neg`: `t.device != device` builds a device object.
        if self._cpu:
            for t in pool:
                if not t.is_cpu or not t.is_contiguous():
                    return None
                if t.is_neg():
                    pool = _resolved(lay, pool)
                    break
        else:
            for t in pool:
                if t.device != device or not t.is_contiguous():
                    return None
                if t.is_neg():
                    pool = _resolved(lay, pool)
                    break
        if lay.overlap_pairs:
            _check_shared_memory(lay, pool)
        if self._direct:
            # torch.empty(*shape, ...) costs half of torch.empty(shape, ...): for a small kernel, the call's
            # overhead is mostly this allocation.
            pool += [make(*shape, dtype=dtype, device=device) for make, shape, dtype in lay.allocate]
            if self.workspaces:
                self.fn(*pool, *[_zeros(shape, dtype, device) for shape, dtype in self.workspaces])
            else:
                self.fn(*pool)
            if self.check_errors is not None:
                self.check_errors()
            if self._single is not None:
                return pool[self._single]
            return tuple([pool[i] for i, _ in lay.results])
        return self._run(pool)

    def _run(self, pool: list):
        """The general case: types converted, accumulators zeroed, empty and rank-0 tensors reshaped, results
        copied back into the caller's tensors or converted to the caller's types."""
        lay, device = self.layout, self.device
        given = pool[:]
        slot = 0
        for i, dtype, fresh in lay.convert:
            t = given[i]
            if self._cpu:  # the host's temporaries are reused, not allocated per call (runtime/conversion_scratch.py)
                pool[i] = conversion_scratch.take(slot, tuple(t.shape), dtype, t.device)
                slot += 1
                if not fresh:
                    pool[i].copy_(t.detach())
            else:
                pool[i] = t.new_empty(t.shape, dtype=dtype) if fresh else t.to(dtype)
        allocated = []
        for k, (make, shape, dtype) in enumerate(lay.allocate):
            if self._cpu and len(given) + k in self._converted_results:  # only its converted copy is returned
                a = conversion_scratch.take(slot, tuple(shape), dtype, device)
                slot += 1
                if make is _torch_zeros():
                    a.zero_()
            else:
                a = make(*shape, dtype=dtype, device=device)
            allocated.append(a)
        pool += allocated
        given += allocated
        if self.fn is not None:
            for i in lay.zero:
                pool[i].zero_()
            params = pool if lay.order is None else [pool[i] for i in lay.order]
            for i, how in lay.reshape:
                params[i] = params[i].reshape(1) if how == "scalar" else _row_major(params[i])
            self.fn(*params, *[_zeros(shape, dtype, device) for shape, dtype in self.workspaces])
            if self.check_errors is not None:
                self.check_errors()
        for i in lay.write_back:
            given[i].copy_(pool[i])
        out = tuple([given[i] if dtype is None else pool[i].to(dtype) for i, dtype in lay.results])
        return out[0] if len(out) == 1 else out


def _check_shared_memory(lay: Layout, pool: list) -> None:
    """A written tensor overlaps no other passed tensor (byte sizes are the signature's: only addresses vary)."""
    ptrs = [t.data_ptr() for t in pool]
    sizes = lay.nbytes
    for o, j in lay.overlap_pairs:
        if ptrs[j] < ptrs[o] + sizes[o] and ptrs[o] < ptrs[j] + sizes[j]:
            from septran.runtime.outputs import check_passed

            check_passed(dict(zip(lay.names, pool)), [name for name, _ in lay.outputs_passed],  # says which
                         dict(zip(lay.names, lay.roles)))


def _resolved(lay: Layout, pool: list) -> list:
    """The pool with lazy negative views materialised; one the kernel writes is refused (it reads as other values
    than its storage holds, and the kernel writes storage)."""
    from septran.runtime.outputs import check_views, resolve_views

    check_views(dict(zip(lay.names, pool)), dict(zip(lay.names, lay.roles)))
    return resolve_views(pool, frozenset(i for _, i in lay.outputs_passed))


def _host_type() -> str:
    """The host's torch device type, as torch names it (shared code names no target)."""
    import torch

    return torch.zeros(()).cpu().device.type


def _torch_zeros():
    import torch

    return torch.zeros


def _zeros(shape, dtype, device):
    import torch

    return torch.zeros(shape, dtype=dtype, device=device)


def _row_major(t):
    from septran.runtime.outputs import row_major

    return row_major(t)


def lay_out(params: tuple, sources: dict, tensors: dict, spec, user: dict, read_outputs: Optional[frozenset]) -> Layout:
    """The layout of a call: ``params`` the program's (name, role) in order, ``sources`` where each passed tensor
    came from, ``spec`` the call's shapes and program dtypes, ``user`` every parameter's dtype as the caller sees
    it, ``read_outputs`` the outputs the program reads before writing (None: the call runs no program)."""
    import torch

    roles = dict(params)
    names = tuple(n for n, _ in params if n in sources)  # the passed tensors, in the program's order
    index = {n: i for i, n in enumerate(names)}
    runs = read_outputs is not None
    convert, zero, write_back = [], [], []
    for n in names:
        want = getattr(torch, spec.dtypes[n])
        if tensors[n].dtype != want:  # a type the target computes in another (bfloat16 in float32)
            convert.append((index[n], want, roles[n] == "output"))
            if roles[n] != "input":  # written: the caller's tensor gets the result
                write_back.append(index[n])
        if runs and roles[n] == "output" and n in read_outputs:  # a passed accumulator starts from zero, as an allocated one
            zero.append(index[n])
    allocate = []
    for n, role in params:
        if role == "output" and n not in index:
            index[n] = len(names) + len(allocate)
            # Only an output the program reads before writing it (an accumulator kept in global memory) needs a
            # first value: zeros, a sum's identity. Filling the others would cost a pass over memory per call.
            make = torch.zeros if runs and n in read_outputs else torch.empty
            allocate.append((make, tuple(spec.shapes[n]), getattr(torch, spec.dtypes[n])))
    order = tuple(index[n] for n, _ in params)
    reshape = []
    for k, (n, _) in enumerate(params):
        shape = tuple(spec.shapes[n])
        if not shape:  # the program holds a rank-0 tensor as (1,)
            reshape.append((k, "scalar"))
        elif not math.prod(shape):  # an empty tensor, with the strides TileLang checks
            reshape.append((k, "empty"))
    results = tuple((index[n], None if n in sources or user[n] == spec.dtypes[n] else getattr(torch, user[n]))
                    for n, role in params if role == "output")
    if not results:  # a kernel that only writes into tensors it is passed (a split sum's Y, KV caches): those
        results = tuple((index[n], None) for n, role in params if role == "inout")
    nbytes = tuple(tensors[n].numel() * tensors[n].element_size() for n in names)
    return Layout(take=tuple(sources[n] for n in names), allocate=tuple(allocate),
                  order=None if order == tuple(range(len(order))) else order, convert=tuple(convert), zero=tuple(zero),
                  reshape=tuple(reshape), write_back=tuple(write_back), results=results,
                  outputs_passed=tuple((n, index[n]) for n in names if roles[n] != "input"), names=names,
                  nbytes=nbytes, overlap_pairs=tuple((index[o], index[n]) for o in names if roles[o] != "input" and nbytes[index[o]]
                                                     for n in names if n != o and nbytes[index[n]]),
                  roles=tuple(roles[n] for n in names))
