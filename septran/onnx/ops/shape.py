"""Shape and data-movement ONNX ops. Shapes are known at import (the graph is specialised to its input shapes),
so ``Shape`` is a constant and what is computed from it folds; the shape a ``Reshape`` or ``Expand`` takes must
be known then (``Node.const``)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from septran.onnx.ops.registry import op


@op("Constant")
def constant(b, n):
    from onnx import numpy_helper

    from septran.onnx.dtypes import tensor_from_numpy

    (key, v), = n.attrs.items()
    if key in ("value", "sparse_value"):
        if key == "sparse_value":
            raise n.error("sparse constants are not taken")
        return [tensor_from_numpy(numpy_helper.to_array(v))]
    dtype = {"value_float": torch.float32, "value_floats": torch.float32, "value_int": torch.int64,
             "value_ints": torch.int64}.get(key)
    if dtype is None:
        raise n.error(f"a Constant of {key} is not taken")
    return [torch.tensor(v, dtype=dtype)]


@op("Shape")
def shape(b, n):
    dims = list(n.shape(0))
    start, end = n.attr("start", 0), n.attr("end", None)
    return [torch.tensor(dims[slice(start, end)], dtype=torch.int64)]


@op("Size")
def size(b, n):
    return [torch.tensor(math.prod(n.shape(0)), dtype=torch.int64)]


@op("Reshape")
def reshape(b, n):
    want = n.ints(1)
    have = n.shape(0)
    if not n.attr("allowzero", 0):
        want = [have[i] if d == 0 else d for i, d in enumerate(want)]
    return [n.call(torch.reshape, n.input(0), tuple(want))]


@op("Flatten")
def flatten(b, n):
    shape = n.shape(0)
    axis = n.attr("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis  # in [-r, r]
    return [n.call(torch.reshape, n.input(0), (math.prod(shape[:axis]), math.prod(shape[axis:])))]


@op("Transpose")
def transpose(b, n):
    rank = len(n.shape(0))
    perm = n.attr("perm") or list(range(rank))[::-1]
    return [n.call(torch.permute, n.input(0), tuple(perm))]


def _axes(n, i_input: int):
    """The ``axes`` of Squeeze/Unsqueeze/Reduce*: an input from opset 13 (18 for most reductions), else an attribute."""
    if len(n.inputs) > i_input and n.input(i_input) is not None:
        return n.ints(i_input)
    a = n.attr("axes")
    return list(a) if a is not None else None


@op("Unsqueeze")
def unsqueeze(b, n):
    axes = _axes(n, 1)
    rank = len(n.shape(0)) + len(axes)
    shape = list(n.shape(0))
    for a in sorted(x % rank for x in axes):
        shape.insert(a, 1)
    return [n.call(torch.reshape, n.input(0), tuple(shape))]


@op("Squeeze")
def squeeze(b, n):
    axes = _axes(n, 1)
    shape = n.shape(0)
    drop = {a % len(shape) for a in axes} if axes is not None else {i for i, s in enumerate(shape) if s == 1}
    return [n.call(torch.reshape, n.input(0), tuple(s for i, s in enumerate(shape) if i not in drop))]


@op("Concat")
def concat(b, n):
    vals = [v for v in n.inputs if v is not None]
    return [n.call(torch.cat, vals, n.attr("axis"))]


def _gather(data, idx, axis):
    idx = torch.where(idx < 0, idx + data.shape[axis], idx)
    out = torch.index_select(data, axis, idx.reshape(-1))
    return out.reshape(data.shape[:axis] + idx.shape + data.shape[axis + 1:])


@op("Gather")
def gather(b, n):
    axis = n.attr("axis", 0) % len(n.shape(0))
    return [n.call(_gather, n.input(0), n.input(1), axis)]


def _slice(x, spec):
    for axis, start, end, step in spec:
        if step > 0:
            x = x[(slice(None),) * axis + (slice(start, end, step),)]
        else:  # torch's slices take no negative step: pick the elements
            x = torch.index_select(x, axis, torch.arange(start, end, step, device=x.device))
    return x


@op("Slice")
def slice_(b, n):
    shape = n.shape(0)
    if n.opset < 10:
        starts, ends, axes, steps = n.attr("starts"), n.attr("ends"), n.attr("axes"), None
    else:
        starts, ends, axes, steps = n.ints(1), n.ints(2), n.ints(3), n.ints(4)
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    spec = []
    for s, e, a, st in zip(starts, ends, axes, steps):
        a %= len(shape)
        lo, hi, st = slice(s, e, st).indices(shape[a])  # ONNX clamps like Python's slices
        if st > 0:
            hi = max(lo, hi)
        spec.append((a, lo, hi, st))
    return [n.call(_slice, n.input(0), tuple(spec))]


@op("Expand")
def expand(b, n):
    shape = torch.broadcast_shapes(tuple(n.shape(0)), tuple(n.ints(1)))  # ONNX's Expand broadcasts both ways
    return [n.call(torch.Tensor.expand, n.input(0), tuple(shape))]


@op("ConstantOfShape")
def constant_of_shape(b, n):
    from onnx import numpy_helper

    from septran.onnx.dtypes import tensor_from_numpy

    v = n.attr("value")
    value = tensor_from_numpy(numpy_helper.to_array(v)).reshape(()) if v is not None else torch.tensor(0.0)
    return [value.expand(tuple(n.ints(0))).clone()]


@op("Range")
def range_(b, n):
    start, limit, delta = (n.const(i) for i in range(3))
    return [torch.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype)]


def _pad(x, pads, mode, value):
    if mode == "constant":
        return F.pad(x, pads, mode="constant", value=value)
    return F.pad(x, pads, mode={"reflect": "reflect", "edge": "replicate", "wrap": "circular"}[mode])


@op("Pad")
def pad(b, n):
    rank = len(n.shape(0))
    if n.opset < 11:
        pads, value = n.attr("pads"), n.attr("value", 0.0)
    else:
        pads = n.ints(1)
        c = n.const(2)
        value = c.item() if c is not None and c.numel() else 0
    axes = n.ints(3) if n.opset >= 18 and len(n.inputs) > 3 else None
    axes = [a % rank for a in axes] if axes is not None else list(range(rank))
    k = len(axes)
    begin, end = dict(zip(axes, pads[:k])), dict(zip(axes, pads[k:]))
    torch_pads = []  # torch: last dimension first, (before, after) pairs
    for d in reversed(range(rank)):
        torch_pads += [begin.get(d, 0), end.get(d, 0)]
    mode = n.attr("mode", "constant")
    if mode != "constant" and any(begin.get(d, 0) or end.get(d, 0) for d in range(rank - 2 if rank > 2 else 0)):
        raise n.error(f"{mode} padding of the leading dimensions is not taken")
    return [n.call(_pad, n.input(0), torch_pads, mode, value)]


@op("Split")
def split(b, n):
    axis = n.attr("axis", 0) % len(n.shape(0))
    sizes = n.ints(1) if n.opset >= 13 and len(n.inputs) > 1 and n.input(1) is not None else n.attr("split")
    if sizes is None:
        count = n.attr("num_outputs", n.n_outputs)
        total = n.shape(0)[axis]
        each = -(-total // count)
        sizes = [min(each, total - i * each) for i in range(count)]
    return list(n.call(torch.split, n.input(0), list(sizes), axis))


@op("Tile")
def tile(b, n):
    return [n.call(torch.Tensor.repeat, n.input(0), tuple(n.ints(1)))]
