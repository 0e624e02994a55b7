"""The small torch operations between a segment's kernels, recorded as the launcher's own C (``glue_source``).

A Hugging Face decode step computes its positions (``arange`` plus the cache's length), its rotary tables (``cat``,
``cos``, ``sin``), its mask (``le`` of two position ranges), its embedding and its KV-cache writes (``index_copy_``
at those positions) with torch between the kernels. Each such operation used to end a segment (one more
Python-to-C crossing) and cost a torch call of 10 to 80 µs. Here each becomes a step of the launcher: a fresh
result gets a scratch buffer (one Python allocates where it is read after the segment) laid out as the graph's
metadata says, written by a loop over its elements (``Each``) or by copies (``cat``, and the gathers and scatters
of ``Indexed``). An index read at run time is bounds-checked in C.

Only what is written here is taken, for the dtypes C computes exactly as torch does (float32 and float64
arithmetic rounds the same; integer and bool arithmetic is exact); anything else (another dtype, a keyword that
changes the meaning, a broadcast the sizes do not show) is ``Unsupported``, and the segment runs its nodes.
"""
from __future__ import annotations

import math

import sympy
import torch
import torch.fx as fx

from septran.model.launcher.cexpr import Unsupported, expr
from septran.model.launcher.glue_source import CTYPES, Each, Indexed, Load
from septran.model.launcher.source import Copy
from septran.model.launcher.views import Desc, same

aten = torch.ops.aten

_BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_COMPARE = {"le": "<=", "lt": "<", "ge": ">=", "gt": ">", "eq": "==", "ne": "!="}
_UNARY = {"cos": "cos", "sin": "sin", "exp": "exp", "sqrt": "sqrt", "neg": None, "rsqrt": None}
_OPS = {}
for _name in (*_BINARY, *_COMPARE):
    for _overload in ("Tensor", "Scalar"):
        _OPS[getattr(getattr(aten, _name), _overload)] = "binary"
for _name in _UNARY:
    _OPS[getattr(aten, _name).default] = "unary"
_OPS.update({aten._to_copy.default: "convert", aten.arange.default: "arange", aten.arange.start: "arange",
             aten.arange.start_step: "arange", aten.cat.default: "cat", aten.embedding.default: "embedding",
             aten.index_select.default: "index_select", aten.index_copy_.default: "index_copy"})
_FLOATS = ("float32", "float64")
HOST = torch.empty(0).cpu().device  # the glue's loops run on the host, over host memory


def _dtype(t) -> str:
    return str(t).split(".")[-1]


def _dense(t: torch.Tensor) -> bool:
    """``t``'s elements fill a buffer of ``numel`` elements, each once (contiguous up to a permutation)."""
    step = 1
    for stride, size in sorted((st, s) for s, st in zip(t.shape, t.stride()) if s > 1):
        if stride != step:
            return False
        step *= size
    return True


def joins(n: fx.Node) -> bool:
    """``n`` is an operation the launcher does itself, on dtypes it computes as torch does."""
    if n.target not in _OPS:
        return False
    v = n.meta.get("val")
    if not isinstance(v, torch.Tensor) or v.device != HOST or _dtype(v.dtype) not in CTYPES:
        return False
    if not all(_dtype(a.meta["val"].dtype) in CTYPES for a in n.all_input_nodes
               if isinstance(a.meta.get("val"), torch.Tensor)):
        return False
    try:
        return _static_ok(n, _OPS[n.target], v)
    except (TypeError, ValueError, AttributeError, IndexError, KeyError, RuntimeError):
        return False


def _meta(a):
    return a.meta.get("val") if isinstance(a, fx.Node) else a


def _static_ok(n: fx.Node, kind: str, v: torch.Tensor) -> bool:
    """What the metadata already shows the recorder would refuse (a node it refuses would keep its whole segment
    on its steps; left out, it only ends the segment, as before the glue)."""
    if kind != "index_copy" and v.numel() == 0:
        return False
    name = n.target._overloadpacket.__name__
    if kind == "binary":
        if len(n.args) != 2 or any(k != "alpha" or n.kwargs[k] != 1 for k in n.kwargs):
            return False
        a, b = (_meta(x) for x in n.args)
        if any(isinstance(x, float) and not math.isfinite(x) for x in (a, b)):
            return False
        if not all(isinstance(x, (torch.Tensor, int, float, torch.SymInt)) for x in (a, b)):
            return False
        compute = _dtype(torch.result_type(*(x if not isinstance(x, torch.SymInt) else 1 for x in (a, b))))
        return compute in CTYPES and (name != "div" or compute in _FLOATS)
    if kind == "unary":
        x = _meta(n.args[0])
        return len(n.args) == 1 and not n.kwargs and isinstance(x, torch.Tensor) and x.dtype == v.dtype and \
            (name == "neg" or _dtype(v.dtype) in _FLOATS)
    if kind == "convert":
        return set(n.kwargs) <= {"dtype", "layout", "device", "pin_memory", "non_blocking", "memory_format"}
    if kind == "arange":
        return _dtype(v.dtype) in ("int64", "int32") and all(isinstance(_meta(a), (int, torch.SymInt))
                                                              for a in n.args)
    if kind == "cat":
        return all(isinstance(_meta(a), torch.Tensor) and (_meta(a).numel() == 0 or
                   (_meta(a).dtype == v.dtype and _meta(a).dim() == v.dim())) for a in n.args[0])
    if kind in ("embedding", "index_select", "index_copy"):
        at = {"embedding": 1, "index_select": 2, "index_copy": 2}[kind]
        ids = _meta(n.args[at])
        if _dtype(ids.dtype) not in ("int64", "int32"):
            return False
        return sum(not (isinstance(s, int) and s == 1) for s in ids.shape) <= 1
    return True


class Glue:
    """The recorder's glue half (``record.Recorder``): needs ``descs``, ``program``, ``_check``, ``_tmp``, ``_ptr``
    and ``_int``."""

    def _glue_op(self, n: fx.Node, env: dict) -> bool:
        """Records ``n`` where it is a glue operation (True); False where it is not one."""
        kind = _OPS.get(n.target)
        if kind is None:
            return False
        getattr(self, f"_g_{kind}")(n, env[n], env)
        return True

    # results and operands -------------------------------------------------------------------------------------
    def _fresh(self, n: fx.Node, v) -> Desc:
        """A scratch buffer for ``n``'s result, laid out as the graph's metadata (dense, maybe permuted)."""
        meta = n.meta.get("val")
        if not isinstance(v, torch.Tensor) or not isinstance(meta, torch.Tensor) or not v.numel():
            raise Unsupported(f"{n.name}: an empty result, or none")
        item = v.element_size()
        if v.storage_offset() or v.untyped_storage().nbytes() != v.numel() * item or \
                not _dense(v):
            raise Unsupported(f"{n.name}: a result that is not a dense buffer of its own")
        sizes = tuple(expr(s) for s in meta.shape)
        d = Desc(None, sympy.Integer(0), sizes, tuple(expr(s) for s in meta.stride()), v.dtype)
        base = self._tmp(math.prod(sizes, start=sympy.Integer(1)) * item, v.data_ptr())
        d = Desc(base, d.offset, d.sizes, d.strides, d.dtype)
        self._check(v, d, n.name)
        self.descs[n] = d
        return d

    def _held(self, a, what: str) -> Desc:
        d = self.descs.get(a) if isinstance(a, fx.Node) else None
        if d is None:
            raise Unsupported(f"{what} reads a value the launcher does not hold")
        return d

    def _load(self, a, out: Desc, what: str) -> Load:
        """``a`` (a value of the segment) read over ``out``'s box, broadcast as torch does."""
        d = self._held(a, what)
        ctype = CTYPES.get(_dtype(d.dtype))
        lead = len(out.sizes) - len(d.sizes)
        if ctype is None or lead < 0:
            raise Unsupported(f"{what}: an operand of dtype {d.dtype} or rank {len(d.sizes)}")
        strides = []
        for j, e in enumerate(out.sizes):
            i = j - lead
            if i < 0 or (d.sizes[i].is_number and d.sizes[i] == 1):
                strides.append(sympy.Integer(0))
            elif same(d.sizes[i], e):
                strides.append(d.strides[i])
            else:
                raise Unsupported(f"{what}: a broadcast the launcher cannot follow ({d.sizes} to {out.sizes})")
        return Load(self._ptr(d), tuple(strides), ctype)

    def _scalar(self, a, what: str):
        """A Python number as a C literal, or an integer input as its expression (sympy)."""
        if isinstance(a, bool):
            return "1" if a else "0"
        if isinstance(a, int):
            return f"INT64_C({a})"
        if isinstance(a, float):
            if not math.isfinite(a):
                raise Unsupported(f"{what}: a scalar {a}")
            return repr(a)
        if isinstance(a, fx.Node) and a not in self.descs:
            return self._int(a)
        raise Unsupported(f"{what}: a scalar the launcher cannot write ({a!r})")

    def _each(self, n, out: Desc, operands: list, body) -> None:
        """``out = body(x0, x1...)``, ``operands`` each a value of the segment, a scalar or a size expression."""
        loads, names, sizes = [], [], []
        for a in operands:
            if isinstance(a, fx.Node) and a in self.descs:
                names.append(f"x{len(loads)}")
                loads.append(self._load(a, out, n.name))
                continue
            x = a if isinstance(a, sympy.Basic) else self._scalar(a, n.name)
            if isinstance(x, sympy.Basic):  # a size: computed from S before the loop
                names.append(f"c{len(sizes)}")
                sizes.append(x)
            else:
                names.append(x)
        self.program.ops.append(Each(self._ptr(out), out.sizes, out.strides, CTYPES[_dtype(out.dtype)],
                                     tuple(loads), body(*names), tuple(sizes)))

    # the operations --------------------------------------------------------------------------------------------
    def _g_binary(self, n, v, env) -> None:
        name = n.target._overloadpacket.__name__
        if len(n.args) != 2 or any(k != "alpha" or n.kwargs[k] != 1 for k in n.kwargs):
            raise Unsupported(f"{n.name}: {name} with {n.kwargs}")
        a, b = (env[x] if isinstance(x, fx.Node) else x for x in n.args)
        compute = _dtype(torch.result_type(a, b))
        if compute not in CTYPES or (name == "div" and compute not in _FLOATS):
            raise Unsupported(f"{n.name}: {name} computed in {compute}")
        ct, op = CTYPES[compute], _BINARY.get(name) or _COMPARE[name]
        out = self._fresh(n, v)
        self._each(n, out, list(n.args), lambda x, y: f"({ct})({x}) {op} ({ct})({y})")

    def _g_unary(self, n, v, env) -> None:
        name = n.target._overloadpacket.__name__
        d = self._held(n.args[0], n.name)
        if len(n.args) != 1 or n.kwargs or d.dtype != v.dtype:
            raise Unsupported(f"{n.name}: {name} that converts")
        dt = _dtype(v.dtype)
        if name == "neg":
            body = lambda x: f"-({x})"  # noqa: E731
        elif dt not in _FLOATS:
            raise Unsupported(f"{n.name}: {name} of {dt}")
        elif name == "rsqrt":
            one = "1.0f" if dt == "float32" else "1.0"
            body = lambda x: f"{one} / {'sqrtf' if dt == 'float32' else 'sqrt'}({x})"  # noqa: E731
        else:
            fn = _UNARY[name] + ("f" if dt == "float32" else "")
            body = lambda x: f"{fn}({x})"  # noqa: E731
        self._each(n, self._fresh(n, v), [n.args[0]], body)

    def _g_convert(self, n, v, env) -> None:
        allowed = {"dtype": None, "layout": torch.strided, "device": HOST, "pin_memory": False,
                   "non_blocking": False, "memory_format": torch.preserve_format}
        for k, x in n.kwargs.items():
            if k not in allowed or (k != "dtype" and x is not None and x != allowed[k]):
                raise Unsupported(f"{n.name}: _to_copy with {k}={x}")
        self._held(n.args[0], n.name)
        self._each(n, self._fresh(n, v), [n.args[0]], lambda x: x)

    def _g_arange(self, n, v, env) -> None:
        if _dtype(v.dtype) not in ("int64", "int32") or v.dim() != 1:
            raise Unsupported(f"{n.name}: an arange of {v.dtype}")
        args = list(n.args)
        start, step = (self._int(args[0]), self._int(args[2]) if len(args) > 2 else sympy.Integer(1)) \
            if len(args) > 1 else (sympy.Integer(0), sympy.Integer(1))
        self._each(n, self._fresh(n, v), [start, step], lambda first, by: f"{first} + i0 * {by}")

    def _g_cat(self, n, v, env) -> None:
        pieces = n.args[0]
        dim = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0)
        out = self._fresh(n, v)
        dim %= len(out.sizes)
        start = sympy.Integer(0)
        for a in pieces:
            d = self._held(a, n.name)
            if env[a].numel() == 0:
                continue  # (an empty piece adds nothing, whatever its rank)
            if d.dtype != out.dtype or len(d.sizes) != len(out.sizes):
                raise Unsupported(f"{n.name}: a piece that converts or broadcasts")
            dst = Desc(out.base, out.offset + start * out.strides[dim], d.sizes, out.strides, out.dtype)
            self.program.ops.append(Copy(self._ptr(dst), self._ptr(d), d.sizes, out.strides, d.strides,
                                         v.element_size()))
            start = start + d.sizes[dim]
        if not same(start, out.sizes[dim]):
            raise Unsupported(f"{n.name}: the pieces do not fill the result")

    def _index(self, a, what: str):
        """An index tensor read as one run: (pointer, bytes per index, count, stride)."""
        d = self._held(a, what)
        if _dtype(d.dtype) not in ("int64", "int32"):
            raise Unsupported(f"{what}: indices of {d.dtype}")
        long = [(s, st) for s, st in zip(d.sizes, d.strides) if not (s.is_number and s == 1)]
        if len(long) > 1:
            raise Unsupported(f"{what}: indices of more than one dimension")
        count, stride = long[0] if long else (sympy.Integer(1), sympy.Integer(1))
        return self._ptr(d), 8 if _dtype(d.dtype) == "int64" else 4, count, stride

    def _g_embedding(self, n, v, env) -> None:
        w = self._held(n.args[0], n.name)
        if len(w.sizes) != 2:
            raise Unsupported(f"{n.name}: an embedding table of rank {len(w.sizes)}")
        ids, nbytes, count, stride = self._index(n.args[1], n.name)
        out = self._fresh(n, v)
        rows = [i for i, s in enumerate(out.sizes[:-1]) if not (s.is_number and s == 1)]
        row = out.strides[rows[0]] if rows else sympy.Integer(0)
        self.program.ops.append(Indexed(self._ptr(out), self._ptr(w), ids, nbytes, count, stride, w.sizes[0],
                                        False, row, w.strides[0], (w.sizes[1],), (out.strides[-1],),
                                        (w.strides[1],), v.element_size()))

    def _g_index_select(self, n, v, env) -> None:
        src = self._held(n.args[0], n.name)
        dim = n.args[1] % max(len(src.sizes), 1)
        ids, nbytes, count, stride = self._index(n.args[2], n.name)
        out = self._fresh(n, v)
        if len(out.sizes) != len(src.sizes) or not src.sizes:
            raise Unsupported(f"{n.name}: an index_select of a scalar")
        keep = [i for i in range(len(src.sizes)) if i != dim]
        self.program.ops.append(Indexed(self._ptr(out), self._ptr(src), ids, nbytes, count, stride, src.sizes[dim],
                                        False, out.strides[dim], src.strides[dim],
                                        tuple(src.sizes[i] for i in keep), tuple(out.strides[i] for i in keep),
                                        tuple(src.strides[i] for i in keep), v.element_size()))

    def _g_index_copy(self, n, v, env) -> None:
        dst, source = self._held(n.args[0], n.name), self._held(n.args[3], n.name)
        if len(dst.sizes) != len(source.sizes) or not dst.sizes or dst.dtype != source.dtype or n.kwargs:
            raise Unsupported(f"{n.name}: an index_copy_ that converts or broadcasts")
        dim = n.args[1] % len(dst.sizes)
        ids, nbytes, count, stride = self._index(n.args[2], n.name)
        if not same(count, source.sizes[dim]):
            raise Unsupported(f"{n.name}: as many indices as rows, not shown by the sizes")
        keep = [i for i in range(len(dst.sizes)) if i != dim]
        if not all(same(dst.sizes[i], source.sizes[i]) for i in keep):
            raise Unsupported(f"{n.name}: an index_copy_ whose boxes differ")
        self.program.ops.append(Indexed(self._ptr(dst), self._ptr(source), ids, nbytes, count, stride,
                                        dst.sizes[dim], True, dst.strides[dim], source.strides[dim],
                                        tuple(source.sizes[i] for i in keep), tuple(dst.strides[i] for i in keep),
                                        tuple(source.strides[i] for i in keep), v.element_size()))
        self._check(v, dst, n.name)
        self.descs[n] = dst
