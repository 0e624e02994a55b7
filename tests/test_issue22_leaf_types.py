"""Issue 22, leaf bindings typed end to end: every operand of a leaf, outputs and temps included, is checked
against the types the target declares its leaf's functions for (target.yaml: operand_dtypes), at the binding."""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import REPO, edited_mapping, forbid_tilelang, mapping_path

ATTENTION = REPO / "septran" / "ops" / "logic" / "attention.py"  # the logic the example imports


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


@pytest.mark.build
def test_the_declared_types_still_run_right():
    kernel = septran.compile(logic_file=ATTENTION, mapping_file=mapping_path("cpu", "attention"))
    q, k, v = torch.randn(1, 2, 37, 64), torch.randn(1, 2, 51, 64), torch.randn(1, 2, 51, 64)
    torch.testing.assert_close(kernel(q, k, v), torch.nn.functional.scaled_dot_product_attention(q, k, v),
                               atol=1e-4, rtol=1e-4)


LOCAL_COPY = '''
from septran import task

@task.define(leaf=True)
def twice_leaf(Y, X):
    task.compute(Y, lambda i, j: X[i, j] * 2)

@task.define
def twice_block(Y, X):
    task.launch(twice_leaf, Y, X)

@task.define(dtype={"Y": "X"})
def twice_logic(Y, X):
    Yp = task.partition(Y, by="blocks", tile=("BM", "BN"))
    Xp = task.partition(X, by="blocks", tile=("BM", "BN"))
    for i, j in task.parallel_range(Yp.shape):
        task.launch(twice_block, Yp[i, j], Xp[i, j])
'''
LOCAL_MAPPING = '''
target: cpu
entrypoint: h
task_mappings:
  h:
    task_name: twice_logic
    proc: HOST
    mems: {"*": GLOBAL}
    tunables: {BM: 8, BN: 16}
    calls: {twice_block: b}
  b:
    task_name: twice_block
    proc: BLOCK
    mems: {"*": LOCAL}
    leaf_task_bindings: {twice_leaf: vector_loops}
'''


@pytest.mark.build
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.float16, torch.float32])
def test_a_tile_of_a_type_the_vendor_cannot_copy_is_copied_by_tilelang(tmp_path, dtype):
    """cpu's LOCAL copies are vendor calls for float32 and float16 only (op_dtypes); an int64 or bool tile there
    reached the linker (septran_cpu_load_int64_int64). It now moves with TileLang's T.copy."""
    logic, mapping = tmp_path / "twice.py", tmp_path / "twice.yaml"
    logic.write_text(LOCAL_COPY)
    mapping.write_text(LOCAL_MAPPING)
    kernel = septran.compile(logic_file=logic, mapping_file=mapping)
    x = (torch.arange(20 * 30).reshape(20, 30) % 7).to(dtype)
    y = kernel(x)
    assert y.dtype == dtype
    torch.testing.assert_close(y, (x.to(torch.int64) * 2).to(dtype))


def test_a_float16_result_temp_of_the_vendors_reduction_is_refused_at_the_binding(tmp_path, monkeypatch):
    """rmsnorm's per-tile sum in a float16 temp (the cpu mapping's algorithm, rmsnorm_sums): the vendor's row
    reductions write float32 only (septran_cpu_reduce_sumsq_f32 / _f16 take float* out)."""
    old = "s = task.temp(*stats)"
    text = (REPO / "septran" / "ops" / "logic" / "rmsnorm.py").read_text()
    assert old in text
    logic = tmp_path / "rmsnorm.py"
    logic.write_text(text.replace(old, old[:-1] + ', dtype="float16")'))
    kernel = septran.compile(logic_file=logic, mapping_file=mapping_path("cpu", "rmsnorm"))
    forbid_tilelang(monkeypatch, "refused before TileLang")
    with pytest.raises(septran.LoweringError, match="row_sum_squares for out of float32 only, but temp s .* is float16"):
        kernel.specialize(X=((8, 40), "float32"), W=((40,), "float32"))


@pytest.mark.build
def test_float16_rows_summed_by_the_vendor_build(tmp_path):
    """rmsnorm's sum of squares over float16 rows: septran_cpu_reduce_sumsq_f16 reads them in place (a float16
    tile reduced by the vendor was refused here once, and g++ failed at link time before that, while the vendor had
    float32 reductions only)."""
    # (the shipped mapping stages float16 rows in float32 tiles, stage_dtypes: without it they are read in place)
    plain = edited_mapping(tmp_path, "cpu", "rmsnorm", ("stage_dtypes: {float16: float32}\n", ""))
    kernel = septran.compile(logic_file=REPO / "septran" / "ops" / "logic" / "rmsnorm.py", mapping_file=plain)
    x, w = torch.randn(8, 1037).half(), torch.randn(1037).half()
    got = kernel(x, w, eps=1e-6)
    assert "septran_cpu_reduce_sumsq_f16" in kernel.latest.device_source
    expect = torch.nn.functional.rms_norm(x.double(), (1037,), w.double(), 1e-6)
    torch.testing.assert_close(got.double(), expect, rtol=2e-3, atol=2e-3)  # float16's rounding of the result


# GPU targets and DSAs: the same tables (target.yaml: operand_dtypes), checked before TileLang runs.
GEMM_LOGIC = REPO / "septran" / "ops" / "logic" / "gemm.py"


@pytest.mark.parametrize("target, leaf, dtype", [
    ("sm80", "gemm_leaf_tensorcore", "bfloat16"),  # tl::mma_sync: a float16 accumulator from float16 operands only
    ("sm80", "gemm_leaf_tensorcore", "float32"),
    ("sm90", "gemm_leaf_tensorcore", "bfloat16"),
    ("gfx942", "gemm_leaf_matrixcore", "float16"),  # MFMA accumulates in float32
])
def test_a_float16_accumulator_the_matrix_unit_lacks_is_refused_at_the_binding(tmp_path, monkeypatch, target, leaf, dtype):
    """nvcc failed with "tl::mma_sync: unsupported configuration" (sm80, sm90) after TileLang emitted the code."""
    from conftest import edited_mapping

    path = edited_mapping(tmp_path, target, "gemm", ("    proc: BLOCK\n", "    proc: BLOCK\n    accum_dtype: float16\n"))
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
    forbid_tilelang(monkeypatch, "refused before TileLang")
    with pytest.raises(septran.LoweringError, match=f"{leaf} implements gemm for .* but C of gemm_block_logic is "
                                                    f"float16 \\(with A {dtype}, B {dtype}\\)") as info:
        kernel.specialize(A=((256, 128), dtype), B=((128, 256), dtype))
    err = info.value
    assert err.loc.file == str(path) and "leaf_task_bindings" in path.read_text().splitlines()[err.loc.line - 1]
    assert "accum_dtype: float32" in err.hint


@pytest.mark.parametrize("target", ["sm80", "sm90"])
def test_a_float16_accumulator_from_float16_operands_still_emits(target):
    """The second combination of the tensor cores' table."""
    import re

    from conftest import first_point_text

    text = first_point_text(target).replace("    proc: BLOCK\n", "    proc: BLOCK\n    accum_dtype: float16\n")
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping=text)
    variant = kernel.specialize(A=((256, 128), "float16"), B=((128, 256), "float16"))
    assert re.search(r"C_local = T.alloc_fragment\(\(BM, BN\), \"float16\"\)", variant.tilelang_source)


@pytest.mark.parametrize("target", ["dsa_ref", "dsa_acme"])
def test_a_dsa_accumulates_in_float32_only(tmp_path, monkeypatch, target):
    from conftest import edited_mapping

    path = edited_mapping(tmp_path, target, "gemm", ("    leaf_task_bindings:", "    accum_dtype: float16\n    leaf_task_bindings:"))
    with pytest.raises(septran.MappingError, match="accumulates in float32"):
        septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)


def test_specialize_without_an_input_names_the_callers_line():
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu"))
    with pytest.raises(septran.CallError, match="specialize\\(\\) needs input B") as info:
        kernel.specialize(A=((64, 48), "float32"))  # the line named
    assert info.value.loc.file == __file__ and "the line named" in open(__file__).read().splitlines()[info.value.loc.line - 1]
    with pytest.raises(septran.CallError, match="must be a tensor or a \\(shape, dtype\\) pair") as info:
        kernel.specialize(A=((64, 48), "float32"), B=64)
    assert info.value.loc.file == __file__


@pytest.mark.build
def test_a_bfloat16_temp_on_cpu_is_computed_in_float32_like_its_tensors(tmp_path):
    """cpu computes bfloat16 in float32 (target.yaml: converts); a bfloat16 temp was left bfloat16 and TileLang's C
    failed to lower it ("variables (m,) are used, but are not passed in"), an InternalError (found by the fuzzer)."""
    old = "m = task.temp(Q.shape[2])  # running"
    logic = tmp_path / "attention.py"
    logic.write_text(ATTENTION.read_text().replace(old, 'm = task.temp(Q.shape[2], dtype="bfloat16")  # running'))
    kernel = septran.compile(logic_file=logic, mapping_file=mapping_path("cpu", "attention"))
    q, k, v = torch.randn(1, 2, 37, 64), torch.randn(1, 2, 51, 64), torch.randn(1, 2, 51, 64)
    torch.testing.assert_close(kernel(q, k, v), torch.nn.functional.scaled_dot_product_attention(q, k, v),
                               atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("target, leaf", [("sm90", "tile_parallel"), ("cpu", "tile_loops")])
def test_a_sum_of_squares_on_a_leaf_without_one_is_refused_at_the_binding(tmp_path, target, leaf):
    """row_sum_squares is a kind of its own: TileLang has no reduction of squares (a T.reduce_sumsq would fail in
    TileLang), so a leaf that runs the other reductions is refused for it where the mapping binds it."""
    from conftest import edited_mapping

    binding = "rms_sums_add_square: vector_loops" if target == "cpu" else "rms_add_square: tile_parallel"
    if target == "cpu":
        edits = [(binding, f"rms_sums_add_square: {leaf}")]
    else:  # the GPU's mapping with the CPU's algorithm
        edits = [("task_name: rmsnorm_logic", "task_name: rmsnorm_sums_logic"),
                 ("calls: {rmsnorm_rows: rms_block}", "calls: {rmsnorm_sums_rows: rms_block}"),
                 ("task_name: rmsnorm_rows", "task_name: rmsnorm_sums_rows"),
                 ("acc: REGISTER, rstd: REGISTER", "rstd: REGISTER, s: REGISTER, S: REGISTER"),
                 ("rms_clear: tile_parallel", "rms_sums_start: tile_parallel"),
                 (binding, f"rms_sums_add_square: {leaf}"), ("rms_rstd: tile_parallel", "rms_sums_rstd: tile_parallel")]
    path = edited_mapping(tmp_path, target, "rmsnorm", *edits)
    with pytest.raises(septran.MappingError, match=f"{leaf} implements elementwise, reduce, reduce_axis, but "
                                                   r"rms_sums_add_square calls 'row_sum_squares' \(reduce_squares") as info:
        septran.compile(logic_file=REPO / "septran" / "ops" / "logic" / "rmsnorm.py", mapping_file=path)
    assert info.value.loc.file == str(path) and f"rms_sums_add_square: {leaf}" in path.read_text().splitlines()[info.value.loc.line - 1]


def test_a_row_statistics_primitive_on_a_leaf_without_one_is_refused_at_the_binding(tmp_path):
    """layernorm's row_moments (kind reduce_squares) on the cpu's TileLang-reduction leaf."""
    from conftest import edited_mapping

    path = edited_mapping(tmp_path, "cpu", "layernorm", ("ln_sums_add: vector_loops", "ln_sums_add: tile_loops"))
    with pytest.raises(septran.MappingError, match="tile_loops implements elementwise, reduce, reduce_axis, but "
                                                   r"ln_sums_add calls 'row_moments' \(reduce_squares"):
        septran.compile(logic_file=REPO / "septran" / "ops" / "logic" / "layernorm.py", mapping_file=path)

