"""The flat program: the task tree with every instance inlined and every name resolved.

What ``flatten`` produces and ``verify`` proves: loops with their extents,
and invocations of tasks and leaves whose operands are views in the
coordinates of the tensor (or temp) they were cut from. Nothing is staged
yet; each operand says in which memory its caller's mapping wants it. Every
tile index a launch uses is kept with the grid it must stay inside, so that
the verification can prove it, and every node keeps its logic line.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from septran.errors import SourceLoc
from septran.expr import Expr, Sym
from septran.frontend.ir import Launch, Privilege, TaskDef, Temp
from septran.lowering.tile_ir import TensorParam, Why
from septran.mapping.schema import InstanceMapping
from septran.mapping.yaml_source import Located


@dataclass(frozen=True)
class View:
    """Where a task parameter's data is: a box of a tensor or buffer, in a memory space."""

    of: Sym
    offsets: tuple[Expr, ...]
    extents: tuple[Expr, ...]
    space: str
    whole: bool
    # Per dimension: where the view starts in the whole tensor it was cut from, and
    # that tensor's extent (task.global_index / global_size).
    origin: tuple[tuple[Expr, Expr], ...] = ()


@dataclass(frozen=True)
class IndexUse:
    """One tile index of a launch: it must stay in ``0 .. grid - 1`` on every iteration."""

    index: Expr  # in the program's loop variables and constants
    grid: Expr  # the number of tiles along that axis
    axis: int
    partition: str  # the partition's name in the logic
    source: str  # what the partition splits (a parameter's name)
    written: str  # the index as the logic wrote it
    loc: SourceLoc


@dataclass(frozen=True)
class Operand:
    """One argument of an invocation, and the memory the calling instance wants it in."""

    param: str  # the caller's parameter (or temp) the argument is cut from
    view: View
    want: Optional[Located]  # the caller's mems entry for it; None: used where it is
    privilege: Privilege  # what the callee does to it
    keep: Optional[int]  # a leaf operand: the rank its primitives read it at


@dataclass(frozen=True)
class Invoke:
    """A launch: of a leaf (``impl`` set) or of an inner task (``body`` set, inlined)."""

    launch: Launch
    callee: TaskDef
    caller: InstanceMapping  # the instance whose body launches (its mems, copy options, accum_dtype)
    caller_task: TaskDef
    operands: tuple[Operand, ...]
    indices: tuple[IndexUse, ...]  # and windows' starts (lowering/windows.py's WindowUse)
    scalars: tuple[tuple[str, float], ...]
    instance: Optional[InstanceMapping] = None  # the callee's instance (inner tasks)
    temps: tuple[tuple[Temp, View], ...] = ()  # the callee's own tiles (inner tasks)
    body: tuple["Stmt", ...] = ()
    binding: Optional[Located] = None  # leaf_task_bindings entry (leaves)


@dataclass(frozen=True)
class Loop:
    var: Sym
    extent: Expr
    stages: Optional[int]  # pipelined over this many stages; None: serial
    body: tuple["Stmt", ...]
    why: Why
    parallel: bool = False  # a parallel_range inside a program: its iterations need no order


Stmt = Union[Loop, Invoke]


@dataclass(frozen=True)
class FlatProgram:
    name: str
    tensors: tuple[TensorParam, ...]  # in the entry task's parameter order
    grid: tuple[tuple[Sym, Expr], ...]  # blockIdx.x first
    grid_indices: tuple[IndexUse, ...]  # the tile indices of the grid's launch
    threads: Optional[int]
    program: Invoke  # one program of the grid: the entry's launch, inlined
    why: Why
    # grid indices that stand for several dimensions of the parallel_range: (index, each dimension's index
    # as an expression of it, outermost first); see grid_fold.py
    folded: tuple[tuple[Sym, tuple[Expr, ...]], ...] = ()


def format_flat(p: FlatProgram) -> str:
    """The flat program as text (a dump after ``flatten`` and ``verify``)."""
    out = [f"flat program {p.name}"]
    for t in p.tensors:
        out.append(f"  tensor {t.sym.name}: ({', '.join(map(str, t.shape))}) {t.dtype} {t.role}")
    out.append("grid " + ", ".join(f"{s.name} < {e}" for s, e in p.grid) + (f", {p.threads} threads" if p.threads else ""))
    _invoke(p.program, 1, out)
    return "\n".join(out) + "\n"


def _view(v: View) -> str:
    box = ", ".join(f"{o}:+{e}" for o, e in zip(v.offsets, v.extents))
    return f"{v.of.name}[{box}]@{v.space}"


def _invoke(s: Invoke, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    what = f"leaf {s.callee.name} -> {s.binding.value}" if s.binding is not None else f"task {s.callee.name} as {s.instance.name}"
    out.append(f"{pad}{what}  (logic {s.launch.loc})")
    for op in s.operands:
        want = f" -> {op.want.value}" if op.want is not None else ""
        out.append(f"{pad}  {op.param}: {_view(op.view)}{want} ({op.privilege.value})")
    for u in s.indices:
        if not isinstance(u, IndexUse):  # a window's start (septran/lowering/windows.py)
            out.append(f"{pad}  {u.describe()}")
            continue
        out.append(f"{pad}  index {u.written} = {u.index} in 0..{u.grid} - 1 ({u.partition} axis {u.axis})")
    for t, v in s.temps:
        out.append(f"{pad}  temp {t.name}: {_view(v)}")
    for b in s.body:
        _stmt(b, depth + 1, out)


def _stmt(s: Stmt, depth: int, out: list[str]) -> None:
    if isinstance(s, Loop):
        stages = f", {s.stages} stages" if s.stages else ""
        out.append(f"{'  ' * depth}loop {s.var.name} in 0..{s.extent}{stages}")
        for b in s.body:
            _stmt(b, depth + 1, out)
    else:
        _invoke(s, depth, out)
