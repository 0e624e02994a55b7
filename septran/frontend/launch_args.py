"""How ``task.launch`` binds its arguments to the callee's parameters.

Positions follow the callee's signature (tensors first, then optional tensors and scalars in the order
written); any parameter after the required tensors may also be named (``M=Mp[b, h, i, 0]``). An optional
tensor passed None, or not passed, is absent: the callee is traced without it.
"""
from __future__ import annotations

from septran.errors import FrontendError, SourceLoc
from septran.frontend import tracer


def bind(frame, callee, args: tuple, kwargs: dict, loc: SourceLoc, scalar_arg):
    """The callee's tensors (those passed), its scalars (up to the last one given) and its absent optional tensors."""
    order = callee.signature
    required = [n for n in callee.param_names if n not in callee.optional]
    if not (len(required) <= len(args) + len(kwargs) and len(args) <= len(order)):
        raise _arity(callee, required, len(args) + len(kwargs), loc)
    given = dict(zip(order, args))
    for name, value in kwargs.items():
        if name not in order:
            raise FrontendError(f"task.launch: {callee.name} has no parameter {name!r}", loc,
                                hint=f"its parameters: {', '.join(order)}")
        if name in given:
            raise FrontendError(f"task.launch: {name} of {callee.name} is given twice", loc)
        if name in required:
            raise FrontendError(f"task.launch: pass {name} of {callee.name} by position", loc)
        given[name] = value
    if any(n not in given for n in required):
        raise _arity(callee, required, len(args) + len(kwargs), loc)
    tensors, absent = [], []
    for name in callee.param_names:
        value = given.get(name)
        if value is None:
            if name not in callee.optional:
                raise FrontendError(f"task.launch: {name} of {callee.name} is None, but it is not optional", loc,
                                    hint=f"give it a default of None in {callee.name} to make it optional")
            absent.append(name)
            continue
        tensors.append(tracer.unwrap(value, "launch", f"argument {name} of {callee.name}", loc))
    scalar_names = list(callee.scalar_defaults)
    last = max((k for k, n in enumerate(scalar_names) if n in given), default=-1)
    scalars = tuple(scalar_arg(frame, given[n], f"{n} of {callee.name}", loc) if n in given else callee.scalar_defaults[n]
                    for n in scalar_names[: last + 1])
    absent = frozenset(absent)
    seen = frame.absent.setdefault(callee.name, (absent, loc))
    if seen[0] != absent:
        raise FrontendError(f"task.launch: {callee.name} is launched without {_names(seen[0])} at {seen[1]} "
                            f"and without {_names(absent)} here; a task is traced once per logic call", loc,
                            hint="pass the same optional tensors at every launch, or define two tasks")
    return tuple(tensors), scalars


def _arity(callee, required, got: int, loc) -> FrontendError:
    rest = len(callee.signature) - len(required)
    more = f" and up to {rest} {'scalars' if not callee.optional else 'optional tensors and scalars'}" if rest else ""
    takes = ", ".join(required + [f"{n}=None" for n in callee.optional] + [f"{s}={d}" for s, d in callee.scalar_defaults.items()])
    return FrontendError(f"task.launch: {callee.name} takes {len(required)} arguments{more} ({takes}), got {got}", loc)


def _names(absent) -> str:
    return ", ".join(sorted(absent)) or "no optional tensor"
