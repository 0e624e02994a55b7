"""Optional tensor parameters (``M=None``): one kernel per set of optional tensors a call passes.

The logic decides with a plain Python ``if M is not None:`` what to do, at trace time; so each set of
optional tensors passed is its own task graph, traced (and its mapping checked) on the first call that
passes that set. A call binds its arguments as: the required inputs, then the optional tensors in the
order the entry task declares them, then the scalars; any of them may be named.
"""
from __future__ import annotations

from septran.errors import CallError


def route(kernel, args: tuple, kwargs: dict):
    """The kernel that runs this call, and the arguments to call it with (None where the call is the kernel's
    own: no optional tensor passed, and the arguments stay as given)."""
    names = kernel.optional
    n = len(kernel.inputs)
    passed = {name: value for name, value in zip(names, args[n:n + len(names)])}
    rest = args[:n] + args[n + len(names):]
    for name in names:
        if name in kwargs:
            if name in passed:
                raise CallError(f"input {name} given twice")
            passed[name] = kwargs[name]
    kwargs = {k: v for k, v in kwargs.items() if k not in names}
    present = tuple(name for name in names if passed.get(name) is not None)
    if not present:
        return kernel, rest, kwargs
    sub = kernel.with_optional(present)
    bound = dict(zip([a.name for a in kernel.inputs], rest[:n])) | {k: v for k, v in kwargs.items() if k not in kernel.scalars}
    bound |= {name: passed[name] for name in present}
    missing = [a.name for a in sub.inputs if a.name not in bound]
    if missing:
        raise CallError(f"missing input {', '.join(missing)}", hint=f"call with ({', '.join(a.name for a in sub.inputs)})")
    scalars = {k: v for k, v in kwargs.items() if k in kernel.scalars}
    return sub, tuple(bound.pop(a.name) for a in sub.inputs) + tuple(rest[n:]), bound | scalars


def check_roles(sub, present: tuple) -> None:
    """An optional tensor is read (an input, or read-write): one the logic only writes is refused."""
    for name in present:
        role = next((a.role for a in sub.args if a.name == name), "input")
        if role == "output":
            raise CallError(f"optional tensor {name} is written but never read by the logic; an optional tensor "
                            "is an input (or read-write)", sub.graph.entry_task.loc)


def specialize_args(kernel, args: dict):
    """``kernel.specialize(...)`` with optional tensors: the kernel for those given, and the arguments left."""
    present = tuple(name for name in kernel.optional if args.get(name) is not None)
    args = {k: v for k, v in args.items() if k not in kernel.optional or args[k] is not None}
    return (kernel.with_optional(present) if present else kernel), args
