"""A mapping's ``stage_dtypes`` (septran/mapping/dtype_keys.py): on-chip tiles of a narrow type held in a wider one.

The cpu's row operators say ``stage_dtypes: {float16: float32}`` and stage float16 tensors in LOCAL: the vendor's
F16C copies widen each tile once on the way in and narrow it once on the way out, and the loops between compute
in float32 (before: one software conversion per element read or written). Checked here: the key's errors, at
their lines; the tiles' type in the program; and the operators under the FlashAttention rule on odd shapes, in
float16 and bfloat16 (the softmax keeps bfloat16 too since this change), also past one column tile.
"""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import REPO, assert_flash_rule, edited_mapping, mapping_path

SOFTMAX = REPO / "septran" / "ops" / "logic" / "softmax.py"
SHAPES = [(1, 1), (3, 257), (7, 1025), (5, 4097), (2, 9000)]  # 9000: three column tiles of 4104


def _softmax_kernel(path=None):
    from septran.ops.logic import softmax as logic
    return septran.compile(logic.softmax_cached_logic, mapping_file=path or mapping_path("cpu", "softmax"))


@pytest.mark.parametrize("text,message", [
    ("stage_dtypes: [float16]", "stage_dtypes must map element types"),
    ("stage_dtypes: {float17: float32}", "stage_dtypes: 'float17' is not an element type"),
    ("stage_dtypes: {float32: float16}", "a float32 tile cannot be held as 'float16'"),
    ("stage_dtypes: {int32: float32}", "a int32 tile cannot be held as 'float32'"),
])
def test_stage_dtypes_errors_at_their_line(tmp_path, text, message):
    path = edited_mapping(tmp_path, "cpu", "softmax", ("stage_dtypes: {float16: float32}", text))
    with pytest.raises(septran.MappingError, match=message) as info:
        _softmax_kernel(path)
    assert "stage_dtypes" in path.read_text().splitlines()[info.value.loc.line - 1]


def test_a_type_the_target_does_not_compute_in_is_refused(tmp_path):
    path = edited_mapping(tmp_path, "cpu", "softmax", ("stage_dtypes: {float16: float32}", "stage_dtypes: {float32: float64}"))
    with pytest.raises(septran.MappingError, match="target cpu does not compute in float64") as info:
        _softmax_kernel(path).specialize(X=((3, 257), "float32"))
    assert "delete float32 from stage_dtypes" in info.value.hint


def test_float16_tiles_are_float32_and_the_vendor_converts_them(tmp_path):
    spec = dict(X=((3, 257), "float16"))
    src = _softmax_kernel().specialize(**spec).tilelang_source
    assert "septran_cpu_load_f32_f16" in src and "septran_cpu_store_f16_f32" in src
    assert '"float16"' not in "".join(l for l in src.splitlines() if "alloc_local" in l)
    plain = edited_mapping(tmp_path, "cpu", "softmax", ("stage_dtypes: {float16: float32}\n", ""))
    src = _softmax_kernel(plain).specialize(**spec).tilelang_source
    assert "septran_cpu_load_f32_f16" not in src  # without the key no tile is widened


@pytest.mark.build
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_of_16_bit_rows_keeps_the_flash_rule(dtype, log):
    import septran.ops
    septran.ops.load()
    gen = torch.Generator().manual_seed(21)
    for rows, cols in SHAPES:
        x = (torch.randn(rows, cols, generator=gen) * 4).to(dtype)
        out = torch.ops.septran.softmax(x, -1, log, dtype)
        fn = torch.log_softmax if log else torch.softmax
        assert out.dtype == dtype
        assert_flash_rule(out, fn(x.double(), -1), fn(x, -1), f"{rows}x{cols} {dtype} log={log}")


@pytest.mark.build
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("x_dtype, w_dtype, y_dtype", [
    (torch.float16, torch.float16, torch.float16), (torch.float16, torch.float32, torch.float16),
    (torch.float32, torch.float16, torch.float32), (torch.float16, torch.bfloat16, torch.float32)])
def test_norms_stage_float16_tensors_in_float32_tiles(op, x_dtype, w_dtype, y_dtype):
    from test_norms import run_mixed
    for rows, cols in ((3, 257), (1030, 1024)):  # a plain store, and a streamed one (> 4 MB)
        src = run_mixed(op, x_dtype, w_dtype, y_dtype, rows, cols)
        if x_dtype == y_dtype == torch.float16 and w_dtype in (torch.float16, torch.float32):
            # one type for X and Y, W (B) of it or float32: the write as one vendor call, in place
            # (mappings/cpu/rmsnorm.yaml, layernorm.yaml)
            w = "f16" if w_dtype == torch.float16 else "f32"
            call = ("septran_cpu_row_scale_f16_w" if op == "rmsnorm" else "septran_cpu_row_normalize_f16_w") + w
            assert call in src and "septran_cpu_load_f32_f16" not in src
            continue
        assert ("septran_cpu_load_f32_f16" in src) == (torch.float16 in (x_dtype, w_dtype))
        assert ("septran_cpu_stream_f16_f32" in src or "septran_cpu_store_f16_f32" in src) == (y_dtype == torch.float16)
