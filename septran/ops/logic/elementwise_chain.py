"""The Task Lang logic of a fused chain of elementwise ops, generated from a whitelisted op table.

A chain is data: ``ops``, a tuple of ``(name, operand, ...)`` where each operand is ``("i", k)`` (input k),
``("c", x)`` (a number) or ``("v", k)`` (the result of op k); the last op's result is the output. Each name is
a key of ``OPS``, whose entries are closures over element expressions of ``task.compute``: no text of the
model reaches a generated program, only these closures and float constants.

Inputs are 2-D views of the output's (rows, columns) as their ``kind`` says: ``full`` (the output's shape),
``col`` (a vector of the last dimension, broadcast over rows: a bias or a weight), ``row`` (one value per row:
a keepdim reduction) or ``one`` (a single element). The entry task cuts the output into BM x BN tiles (the
mapping's tunables), each a program; the leaf computes the chain at every element of its tile.
"""
from __future__ import annotations

import inspect
import math

from septran import task

KINDS = ("full", "col", "row", "one")

_SQRT1_2 = 1.0 / math.sqrt(2.0)
_SQRT2_PI = math.sqrt(2.0 / math.pi)


def _pow(a, p: float):
    """``a ** p`` for the exponents the pattern takes (small integers, +-0.5): multiplications and square roots."""
    if p == 0.5:
        return task.sqrt(a)
    if p == -0.5:
        return task.rsqrt(a)
    n = int(abs(p))
    r = a
    for _ in range(n - 1):
        r = r * a
    return 1.0 / r if p < 0 else r


OPS = {  # name -> (arity, element function)
    "add": (2, lambda a, b: a + b),
    "sub": (2, lambda a, b: a - b),
    "mul": (2, lambda a, b: a * b),
    "div": (2, lambda a, b: a / b),
    "neg": (1, lambda a: 0.0 - a),
    "exp": (1, lambda a: task.exp(a)),
    "log": (1, lambda a: task.log(a)),
    "tanh": (1, lambda a: task.tanh(a)),
    "sigmoid": (1, lambda a: 1.0 / (1.0 + task.exp(0.0 - a))),
    "relu": (1, lambda a: task.maximum(a, 0.0)),
    "gelu": (1, lambda a: 0.5 * a * (1.0 + task.erf(a * _SQRT1_2))),
    "gelu_tanh": (1, lambda a: 0.5 * a * (1.0 + task.tanh(_SQRT2_PI * (a + 0.044715 * a * a * a)))),
    "silu": (1, lambda a: a / (1.0 + task.exp(0.0 - a))),
    "erf": (1, lambda a: task.erf(a)),
    "rsqrt": (1, lambda a: task.rsqrt(a)),
    "sqrt": (1, lambda a: task.sqrt(a)),
    "abs": (1, lambda a: task.abs(a)),
    "reciprocal": (1, lambda a: 1.0 / a),
    "maximum": (2, lambda a, b: task.maximum(a, b)),
    "minimum": (2, lambda a, b: task.minimum(a, b)),
    "where": (3, lambda c, a, b: task.where(c, a, b)),
    "same": (1, lambda a: a),  # a dtype conversion: the chain computes in float32 and stores once
}
POW_EXPONENTS = (-4.0, -3.0, -2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 3.0, 4.0)


def check(ops: tuple, kinds: tuple) -> None:
    """Raises ValueError unless ``ops`` is a well-formed chain over ``len(kinds)`` inputs of known kinds."""
    if not ops or any(k not in KINDS for k in kinds):
        raise ValueError("a chain has at least one op and inputs of kinds " + ", ".join(KINDS))
    for n, (name, *operands) in enumerate(ops):
        if name == "pow":
            if len(operands) != 2 or operands[1][0] != "c" or float(operands[1][1]) not in POW_EXPONENTS:
                raise ValueError(f"op {n}: pow takes a tensor and one of the exponents {POW_EXPONENTS}")
        elif name not in OPS or OPS[name][0] != len(operands):
            raise ValueError(f"op {n}: {name!r} is not an elementwise op of the table with {len(operands)} operands")
        for tag, x in operands:
            if tag == "i" and not (isinstance(x, int) and 0 <= x < len(kinds)):
                raise ValueError(f"op {n}: no input {x!r}")
            if tag == "v" and not (isinstance(x, int) and 0 <= x < n):
                raise ValueError(f"op {n}: no earlier result {x!r}")
            if tag == "c" and (isinstance(x, bool) or not isinstance(x, (int, float))):
                raise ValueError(f"op {n}: constant {x!r} is not a number")
            if tag not in ("i", "v", "c"):
                raise ValueError(f"op {n}: operand tag {tag!r}")


def _element(ops: tuple, kinds: tuple, xs: tuple, i, j):
    """The chain's value at element (i, j), as an element expression."""
    def read(k):
        kind, t = kinds[k], xs[k]
        return t[i, j] if kind == "full" else t[j] if kind == "col" else t[i] if kind == "row" else t[0]

    vals = []
    for name, *operands in ops:
        args = [read(x) if tag == "i" else vals[x] if tag == "v" else float(x) for tag, x in operands]
        vals.append(_pow(args[0], args[1]) if name == "pow" else OPS[name][1](*args))
    return vals[-1]


def _task(fn, name: str, params: list, leaf: bool = False):
    """``fn(*params)`` as a task named ``name`` whose parameters are ``params`` (the chain's arity varies)."""
    fn.__name__ = fn.__qualname__ = name
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    fn.__signature__ = inspect.Signature([inspect.Parameter(p, kind) for p in params])
    return task.define(leaf=leaf)(fn)


def chain_logic(ops: tuple, kinds: tuple):
    """The entry task ``ew_host(Y, X0, X1, ...)`` of the chain (calls ``ew_block``, which launches ``ew_leaf``)."""
    check(ops, kinds)
    params = ["Y"] + [f"X{k}" for k in range(len(kinds))]

    def leaf(Y, *xs):
        task.compute(Y, lambda i, j: _element(ops, kinds, xs, i, j))

    ew_leaf = _task(leaf, "ew_leaf", params, leaf=True)

    def block(Y, *xs):
        task.launch(ew_leaf, Y, *xs)

    ew_block = _task(block, "ew_block", params)

    def host(Y, *xs):
        Yp = task.partition(Y, by="blocks", tile=("BM", "BN"))
        tiles = {"full": ("BM", "BN"), "col": ("BN",), "row": ("BM",)}
        parts = [task.partition(x, by="blocks", tile=tiles[k]) if k != "one" else x for x, k in zip(xs, kinds)]
        for i, j in task.parallel_range(Yp.shape):  # parallel: may become the grid
            at = {"full": lambda p: p[i, j], "col": lambda p: p[j], "row": lambda p: p[i], "one": lambda p: p}
            task.launch(ew_block, Yp[i, j], *(at[k](p) for p, k in zip(parts, kinds)))

    return _task(host, "ew_host", params)


def _known_equal(a, b) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(a == b))


def kind_of(shape, out) -> "str | None":
    """How an input of ``shape`` broadcasts to the output's ``out``: a kind of ``KINDS``, or None (another way)."""
    shape, out = tuple(shape), tuple(out)
    if len(shape) > len(out):
        return None
    padded = (1,) * (len(out) - len(shape)) + shape
    if all(_known_equal(a, b) for a, b in zip(padded, out)):
        return "full"
    if all(_known_equal(a, 1) for a in shape):
        return "one"
    if out and all(_known_equal(a, 1) for a in padded[:-1]) and _known_equal(padded[-1], out[-1]):
        return "col"
    if out and _known_equal(padded[-1], 1) and all(_known_equal(a, b) for a, b in zip(padded[:-1], out[:-1])):
        return "row"
    return None
