"""Task Lang: the public language of SepTran's logic files (``from septran import task``).

An operator is a hierarchy of tasks. Nothing here names hardware: where a
task runs, where its data lives and how large its tiles are is the mapping's
business.
"""
from __future__ import annotations

import difflib
import inspect
from typing import Callable, Optional, Union

from septran.errors import FrontendError
from septran.names import check_name, is_safe_name
from septran.expr import Const, Expr, GlobalExtent, GlobalStart, Tunable, Var, as_expr, fresh
from septran.expr import ceildiv as ceildiv_expr, minimum as minimum_expr
from septran.frontend import elementwise as el
from septran.frontend.compute_operands import collect
from septran.frontend.bounds import check_axis, check_extent, check_index_expr
from septran.frontend.ir import Launch, Loop, Partition, PrimCall, TileRef, Param, Temp
from septran.frontend import reduce_axis  # noqa: I001 - primitives with axis=
from septran.frontend.primitives import PRIMITIVES, PrimitiveSig
from septran.frontend.types_api import cast, temp_dtype, with_dtypes as _with_dtypes
from septran.frontend import launch_args, tracer
from septran.frontend.tracer import TaskFunction, assigned_name, caller_loc
from septran.frontend.scalar_index import as_index
from septran.frontend.shape_from import design_tiles

__all__ = ["define", "partition", "window", "parallel_range", "range", "launch", "call_primitive", "temp", "compute",
           "global_index", "global_size", "global_offset", "ceildiv", "cast", "as_index", *el.FUNCTIONS, "TaskFunction"]


def define(fn: Optional[Callable] = None, *, leaf: bool = False, dtype: Optional[dict] = None):
    """Declares a task: ``@task.define`` or ``@task.define(leaf=True)``.

    A leaf task calls primitives (``task.call_primitive``); an inner task
    partitions its parameters and launches other tasks over the tiles.
    ``dtype={"loss": "float32"}`` (on the entry task) gives outputs their
    element type: a type's name, or the name of an input whose type they take.
    """
    if fn is None:
        return lambda f: _with_dtypes(TaskFunction(f, leaf), dtype, caller_loc())
    if not callable(fn):
        raise FrontendError("@task.define takes a function", caller_loc())
    return TaskFunction(fn, leaf)


TileEntry = Union[int, str, None]


def partition(tensor, by: str = "blocks", tile: tuple = (), shape_from=None, **unknown):
    """Splits ``tensor`` into a grid of tiles of shape ``tile``.

    Each entry of ``tile`` is an int, the name of a tunable the mapping sets, or None for the whole
    dimension. Index the result (``Ap[i, k]``) for a tile; ``by="windows"``: see ``task.window``.
    ``shape_from="A"`` (the design notes' spelling, instead of ``tile``): square tiles of the tunable
    ``block_size`` along each dimension, as the tensor ``A`` is cut (see ``shape_from.design_tiles``).
    """
    frame = tracer.current("partition")
    loc = caller_loc()
    if unknown:
        raise FrontendError(f"task.partition got an unknown keyword {next(iter(unknown))!r}", loc,
                            hint='give the tile shape as tile=("BM", "BK") (ints, tunable names or None), or shape_from="A"')
    source = tracer.unwrap(tensor, "partition", "the tensor", loc)
    if shape_from is not None:
        if tile:
            raise FrontendError("task.partition takes tile= or shape_from=, not both", loc)
        tile = design_tiles(frame, source, shape_from, loc)
    if by not in ("blocks", "windows"):
        raise FrontendError(f'task.partition: unknown partitioning by={by!r}', loc, hint='use by="blocks" or by="windows"')
    if not isinstance(tile, (tuple, list)) or not tile:
        raise FrontendError("task.partition: tile must be a non-empty tuple, one entry per dimension", loc)
    entries: list[Optional[Expr]] = []
    for t in tile:
        if t is None:
            entries.append(None)
        elif isinstance(t, str):
            entries.append(Tunable(check_name(t, "task.partition: a tunable's name", loc, FrontendError)))
        elif isinstance(t, int) and not isinstance(t, bool):
            if t <= 0:
                raise FrontendError(f"task.partition: tile size {t} must be positive", loc)
            entries.append(check_extent(Const(t), "task.partition: a tile size", loc))
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
    part = Partition(fresh(_partition_name(loc, source)), source, tuple(entries), loc, by)
    frame.partitions.append(part)
    return tracer.PartitionHandle(part)


def window(tensor, start: tuple = (), shape: tuple = ()):
    """The box of ``tensor`` of extents ``shape`` that starts at element ``start``:
    ``task.window(X, start=(n, h + kh, w + kw, 0), shape=(1, 1, "BW", None))``.

    ``shape`` is as a partition's ``tile`` (an int, a tunable's name, None for the whole dimension,
    whose start is 0). Windows may overlap. One may run past the end of its tensor (those elements
    read as 0, as a tile's do), never past the end of a tile it is cut from, and never start before
    0: the verification proves it for the shapes of each call.
    """
    if not isinstance(start, (tuple, list)) or not isinstance(shape, (tuple, list)) or len(start) != len(shape):
        raise FrontendError("task.window: start and shape are tuples with one entry per dimension "
                            f"(got {len(start) if isinstance(start, (tuple, list)) else start!r} and "
                            f"{len(shape) if isinstance(shape, (tuple, list)) else shape!r})", caller_loc())
    return partition(tensor, by="windows", tile=tuple(shape))[tuple(start)]


def _partition_name(loc, source) -> Optional[str]:
    """The variable the user assigns the partition to (``Ap = ...``), for readable dumps."""
    target = loc.source_line().split("=", 1)[0].strip()
    if is_safe_name(target):
        return target
    if source is None:
        return None
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
        exts = tuple(check_extent(as_expr(e), f"task.{api}", loc) for e in exts)
        for e in exts:
            tracer.check_live(e, f"task.{api}", loc)
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
    frame.live.extend(syms)
    yield vars_[0] if single else vars_
    del frame.live[-len(syms):]
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


def launch(callee, *args, **kwargs) -> None:
    """Runs task ``callee`` on ``args`` (parameters or tiles of the caller); optional tensors and scalars may be
    named (``M=Mp[i, 0]``), and an optional tensor passed None is absent in the callee."""
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
    unwrapped, scalars = launch_args.bind(frame, callee, args, kwargs, loc, _scalar_arg)
    known = frame.callees.setdefault(callee.name, callee)
    if known is not callee:
        raise FrontendError(
            f"task.launch: two different tasks are named {callee.name} ({known.loc} and {callee.loc})", loc
        )
    frame.stmts.append(Launch(callee.name, unwrapped, loc, scalars))


def _scalar_arg(frame, value, what: str, loc):
    """A scalar handed on: the caller's own scalar parameter, or a number."""
    if isinstance(value, el.ScalarRef):
        if value.param not in frame.scalars:
            raise FrontendError(f"task.launch: {what} is {value.param.name}, a scalar of another task", loc,
                                hint=f"add {value.param.name}=<default> to {frame.task.name}'s parameters and pass it down")
        return value.param
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, int) and not -(2**1000) <= value <= 2**1000:  # (task.abs shadows abs here)
            raise FrontendError(f"task.launch: {what} is too large for a float", loc)
        return float(value)
    raise FrontendError(f"task.launch: {what} must be a number or a scalar parameter, got {type(value).__name__}", loc)


def call_primitive(name: str, *args, **options) -> None:
    """Calls a primitive (``"gemm"``: C += A @ B) on tiles; only in a leaf task."""
    frame = tracer.current("call_primitive")
    loc = caller_loc()
    sig = reduce_axis.lookup(name, options, loc, PRIMITIVES)
    if sig is None:
        close = difflib.get_close_matches(str(name), PRIMITIVES, n=1)
        raise FrontendError(
            f"unknown primitive {name!r}",
            loc,
            hint=(f"did you mean {close[0]!r}? " if close else "") + f"known primitives: {', '.join(sorted([*PRIMITIVES, *reduce_axis.OPS]))}",
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
    frame.stmts.append(PrimCall(name, unwrapped, loc, sig=sig))



def temp(*shape, dtype=None, name: Optional[str] = None):
    """A tile this task allocates for itself: ``S = task.temp(Q.shape[2], "BN")``.

    Each extent is an int, a tunable name, or an extent of a parameter. Its
    element type is the accumulator type (float32 unless the mapping sets
    ``accum_dtype``), or that of the parameter passed as ``dtype``. The mapping
    says where it lives: ``mems: {S: REGISTER}``, by the name the call is assigned
    to (read from the caller's bytecode, so a notebook cell or ``exec``'d text
    works too) or ``name="S"`` where it is not assigned to a plain name.
    """
    frame = tracer.current("temp")
    loc = caller_loc()
    if frame.task.leaf:
        raise FrontendError(f"leaf task {frame.task.name} cannot allocate a temp", loc,
                            hint="allocate it in the task that launches the leaf, and pass it in")
    if not shape:
        raise FrontendError("task.temp needs at least one extent", loc)
    extents = []
    for t in shape:
        if isinstance(t, str):
            extents.append(Tunable(check_name(t, "task.temp: a tunable's name", loc, FrontendError)))
        elif isinstance(t, Expr) or (isinstance(t, int) and not isinstance(t, bool) and t > 0):
            extents.append(check_extent(as_expr(t), "task.temp", loc))
        else:
            raise FrontendError(f"task.temp: extent {t!r} must be a positive int, a tunable name or a parameter's extent", loc)
    dtype_of, named = temp_dtype(dtype, loc)
    if name is not None:
        if not isinstance(name, str):
            raise FrontendError(f"task.temp: name= takes a string, got {type(name).__name__}", loc)
        check_name(name, "task.temp: the temp's name", loc, FrontendError)
    else:
        name = assigned_name()
        if name is not None:
            check_name(name, "task.temp: the temp's name", loc, FrontendError)
    if name is None:
        raise FrontendError("task.temp: assign the temp to a new name (S = task.temp(...)); the mapping's mems use it",
                            loc, hint='or name it: task.temp(..., name="S")')
    if name in frame.task.param_names or any(t.name == name for t in frame.temps):
        raise FrontendError(f"task.temp: {name} already names a parameter or temp of {frame.task.name}; assign the temp "
                            "to a new name (S = task.temp(...)); the mapping's mems use it", loc)
    t = Temp(fresh(name), tuple(extents), dtype_of, loc, named)
    frame.temps.append(t)
    return tracer.TensorHandle(t)


def compute(out, fn: Callable) -> None:
    """Sets every element of ``out``: ``task.compute(Y, lambda i, j: task.exp(X[i, j] - m[i]))``.

    The lambda's parameters name ``out``'s indices; other tiles are read at
    those names (a name shared by two tiles means equal extents; ``m[i]`` is
    broadcast along ``j``), unless a read is shifted (``X[i, j + 1]``) or
    guarded (``task.where(task.global_index(M, 1, j) < task.global_size(M, 1),
    M[i, j], 0.0)``): then the verify pass proves it in bounds instead. Only in a
    leaf task; targets supply the loop.
    """
    frame = tracer.current("compute")
    loc = caller_loc()
    if not frame.task.leaf:
        raise FrontendError(f"task {frame.task.name} uses task.compute but is not a leaf task", loc,
                            hint="put it in a @task.define(leaf=True) task and launch that")
    out_arg = tracer.unwrap(out, "compute", "the output", loc)
    try:
        names = tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        raise FrontendError("task.compute takes a function of the output's indices (lambda i, j: ...)", loc) from None
    if not names:
        raise FrontendError("task.compute: the function needs one parameter per index of the output (lambda i, j: ...)", loc)
    for n in names:
        check_name(n, "task.compute: an index's name", loc, FrontendError)
    try:
        value = el.as_elem(fn(*(el.Index(n) for n in names)))
    except TypeError as err:
        raise FrontendError(f"task.compute: {err}", loc) from None
    operands, dims, privileges, defaults = collect(frame, value, names, out_arg, loc)
    name_of = lambda a: a.name  # noqa: E731
    sig = PrimitiveSig(
        name="compute", kind="elementwise", params=tuple(a.name for a in operands),
        privileges=privileges, dims=dims,
        meaning=f"{out_arg.name}[{', '.join(names)}] = {el.describe(value, name_of)}", batched=True,
        defaults=defaults,
    )
    frame.stmts.append(PrimCall("compute", tuple(operands), loc, sig=sig, expr=value))


def global_index(tile, axis: int, index) -> el.Elem:
    """Where ``index`` along ``axis`` of ``tile`` falls in the whole tensor the tile was cut from (for masks)."""
    loc = caller_loc()
    arg = tracer.unwrap(tile, "global_index", "the tile", loc)
    if not isinstance(index, el.Index):
        raise FrontendError("task.global_index: the third argument is an index of the compute (i, j, ...)", loc)
    return el.GlobalIndex(arg, check_axis(axis, "task.global_index", loc), index.name)


def _located(tile, api: str, axis, loc) -> Param:
    arg = tracer.unwrap(tile, api, "the tile", loc)
    if not isinstance(arg, Param):
        raise FrontendError(f"task.{api} takes a parameter of this task, not a tile of one", loc,
                            hint="pass the tile to a task and ask there")
    check_axis(axis, f"task.{api}", loc)
    return arg


def global_size(tile, axis: int) -> Expr:
    """The extent along ``axis`` of the whole tensor ``tile`` was cut from (a sequence length, a row length)."""
    return GlobalExtent(_located(tile, "global_size", axis, caller_loc()).sym, axis)


def global_offset(tile, axis: int) -> Expr:
    """Where ``tile`` starts along ``axis`` in the whole tensor it was cut from (for loop bounds such as causal
    attention's: only the key tiles up to the diagonal)."""
    return GlobalStart(_located(tile, "global_offset", axis, caller_loc()).sym, axis)


def ceildiv(a, b) -> Expr:
    """``-(-a // b)`` on shapes; a string names a tunable."""
    loc = caller_loc()
    try:
        args = [Tunable(check_name(x, "task.ceildiv: a tunable's name", loc, FrontendError)) if isinstance(x, str) else x
                for x in (a, b)]
        return check_index_expr(ceildiv_expr(*args), "task.ceildiv", loc)
    except (TypeError, ZeroDivisionError) as err:
        raise FrontendError(f"task.ceildiv: {err}", loc) from None


def _function(fn: str):
    def call(*args):
        return el.check_function(fn, args, caller_loc())

    call.__name__ = fn
    call.__doc__ = f"Element function for task.compute: {el.FUNCTIONS[fn][1]}."
    return call


for _fn in el.FUNCTIONS:
    globals()[_fn] = _function(_fn)

_elem_minimum = globals()["minimum"]  # the element function defined just above


def minimum(a, b):  # noqa: F811
    """The smaller of two values: of shapes (a loop bound) or of elements (in task.compute)."""
    if all(isinstance(x, (Expr, int, str)) and not isinstance(x, bool) for x in (a, b)):
        loc = caller_loc()
        args = [Tunable(check_name(x, "task.minimum: a tunable's name", loc, FrontendError)) if isinstance(x, str) else x
                for x in (a, b)]
        return check_index_expr(minimum_expr(*args), "task.minimum", loc)
    return _elem_minimum(a, b)
