"""Task Lang: the public language of SepTran's logic files (``from septran import task``).

An operator is a hierarchy of tasks. Nothing here names hardware: where a
task runs, where its data lives and how large its tiles are is the mapping's
business.
"""
from __future__ import annotations

import difflib
from typing import Callable, Optional, Union

from septran.errors import FrontendError
from septran.expr import Const, Expr, Tunable, Var, as_expr, fresh
from septran.frontend.ir import Launch, Loop, Partition, PrimCall, TileRef, Param
from septran.frontend.primitives import PRIMITIVES
from septran.frontend import tracer
from septran.frontend.tracer import TaskFunction, caller_loc

__all__ = ["define", "partition", "parallel_range", "range", "launch", "call_primitive", "TaskFunction"]


def define(fn: Optional[Callable] = None, *, leaf: bool = False):
    """Declares a task: ``@task.define`` or ``@task.define(leaf=True)``.

    A leaf task calls primitives (``task.call_primitive``); an inner task
    partitions its parameters and launches other tasks over the tiles.
    """
    if fn is None:
        return lambda f: TaskFunction(f, leaf)
    if not callable(fn):
        raise FrontendError("@task.define takes a function", caller_loc())
    return TaskFunction(fn, leaf)


TileEntry = Union[int, str, None]


def partition(tensor, by: str = "blocks", tile: tuple = ()):
    """Splits ``tensor`` into a grid of tiles of shape ``tile``.

    Each entry of ``tile`` is an int, the name of a tunable the mapping sets,
    or None for the whole dimension. Index the result (``Ap[i, k]``) for a tile.
    """
    frame = tracer.current("partition")
    loc = caller_loc()
    source = tracer.unwrap(tensor, "partition", "the tensor", loc)
    if by != "blocks":
        raise FrontendError(f'task.partition: unknown partitioning by={by!r}', loc, hint='use by="blocks"')
    if not isinstance(tile, (tuple, list)) or not tile:
        raise FrontendError("task.partition: tile must be a non-empty tuple, one entry per dimension", loc)
    entries: list[Optional[Expr]] = []
    for t in tile:
        if t is None:
            entries.append(None)
        elif isinstance(t, str):
            if not t.isidentifier():
                raise FrontendError(f"task.partition: tunable name {t!r} is not a plain identifier", loc)
            entries.append(Tunable(t))
        elif isinstance(t, int) and not isinstance(t, bool):
            if t <= 0:
                raise FrontendError(f"task.partition: tile size {t} must be positive", loc)
            entries.append(Const(t))
        else:
            raise FrontendError(
                f"task.partition: tile entry {t!r} must be an int, a tunable name or None", loc
            )
    if isinstance(source, TileRef) and source.rank != len(entries):
        raise FrontendError(
            f"task.partition: tile has {len(entries)} entries but the tensor has rank {source.rank}", loc
        )
    if isinstance(source, Param):
        for other in frame.partitions:
            if isinstance(other.source, Param) and other.source == source and other.rank != len(entries):
                raise FrontendError(
                    f"task.partition: tile has {len(entries)} entries but {source.name} was partitioned "
                    f"with {other.rank} at {other.loc}; a tensor has one rank",
                    loc,
                )
    part = Partition(fresh(_partition_name(loc, source)), source, tuple(entries), loc)
    frame.partitions.append(part)
    return tracer.PartitionHandle(part)


def _partition_name(loc, source) -> str:
    """The variable the user assigns the partition to (``Ap = ...``), for readable dumps."""
    target = loc.source_line().split("=", 1)[0].strip()
    if target.isidentifier():
        return target
    base = source.name if isinstance(source, Param) else source.partition.sym.name
    return f"{base}p"


def _loop(api: str, extents, parallel: bool, default_var: str):
    frame = tracer.current(api)
    loc = caller_loc()
    if isinstance(extents, (tuple, list)):
        exts = tuple(extents)
        single = False
    else:
        exts = (extents,)
        single = True
    if not exts:
        raise FrontendError(f"task.{api}: needs at least one extent", loc)
    try:
        exts = tuple(as_expr(e) for e in exts)
    except TypeError as err:
        raise FrontendError(f"task.{api}: {err}", loc) from None
    names = tracer.loop_var_names(loc, len(exts), default_var)
    syms = tuple(fresh(n) for n in names)
    return _loop_body(frame, syms, exts, parallel, loc, single)


def _loop_body(frame, syms, exts, parallel, loc, single):
    outer = frame.stmts
    frame.stmts = []
    frame.open_loops += 1
    vars_ = tuple(Var(s) for s in syms)
    yield vars_[0] if single else vars_
    body = frame.stmts
    frame.stmts = outer
    frame.open_loops -= 1
    outer.append(Loop(syms, exts, parallel, tuple(body), loc))


def parallel_range(shape):
    """Iterates over ``shape`` with no order between iterations (a grid, or parallel lanes)."""
    return _loop("parallel_range", shape, True, "i")


def range(n):  # noqa: A001 - Task Lang's spelling, as in the seeds
    """Iterates ``0 .. n-1`` in order: later iterations may depend on earlier ones."""
    return _loop("range", n, False, "k")


def launch(callee, *args) -> None:
    """Runs task ``callee`` on ``args`` (parameters or tiles of the caller)."""
    frame = tracer.current("launch")
    loc = caller_loc()
    if not isinstance(callee, TaskFunction):
        raise FrontendError(
            f"task.launch: {getattr(callee, '__name__', callee)!r} is not a task",
            loc,
            hint="decorate it with @task.define",
        )
    if frame.task.leaf:
        raise FrontendError(
            f"leaf task {frame.task.name} cannot launch other tasks", loc, hint="remove leaf=True or call a primitive"
        )
    if len(args) != len(callee.param_names):
        raise FrontendError(
            f"task.launch: {callee.name} takes {len(callee.param_names)} arguments "
            f"({', '.join(callee.param_names)}), got {len(args)}",
            loc,
        )
    unwrapped = tuple(
        tracer.unwrap(a, "launch", f"argument {callee.param_names[k]} of {callee.name}", loc) for k, a in enumerate(args)
    )
    known = frame.callees.setdefault(callee.name, callee)
    if known is not callee:
        raise FrontendError(
            f"task.launch: two different tasks are named {callee.name} ({known.loc} and {callee.loc})", loc
        )
    frame.stmts.append(Launch(callee.name, unwrapped, loc))


def call_primitive(name: str, *args) -> None:
    """Calls a primitive (``"gemm"``: C += A @ B) on tiles; only in a leaf task."""
    frame = tracer.current("call_primitive")
    loc = caller_loc()
    sig = PRIMITIVES.get(name)
    if sig is None:
        close = difflib.get_close_matches(str(name), PRIMITIVES, n=1)
        raise FrontendError(
            f"unknown primitive {name!r}",
            loc,
            hint=(f"did you mean {close[0]!r}? " if close else "") + f"known primitives: {', '.join(sorted(PRIMITIVES))}",
        )
    if not frame.task.leaf:
        raise FrontendError(
            f"task {frame.task.name} calls primitive {name!r} but is not a leaf task",
            loc,
            hint="declare it with @task.define(leaf=True); inner tasks launch other tasks",
        )
    if len(args) != len(sig.params):
        raise FrontendError(
            f"primitive {name!r} takes {len(sig.params)} arguments ({', '.join(sig.params)}), got {len(args)}", loc
        )
    unwrapped = tuple(
        tracer.unwrap(a, "call_primitive", f"argument {sig.params[k]} of {name!r}", loc) for k, a in enumerate(args)
    )
    frame.stmts.append(PrimCall(name, unwrapped, loc))

