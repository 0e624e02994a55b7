"""The ONNX backend node tests as a conformance suite for ``septran.compile_onnx``.

The cases are read from ``onnx/backend/test/data/node/*`` (model.onnx, test_data_set_*/input_*.pb, output_*.pb)
when the installed onnx wheel ships that folder; onnx 1.23's wheel does not, so they are then made in memory by
the wheel's own generators (``onnx.backend.test.case.node.<op>``: what ``backend-test-tools generate-data``
writes to that folder, seeded the same way), one module per selected op. Selected: every case whose node (or,
for an ``_expanded`` case, whose function body) uses an op the rewrite knows. ``run_case`` compiles a case,
compares every output (1e-4 relative in float32 and float64, 1e-2 in float16 and bfloat16, exact for integers
and bools, NaN and inf where expected) and says whether its computation ran in a SepTran kernel.
"""
from __future__ import annotations

import glob
import importlib
import os
import time
from dataclasses import dataclass, field

import numpy as np

# The ops the rewrite knows, and the case generator module of each (onnx/backend/test/case/node/<module>.py).
KNOWN = {
    "Gemm": "gemm", "MatMul": "matmul", "Softmax": "softmax", "LogSoftmax": "logsoftmax",
    "LayerNormalization": "layernormalization", "RMSNormalization": "rmsnormalization", "Attention": "attention",
    "Gelu": "gelu", "Conv": "conv",
}
ELEMENTWISE = {
    "Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Relu": "relu", "Exp": "exp", "Log": "log",
    "Tanh": "tanh", "Sigmoid": "sigmoid", "Sqrt": "sqrt", "Neg": "neg", "Abs": "abs", "Reciprocal": "reciprocal",
    "Erf": "erf", "Pow": "pow", "Max": "max", "Min": "min", "Where": "where",
}
SELECTED = {**KNOWN, **ELEMENTWISE}


@dataclass
class Case:
    name: str
    model: object  # onnx.ModelProto
    data: list  # [(inputs, outputs)], NumPy arrays
    family: str = ""  # the selected op it tests (an _expanded case: the op whose function body it is)

    @property
    def op(self) -> str:
        nodes = self.model.graph.node
        return nodes[0].op_type if len(nodes) == 1 else "expanded"


def _shipped(root: str) -> list[Case]:
    import onnx
    from onnx import numpy_helper

    def read(path):
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        return numpy_helper.to_array(t)

    out = []
    for d in sorted(glob.glob(os.path.join(root, "*", "model.onnx"))):
        folder = os.path.dirname(d)
        model = onnx.load(d)
        data = []
        for s in sorted(glob.glob(os.path.join(folder, "test_data_set_*"))):
            ins = [read(p) for p in sorted(glob.glob(os.path.join(s, "input_*.pb")), key=_index)]
            outs = [read(p) for p in sorted(glob.glob(os.path.join(s, "output_*.pb")), key=_index)]
            data.append((ins, outs))
        out.append(Case(os.path.basename(folder), model, data))
    return out


def _index(path: str) -> int:
    return int(os.path.basename(path).split("_")[1].split(".")[0])


def _generated() -> list[Case]:
    import onnx.backend.test.case.node as node_cases

    with np.errstate(all="ignore"):
        for module in sorted(set(SELECTED.values())):
            importlib.import_module(f"onnx.backend.test.case.node.{module}")
    seen, out = set(), []
    for c in node_cases._NodeTestCases:
        if c.name not in seen:
            seen.add(c.name)
            out.append(Case(c.name, c.model, [(list(i), list(o)) for i, o in c.data_sets]))
    return out


def source() -> str:
    import onnx

    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    return root if os.path.isdir(root) else "generated"


def selected_cases() -> list[Case]:
    """Every node test case of a selected op (its single node, or an ``_expanded`` case of one), by name."""
    where = source()
    cases = _shipped(where) if where != "generated" else _generated()
    keep, ops_of = [], {}
    for c in cases:
        ops = {n.op_type for n in c.model.graph.node}
        if len(c.model.graph.node) == 1 and ops <= set(SELECTED):
            c.family = c.model.graph.node[0].op_type
            ops_of[c.name] = c.family
            keep.append(c)
    for c in cases:
        base = c.name.split("_expanded")[0]
        if "_expanded" in c.name and base in ops_of:
            c.family = ops_of[base]
            keep.append(c)
    return sorted(keep, key=lambda c: c.name)


# -- running one case -------------------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    op: str
    family: str
    passed: bool
    in_septran: bool  # some of its computation ran in a SepTran kernel
    septran_nodes: list = field(default_factory=list)
    why: str = ""
    seconds: float = 0.0


def tolerance(dtype) -> tuple[float, float]:
    name = np.dtype(dtype).name
    if name in ("float16", "bfloat16"):
        return 1e-2, 1e-2
    if name in ("float32", "float64"):
        return 1e-4, 1e-5
    return 0.0, 0.0


def compare(got, want) -> str:
    """Why ``got`` is not ``want`` (empty when it is)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if want.dtype.name == "bfloat16" or got.dtype.name == "bfloat16":
        rtol, atol = tolerance(want.dtype)
        got, want = got.astype(np.float32), want.astype(np.float32)
    else:
        rtol, atol = tolerance(want.dtype)
    if want.dtype.kind in "fc":
        g, w = got.astype(np.float64), want.astype(np.float64)
        nan_w, nan_g = np.isnan(w), np.isnan(g)
        if (nan_w != nan_g).any():
            return f"NaN at {int((nan_w != nan_g).sum())} places where the expected output has none (or the reverse)"
        inf = np.isinf(w) | np.isinf(g)
        if (g[inf] != w[inf]).any():
            return "an infinity differs"
        ok = ~(nan_w | inf)
        err = np.abs(g[ok] - w[ok])
        bound = atol + rtol * np.abs(w[ok])
        if (err > bound).any():
            k = int(np.argmax(err - bound))
            return f"max |got - expected| {err.max():.3g} (at {g[ok][k]:.6g} vs {w[ok][k]:.6g}; rtol {rtol}, atol {atol})"
        return ""
    return "" if np.array_equal(got, want) else "integer or bool values differ"


def run_case(case: Case) -> Result:
    import septran
    from septran.errors import SepTranError

    t0 = time.perf_counter()
    try:
        model = septran.compile_onnx(case.model)
        why = ""
        for inputs, outputs in case.data:
            got = model(*inputs)
            got = got if isinstance(got, tuple) else (got,)
            for i, (g, w) in enumerate(zip(got, outputs)):
                problem = compare(g, w)
                if problem:
                    why = why or f"output {i}: {problem}"
        report = model.report()
        nodes = [f"{r.op}: {r.runs}" for r in report.septran_nodes]
        return Result(case.name, case.op, case.family, not why, bool(nodes), nodes, why, time.perf_counter() - t0)
    except SepTranError as err:
        return Result(case.name, case.op, case.family, False, False, [], f"refused: {err}", time.perf_counter() - t0)


# -- the default run's subset -----------------------------------------------------------------------------------

# Per op, how many cases the default run takes (single-node cases evenly spaced by name), and which ops get one
# of their _expanded function bodies too. The elementwise ops count as one family.
PER_FAMILY = {"Attention": 3}
EXPANDED = ("Softmax",)  # an expanded body builds a kernel per elementwise chain: 10-25 s cold each


def family(case: Case) -> str:
    return case.family


def _group(case: Case) -> str:
    return "elementwise" if case.family in ELEMENTWISE else case.family


def representative(cases: list[Case]) -> list[Case]:
    """A deterministic subset: per op, cases evenly spaced in name order; one _expanded case of a few ops."""
    single: dict[str, list[Case]] = {}
    expanded: dict[str, list[Case]] = {}
    for c in cases:
        (expanded if "_expanded" in c.name else single).setdefault(_group(c), []).append(c)
    out = []
    for op, group in sorted(single.items()):
        k = min(len(group), PER_FAMILY.get(op, 4 if op == "elementwise" else 2))
        out += [group[(i * len(group)) // k] for i in range(k)]
    for op in EXPANDED:
        group = expanded.get(op, [])
        out += group[len(group) // 2:][:1]
    return sorted(out, key=lambda c: c.name)


def table(results: list[Result]) -> str:
    """Per op: cases run, passed, ran in a SepTran kernel; then the totals."""
    rows: dict[str, list[int]] = {}
    for r in results:
        row = rows.setdefault(r.family + (" (expanded)" if r.op == "expanded" else ""), [0, 0, 0])
        row[0] += 1
        row[1] += r.passed
        row[2] += r.in_septran
    lines = [f"{'op':<32}{'run':>6}{'passed':>8}{'SepTran':>9}"]
    for op, (n, ok, sep) in sorted(rows.items()):
        lines.append(f"{op:<32}{n:>6}{ok:>8}{sep:>9}")
    n, ok, sep = len(results), sum(r.passed for r in results), sum(r.in_septran for r in results)
    lines.append(f"{'total':<32}{n:>6}{ok:>8}{sep:>9}")
    return "\n".join(lines)
