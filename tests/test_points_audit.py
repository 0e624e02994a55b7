"""Points of the shipped cpu search spaces other than the ones the mappings run: a seeded sample per operator, on
odd shapes, runs right against float64 torch or is refused at a located line. The tuner times any point of a space
(and a user may pin one): none may be silently wrong. Each operator's inputs and reference are its example's
(``examples/<op>/run_<op>.py``, whose ``run`` is intercepted), so the audit follows the examples.

An unbounded sweep (every operator, 30 points, three dtypes: 2,616 runs on an AMD EPYC Zen 4) found 0 wrong results
and 0 unlocated errors; this keeps two points that run per operator and type (float32, float16) in the suite.
"""
from __future__ import annotations

import random

import pytest
import torch

import septran
from conftest import REPO, load_module
from septran.errors import SepTranError

pytestmark = pytest.mark.build

# operator -> its example's main() arguments: odd sizes that cross the tiles' edges
CASES = {
    "gemm": dict(M=77, N=1029, K=131),
    "gemm_epilogue": dict(M=77, N=519, K=300, act="gelu", transpose_b=True),
    "bmm": dict(batch=3, M=77, N=130, K=95),
    "softmax": dict(rows=37, cols=1500, log=True),
    "layernorm": dict(rows=37, cols=1500),
    "rmsnorm": dict(rows=37, cols=1500),
    "attention": dict(batch=1, heads=2, sq=93, sk=93, d=64, causal=True),
    "cross_entropy": dict(rows=37, classes=5001),
    "reduce": dict(size=(37, 1500), op="max", axis=0),
    "rope": dict(batch=2, seq=37, heads=3, head_dim=64),
}
POINTS = 2


def example(op: str) -> dict:
    """What examples/<op>/run_<op>.py hands its runner: the logic, the inputs' maker, the reference, the scalars."""
    module = load_module(REPO / "examples" / op / f"run_{op}.py")  # (it puts examples/ and its folder on sys.path)
    got = {}

    def run(logic, title, make_inputs, reference, flops, dtype=None, show_source=True, repeats=5, unit="", scalars=None):
        got.update(logic=logic, make_inputs=make_inputs, reference=reference, scalars=scalars or {})
        return 0.0

    module.run = run
    module.main(**CASES[op])
    return got


def sample(space, op: str, dtype: str, count: int = 48) -> list[dict]:
    """Up to ``count`` points of the space that are not its first, drawn with a seed of the operator's name and type."""
    rng = random.Random(op + dtype)
    points = []
    for _ in range(1000):
        p = {d.path: rng.choice(d.choices) for d in space.dimensions}
        if p != space.first and p not in points:
            points.append(p)
        if len(points) == count:
            break
    return points


@pytest.mark.parametrize("dtype", ["float32", "float16"])  # (the 16-bit paths stage, convert and keep: past bugs)
@pytest.mark.parametrize("op", sorted(CASES))
def test_sampled_points_run_right_or_are_refused_at_a_line(op, dtype):
    got = example(op)
    kernel = septran.compile(got["logic"], mapping_file=REPO / "mappings" / "cpu" / f"{op}.yaml", target="cpu")
    assert kernel.mapping.space is not None, f"mappings/cpu/{op}.yaml has no search space"
    inputs = got["make_inputs"]("cpu", getattr(torch, dtype))
    ref = got["reference"](*(t.double() for t in inputs.values()))
    torch_err = (got["reference"](*inputs.values()).double() - ref).abs().max().item()
    ran = refused = 0
    for point in sample(kernel.mapping.space, op, dtype):  # until POINTS of them ran (a space's points are mostly refused
        try:                                        # on some CPUs: the gemm's AMX leaf, leaves for other memories)
            out = kernel.at(point)(**{k: v.clone() for k, v in inputs.items()}, **got["scalars"])
        except SepTranError as err:
            assert err.loc is not None and err.loc.line, f"{op} at {point}: refused without a line: {err}"
            refused += 1
            continue
        out = out[0] if isinstance(out, tuple) else out
        err = (out.double() - ref).abs().max().item()
        slack = {"float32": 1e-5, "float16": 2e-3}[dtype] * max(ref.abs().max().item(), 1.0)
        assert err <= 3 * torch_err + slack, f"{op} {dtype} at {point}: error {err}, torch's {torch_err}"
        ran += 1
        if ran == POINTS:
            break
    print(f"{op} {dtype}: {ran} sampled points ran, {refused} were refused at a line")
    assert ran, f"none of the sampled points of mappings/cpu/{op}.yaml ran here"
