"""TileProgram -> TileLang Python source, as a TileLang programmer would write it.

The emitter decides nothing: names, buffers, copies and loops all come from
the tile program. Its output is deterministic (same program, same text), and
it is exactly what gets compiled.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


from septran.resources import display_name
from septran.expr import BinOp, Const, Expr, Var, simplify
from septran.frontend import elementwise as el
from septran.lowering import tile_ir as ir

INDENT = "    "
_PREC = {"+": 1, "-": 1, "*": 2, "//": 2, "%": 2}


def expr(e: Expr, parent: int = 0) -> str:
    if isinstance(e, Const):
        return str(e.value)
    if isinstance(e, Var):
        return e.sym.name
    if isinstance(e, BinOp):
        if e.op in ("ceildiv", "min", "max"):
            return f"T.{e.op}({expr(e.lhs)}, {expr(e.rhs)})"
        prec = _PREC[e.op]
        # a - (b + c), a // (b * c), a % (b * c), a * (b // c): the right operand in parentheses where order matters
        right = e.op in ("-", "//", "%") or (e.op == "*" and isinstance(e.rhs, BinOp) and e.rhs.op in ("//", "%"))
        text = f"{expr(e.lhs, prec)} {e.op} {expr(e.rhs, prec + right)}"
        return f"({text})" if prec < parent else text
    return str(e)


def _start(r: ir.Region) -> str:
    """``A[by * BM, k * BK]``: TileLang's copy idiom, the extent taken from the other side."""
    return f"{r.of.name}[{', '.join(expr(o) for o in r.offsets)}]"


def _slices(r: ir.Region) -> str:
    parts = []
    for o, e in zip(r.offsets, r.extents):
        parts.append(f"{expr(o)}:{expr(o + e)}")
    return f"{r.of.name}[{', '.join(parts)}]"


def _unbatched(extents):
    """Extents without leading dimensions of one element (a batch of one, staged as a plain tile)."""
    while len(extents) > 1 and extents[0] == Const(1):
        extents = extents[1:]
    return extents


def region(r: ir.Region, other: ir.Region | None = None) -> str:
    if r.whole:
        return r.of.name
    if other is not None and other.whole and _unbatched(other.extents) == _unbatched(r.extents):
        return _start(r)
    return _slices(r)


@dataclass(frozen=True)
class _Program:
    """What printing a statement needs to know of the program around it."""

    placed: dict  # buffer -> its placed Buffer (a DSA's memory)
    dtypes: dict  # buffer -> its element type
    shapes: dict  # tensor or allocated buffer -> its shape
    bits: int  # the width of integer arguments of vendor calls


class _Operand:
    """One argument of a vendor call or leaf template: ``{A}`` and its attributes ``{A.ptr}``, ``{A.rows}``...

    ``str()`` is how TileLang names the operand: a buffer's name (or its address
    or handle, for a memory TileLang does not know), or a region of a tensor.
    """

    def __init__(self, r: ir.Region, prog: _Program):
        self._r, self._bits = r, prog.bits
        self._placed = prog.placed.get(r.of)
        self._shape = prog.shapes.get(r.of)

    def __str__(self) -> str:
        if self._placed is not None:
            return self._placed.sym.name
        return region(self._r)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    @property
    def ptr(self) -> str:
        """The region's first element as a pointer: ``access_ptr`` with the row-major offset. (TileLang 0.1.15's C
        target fails to lower some ``T.address_of(A[...])`` whose flattened index is a multiple of 32768.)"""
        if self._shape is None:
            return f"T.address_of({_start(self._r)})"
        offset, stride = Const(0), Const(1)
        for off, extent in reversed(list(zip(self._r.offsets, self._shape))):
            offset, stride = offset + off * stride, stride * extent
        offset = simplify(offset)
        where = "" if offset == Const(0) else f", offset={expr(offset)}"
        return f'{self._r.of.name}.access_ptr("rw"{where})'

    @property
    def addr(self) -> str:
        return self._placed.address.name if self._placed is not None else self.ptr

    @property
    def rows(self) -> str:
        return _int(self._r.extents[-2] if len(self._r.extents) > 1 else Const(1), self._bits)

    @property
    def shape(self) -> str:
        """The extents, comma-separated: a loop over every element (``T.Parallel({out.shape})``). A tile written in
        place in global memory that overhangs its tensor loops over its in-bounds part only."""
        return ", ".join(expr(e) for e in (self._r.valid or self._r.extents))

    @property
    def cols(self) -> str:
        return _int(self._r.extents[-1], self._bits)

    @property
    def valid_rows(self) -> str:
        return _int(self._r.valid[-2] if len(self._r.valid) > 1 else Const(1), self._bits)

    @property
    def valid_cols(self) -> str:
        return _int(self._r.valid[-1], self._bits)

    @property
    def ld(self) -> str:
        return _int(self._r.row_stride, self._bits)

    @property
    def dtype(self) -> str:
        return str(self._r.dtype_code)

    @property
    def type(self) -> str:
        """The element type in a vendor function's name (``septran_cpu_load_{dst.type}_{src.type}``): TileLang
        declares an extern from the arguments of each call, so one name must always take one pointer type."""
        return _TYPE_NAMES.get(self._r.dtype, self._r.dtype)


_TYPE_NAMES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64"}


def _int(e: Expr, bits: int) -> str:
    """An integer argument of a vendor call, of one type at every call: TileLang declares the extern from each
    call's argument types. With 64-bit indices TileLang widens every index expression, so every one is int64."""
    if bits == 32:
        return expr(e)
    return f"T.int64({e.value})" if isinstance(e, Const) else f'T.Cast("int64", {expr(e)})'


def _template(template: str, args, prog: _Program, flags=(), **fields) -> str:
    operands = {name: _Operand(r, prog) for name, r in args}
    if args:
        operands.setdefault("out", operands[args[0][0]])  # elementwise loops run over the updated operand
    # {flags}: the flags that are on, as TileLang's keywords; {transpose_A} and the like: each one as 0 or 1,
    # for a vendor's call (TileLang declares an extern's parameters from its arguments: a bool would not be int32).
    return template.format(**operands, **fields, **{k: int(v) for k, v in flags},
                           flags="".join(f", {k}={v!r}" for k, v in flags if v))


_FUNCTIONS = {"exp": "T.exp", "exp2": "T.exp2", "log": "T.log", "log2": "T.log2", "sqrt": "T.sqrt", "rsqrt": "T.rsqrt",
              "erf": "T.erf", "tanh": "T.tanh", "maximum": "T.max", "minimum": "T.min", "where": "T.if_then_else"}
_ELEM_PREC = {"<": 0, "<=": 0, ">": 0, ">=": 0, "==": 0, "!=": 0, "+": 1, "-": 1, "*": 2, "/": 2, "//": 2, "%": 2}


def _constant(e: el.Num) -> str:
    """A constant as the lowering typed it: an integer of a type, one that takes its neighbour's, or a float32."""
    if e.dtype == "bool":
        return f"T.bool({bool(e.value)})"
    if e.dtype is not None:
        return f"T.{e.dtype}({int(e.value)})"
    return str(e.value) if isinstance(e.value, int) else number(e.value)


# Per float type: its largest finite value, and the magnitude from which a value rounds to infinity (the largest
# finite value plus half an ulp; the tie rounds to the even neighbour, infinity). TileLang refuses a literal beyond
# the largest finite value; torch rounds it, as IEEE does.
_FLOAT_LIMITS = {"float32": (3.4028234663852886e38, 2.0 ** 128 - 2.0 ** 103),
                 "bfloat16": (3.3895313892515355e38, 2.0 ** 128 - 2.0 ** 119), "float16": (65504.0, 65520.0)}


def rounded(v: float, dtype: str = "float32") -> float:
    """``v`` as ``dtype`` holds it, as far as its range goes: beyond the largest finite value, that value or an
    infinity, as IEEE rounding to nearest gives it."""
    top, to_inf = _FLOAT_LIMITS.get(dtype, (math.inf, math.inf))
    if v != v or abs(v) <= top:
        return v
    return math.copysign(math.inf if abs(v) >= to_inf else top, v)


def number(v: float) -> str:
    """A float32 constant as TileLang reads it (NaN and the infinities included)."""
    v = rounded(v)
    if v != v:
        return 'T.float32(float("nan"))'
    if v == float("inf"):
        return 'T.infinity("float32")'
    if v == float("-inf"):
        return '-T.infinity("float32")'
    return f"T.float32({v!r})"


def _element(e: el.Elem, placed: dict, parent: int = 0) -> str:
    """An element expression as TileLang: buffer elements, T.exp, T.if_then_else, casts the lowering chose."""
    if isinstance(e, el.Num):
        text = _constant(e)
        return f"({text})" if text.startswith("-") and parent > 0 else text
    if isinstance(e, el.Elt):
        return f"{e.of.name}[{', '.join(_element(i, placed) if isinstance(i, el.Elem) else expr(i) for i in e.index)}]"
    if isinstance(e, el.Cast):
        return f'T.Cast("{e.dtype}", {_element(e.operand, placed)})'
    if isinstance(e, el.Size):
        return expr(e.expr, 3)
    if isinstance(e, el.AsFloat):
        return f"T.float32({_element(e.operand, placed)})"
    if isinstance(e, el.Position):
        if e.start == Const(0):
            return e.idx
        text = f"{expr(e.start, 1)} + {e.idx}"
        return f"({text})" if parent > 1 else text
    if isinstance(e, el.Neg):
        return f"-{_element(e.operand, placed, 3)}"
    if isinstance(e, el.Call):
        if e.fn == "abs":  # T.abs fails on TileLang's C target; max(x, -x) is |x| everywhere
            x = _element(e.args[0], placed)
            return f"T.max({x}, -({x}))"
        return f"{_FUNCTIONS[e.fn]}({', '.join(_element(a, placed) for a in e.args)})"
    if isinstance(e, el.Bin):
        prec = _ELEM_PREC[e.op]
        text = f"{_element(e.lhs, placed, prec)} {e.op} {_element(e.rhs, placed, prec + 1)}"
        return f"({text})" if prec < parent else text
    raise TypeError(f"unknown element expression {e!r}")  # pragma: no cover


def _shape(shape) -> str:
    inner = ", ".join(expr(e) for e in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


class _Writer:
    def __init__(self):
        self.lines: list[str] = []

    def line(self, depth: int, text: str = "") -> None:
        self.lines.append(INDENT * depth + text if text else "")


def _stmt(w: _Writer, s, depth: int, prog: _Program) -> None:
    placed, dtypes = prog.placed, prog.dtypes
    if isinstance(s, ir.Fill):
        value = rounded(s.value, dtypes[s.dst]) if isinstance(s.value, float) else s.value
        if value == 0:
            w.line(depth, f"T.clear({s.dst.name})")
        elif abs(value) == float("inf"):
            w.line(depth, f'T.fill({s.dst.name}, {"-" if value < 0 else ""}T.infinity("{dtypes[s.dst]}"))')
        elif value != value:  # NaN: always a float
            w.line(depth, f'T.fill({s.dst.name}, T.Cast("{dtypes[s.dst]}", {number(value)}))')
        else:
            w.line(depth, f"T.fill({s.dst.name}, {value!r})")
    elif isinstance(s, ir.Copy):
        opts = "".join(f", {k}={v!r}" for k, v in s.options)
        w.line(depth, f"T.copy({region(s.src, s.dst)}, {region(s.dst, s.src)}{opts})")
    elif isinstance(s, ir.LeafCall):
        template = s.template
        if s.expr is not None:
            store, value = _element(s.store, placed), _element(s.expr, placed)
            body = f"T.atomic_add({store}, {value})" if s.atomic else f"{store} = {value}"
            if s.guard:
                body = f"if {' and '.join(f'{expr(i, 1)} < {expr(b, 1)}' for i, b in s.guard)}: {body}"
            template = template.replace("{body}", body.replace("{", "{{").replace("}", "}}"))
        text = _template(template, s.args, prog, s.flags, indices=", ".join(s.loop), **dict(s.attrs))
        for line in text.splitlines():
            w.line(depth, line)
    elif isinstance(s, ir.VendorOp):
        call = _template(s.template, s.args, prog)
        w.line(depth, f"{s.result.name} = {call}" if s.result is not None else call)
    elif isinstance(s, ir.For):
        if s.kind == "pipelined":
            w.line(depth, f"for {s.var.name} in T.Pipelined({expr(s.extent)}, num_stages={s.num_stages}):")
        elif s.kind == "parallel":
            w.line(depth, f"for {s.var.name} in T.Parallel({expr(s.extent)}):")
        else:
            w.line(depth, f"for {s.var.name} in T.serial({expr(s.extent)}):")
        for b in s.body:
            _stmt(w, b, depth + 1, prog)
        if not s.body:
            w.line(depth + 1, "pass")
    elif isinstance(s, ir.Guarded):
        # from 1: a size of 0 (untested, not refused) keeps the walks, which then run no trip
        w.line(depth, f"if T.And({s.size.name} >= 1, {s.size.name} <= {s.at_most}):  # {s.why.text}")
        for b in s.then:
            _stmt(w, b, depth + 1, prog)
        w.line(depth, "else:")
        for b in s.otherwise:
            _stmt(w, b, depth + 1, prog)
    else:  # pragma: no cover
        raise TypeError(f"unknown tile statement {s!r}")


def emit(program: ir.TileProgram, version: str) -> str:
    w = _Writer()
    w.line(0, f"# Generated by SepTran {version} for target {program.target}")
    w.line(0, f"#   logic:   {display_name(program.logic_file)}")
    w.line(0, f"#   mapping: {display_name(program.mapping_file)}")
    w.line(0, "# This is the program that is compiled. To change it, change the logic or the mapping.")
    w.line(0, f"import {program.language} as T")
    w.line(0)
    for c in program.consts:
        where = f" ({display_name(c.why.mapping.file)}:{c.why.mapping.line})" if c.why.mapping else ""
        value = c.value if c.value is not None else f'T.dynamic("{c.sym.name}", "{c.dtype}")'  # bound at each call
        w.line(0, f"{c.sym.name} = {value}  # {c.why.text}{where}")
    w.line(0)
    w.line(0)
    w.line(0, "@T.prim_func")
    w.line(0, f"def {program.name}(")
    for p in program.params:
        held = f"  # {p.dtype}, held as its bits" if p.storage else ""
        w.line(1, f"{p.sym.name}: T.Tensor({_shape(p.shape)}, \"{p.storage or p.dtype}\"),{held}")
    w.line(0, "):")
    for n, k in enumerate((program.kernel,) + program.after):  # after: in order, each once the one before ended
        grid = ", ".join(expr(e) for _, e in k.grid)
        threads = f", threads={k.threads}" if k.threads is not None else ""
        names = ", ".join(s.name for s, _ in k.grid)
        bound = f"({names})" if len(k.grid) > 1 else names
        if n == 0 and program.parallel is not None:  # the builder reads it from the program, not from this comment
            w.line(1, f"# {program.parallel.describe()}")
        w.line(1, f"with T.Kernel({grid}{threads}) as {bound}:")
        placed = {b.sym: b for b in k.buffers if b.address is not None}
        for b in k.buffers:
            if b.alloc is not None:
                also = f"  # then {', '.join(t.name for t in b.also)}'s, computed in place" if b.also else ""
                w.line(2, f"{b.sym.name} = T.{b.alloc}({_shape(b.shape)}, \"{b.dtype}\"){also}")
            elif b.handle:
                w.line(2, f"{b.sym.name} = T.alloc_var(\"int32\")  # the vendor's handle for this tile")
        shapes = {p.sym: p.shape for p in program.params} | {b.sym: b.shape for b in k.buffers if b.alloc is not None}
        prog = _Program(placed, {b.sym: b.dtype for b in k.buffers}, shapes, program.index_bits)
        for s in k.body:
            _stmt(w, s, 2, prog)
    return "\n".join(w.lines) + "\n"
