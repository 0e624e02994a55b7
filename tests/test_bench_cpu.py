"""bench/cpu.py's smoke test: a quick run of two cases and the call overhead, on one thread, small shapes.

The timings belong to the benchmark; here only that it runs, checks its kernels and writes every field."""
from __future__ import annotations

import pytest

import json
import subprocess
import sys

from conftest import REPO

pytestmark = pytest.mark.build  # bench/cpu.py in a child process builds every case


def test_cpu_bench_quick_run_writes_every_field(tmp_path):
    out = tmp_path / "cpu.json"
    run = subprocess.run([sys.executable, str(REPO / "bench" / "cpu.py"), "--quick", "--sizes", "small", "--cases",
                          "gemm,softmax,overhead", "--threads", "1", "--json", str(out)],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert {"torch", "cpu_model", "cores"} <= set(report["machine"])
    assert report["settings"]["threads"] == [1] and report["settings"]["quick"]
    rows = [r for r in report["rows"] if r["op"] != "overhead"]
    assert {r["op"] for r in rows} == {"gemm", "softmax"} and len(rows) == 5  # 3 GEMM shapes, 2 softmax shapes
    for r in rows:
        assert "error" not in r, r["error"]
        assert r["threads"] == 1 and r["compile_s"] >= 0 and r["unit"] in ("GFLOP/s", "GB/s")
        for s in [r["septran"], *r["torch"].values()]:
            assert s["min"] <= s["median"] <= s["max"] and len(s["samples"]) == 3 and s["q1"] <= s["q3"]
        assert r["septran_rate"] > 0 and all(v > 0 for v in r["ratio"].values())
    (ov,) = [r for r in report["rows"] if r["op"] == "overhead"]
    assert ov["calls"] == 1000 and ov["floor"] == "ctypes_floor"
    # SepTran's calls run through its C entry (no ctypes), so they may beat the ctypes call: no order between them
    assert ov["c_entry"] == "yes" or ov["c_entry"].startswith("no: ")
    assert all(v > 0 for v in ov["mean_us"].values()) and "torch_matmul" in ov["mean_us"]
    assert set(ov["ratio_to_matmul"]) == set(ov["us"]) and ov["ratio_to_matmul"]["torch_matmul"] == 1.0
    assert "call overhead" in run.stdout and "ratio" in run.stdout
