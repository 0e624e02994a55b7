"""Tracing: running a task function on symbolic handles to record its task graph.

A ``@task.define`` function is called once per trace with one ``TensorHandle``
per parameter; each Task Lang call appends a node to the innermost open
statement list. Loops are generators, so the body of a ``for`` runs once,
between the opening and the closing of the loop.
"""
from __future__ import annotations

import dis
import functools
import inspect
import re
import sys
from dataclasses import dataclass
from typing import Callable, Optional

from septran.errors import FrontendError, SourceLoc
from septran.expr import Expr, fresh
from septran.frontend.bounds import check_axis, check_index_expr
from septran.frontend.ir import FULL, Arg, Param, Partition, ScalarParam, TaskDef, Temp, TileRef, source_dim
from septran.frontend.user_errors import as_frontend_error, is_internal
from septran.names import check_name, is_safe_name
from septran.paths import path_problem



def caller_loc() -> SourceLoc:
    """The first frame outside SepTran: the user's line that called Task Lang."""
    frame = sys._getframe(1)
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:  # pragma: no cover - only from inside SepTran itself
        return SourceLoc("<unknown>", 0)
    return SourceLoc(frame.f_code.co_filename, frame.f_lineno)


_STORES = ("STORE_NAME", "STORE_FAST", "STORE_DEREF", "STORE_GLOBAL")


def assigned_name() -> Optional[str]:
    """The plain name the user's line assigns the Task Lang call's result to (``S = task.temp(...)``), read from
    the calling frame's bytecode: the instruction after the call, where it stores into a name. None otherwise
    (``f(task.temp(...))``, ``self.S = ...``, ``a, b = ...``). Needs no source text (a notebook cell, exec)."""
    frame = sys._getframe(1)
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:  # pragma: no cover - only from inside SepTran itself
        return None
    after = next((i for i in _instructions(frame.f_code) if i.offset > frame.f_lasti), None)
    if after is None:
        return None
    if after.opname in _STORES:
        return after.argval
    if after.opname.startswith("STORE_FAST_") and isinstance(after.argval, tuple):  # 3.13's superinstructions
        return after.argval[0]
    return None


@functools.lru_cache(maxsize=256)
def _instructions(code) -> tuple:
    return tuple(dis.get_instructions(code))


class TaskFunction:
    """What ``@task.define`` returns: a Python function plus what Task Lang needs to know of it."""

    def __init__(self, fn: Callable, leaf: bool):
        if isinstance(fn, TaskFunction):
            raise FrontendError(f"@task.define is applied twice to {fn.name}", caller_loc(), hint="keep one @task.define")
        if not inspect.isfunction(fn):
            raise FrontendError(f"@task.define takes a function (def ...), got {type(fn).__name__}", caller_loc())
        self.fn = fn
        self.leaf = leaf
        self.name = fn.__name__
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__wrapped__ = fn
        code = fn.__code__
        self.loc = SourceLoc(code.co_filename, code.co_firstlineno)
        if path_problem(code.co_filename) is not None:
            raise FrontendError(f"the file of task {fn.__name__!r} has an unusable name: it {path_problem(code.co_filename)}")
        check_name(self.name, "a task's name", self.loc, FrontendError, as_is=True)
        sig = inspect.signature(fn)
        tensors, scalars, optional = [], {}, []
        for p in sig.parameters.values():
            number = isinstance(p.default, (int, float)) and not isinstance(p.default, bool)
            if p.default is None and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                optional.append(p.name)  # an optional tensor (M=None): one trace per set of those passed
            elif p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or (p.default is not p.empty and not number):
                raise FrontendError(
                    f"task {self.name}: parameter {p.name!r} must be a plain positional parameter (a tensor), "
                    "have None as its default (an optional tensor, M=None) "
                    "or have a number as its default (a scalar, such as eps=1e-5)",
                    self.loc,
                    hint="tile sizes belong in the mapping's tunables",
                )
            check_name(p.name, f"task {self.name}: a parameter's name", self.loc, FrontendError)
            if p.default is p.empty or p.default is None:
                tensors.append(p.name)
            else:
                try:
                    scalars[p.name] = float(p.default)
                except OverflowError:
                    raise FrontendError(f"task {self.name}: the default of {p.name} is too large for a float", self.loc) from None
        self.param_names = tuple(tensors)  # the tensors, optional ones included
        self.scalar_defaults = scalars  # name -> default, after the tensors (Python puts defaults last)
        self.optional = tuple(optional)  # the optional tensors, in the signature's order
        self.dtypes: dict = {}  # @task.define(dtype={...}): outputs' dtypes (types_api.with_dtypes sets them)
        self.signature = tuple(sig.parameters)  # every parameter, in order: how a launch binds positions

    def __call__(self, *args, **kwargs):
        raise FrontendError(
            f"task {self.name} cannot be called directly",
            caller_loc(),
            hint="launch it from another task with task.launch(...), or compile it with septran.compile / @septran.jit",
        )

    def __repr__(self) -> str:
        return f"<task {self.name} at {self.loc}>"


@dataclass
class _Frame:
    task: TaskFunction
    params: tuple[Param, ...]
    stmts: list  # the innermost open statement list
    partitions: list
    callees: dict
    open_loops: int = 0
    live: list = None  # the loop indices (Syms) of the loops open now
    temps: list = None
    scalars: tuple = ()
    absent: dict = None  # callee name -> (its optional tensors not passed, the launch's line)


_stack: list[_Frame] = []


def current(api: str) -> _Frame:
    if not _stack:
        raise FrontendError(
            f"task.{api} used outside a task",
            caller_loc(),
            hint="did you forget @task.define on the enclosing function?",
        )
    return _stack[-1]


def trace(tf: TaskFunction, absent: frozenset = frozenset()) -> tuple[TaskDef, dict[str, TaskFunction], dict]:
    """Runs ``tf`` on symbolic parameters: its task definition, the tasks it launches and, for each, the optional
    tensors it was not passed.

    ``absent``: the optional tensors not passed (the function sees None); the task has no such parameter."""
    from septran.frontend.elementwise import ScalarRef

    present = [n for n in tf.param_names if n not in absent]
    params = tuple(Param(fresh(n), i, tf.loc) for i, n in enumerate(present))
    scalars = tuple(ScalarParam(fresh(n), d, tf.loc) for n, d in tf.scalar_defaults.items())
    frame = _Frame(tf, params, [], [], {}, temps=[], scalars=scalars, live=[], absent={})
    handles = {p.name: TensorHandle(p) for p in params} | {s.name: ScalarRef(s) for s in scalars}
    _stack.append(frame)
    try:
        result = tf.fn(*(handles.get(n) for n in tf.signature))
    except Exception as err:  # the user's code ran: whatever it raised is reported at the user's line
        raise as_frontend_error(err, tf.loc.file, tf.loc, f"while tracing task {tf.name}") from None
    finally:
        _stack.pop()
    if frame.open_loops:
        raise FrontendError(
            f"task {tf.name} left a task.range / task.parallel_range loop early",
            tf.loc,
            hint="`break` and `return` inside a task loop are not supported: the loop body is traced once",
        )
    if result is not None:
        raise FrontendError(
            f"task {tf.name} returns a value; tasks communicate only through their parameters",
            tf.loc,
            hint="write results into a parameter (a tile the caller passes)",
        )
    tdef = TaskDef(tf.name, params, tf.leaf, tuple(frame.stmts), tuple(frame.partitions), tf.loc, tuple(frame.temps), scalars,
                   tuple(tf.dtypes.items()), tuple(n for n in tf.optional if n in absent))
    return tdef, frame.callees, {name: a for name, (a, _) in frame.absent.items()}


class _ParamShape:
    """``A.shape`` for a parameter whose rank is not known while tracing."""

    def __init__(self, param: Param):
        self._param = param

    def __getitem__(self, axis):
        if not isinstance(axis, int) or isinstance(axis, bool) or axis < 0:
            raise FrontendError(
                f"{self._param.name}.shape[{str(axis)[:40]}]: index the shape with a non-negative integer",
                caller_loc(),
            )
        return source_dim(self._param, check_axis(axis, f"{self._param.name}.shape[...]", caller_loc()))

    def __len__(self):
        raise FrontendError(
            f"the rank of parameter {self._param.name} is not known inside its task",
            caller_loc(),
            hint="index the shape (A.shape[0]) or partition the tensor first",
        )


class TensorHandle:
    """A parameter or a tile, as a task function sees it."""

    def __init__(self, arg: Arg):
        self._arg = arg

    @property
    def shape(self):
        if isinstance(self._arg, Param):
            return _ParamShape(self._arg)
        if isinstance(self._arg, Temp):
            return self._arg.shape
        return tuple(source_dim(self._arg, d) for d in range(self._arg.rank))

    def __getitem__(self, index):
        """``X[i, j]`` inside ``task.compute``: the element at the compute's indices."""
        from septran.frontend import elementwise as el
        from septran.frontend.index_expr import Affine
        from septran.frontend.elementwise import entry

        index = index if isinstance(index, tuple) else (index,)
        if not any(isinstance(i, (el.Index, Affine)) for i in index) and not all(isinstance(i, (int, el.Elem)) for i in index):
            raise FrontendError(f"{self._arg.name}[...] takes the indices of a task.compute (i, j, j + 1, 0, T[i])",
                                caller_loc(),
                                hint="to take a tile, partition the tensor (task.partition) and index the partition")
        try:
            return el.Load(self._arg, tuple(entry(i, self._arg.name) for i in index))
        except TypeError as err:
            raise FrontendError(str(err), caller_loc()) from None

    def __repr__(self) -> str:
        return f"<tensor {self._arg}>"


class PartitionHandle:
    """The result of ``task.partition``: index it to get a tile."""

    def __init__(self, partition: Partition):
        self._partition = partition

    @property
    def shape(self) -> tuple[Expr, ...]:
        return self._partition.shape

    def __getitem__(self, index) -> TensorHandle:
        loc = caller_loc()
        if not isinstance(index, tuple):
            index = (index,)
        part = self._partition
        if len(index) != part.rank:
            raise FrontendError(
                f"{part.sym.name}[...] takes {part.rank} indices (one per tiled dimension), got {len(index)}",
                loc,
            )
        out = []
        for i in index:
            if isinstance(i, slice):
                if i != slice(None):
                    raise FrontendError(
                        f"{part.sym.name}[...]: only `:` (a whole dimension) is supported as a slice, got {i}",
                        loc,
                    )
                out.append(FULL)
            elif isinstance(i, Expr):
                check_index_expr(i, f"{part.sym.name}[...]", loc)
                check_live(i, f"{part.sym.name}[...]", loc)
                out.append(i)
            elif isinstance(i, int) and not isinstance(i, bool):
                from septran.expr import Const

                out.append(check_index_expr(Const(i), f"{part.sym.name}[...]", loc))
            else:
                raise FrontendError(f"{part.sym.name}[...]: cannot index a partition with {i!r}", loc)
        if part.by == "windows":  # starts in elements, not tile numbers
            from septran.frontend.windows import check_starts

            out = check_starts(part, tuple(out), loc)
        return TensorHandle(TileRef(part, tuple(out), loc))


def check_live(e: Expr, what: str, loc: SourceLoc) -> None:
    """A loop index used after its loop ended (Python keeps the variable) or in another task is refused."""
    from septran.expr import Var, leaves

    live = _stack[-1].live if _stack else []
    scalars = {s.sym for s in _stack[-1].scalars} if _stack else set()  # task.as_index(pos)
    for leaf in leaves(e):
        if isinstance(leaf, Var) and leaf.sym not in live and leaf.sym not in scalars:
            raise FrontendError(f"{what}: loop index {leaf.sym.name} is used outside its loop", loc,
                                hint="use it only inside the body of the task.range / task.parallel_range that defines it")


_FOR_TARGET = re.compile(r"^\s*for\s+(.+?)\s+in\b")


def loop_var_names(loc: SourceLoc, count: int, default: str) -> list[str]:
    """The names the user gave the loop variables, read from the ``for`` line when possible."""
    m = _FOR_TARGET.match(loc.source_line())
    if m:
        names = [n.strip(" ()") for n in m.group(1).split(",")]
        if len(names) == count and all(is_safe_name(n) for n in names):  # else SepTran's own names
            return names
    return [f"{default}{k}" for k in range(count)] if count > 1 else [default]


def unwrap(handle, api: str, what: str, loc: SourceLoc) -> Arg:
    if isinstance(handle, TensorHandle):
        return handle._arg
    if isinstance(handle, PartitionHandle):
        raise FrontendError(
            f"task.{api}: {what} is a whole partition; index it to pass one tile (e.g. Ap[i, 0])", loc
        )
    raise FrontendError(f"task.{api}: {what} must be a task parameter or a tile, got {type(handle).__name__}", loc)
