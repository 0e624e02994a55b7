"""Issue 11: the cpu target's grid on every core, its zero-fill decisions, the call path, the leaves it chooses."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import septran
from conftest import GEMM_LOGIC, REPO, edited_mapping, load_module, mapping_path
from septran import task
from support.rows import rows_logic, rows_mapping

pytestmark = pytest.mark.build  # 9 of its 11 tests build kernels

ROWS_MAPPING = rows_mapping("double", bm=8)


def _rows_logic(repeat_outer: bool):
    """Every row block written twice, by two programs: a grid index that no output's offset names."""

    @task.define(leaf=True)
    def double(Y, X):
        task.compute(Y, lambda i, j: X[i, j] * 2.0)

    @task.define
    def rows(Y, X):
        task.launch(double, Y, X)

    @task.define
    def host(Y, X):
        Yp = task.partition(Y, by="blocks", tile=("BM", None))
        Xp = task.partition(X, by="blocks", tile=("BM", None))
        if repeat_outer:
            for r, i in task.parallel_range((2, Yp.shape[0])):
                task.launch(rows, Yp[i, 0], Xp[i, 0])
        else:
            for i, r in task.parallel_range((Yp.shape[0], 2)):
                task.launch(rows, Yp[i, 0], Xp[i, 0])

    return host


def _mapping(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return path


def test_disjoint_grid_indices_run_in_parallel_with_the_mappings_schedule(tmp_path):
    path = edited_mapping(tmp_path, "cpu", "gemm", ("schedule: static", "schedule: dynamic"))
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
    a, b = torch.randn(300, 200), torch.randn(200, 600)
    torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-4, atol=1e-3)
    assert "#pragma omp parallel for collapse(2) schedule(dynamic) private(C_local)" in kernel.device_source
    assert "programs run in parallel over bx, by (schedule dynamic)" in kernel.explain()


@pytest.mark.parametrize("repeat_outer, pragma", [(True, "collapse(1)"), (False, None)])
def test_a_grid_index_two_programs_share_stays_sequential(tmp_path, repeat_outer, pragma):
    """Programs that differ only in r write the same rows: r's loop runs on one thread, and every loop
    outside it too (C prints the first grid index outermost)."""
    kernel = septran.compile(_rows_logic(repeat_outer), mapping_file=_mapping(tmp_path, ROWS_MAPPING))
    x = torch.randn(401, 50)  # above the one-thread size (a smaller call has no pragma at all)
    torch.testing.assert_close(kernel(x), 2 * x)
    source = kernel.device_source
    if pragma is None:
        assert "#pragma omp" not in source
    else:
        assert f"#pragma omp parallel for {pragma} " in source


def test_a_grid_of_one_program_starts_no_threads():
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu", "gemm"))
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert "#pragma omp" not in kernel.device_source


def test_kernels_share_torchs_openmp_runtime():
    """One thread pool in the process: the kernels' threads follow torch.set_num_threads."""
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu", "gemm"))
    a = torch.randn(600, 600)
    kernel(a, a)
    loaded = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "libgomp" in line}
    assert len(loaded) == 1, loaded


def test_an_accumulator_kept_in_global_memory_starts_from_zeros(tmp_path):
    """C += A @ B straight into the output (gemm_leaf_blas takes C in GLOBAL): the program reads C before it
    writes it, so the runtime hands it zeros; with C in LOCAL (the shipped mapping) nothing is filled."""
    path = edited_mapping(tmp_path, "cpu", "gemm", ("{C: LOCAL, A: GLOBAL, B: GLOBAL}", "{C: GLOBAL, A: GLOBAL, B: GLOBAL}"))
    in_place = septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
    a, b = torch.randn(300, 700), torch.randn(700, 260)
    for _ in range(3):  # fresh outputs every call: never the last call's sums
        torch.testing.assert_close(in_place(a, b), a @ b, rtol=1e-4, atol=1e-3)
    assert "start from zeros: C" in in_place.explain()
    shipped = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu", "gemm"))
    shipped(a, b)
    assert "start from zeros" not in shipped.explain()


def test_a_repeated_call_still_refuses_what_the_first_call_would():
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu", "gemm"))
    a, b = torch.randn(64, 32), torch.randn(32, 48)
    kernel(a, b)
    with pytest.raises(septran.CallError, match="not contiguous"):
        kernel(a, torch.randn(48, 32).t())
    torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_the_mapping_chooses_the_gemm_leaf(tmp_path):
    """OpenBLAS on A and B in place, or TileLang's T.gemm on tiles staged in LOCAL: one answer."""
    staged = edited_mapping(tmp_path, "cpu", "gemm", ("{C: LOCAL, A: GLOBAL, B: GLOBAL}", "{C: LOCAL, A: LOCAL, B: LOCAL}"),
                            ("{BM: 256, BN: 256, BK: 512}", "{BM: 32, BN: 32, BK: 32}"),
                            ("gemm_leaf_blas", "gemm_leaf_cpu"))
    a, b = torch.randn(70, 45).half(), torch.randn(45, 33).half()
    for path in (mapping_path("cpu", "gemm"), staged):
        kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
        out = kernel(a, b)
        assert out.dtype == torch.float16
        torch.testing.assert_close(out.float(), a.float() @ b.float(), rtol=2e-3, atol=2e-2)
    assert "septran_cpu_gemm_f16_f16" in septran.compile(logic_file=GEMM_LOGIC).specialize(A=a, B=b).tilelang_source


def test_a_schedule_the_processor_does_not_offer_is_refused_at_its_line(tmp_path):
    path = edited_mapping(tmp_path, "cpu", "gemm", ("schedule: static", "schedule: spiral"))
    with pytest.raises(septran.MappingError, match="offers static, dynamic") as info:
        septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
    assert "spiral" in path.read_text().splitlines()[info.value.loc.line - 1]


def test_a_schedule_that_is_no_name_is_shown_as_written_and_at_the_edited_line(tmp_path):
    """The value as the YAML said it; and the line shown is the file's now, though an earlier error showed it."""
    path = edited_mapping(tmp_path, "cpu", "gemm", ("schedule: static", "schedule: [static]"))
    with pytest.raises(septran.MappingError) as first:
        septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
    assert "got ['static']" in str(first.value) and "schedule: [static]" in str(first.value)
    path.write_text(path.read_text().replace("schedule: [static]", "schedule: 3"))
    with pytest.raises(septran.MappingError) as second:
        septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
    assert "got 3" in str(second.value) and "schedule: 3" in str(second.value)


def test_a_repeated_call_tells_scalars_apart_as_the_first_call_would():
    """The fast path of repeated calls keys a scalar by its type and exact value: Python's True == 1 and
    -0.0 == 0.0 must not make a refused bool run, or -0.0 run the 0.0 variant."""
    logic = load_module(REPO / "examples" / "layernorm" / "layernorm.py")
    kernel = septran.compile(logic.layernorm_logic, mapping_file=mapping_path("cpu", "layernorm"))
    x, w, b = torch.randn(3, 40), torch.randn(40), torch.randn(40)
    kernel(x, w, b, 1)
    with pytest.raises(septran.CallError, match="must be a number"):
        kernel(x, w, b, True)
    kernel(x, w, b, 0.0)
    kernel(x, w, b, -0.0)
    assert kernel._last.spec.scalars["eps"].hex() == (-0.0).hex()


def test_a_kernel_that_only_updates_its_arguments_takes_the_fast_path_again():
    """Y += X: Y is read and written, so the kernel allocates nothing; its repeated calls still reuse one plan."""
    @task.define(leaf=True)
    def add_into(Y, X):
        task.compute(Y, lambda i, j: Y[i, j] + X[i, j])

    kernel = septran.compile(rows_logic(add_into), mapping=rows_mapping("add_into"), target="cpu")
    y, x = torch.zeros(5, 7), torch.randn(5, 7)
    for _ in range(3):
        kernel(y, x)
    torch.testing.assert_close(y, 3 * x)
    assert len(kernel._plans) == 1 and next(iter(kernel._plans.values())).device == x.device


def test_a_dynamic_grid_starts_no_thread_team_for_one_program():
    """The model level's GEMM (rows dynamic): its grid's size comes with each call, and a decode step's one row in
    one 4096-wide tile is one program, so the grid's loops run under the pragma only behind an if on the call's
    sizes, and are printed again without it for the other branch (not the pragma's if(...) clause: a false one is a
    team of one, inside which a vendor leaf's own team is a nested one); a static grid has no test."""
    from septran.ops.gemm import gemm_kernel

    k = gemm_kernel("cpu", "none", False, True)
    a, w = torch.randn(3, 40), torch.randn(40, 24)
    torch.testing.assert_close(k(a, w), a @ w, rtol=1e-4, atol=1e-4)
    test, pragma = _grid_test(k.latest.device_source)
    assert test.rstrip().endswith("> 1) {") and " if(" not in pragma, (test, pragma)
    src = k.latest.device_source
    assert src.count("for (int64_t by = ") == 2 and "} else {" in src


def _grid_test(src: str) -> tuple[str, str]:
    """The line that tests the call's sizes before the grid's pragma, and the pragma."""
    lines = src.splitlines()
    at = next(k for k, line in enumerate(lines) if "#pragma omp parallel for" in line)
    return lines[at - 1], lines[at]


def test_a_small_call_starts_no_thread_team(tmp_path):
    """Issue 20: a call whose tensors hold fewer than 32K elements in all runs on one thread. Rows dynamic (the
    model level's norm): the size test reads the rows at the call and precedes the grid's; a static tiny kernel's
    test is decided when the C is made (if(0)). Both right below and above the threshold."""
    from septran.build.c_parallel import ONE_THREAD_ELEMENTS
    from septran.ops import kernels, norms

    k = norms._kernel("rmsnorm", torch.device("cpu"), (), lambda: kernels.logic("rmsnorm").rmsnorm(axis=1, rank=2))
    w = torch.randn(64)
    for rows in (3, ONE_THREAD_ELEMENTS // 64 + 5):
        x = torch.randn(rows, 64)
        torch.testing.assert_close(k(x, w, eps=1e-6), torch.nn.functional.rms_norm(x, (64,), w, 1e-6))
    test, _ = _grid_test(k.latest.device_source)
    assert f"if (64 * (int64_t)X_dim0 + 64 * (int64_t)X_dim0 + 64 >= {ONE_THREAD_ELEMENTS} && " in test, test
    assert test.rstrip().endswith("> 1) {"), test
    kernel = septran.compile(_rows_logic(True), mapping_file=_mapping(tmp_path, ROWS_MAPPING))
    x = torch.randn(37, 50)
    torch.testing.assert_close(kernel(x), 2 * x)
    assert "#pragma omp" not in kernel.device_source  # decided when the C is made: no OpenMP region at all
