"""The tile program: a flat, explicit description of one kernel.

Everything the emitter prints is decided here already: the grid, the thread
count, each buffer with its memory space and shape, every copy, loop and leaf
call. Each statement carries a ``Why``: the mapping key and logic line that
caused it (``kernel.explain()`` prints them).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Optional, Union

from septran.errors import SourceLoc
from septran.expr import Expr, Sym
from septran.frontend import elementwise as el


@dataclass(frozen=True)
class Why:
    text: str
    mapping: Optional[SourceLoc] = None
    logic: Optional[SourceLoc] = None

    def __str__(self) -> str:
        where = [f"mapping {self.mapping}" if self.mapping else None, f"logic {self.logic}" if self.logic else None]
        where = [w for w in where if w]
        return self.text + (f"  [{'; '.join(where)}]" if where else "")


@dataclass(frozen=True)
class Const:
    """A named compile-time constant of the program (a tunable or a problem dimension)."""

    sym: Sym
    value: Optional[int]  # None: a dynamic dimension, a symbolic variable of the program bound at each call
    why: Why
    dtype: Optional[str] = None  # a dynamic dimension's integer type (the program's index width)


@dataclass(frozen=True)
class TensorParam:
    """A kernel argument: a tensor in global memory."""

    sym: Sym
    shape: tuple[Expr, ...]
    dtype: str
    role: str  # "input", "output", "inout", or "workspace" (after the others: the runtime allocates it, zeros)
    # The type the program holds it as where TileLang cannot name ``dtype`` (cpu: bfloat16 as uint16 bits; only
    # vendor functions named for ``dtype`` touch it: lowering/bits_dtypes.py). None: ``dtype`` itself.
    storage: Optional[str] = None


@dataclass(frozen=True)
class Buffer:
    """A buffer the kernel allocates in a target memory space."""

    sym: Sym
    shape: tuple[Expr, ...]
    dtype: str
    space: str
    alloc: Optional[str]  # the TileLang allocation function; None for a placed buffer
    why: Why
    # A buffer in a memory TileLang does not know: a byte offset (a named constant),
    # and, where the vendor names tiles by handle, the variable that holds the handle.
    address: Optional[Sym] = None
    handle: bool = False
    stages: int = 1  # copies held at once (a pipelined loop's stages, in a memory that keeps one per stage)
    holds: Optional[Sym] = None  # the tensor whose tiles it is staged from (None: a temp's own buffer)
    also: tuple[Sym, ...] = ()  # other tensors whose tiles it holds later, each computed in place (reuse_buffers)


DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "int32": 4, "int64": 8, "bool": 1}


def buffer_bytes(buf: "Buffer", value: Callable[[Expr], int], stages: bool = True) -> int:
    """Bytes ``buf`` takes (times its pipeline stages, unless ``stages`` is False); ``value`` evaluates its extents."""
    return DTYPE_BYTES[buf.dtype] * math.prod(value(e) for e in buf.shape) * (buf.stages if stages else 1)


@dataclass(frozen=True)
class Region:
    """A box of a tensor or buffer: ``offsets`` and ``extents`` per dimension."""

    of: Sym
    offsets: tuple[Expr, ...]
    extents: tuple[Expr, ...]
    whole: bool  # the box is the whole buffer
    # What vendor calls need besides the box:
    valid: tuple[Expr, ...] = ()  # the in-bounds part of each extent (a tile may overhang its tensor)
    row_stride: Optional[Expr] = None  # elements from one row of `of` to the next
    dtype: str = ""
    dtype_code: Optional[int] = None  # the target's number for dtype


@dataclass(frozen=True)
class Fill:
    dst: Sym
    value: Union[int, float]  # 0 is emitted as T.clear; +-inf as T.infinity
    why: Why


@dataclass(frozen=True)
class Copy:
    src: Region
    dst: Region
    options: tuple[tuple[str, object], ...]  # T.copy keywords from the mapping's copy policy
    why: Why


@dataclass(frozen=True)
class LeafCall:
    impl: str
    template: str
    args: tuple[tuple[str, Region], ...]  # primitive parameter name -> region
    why: Why
    flags: tuple[tuple[str, object], ...] = ()  # the primitive's flags, as keywords ({flags})
    attrs: tuple[tuple[str, object], ...] = ()  # fixed template fields of the primitive ({op}, {clear})
    # Elementwise code (task.compute and the named elementwise primitives): the element
    # stored at each point of the loop over the output ({indices}), and its value ({body}).
    store: Optional[object] = None
    expr: Optional[object] = None
    loop: tuple[str, ...] = ()
    atomic: bool = False  # the store adds expr into its element atomically (lowering/combine.py)
    # (index, bound) pairs: the store happens only where every index is below its bound (the loop runs over a
    # whole tile that overhangs its tensor; lowering/combine.py)
    guard: tuple[tuple[Expr, Expr], ...] = ()
    written: tuple[int, ...] = ()  # a vendor call's operands it only writes (a compute's form: Y), by position


def told_in_bounds(call: LeafCall) -> bool:
    """Whether a leaf's template passes its operands' in-bounds extents (``{X.valid_rows}``, ``{X.valid_cols}``): it
    reads a staged tile's part inside its tensor only (a vendor's row reduction), not the whole tile."""
    return "valid_" in call.template


@dataclass(frozen=True)
class VendorOp:
    """A call into a vendor library for one of a memory space's ops (load, store, sync, ...)."""

    op: str
    template: str  # TileLang text with {dst}, {src}, {buf} operands
    args: tuple[tuple[str, Region], ...]
    why: Why
    result: Optional[Sym] = None  # the variable that receives the call's value (a handle)


@dataclass(frozen=True)
class For:
    var: Sym
    extent: Expr
    kind: str  # "serial", "pipelined", or "parallel" (lowering/parallel_loops.py)
    num_stages: Optional[int]
    body: tuple["Stmt", ...]
    why: Why
    parallel: bool = False  # a parallel_range inside a program: its iterations need no order


@dataclass(frozen=True)
class Guarded:
    """``then`` where the dynamic size ``size`` is from 1 to ``at_most``, else ``otherwise``: one program in two
    versions (lowering/one_tile.py). Made after every pass; the emitter and the cost model read it."""

    size: Sym
    at_most: int
    then: tuple["Stmt", ...]
    otherwise: tuple["Stmt", ...]
    why: Why


Stmt = Union[Fill, Copy, LeafCall, VendorOp, For, Guarded]


def statements(stmts):
    """Every statement of ``stmts`` that is no loop, the loops' bodies opened, in program order (a guarded
    statement's two versions one after the other)."""
    for s in stmts:
        if isinstance(s, For):
            yield from statements(s.body)
        elif isinstance(s, Guarded):
            yield from statements(s.then)
            yield from statements(s.otherwise)
        else:
            yield s


def syms(node):
    """Every Sym a statement (or anything the tile program holds) names, however deep: regions, element
    expressions (the buffers they load, their indices), stores; a ``Why`` names none."""
    if isinstance(node, Sym):
        yield node
    elif isinstance(node, el.Elem):  # (no dataclass: a resolved expression's loads, stores and sizes)
        for n in el.nodes(node):
            if isinstance(n, el.Elt):
                yield from syms(n.of)
                yield from syms(n.index)
            elif isinstance(n, el.Position):
                yield from syms(n.start)
            elif isinstance(n, el.Size):
                yield from syms(n.expr)
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        if isinstance(node, Why):
            return
        for f in dataclasses.fields(node):
            yield from syms(getattr(node, f.name))
    elif isinstance(node, (tuple, list)):
        for item in node:
            yield from syms(item)


@dataclass(frozen=True)
class KernelLaunch:
    grid: tuple[tuple[Sym, Expr], ...]  # (block index, extent), blockIdx.x first
    threads: Optional[int]
    buffers: tuple[Buffer, ...]
    body: tuple[Stmt, ...]
    why: Why
    folded: tuple[tuple[Sym, tuple[Expr, ...]], ...] = ()  # FlatProgram.folded


@dataclass(frozen=True)
class ParallelGrid:
    """Grid indices whose programs run at once (outermost first), and how they are spread over threads."""

    syms: tuple[Sym, ...]
    schedule: str

    def describe(self) -> str:
        return f"programs run in parallel over {', '.join(s.name for s in self.syms)} (schedule {self.schedule})"


def each_kernel(program: "TileProgram", fn: Callable[["KernelLaunch"], "KernelLaunch"]) -> "TileProgram":
    """``program`` with ``fn`` applied to each of its kernels (``kernel``, then those ``after`` it); ``program``
    itself where ``fn`` changed none."""
    old = (program.kernel, *program.after)
    new = tuple(fn(k) for k in old)
    if all(a is b for a, b in zip(new, old)):
        return program
    return dataclasses.replace(program, kernel=new[0], after=new[1:])


@dataclass(frozen=True)
class TileProgram:
    name: str
    target: str
    language: str
    consts: tuple[Const, ...]
    params: tuple[TensorParam, ...]
    kernel: KernelLaunch
    logic_file: str
    mapping_file: str
    names: frozenset = frozenset()  # every name the program uses (a pass that adds one picks a new one)
    parallel: Optional[ParallelGrid] = None  # None: the grid's programs run one after another
    read_outputs: frozenset = frozenset()  # outputs the program reads before writing: they start from zeros
    shared_outputs: tuple = ()  # (output read, grid index of extent > 1 whose programs may touch one element of it)
    index_bits: int = 32  # the width of the program's index arithmetic (and of vendor calls' integer arguments)
    after: tuple[KernelLaunch, ...] = ()  # kernels launched after ``kernel``, in order (lowering/two_kernels.py)
    workspaces: tuple[tuple[str, tuple[int, ...], str], ...] = ()  # (param, shape, dtype): the runtime's zeros
