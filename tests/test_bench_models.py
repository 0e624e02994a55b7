"""bench/models.py's smoke test: a quick run of both blocks and HF GPT-2 cut down, a short prefill, one thread.

The timings belong to the benchmark; here only that it runs, checks each backend and writes every field.
Inductor and aot_eager are left to the benchmark (each compile is a Dynamo capture of its own): septran is the
compiled backend here, and the bench runs every non-eager backend through the same code."""
from __future__ import annotations

import pytest

import json
import os
import subprocess
import sys

from conftest import REPO
from support import lowering_records

pytestmark = pytest.mark.build  # bench/models.py in a child process builds the blocks' kernels


def test_models_bench_quick_run_writes_every_field(tmp_path):
    # one example block and one Hugging Face model (the GPT-2 block's rows are the same code; tests/test_model_blocks.py
    # runs it)
    out = tmp_path / "models.json"
    run = subprocess.run([sys.executable, str(REPO / "bench" / "models.py"), "--quick", "--sizes", "small", "--prompt", "24",
                          "--backends", "eager,septran", "--threads", "1", "--blocks", "llama", "--hf", "gpt2", "--json", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=REPO,
                         # torch's threads at 1 from the start: Dynamo guards on the count, so a process that
                         # starts at 2 compiles the first model's graphs twice (once before --threads 1 is set)
                         env=lowering_records.child_env(dict(os.environ, OMP_NUM_THREADS="1")))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert {"torch", "cpu_model", "cores"} <= set(report["machine"])
    assert report["settings"]["threads"] == [1] and report["settings"]["quick"] and report["settings"]["prompt"] == 24
    rows = report["rows"]
    assert [(r["block"], r["phase"], r["tokens"]) for r in rows] == [
        ("llama", "prefill", 24), ("llama", "decode", 1), ("hf-gpt2", "prefill", 24), ("hf-gpt2", "decode", 1)]
    for r in rows:
        assert not [n for n in r["notes"] if "error" in n], r["notes"]
        timed = set(r["ms"])
        skipped = {n["backend"] for n in r["notes"] if "skipped" in n}
        assert timed == {"eager", "septran"} and not skipped
        for s in r["ms"].values():
            assert s["min"] <= s["median"] <= s["max"] and len(s["samples"]) == 3 and s["q1"] <= s["q3"]
        assert r["speedup"]["eager"] == 1.0 and all(v > 0 for v in r["speedup"].values())
        assert all(r["compile_s"][b] >= 0 and r["max_abs_err"][b] >= 0 for b in timed)
        assert all(r["tokens_per_s"][b] > 0 and r["peak_bytes"][b] >= 0 for b in timed)
    assert "x septran" in run.stdout and "decode" in run.stdout
