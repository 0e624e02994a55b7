"""Every operator's example on this machine's NVIDIA GPU (the target detected, its shipped mapping, float16), odd
shapes, against torch in float64: the numerics the cpu tests check, on the GPU mappings. Where the example measures
torch's own float16 error, the FlashAttention rule holds (max |out - ref| <= 2 x torch's + 1e-5); elsewhere a bound
of the output's float16 rounding. Marked gpu (make gpu);
skipped where torch sees no NVIDIA GPU. Where SEPTRAN_GPU_REPORT names a file, each case appends its error to it
(JSON lines), so a device run brings the numbers back even when they pass."""
from __future__ import annotations

import json
import math
import os
import sys

import pytest

from conftest import REPO, load_module, needs_gpu

pytestmark = pytest.mark.build

# (script, main's arguments, the largest |out - float64 reference| allowed). float16 outputs carry 2^-11 of their
# size: about 1e-3 on O(1) values (norms, softmax, attention, rope), more where sums of many products are large.
CASES = [
    ("gemm/run_gemm.py", dict(M=300, N=200, K=136), 6e-2),
    ("gemm/run_gemm.py", dict(M=512, N=512, K=512), 1.2e-1),
    ("bmm/run_bmm.py", dict(batch=3, M=70, N=96, K=136), 6e-2),
    ("gemm_epilogue/run_gemm_epilogue.py", dict(M=96, N=200, K=136, act="silu", transpose_a=True), 6e-2),
    ("gemm_epilogue/run_gemm_epilogue.py", dict(M=256, N=256, K=256, act="gelu"), 1e-1),
    ("softmax/run_softmax.py", dict(rows=9, cols=700, log=True), 2e-2),
    ("softmax/run_softmax.py", dict(rows=37, cols=4097), 1e-2),
    ("layernorm/run_layernorm.py", dict(rows=5, cols=300), 2e-2),
    ("rmsnorm/run_rmsnorm.py", dict(rows=37, cols=4097), 2e-2),
    ("swiglu_mlp/run_swiglu_mlp.py", dict(tokens=37, dim=64, hidden=176), 5e-2),
    ("rope/run_rope.py", dict(batch=2, seq=37, heads=3, head_dim=64), 1e-2),
    ("rope/run_rope.py", dict(batch=2, seq=128, heads=12, head_dim=64), 1e-2),
    ("reduce/run_reduce.py", dict(size=(9, 3, 70), op="max", axis=1), 1e-3),
    ("reduce/run_reduce.py", dict(size=(37, 1000), op="sum", axis=1), 1e-1),
    ("attention/run_attention.py", dict(batch=1, heads=2, sq=37, sk=70, d=64, causal=True), 1e-2),
    ("attention/run_attention.py", dict(batch=2, heads=4, sq=203, sk=331, d=64, causal=False), 1e-2),
    ("conv2d/run_conv2d.py", dict(N=2, H=13, W=13, Ci=16, Co=32), 3e-2),
    ("conv2d/run_conv2d.py", dict(N=2, H=13, W=13, Ci=128, Co=256), 3e-2),
    ("conv2d/run_conv2d.py", dict(N=8, H=58, W=58, Ci=64, Co=128), 3e-2),
    ("cross_entropy/run_cross_entropy.py", dict(rows=37, classes=1000), 3e-2),
    ("gqa_kv_cache/run_gqa_kv_cache.py", dict(batch=2, hq=8, hkv=2, prompt=37, steps=3, smax=128, d=64), 1e-2),
]


def _id(case) -> str:
    script, kwargs, _ = case
    return script.split("/")[0] + "-" + "-".join(str(v) for v in kwargs.values())


@needs_gpu
@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_operator_runs_right_on_the_gpu(monkeypatch, capsys, case):
    script, kwargs, tolerance = case
    monkeypatch.delenv("SEPTRAN_TARGET", raising=False)
    monkeypatch.delenv("SEPTRAN_MAPPING", raising=False)
    run = load_module(REPO / "examples" / script)
    errors = sys.modules["runner"].LAST_ERRORS  # the module the scripts import by name (examples/ on sys.path)
    errors.clear()
    kwargs = dict(kwargs, dtype="float16", show_source=False)
    if "repeats" in run.main.__code__.co_varnames:
        kwargs["repeats"] = 3
    err = run.main(**kwargs)
    out = capsys.readouterr().out
    torch_err = errors.get("torch")
    if report := os.environ.get("SEPTRAN_GPU_REPORT"):
        with open(report, "a") as f:
            f.write(json.dumps({"case": _id(case), "err": err, "torch_err": torch_err, "tolerance": tolerance,
                                "output": out[-800:]}) + "\n")
    assert not math.isnan(err), out
    if torch_err is not None:
        assert err <= 2 * torch_err + 1e-5, out
    else:
        assert err <= tolerance, out
