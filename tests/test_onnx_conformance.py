"""The ONNX backend node tests (onnx's own cases, see tests/support/onnx_cases.py) through septran.compile_onnx.

Every case of an op the rewrite knows (Gemm, MatMul, Softmax, LogSoftmax, LayerNormalization, RMSNormalization,
Attention, Gelu, Conv, the elementwise ops) and their ``_expanded`` function bodies; each output compared with
onnx's expected one (1e-4 relative in float32, 1e-2 in float16 and bfloat16, NaN and inf where expected). A case
SepTran's patterns do not take runs in torch and must still pass: 0 wrong. The default run takes a deterministic
representative subset (per op, cases evenly spaced by name); ``SEPTRAN_ONNX_CONFORMANCE=all`` runs every case.
The table (cases run, passed, run in a SepTran kernel, per op) is printed and written to
``$SEPTRAN_CACHE_DIR/onnx_conformance.txt``.
"""
from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("onnx")

from support import onnx_cases  # noqa: E402

pytestmark = pytest.mark.build

ALL = os.environ.get("SEPTRAN_ONNX_CONFORMANCE", "") == "all"


def test_onnx_backend_node_tests(capsys):
    from septran import env

    t0 = time.perf_counter()
    cases = onnx_cases.selected_cases()
    run = cases if ALL else onnx_cases.representative(cases)
    results = [onnx_cases.run_case(c) for c in run]
    wall = time.perf_counter() - t0
    wrong = [r for r in results if not r.passed]
    text = (f"ONNX backend node tests ({onnx_cases.source()}): {len(run)} of {len(cases)} selected cases "
            f"({'all' if ALL else 'representative subset; SEPTRAN_ONNX_CONFORMANCE=all runs all'}), {wall:.1f} s\n"
            + onnx_cases.table(results)
            + "".join(f"\nWRONG {r.name}: {r.why}" for r in wrong)
            + "\nslowest: " + ", ".join(f"{r.name} {r.seconds:.1f} s" for r in sorted(results, key=lambda r: -r.seconds)[:5]))
    with capsys.disabled():
        print("\n" + text)
    out = env.cache_dir() / "onnx_conformance.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    assert not wrong, text
    # Every op the rewrite knows runs in a SepTran kernel somewhere among its cases.
    ran = {onnx_cases.family(c) for c, r in zip(run, results) if r.in_septran}
    assert set(onnx_cases.KNOWN) <= ran, f"no case of {sorted(set(onnx_cases.KNOWN) - ran)} ran in SepTran\n{text}"
