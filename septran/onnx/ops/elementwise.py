"""Elementwise ONNX ops: the math the SepTran elementwise chains take (Add ... Where, Erf, Pow), comparisons,
logic and casts. NumPy-style broadcasting is ONNX's and torch's alike."""
from __future__ import annotations

import functools

import torch

from septran.onnx.dtypes import to_torch
from septran.onnx.ops.registry import op

UNARY = {
    "Abs": torch.abs, "Neg": torch.neg, "Exp": torch.exp, "Log": torch.log, "Sqrt": torch.sqrt,
    "Reciprocal": torch.reciprocal, "Relu": torch.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh,
    "Erf": torch.erf, "Floor": torch.floor, "Ceil": torch.ceil, "Sin": torch.sin, "Cos": torch.cos,
    "Not": torch.logical_not, "Sign": torch.sign, "IsNaN": torch.isnan, "Softplus": torch.nn.functional.softplus,
}
BINARY = {
    "Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Equal": torch.eq, "Less": torch.lt,
    "LessOrEqual": torch.le, "Greater": torch.gt, "GreaterOrEqual": torch.ge, "And": torch.logical_and,
    "Or": torch.logical_or, "Xor": torch.logical_xor,
}


WIDE = (torch.uint16, torch.uint32, torch.uint64)  # torch stores them but computes little on them


@functools.lru_cache(maxsize=None)
def _widened(fn):
    """``fn`` on uint16/32/64 tensors, computed in int64 (the same bits for + - *) and stored back. One function
    per ``fn``, the graph's call target (an FX graph cannot hold a function as an argument)."""
    def widened(*args):
        dtype = args[0].dtype
        out = fn(*(a.to(torch.int64) for a in args))
        return out.to(dtype) if out.dtype == torch.int64 else out

    widened.__name__ = f"widened_{getattr(fn, '__name__', 'op')}"
    return widened


def _call(n, fn, *args):
    return n.call(_widened(fn) if n.dtype(0) in WIDE else fn, *args)


@op(*UNARY)
def unary(b, n):
    return [_call(n, UNARY[n.op_type], n.input(0))]


@op(*BINARY)
def binary(b, n):
    return [_call(n, BINARY[n.op_type], n.input(0), n.input(1))]


def _int_div(a, c):
    return torch.div(a, c, rounding_mode="trunc")


@op("Div")
def div(b, n):
    fn = torch.div if n.dtype(0).is_floating_point else _int_div  # ONNX truncates integer division
    return [_call(n, fn, n.input(0), n.input(1))]


def _pow(a, e):
    out = torch.pow(a, e)
    return out if out.dtype == a.dtype else out.to(a.dtype)  # ONNX: the base's type


@op("Pow")
def pow_(b, n):
    return [_call(n, _pow, n.input(0), n.input(1))]


@op("Mod")
def mod(b, n):
    fn = torch.fmod if n.attr("fmod", 0) else torch.remainder  # fmod=0: the sign of the divisor, as Python's %
    return [n.call(fn, n.input(0), n.input(1))]


@op("Max", "Min", "Sum", "Mean")
def variadic(b, n):
    fn = {"Max": torch.maximum, "Min": torch.minimum, "Sum": torch.add, "Mean": torch.add}[n.op_type]
    vals = [v for v in n.inputs if v is not None]
    out = functools.reduce(lambda x, y: _call(n, fn, x, y), vals)
    if n.op_type == "Mean":
        out = n.call(torch.div, out, float(len(vals)))
    return [out]


@op("Where")
def where(b, n):
    return [n.call(torch.where, n.input(0), n.input(1), n.input(2))]


@op("Cast")
def cast(b, n):
    return [n.call(torch.Tensor.to, n.input(0), to_torch(n.attr("to")))]


@op("CastLike")
def cast_like(b, n):
    return [n.call(torch.Tensor.to, n.input(0), n.dtype(1))]


@op("Identity")
def identity(b, n):
    return [n.input(0)]


@op("Gelu")
def gelu(b, n):
    return [n.call(torch.nn.functional.gelu, n.input(0), approximate=n.attr("approximate", "none"))]


@op("LeakyRelu")
def leaky_relu(b, n):
    return [n.call(torch.nn.functional.leaky_relu, n.input(0), n.attr("alpha", 0.01))]


@op("Clip")
def clip(b, n):
    lo, hi = (n.input(1), n.input(2)) if n.opset >= 11 else (n.attr("min"), n.attr("max"))
    x = n.input(0)
    if lo is not None:
        x = n.call(torch.maximum if not isinstance(lo, float) else torch.clamp_min, x, lo)
    if hi is not None:
        x = n.call(torch.minimum if not isinstance(hi, float) else torch.clamp_max, x, hi)
    return [x]
