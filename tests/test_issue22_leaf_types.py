"""Issue 22, leaf bindings typed end to end: every operand of a leaf, outputs and temps included, is checked
against the types the target declares its leaf's functions for (target.yaml: operand_dtypes), at the binding."""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import REPO, forbid_tilelang, mapping_path

ATTENTION = REPO / "examples" / "attention" / "attention.py"


def test_a_float16_temp_written_by_a_float32_reduction_is_refused_at_the_binding(tmp_path, monkeypatch):
    """cpu's vector_loops reduces with septran_cpu_reduce_max_f32(float* out, float* x): a float16 running
    maximum got floats written into it (NaN at 37x51, past its end)."""
    old = "m = task.temp(Q.shape[2])  # running"
    text = ATTENTION.read_text()
    assert old in text
    logic = tmp_path / "attention.py"
    logic.write_text(text.replace(old, 'm = task.temp(Q.shape[2], dtype="float16")  # running'))
    kernel = septran.compile(logic_file=logic, mapping_file=mapping_path("cpu", "attention"))
    forbid_tilelang(monkeypatch, "refused before TileLang")
    with pytest.raises(septran.LoweringError, match="for out of float32 only, but temp m of .* is float16") as info:
        kernel.specialize(Q=((1, 2, 37, 64), "float32"), K=((1, 2, 51, 64), "float32"), V=((1, 2, 51, 64), "float32"))
    err = info.value
    assert err.loc.file.endswith("attention.yaml") and "leaf_task_bindings" in open(err.loc.file).read().splitlines()[err.loc.line - 1]
    assert f"{logic}:" in str(err) and 'dtype="float32"' in err.hint


def test_the_declared_types_still_run_right():
    kernel = septran.compile(logic_file=ATTENTION, mapping_file=mapping_path("cpu", "attention"))
    q, k, v = torch.randn(1, 2, 37, 64), torch.randn(1, 2, 51, 64), torch.randn(1, 2, 51, 64)
    torch.testing.assert_close(kernel(q, k, v), torch.nn.functional.scaled_dot_product_attention(q, k, v),
                               atol=1e-4, rtol=1e-4)
