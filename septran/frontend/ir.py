"""The task graph: what tracing a logic file produces.

Frozen dataclasses, one per construct of Task Lang, each with the logic
file:line it came from. Shapes are symbolic (``septran.expr``) until a call
fixes them.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Optional, Union

from septran.errors import SourceLoc
from septran.expr import Dim, Expr, Sym, ceildiv, Const


class Privilege(enum.Enum):
    """How a task uses a parameter; inferred from the primitives it reaches."""

    NONE = "none"
    READ = "read"
    WRITE = "write"
    REDUCE = "reduce"
    READ_WRITE = "read_write"

    def then(self, later: "Privilege") -> "Privilege":
        """The privilege of doing ``self`` and then ``later`` to one parameter.

        Order matters: what a task does first decides whether it observes the
        value it is given. Read then write is read-write; a write first hides
        the incoming value whatever follows; a reduction first starts from the
        identity, so what follows it (reading or rewriting the result) keeps
        the parameter a reduction: an output that starts at zero.
        """
        if self is Privilege.NONE:
            return later
        if later is Privilege.NONE or later is self or self in (Privilege.WRITE, Privilege.REDUCE, Privilege.READ_WRITE):
            return self
        return Privilege.READ_WRITE  # read, then write / reduce / read-write

    @property
    def reads(self) -> bool:
        return self in (Privilege.READ, Privilege.READ_WRITE)

    @property
    def writes(self) -> bool:
        return self in (Privilege.WRITE, Privilege.REDUCE, Privilege.READ_WRITE)

    @property
    def role(self) -> str:
        """What an entry parameter with this privilege is to a caller: input, output or inout."""
        if self is Privilege.READ_WRITE:
            return "inout"
        return "output" if self.writes else "input"


class _Full:
    """The ``:`` index: the whole extent of a partitioned dimension."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return ":"


FULL = _Full()
Index = Union[Expr, _Full]


@dataclass(frozen=True)
class Param:
    sym: Sym
    position: int
    loc: SourceLoc

    @property
    def name(self) -> str:
        return self.sym.name


@dataclass(frozen=True)
class ScalarParam:
    """A number a task takes after its tensors (``eps=1e-5``): fixed per call, like Triton's constexpr."""

    sym: Sym
    default: float
    loc: SourceLoc

    @property
    def name(self) -> str:
        return self.sym.name


@dataclass(frozen=True)
class Partition:
    """``task.partition(source, by="blocks", tile=...)``: a grid of tiles over ``source``.

    ``by="windows"`` (``task.window``): boxes of shape ``tile`` that start at any element; a
    ``TileRef``'s index is then where the window starts, in elements, not a tile number.
    """

    sym: Sym
    source: "Arg"
    tile: tuple[Optional[Expr], ...]  # None: the whole dimension
    loc: SourceLoc
    by: str = "blocks"

    @property
    def rank(self) -> int:
        return len(self.tile)

    @property
    def shape(self) -> tuple[Expr, ...]:
        if self.by == "windows":  # where a window may start: any element (it may overhang the end)
            return tuple(Const(1) if t is None else source_dim(self.source, d) for d, t in enumerate(self.tile))
        return tuple(
            Const(1) if t is None else ceildiv(source_dim(self.source, d), t)
            for d, t in enumerate(self.tile)
        )


@dataclass(frozen=True)
class TileRef:
    """``Ap[i, k]``: one tile (or a slab, with ``:``) of a partition."""

    partition: Partition
    index: tuple[Index, ...]
    loc: SourceLoc

    @property
    def rank(self) -> int:
        return self.partition.rank

    def is_whole(self, axis: int) -> bool:
        """True where the tile spans the source's whole extent along ``axis``."""
        return self.partition.tile[axis] is None or self.index[axis] is FULL


@dataclass(frozen=True)
class Temp:
    """``S = task.temp(BM, "BN")``: a tile the task allocates for itself (running maxima, scores).

    It lives as long as one run of the task, in the memory the mapping's
    ``mems`` names; ``dtype_of`` names the parameter whose element type it
    takes (None: the accumulator type, float32 unless the mapping says).
    """

    sym: Sym
    shape: tuple[Expr, ...]
    dtype_of: Optional[str]
    loc: SourceLoc
    dtype: Optional[str] = None  # task.temp(..., dtype="int32"): a type by name

    @property
    def name(self) -> str:
        return self.sym.name

    @property
    def rank(self) -> int:
        return len(self.shape)


Arg = Union[Param, TileRef, Temp]


def root_param(arg: Arg) -> Union[Param, Temp]:
    while isinstance(arg, TileRef):
        arg = arg.partition.source
    return arg


def source_dim(arg: Arg, axis: int) -> Expr:
    """The symbolic extent of ``arg`` along ``axis``."""
    if isinstance(arg, Param):
        return Dim(arg.sym, axis)
    if isinstance(arg, Temp):
        return arg.shape[axis]
    if arg.is_whole(axis):
        return source_dim(arg.partition.source, axis)
    return arg.partition.tile[axis]


@dataclass(frozen=True)
class Loop:
    """``task.parallel_range`` (parallel=True) or ``task.range``."""

    vars: tuple[Sym, ...]
    extents: tuple[Expr, ...]
    parallel: bool
    body: tuple["Stmt", ...]
    loc: SourceLoc


@dataclass(frozen=True)
class Launch:
    callee: str
    args: tuple[Arg, ...]
    loc: SourceLoc
    scalars: tuple = ()  # the callee's scalar parameters: a ScalarParam of the caller or a number (missing: default)


@dataclass(frozen=True)
class PrimCall:
    name: str
    args: tuple[Arg, ...]
    loc: SourceLoc
    # the primitive's signature (for task.compute, the one built for this call), and the
    # element expression a compute stores
    sig: Optional[object] = field(default=None, compare=False)
    expr: Optional[object] = field(default=None, compare=False)

    @property
    def signature(self):
        return self.sig


Stmt = Union[Loop, Launch, PrimCall]


@dataclass(frozen=True)
class TaskDef:
    name: str
    params: tuple[Param, ...]
    leaf: bool
    body: tuple[Stmt, ...]
    partitions: tuple[Partition, ...]
    loc: SourceLoc
    temps: tuple[Temp, ...] = ()
    scalars: tuple[ScalarParam, ...] = ()
    dtypes: tuple[tuple[str, str], ...] = ()  # @task.define(dtype={"loss": "float32"}): outputs' types
    absent: tuple[str, ...] = ()  # optional tensors (M=None) this trace was not passed

    def param(self, name: str) -> Optional[Param]:
        return next((p for p in self.params if p.name == name), None)


@dataclass(frozen=True)
class TaskGraph:
    """Every task reachable from the entry, with inferred privileges and ranks."""

    entry: str
    tasks: Mapping[str, TaskDef]
    privileges: Mapping[tuple[str, str], Privilege]  # (task, param) -> privilege
    ranks: Mapping[tuple[str, str], int]  # (task, param) -> rank, where known
    rank_locs: Mapping[tuple[str, str], SourceLoc] = field(default_factory=lambda: MappingProxyType({}))

    def privilege(self, task: str, param: str) -> Privilege:
        return self.privileges.get((task, param), Privilege.NONE)

    @property
    def entry_task(self) -> TaskDef:
        return self.tasks[self.entry]


def walk(body: tuple[Stmt, ...], loops: tuple[Loop, ...] = ()):
    """Yields every statement of ``body``, depth first, with the loops that enclose it."""
    for s in body:
        yield s, loops
        if isinstance(s, Loop):
            yield from walk(s.body, loops + (s,))
