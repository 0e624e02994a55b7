"""The CPU target's vendor library (backends/cpu/vendor): built through septran.build.vendor from a target file
written here, called through ctypes on torch tensors, checked against float64 references; the vendor mechanism's
third-party libraries and force-included headers; the math header compiled the way a kernel is."""
from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from conftest import REPO
from septran.errors import BuildError
from septran.build import vendor
from septran.runtime import vendor as vendor_errors
from septran.target import load_target_file

pytestmark = pytest.mark.build  # 15 of its 18 tests build kernels

VENDOR = REPO / "backends/cpu/vendor"
OPENBLAS = "{package: scipy_openblas32, file: lib/libscipy_openblas.so, dist: scipy-openblas32}"
CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
U32 = 2.0 ** -24  # float32's unit roundoff
SETTINGS = dict(derandomize=True, deadline=None, phases=[Phase.explicit, Phase.generate])
KERNEL_FLAGS = ["-O3", "-march=native", "-fopenmp", "-fno-math-errno"]  # as the CPU target compiles kernels


def write_target(folder: Path, libraries: str = f"[{OPENBLAS}]", extra: str = "",
                 sources: tuple = ("septran_cpu.c", "septran_cpu_gemv.c"), march: str = "native") -> Path:
    """A target file whose vendor library builds ``sources`` (of backends/cpu/vendor) with ``libraries``, for
    ``march`` (g++'s -march: this CPU, or an older level of x86-64 that it runs)."""
    path = folder / "target.yaml"
    path.write_text(f"""\
name: vendor_probe
tilelang: {{target: c}}
torch_device: cpu
dtypes: [float16, float32]
procs: {{HOST: {{memories: [GLOBAL], grid: true}}}}
memories: {{GLOBAL: {{}}}}
vendor:
  sources: [{", ".join(str(VENDOR / s) for s in sources)}]
  cflags: [-O3, -march={march}, -fopenmp]
  libraries: {libraries}
  include: [{VENDOR / "septran_cpu_math.h"}]
{extra}""")
    return path


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return load_target_file(write_target(tmp_path_factory.mktemp("cpu_vendor")))


@pytest.fixture(scope="module")
def lib(target):
    return vendor.library(target)


def call(lib, name: str, *args) -> int:
    """Tensors go as their data pointers, everything else as int32 (the library takes nothing else)."""
    conv = [ctypes.c_void_p(a.data_ptr()) if isinstance(a, torch.Tensor) else ctypes.c_int32(int(a)) for a in args]
    fn = getattr(lib, name)
    fn.restype = ctypes.c_int32
    return fn(*conv)


def strided(rows: int, cols: int, pad: int, dtype, gen) -> tuple[torch.Tensor, int]:
    """A rows x cols view with row stride cols + pad, and that stride."""
    ld = cols + pad
    return torch.randn(max(rows, 1), max(ld, 1), generator=gen).to(dtype)[:rows, :cols], ld


# ---- the vendor mechanism ---------------------------------------------------------------------------------------


def test_link_flags_force_include_the_header_and_name_the_digest(target):
    flags = vendor.link_flags(target)
    lib_path = vendor.library_path(target.vendor)
    assert flags[:2] == [str(lib_path), f"-Wl,-rpath,{lib_path.parent}"]
    assert flags[flags.index("-include") + 1] == str(VENDOR / "septran_cpu_math.h")
    digest = [f for f in flags if f.startswith("-DSEPTRAN_VENDOR_DIGEST=")]
    assert digest and digest[0].split("=")[1] in lib_path.name


def test_digest_follows_the_library_file_and_the_included_headers(tmp_path):
    source, header, blas = tmp_path / "v.c", tmp_path / "inc" / "math.h", tmp_path / "libfake.so"
    header.parent.mkdir()
    source.write_text("int f(void) { return 0; }\n")
    header.write_text("/* one */\n")
    blas.write_bytes(b"x" * 10)
    first = vendor._inputs_digest((source,), (), (blas,), (header,))
    header.write_text("/* two */\n")
    second = vendor._inputs_digest((source,), (), (blas,), (header,))
    blas.write_bytes(b"x" * 11)  # another build of the third-party library
    third = vendor._inputs_digest((source,), (), (blas,), (header,))
    assert len({first, second, third}) == 3


def test_missing_package_names_the_pip_install(tmp_path):
    missing = "[{package: septran_no_such_package, file: lib/libnothing.so, dist: septran-no-such-dist}]"
    target = load_target_file(write_target(tmp_path, libraries=missing))
    with pytest.raises(BuildError, match="septran_no_such_package.*pip install septran-no-such-dist"):
        vendor.link_flags(target)


def test_a_vendor_without_an_error_channel_is_never_asked(target, monkeypatch):
    assert target.vendor.take_error is None
    monkeypatch.setattr(vendor_errors, "library", lambda t: pytest.fail("check_errors loaded the library"))
    vendor_errors.check_errors(target, "kernel")


def test_openblas_runs_in_the_callers_thread(target, lib):
    # the copy our library loaded (dlopen of the same file returns the same handle)
    openblas = ctypes.CDLL(str(vendor._library_file(target.vendor.libraries[0])))
    openblas.scipy_openblas_get_corename.restype = ctypes.c_char_p
    assert openblas.scipy_openblas_get_num_threads() == 1
    assert openblas.scipy_openblas_get_corename()


# ---- GEMM -------------------------------------------------------------------------------------------------------


def check_gemm(lib, dtype, m, n, k, trans_a, trans_b, pads=(0, 0, 0), seed=0):
    gen = torch.Generator().manual_seed(seed)
    a, lda = strided(k, m, pads[1], dtype, gen) if trans_a else strided(m, k, pads[1], dtype, gen)
    b, ldb = strided(n, k, pads[2], dtype, gen) if trans_b else strided(k, n, pads[2], dtype, gen)
    c, ldc = strided(m, n, pads[0], torch.float32, gen)
    op_a, op_b = (a.T if trans_a else a).double(), (b.T if trans_b else b).double()
    want = c.double() + op_a @ op_b
    bound = 2 * (k + 2) * U32 * (c.double().abs() + op_a.abs() @ op_b.abs())
    assert call(lib, "septran_cpu_gemm", c, a, b, CODES[dtype], m, n, k, ldc, lda, ldb, trans_a, trans_b) == 0
    assert ((c.double() - want).abs() <= bound).all(), f"max error {(c.double() - want).abs().max():.3e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
# one row, one column: sgemv (one row of 16-bit B: widened in registers, septran_cpu_row_gemm_16)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (37, 53, 19), (64, 48, 96), (1, 53, 19), (37, 1, 19), (1, 37, 133)])
def test_gemm(lib, dtype, trans_a, trans_b, m, n, k):
    check_gemm(lib, dtype, m, n, k, trans_a, trans_b, pads=(3, 5, 1))


@settings(max_examples=30, **SETTINGS)
@given(dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]), m=st.integers(1, 40), n=st.integers(1, 40),
       k=st.integers(1, 70), trans_a=st.integers(0, 1), trans_b=st.integers(0, 1),
       pads=st.tuples(*[st.sampled_from([0, 1, 16]) for _ in range(3)]))
def test_gemm_any_shape(lib, dtype, m, n, k, trans_a, trans_b, pads):
    check_gemm(lib, dtype, m, n, k, trans_a, trans_b, pads)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 1), (0, 1)])
@pytest.mark.parametrize("n,k", [(1031, 261), (67, 2053)])
def test_one_row_split_over_threads(lib, threads, trans_a, trans_b, n, k):
    """One row of C over a B the vendor splits over the OpenMP threads itself (septran_cpu_gemv.c: from 2^24
    elements; septran_cpu_gemv_split lowers that here), eight rows of B at a time; odd sizes leave a tail of rows,
    of columns and of chunks."""
    lib.septran_cpu_gemv_split(ctypes.c_int64(65536))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)  # the OpenMP runtime the vendor library shares with torch
    try:
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            check_gemm(lib, dtype, 1, n, k, trans_a, trans_b, pads=(0, 3, 5), seed=n + k)
    finally:
        torch.set_num_threads(before)
        lib.septran_cpu_gemv_split(ctypes.c_int64(0))  # SEPTRAN_CPU_GEMV_SPLIT or the default again


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m", [2, 16])
def test_few_rows_split_over_threads(lib, threads, m):
    """Up to 16 rows of C (a batch's decode step) split B's columns over the threads as one row does (each share
    one sgemm, or its own loop); 17 rows do not. Odd sizes leave a tail chunk; both transposes, and a Linear's."""
    lib.septran_cpu_gemv_split(ctypes.c_int64(65536))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for trans_a, trans_b in ((0, 0), (1, 1), (0, 1)):  # (0, 1): a Linear's weight, in dot products
            for dtype in (torch.float32, torch.bfloat16, torch.float16):
                check_gemm(lib, dtype, m, 1031, 261, trans_a, trans_b, pads=(0, 3, 5), seed=m)
        check_gemm(lib, torch.float32, 17, 1031, 261, 0, 1, pads=(0, 3, 5), seed=17)
    finally:
        torch.set_num_threads(before)
        lib.septran_cpu_gemv_split(ctypes.c_int64(0))


@settings(max_examples=24, **SETTINGS)
@given(m=st.sampled_from([2, 3, 5, 8, 13, 16, 17]), n=st.integers(256, 300), k=st.integers(262, 280), trans_a=st.integers(0, 1),
       pads=st.tuples(*[st.sampled_from([0, 3]) for _ in range(3)]), threads=st.sampled_from([1, 2]),
       dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]), trans_b=st.integers(0, 1))
def test_few_rows_stream_b_once(lib, m, n, k, trans_a, pads, threads, dtype, trans_b):
    """2 to 16 rows of C against a B of 2^16 elements or more stream B once (septran_cpu_few_rows_gemm: eight of
    its rows at a time, 16 columns of them shared by every row of C; a 16-bit B widened in registers,
    septran_cpu_few_rows_gemm_16; a 16-bit B stored n x k in dot products, septran_cpu_few_dots_gemm_16); 17 rows
    go to sgemm. Odd sizes leave tails of B's rows and of columns; split over the threads where the split size
    allows."""
    lib.septran_cpu_gemv_split(ctypes.c_int64(65536))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        check_gemm(lib, dtype, m, n, k, trans_a, trans_b, pads=pads, seed=m * n + k)
    finally:
        torch.set_num_threads(before)
        lib.septran_cpu_gemv_split(ctypes.c_int64(0))


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("m,n,k", [(301, 150, 97), (150, 301, 97), (64, 700, 129)])
def test_whole_gemm_split_over_threads(lib, threads, m, n, k):
    """A GEMM of 2^22 multiply-adds or more called outside a parallel region (a kernel of one program over a whole
    C) splits C's longer side over the threads in panels of 64, one sgemm each: rows (m >= n) or columns; odd sizes
    leave a short last panel, and three threads an uneven share. Every transpose, padded strides, the 16-bit types
    (widened first)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for trans_a, trans_b in ((0, 0), (0, 1), (1, 0), (1, 1)):
            for dtype in (torch.float32, torch.bfloat16):
                check_gemm(lib, dtype, m, n, k, trans_a, trans_b, pads=(3, 5, 1), seed=m + n + threads)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("m,n,k", [(5, 7, 0), (0, 7, 3), (5, 0, 3)])
def test_gemm_with_an_empty_dimension_leaves_c_alone(lib, m, n, k):
    c = torch.randn(max(m, 1), max(n, 1))
    before = c.clone()
    a, b = torch.randn(max(m, 1), max(k, 1)), torch.randn(max(k, 1), max(n, 1))
    assert call(lib, "septran_cpu_gemm", c, a, b, 0, m, n, k, max(n, 1), max(k, 1), max(n, 1), 0, 0) == 0
    assert torch.equal(c, before)


def test_gemm_single_row_operands_take_any_stride(lib):
    """A one-row tile's stride means nothing; BLAS would reject it as smaller than a row."""
    a, b, c = torch.randn(1, 9), torch.randn(9, 4), torch.zeros(1, 4)
    assert call(lib, "septran_cpu_gemm", c, a, b, 0, 1, 4, 9, 0, 0, 4, 0, 0) == 0
    torch.testing.assert_close(c, a @ b)


def test_gemm_refuses_bad_arguments(lib):
    c, a, b = torch.zeros(4, 4), torch.ones(4, 4), torch.ones(4, 4)
    assert call(lib, "septran_cpu_gemm", c, a, b, 7, 4, 4, 4, 4, 4, 4, 0, 0) == -1  # unknown dtype
    assert call(lib, "septran_cpu_gemm", c, a, b, 0, -1, 4, 4, 4, 4, 4, 0, 0) == -1
    assert call(lib, "septran_cpu_gemm", c, a, b, 0, 4, 4, 4, 4, 2, 4, 0, 0) == -1  # rows overlap
    assert not c.any()


def test_gemm_from_threads_at_once(lib):
    """One call per thread, as the OpenMP grid makes them: OpenBLAS and the float16 scratch are per thread."""
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(96, 80, generator=gen).half(), torch.randn(80, 72, generator=gen).half()
    outs = [torch.zeros(96, 72) for _ in range(4)]

    def work(c):
        for _ in range(20):
            call(lib, "septran_cpu_gemm", c, a, b, 1, 96, 72, 80, 72, 80, 72, 0, 0)

    threads = [threading.Thread(target=work, args=(c,)) for c in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in outs:
        torch.testing.assert_close(c, 20 * (a.float() @ b.float()), rtol=1e-5, atol=1e-3)


# ---- reductions -------------------------------------------------------------------------------------------------

REDUCE = {"max": (lambda x: x.amax(dim=1), max), "min": (lambda x: x.amin(dim=1), min), "sum": (lambda x: x.sum(dim=1), float.__add__),
          "sumsq": (lambda x: (x * x).sum(dim=1), float.__add__)}
SUMS = ("sum", "sumsq")  # summed in another order than torch's: within a float32 sum's bound


@pytest.mark.parametrize("op", sorted(REDUCE))
@pytest.mark.parametrize("cols", [1, 15, 16, 17, 64, 100])
@pytest.mark.parametrize("clear", [0, 1])
def test_reduce(lib, op, cols, clear):
    gen = torch.Generator().manual_seed(cols)
    x, ld = strided(9, cols, 3, torch.float32, gen)
    x[2] = float("-inf")  # a fully masked row
    x[4, ::2] = float("-inf")
    x[5, ::3] = float("inf")
    out = torch.randn(9, generator=gen)
    before = out.clone()
    assert call(lib, f"septran_cpu_reduce_{op}", out, x, 9, cols, ld, clear) == 0
    rows, combine = REDUCE[op]
    want = rows(x.double())
    if not clear:
        want = torch.tensor([combine(float(o), float(w)) for o, w in zip(before.double(), want)], dtype=torch.float64)
    if op in SUMS:  # another order than torch's: within the bound of a float32 sum, exact where not finite
        terms = x.double().abs() if op == "sum" else x.double() ** 2  # (a square: one more rounding, in the 2)
        bound = 2 * (cols + 1) * U32 * (terms.sum(dim=1) + before.double().abs() * (1 - clear))
        finite = want.isfinite()
        assert ((out.double() - want).abs()[finite] <= bound[finite]).all()
        assert torch.equal(out.double()[~finite], want[~finite])
    else:
        assert torch.equal(out.double(), want), (out, want)


def test_reduce_over_no_columns_gives_the_identity(lib):
    out = torch.full((3,), 5.0)
    x = torch.ones(3, 1)
    for op, identity in (("max", float("-inf")), ("min", float("inf")), ("sum", 0.0), ("sumsq", 0.0)):
        assert call(lib, f"septran_cpu_reduce_{op}", out, x, 3, 0, 1, 1) == 0
        assert (out == identity).all()


@pytest.mark.parametrize("op", sorted(REDUCE))
@pytest.mark.parametrize("cols", [1, 33, 511, 1300])  # 16-bit rows are widened 512 elements at a time
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_reduce_of_16_bit_rows_is_the_float32_reduction_of_their_values(lib, op, cols, dtype):
    gen = torch.Generator().manual_seed(cols)
    x, ld = strided(5, cols, 7, dtype, gen)
    out, want = torch.randn(5, generator=gen), torch.randn(5, generator=gen)
    suffix = "half" if dtype == torch.float16 else "bfloat16"
    assert call(lib, f"septran_cpu_reduce_{op}_{suffix}", out, x, 5, cols, ld, 1) == 0
    assert call(lib, f"septran_cpu_reduce_{op}", want, x.float().contiguous(), 5, cols, cols, 1) == 0
    if op in SUMS:  # the chunks' partial results joined in another order
        terms = x.double().abs() if op == "sum" else x.double() ** 2
        assert ((out.double() - want.double()).abs() <= 4 * (cols + 1) * U32 * terms.sum(dim=1)).all()
    else:
        assert torch.equal(out, want)


@pytest.mark.parametrize("half", [False, True])
@pytest.mark.parametrize("cols", [1, 31, 32, 100, 1300])
@pytest.mark.parametrize("clear", [0, 1])
def test_reduce_of_squared_deviations(lib, half, cols, clear):
    """out[i] (+)= sum_j (x[i, j] - center[i])^2 in float32, for float16 rows too: deviations of 300, whose squares
    overflow float16, sum to what float64 gives within a float32 sum's bound."""
    gen = torch.Generator().manual_seed(cols + 7 * clear)
    x, ld = strided(6, cols, 5, torch.float16 if half else torch.float32, gen)
    x *= 300
    center = x.float().mean(dim=1) + torch.randn(6, generator=gen)
    out = torch.randn(6, generator=gen)
    before = out.clone()
    name = "septran_cpu_reduce_sumsq_dev" + ("_half" if half else "")
    assert call(lib, name, out, x, center, 6, cols, ld, clear) == 0
    terms = (x.double() - center.double()[:, None]) ** 2
    want = terms.sum(dim=1) + (0 if clear else before.double())
    bound = 3 * (cols + 1) * U32 * (terms.sum(dim=1) + before.double().abs() * (1 - clear))
    assert ((out.double() - want).abs() <= bound).all(), (out, want)


# ---- copies -----------------------------------------------------------------------------------------------------


SPECIALS = [70000.0, -65520.0, 6e-8, 3e-5, 1.0 + 2 ** -11, float("inf"), float("-inf"), float("nan")]


def f16_specials(t: torch.Tensor) -> torch.Tensor:
    """Values float16 rounds interestingly: overflow, subnormals, a tie, infinities, NaN."""
    rows, cols = t.shape
    for i, v in enumerate(SPECIALS[: rows * cols]):
        t[i // cols, i % cols] = v
    return t


@settings(max_examples=40, **SETTINGS)
@given(dst_dtype=st.sampled_from([torch.float32, torch.float16]), src_dtype=st.sampled_from([torch.float32, torch.float16]),
       rows=st.integers(1, 20), cols=st.integers(1, 40), valid_rows=st.integers(-2, 22), valid_cols=st.integers(-2, 42),
       pad_dst=st.sampled_from([0, 3]), pad_src=st.sampled_from([0, 5]))
def test_load_pads_with_zeros_and_converts(lib, dst_dtype, src_dtype, rows, cols, valid_rows, valid_cols, pad_dst, pad_src):
    gen = torch.Generator().manual_seed(rows * 100 + cols)
    vr, vc = min(max(valid_rows, 0), rows), min(max(valid_cols, 0), cols)
    src, ld_src = strided(max(vr, 1), max(vc, 1), pad_src + cols - max(vc, 1), src_dtype, gen)
    f16_specials(src)
    dst_all = torch.full((rows, cols + pad_dst), 7.0, dtype=dst_dtype)
    dst = dst_all[:, :cols]
    assert call(lib, "septran_cpu_load", dst, CODES[dst_dtype], src, CODES[src_dtype], rows, cols, cols + pad_dst, ld_src,
                valid_rows, valid_cols) == 0
    want = torch.zeros(rows, cols, dtype=dst_dtype)
    want[:vr, :vc] = src[:vr, :vc].to(dst_dtype)
    torch.testing.assert_close(dst, want, rtol=0, atol=0, equal_nan=True)
    assert (dst_all[:, cols:] == 7).all()  # the stride's gap is not touched


@settings(max_examples=30, **SETTINGS)
@given(dst_dtype=st.sampled_from([torch.float32, torch.float16]), src_dtype=st.sampled_from([torch.float32, torch.float16]),
       rows=st.integers(1, 20), cols=st.integers(1, 40), pad_dst=st.sampled_from([0, 2]), pad_src=st.sampled_from([0, 7]))
def test_store_writes_only_the_valid_part(lib, dst_dtype, src_dtype, rows, cols, pad_dst, pad_src):
    gen = torch.Generator().manual_seed(rows * 100 + cols)
    src, ld_src = strided(rows, cols, pad_src, src_dtype, gen)
    f16_specials(src)
    dst = torch.full((rows + 2, cols + pad_dst + 2), 7.0, dtype=dst_dtype)
    assert call(lib, "septran_cpu_store", dst, CODES[dst_dtype], src, CODES[src_dtype], rows, cols, dst.stride(0), ld_src) == 0
    want = torch.full_like(dst, 7.0)
    want[:rows, :cols] = src.to(dst_dtype)
    torch.testing.assert_close(dst, want, rtol=0, atol=0, equal_nan=True)


@settings(max_examples=40, **SETTINGS)
@given(dtypes=st.sampled_from([(torch.float32, torch.float32), (torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                                (torch.float32, torch.bfloat16)]),
       rows=st.integers(1, 6), cols=st.integers(1, 200), offset=st.integers(0, 9), pad_dst=st.sampled_from([0, 3]),
       pad_src=st.sampled_from([0, 5]))
def test_stream_writes_what_store_writes(lib, dtypes, rows, cols, offset, pad_dst, pad_src):
    """septran_cpu_stream (a store past the caches: copy eviction_policy evict_first) writes exactly the valid part,
    from any alignment of the destination (non-temporal stores write whole 64-byte lines: the head and tail of a
    row, whose lines the rows beside it share, are plain stores), float32 rows narrowed to float16 or bfloat16 rounded as the plain store rounds them
    (NaN, inf, ties); float32 from a 16-bit type is septran_cpu_store's."""
    dst_dtype, src_dtype = dtypes
    gen = torch.Generator().manual_seed(rows * 1000 + cols * 10 + offset)
    src, ld_src = strided(rows, cols, pad_src, src_dtype, gen)
    if src_dtype == torch.float32:
        f16_specials(src)
    whole = torch.full(((rows + 2) * (cols + pad_dst + 2) + offset,), 7.0, dtype=dst_dtype)
    dst = whole[offset:].view(rows + 2, cols + pad_dst + 2)
    assert call(lib, "septran_cpu_stream", dst, CODES[dst_dtype], src, CODES[src_dtype], rows, cols, dst.stride(0), ld_src) == 0
    want = torch.full_like(dst, 7.0)
    want[:rows, :cols] = src.to(dst_dtype)
    torch.testing.assert_close(dst, want, rtol=0, atol=0, equal_nan=True)
    assert (whole[:offset] == 7).all()


def test_store_of_nothing_and_bad_arguments(lib):
    dst, src = torch.full((4, 4), 7.0), torch.zeros(4, 4)
    assert call(lib, "septran_cpu_store", dst, 0, src, 0, 0, 4, 4, 4) == 0
    assert call(lib, "septran_cpu_store", dst, 0, src, 0, 4, -3, 4, 4) == 0
    assert call(lib, "septran_cpu_store", dst, 7, src, 0, 4, 4, 4, 4) == -1  # 7: no dtype
    assert call(lib, "septran_cpu_load", dst, 0, src, 0, -1, 4, 4, 4, 4, 4) == -1
    assert call(lib, "septran_cpu_stream", dst, 0, src, 0, 0, 4, 4, 4) == 0
    assert call(lib, "septran_cpu_stream", dst, 0, src, 0, 4, 4, -4, 4) == -1
    assert (dst == 7).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("rows,cols,ld", [(5, 7, 7), (5, 7, 10), (1, 33, 33), (0, 4, 4)])
def test_fill_zero(lib, dtype, rows, cols, ld):
    buf = torch.full((rows + 1, ld), 7.0, dtype=dtype)
    assert call(lib, "septran_cpu_fill_zero", buf, CODES[dtype], rows, cols, ld) == 0
    want = torch.full_like(buf, 7.0)
    want[:rows, :cols] = 0
    assert torch.equal(buf, want)


# ---- the math header, compiled as a kernel is -------------------------------------------------------------------

MATH_PROBE = r"""
#include <stdio.h>
#define VEC(f) extern "C" __attribute__((noinline)) void v_##f(float* __restrict o, const float* __restrict x, int n) \
  { for (int i = 0; i < n; i++) o[i] = f(x[i]); }
VEC(expf) VEC(exp2f) VEC(logf) VEC(tanhf)
int main() {
  float x[64], o[64];
  const float ex[] = {-INFINITY, INFINITY, NAN, -100.f, -104.f, 88.8f, 0.f, 1.f};
  const float e2[] = {-INFINITY, INFINITY, NAN, -149.f, -151.f, 128.f, 0.f, 1.f};
  for (int i = 0; i < 64; i++) x[i] = ex[i % 8];
  v_expf(o, x, 64);
  for (int i = 0; i < 8; i++) printf("%a ", o[i]);
  for (int i = 0; i < 64; i++) x[i] = e2[i % 8];
  v_exp2f(o, x, 64);
  for (int i = 0; i < 8; i++) printf("%a ", o[i]);
  for (int i = 0; i < 64; i++) x[i] = -130.f + 4.0625f * i + 0.37f * (i % 3);  /* vectors in range, and across it */
  for (int i = 40; i < 48; i++) x[i] = (i % 2) ? -INFINITY : -3.f - 0.1f * i;   /* a mask's -inf among ordinary lanes */
  v_exp2f(o, x, 64);
  for (int i = 0; i < 64; i++) printf("%a %a ", x[i], o[i]);
  return 0;
}
"""


@pytest.mark.skipif(not Path("/usr/lib/x86_64-linux-gnu/libmvec.so.1").exists() or not shutil.which("g++"),
                    reason="needs g++ and glibc's libmvec (x86-64)")
def test_math_header_vectorises_exp_and_keeps_special_values(tmp_path):
    src, exe = tmp_path / "probe.cpp", tmp_path / "probe"
    src.write_text(MATH_PROBE)
    build = ["g++", "-std=c++17", *KERNEL_FLAGS, "-include", str(VENDOR / "septran_cpu_math.h"), str(src), "-o", str(exe),
             "-lmvec"]
    subprocess.run(build, check=True, capture_output=True, text=True)
    calls = subprocess.run(["objdump", "-d", str(exe)], check=True, capture_output=True, text=True).stdout
    # exp2 is the header's own: no call of a scalar (or libmvec) exp2f is left. On AVX2 CPUs without AVX-512 the loop
    # calls the header's 8-wide function (its vector-ABI clone), elsewhere the polynomial is inlined. exp is inlined
    # too, except on those AVX2 CPUs, where the loop calls glibc's 8-wide expf (the header says why)
    assert not re.search(r"call.*<(\w+_)?exp2f@plt>", calls), "exp2f was not inlined and vectorised"
    if _libmvec_expf():
        assert re.search(r"call.*<_ZGVdN8v_expf@plt>", calls), "expf is not libmvec's 8-wide variant"
        assert re.search(r"call.*<_ZGVdN8v_septran_exp2f_v>", calls), "exp2f is not the header's 8-wide function"
    else:
        assert not re.search(r"call.*<(\w+_)?expf@plt>", calls), "expf was not inlined and vectorised"
    got = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    values = [float.fromhex(v) if "nan" not in v else float("nan") for v in got]
    want = [0.0, float("inf"), float("nan"), 3.783505853e-44, 0.0, float("inf"), 1.0, 2.718281828] + \
           [0.0, float("inf"), float("nan"), 2.0 ** -149, 0.0, float("inf"), 1.0, 2.0]
    torch.testing.assert_close(torch.tensor(values[:16], dtype=torch.float64), torch.tensor(want, dtype=torch.float64),
                               rtol=1e-6, atol=0, equal_nan=True)
    # ordinary lanes, subnormal and overflowing results, -inf beside ordinary lanes: within 1 ulp of exp2 (float64)
    x, got2 = torch.tensor(values[16::2], dtype=torch.float64), torch.tensor(values[17::2], dtype=torch.float64)
    want2 = torch.exp2(x).to(torch.float32).to(torch.float64)
    ulp = torch.where(want2 > 0, torch.abs(torch.nextafter(want2.float(), torch.tensor(float("inf"))).double() - want2),
                      torch.tensor(2.0 ** -149, dtype=torch.float64)).clamp(min=2.0 ** -149)
    assert (got2 == want2).sum() >= len(x) // 2, "fewer than half the results exact"
    close = (got2 - torch.exp2(x)).abs() <= ulp * 1.0 + 1e-300
    assert bool((close | (got2 == want2)).all()), f"off by more than 1 ulp at {x[~close].tolist()}"
    # Packed FMA in the vector width g++ prefers for this CPU: 128 bits where -march=native tunes for it
    # (znver1: -mprefer-vector-width=128), else 256 or 512.
    widths = "xyz" if _preferred_width() == "128" else "yz"
    assert re.search(rf"vfmadd\w+ps\s+%[{widths}]mm", calls), \
        f"no vector FMA in the probe (-march=native is {_native_arch()}, preferred width {_preferred_width()})"


ERF_PROBE = r"""
extern "C" __attribute__((noinline)) void v_erff(float* __restrict o, const float* __restrict x, long n) {
  for (long i = 0; i < n; i++) o[i] = erff(x[i]);
}
"""


@pytest.mark.skipif(not shutil.which("g++") or not shutil.which("objdump"), reason="needs g++ and objdump")
def test_math_header_erf_is_inlined_vectorised_and_within_4e7(tmp_path):
    """erf is the header's rational approximation: no call left in a vectorised loop, within 4e-7 of float64 erf
    over a sweep of every 97th float up to 6 and random ones, special values as libm gives them."""
    src, lib = tmp_path / "erf.cpp", tmp_path / "liberf.so"
    src.write_text(ERF_PROBE)
    subprocess.run(["g++", "-std=c++17", "-shared", "-fPIC", *KERNEL_FLAGS, "-include", str(VENDOR / "septran_cpu_math.h"),
                    str(src), "-o", str(lib), "-lm"], check=True, capture_output=True, text=True)
    calls = subprocess.run(["objdump", "-d", str(lib)], check=True, capture_output=True, text=True).stdout
    assert not re.search(r"call.*erff", calls), "erff was not inlined"
    fn = ctypes.CDLL(str(lib)).v_erff
    sweep = torch.arange(0, 0x40C00000, 97, dtype=torch.int32).view(torch.float32)
    x = torch.cat([sweep, -sweep, torch.randn(100_000) * 3, torch.tensor([float("inf"), -float("inf"), float("nan"), -0.0,
                                                                          1e-38, 3.9, 4.0, -4.5])])
    out = torch.empty_like(x)
    fn(ctypes.c_void_p(out.data_ptr()), ctypes.c_void_p(x.data_ptr()), ctypes.c_long(x.numel()))
    want = torch.erf(x.double())
    finite = torch.isfinite(x)
    assert float((out[finite].double() - want[finite]).abs().max()) <= 4e-7
    assert out[-8:-6].tolist() == [1.0, -1.0] and torch.isnan(out[-6]) and str(out[-5].item()) == "-0.0"
    assert torch.equal(out[:len(sweep)], -out[len(sweep):2 * len(sweep)]), "erf is odd"


def _native_option(name: str) -> str:
    """An option's value as g++ resolves ``-march=native`` on this machine (its tuning, not the CPU's flags, decides)."""
    out = subprocess.run(["g++", "-march=native", "-Q", "--help=target"], capture_output=True, text=True).stdout
    return next((line.split()[-1] for line in out.splitlines() if line.strip().startswith(f"-{name}=")), "unknown")


def _native_arch() -> str:
    return _native_option("march")


def _preferred_width() -> str:
    return _native_option("mprefer-vector-width")


def _libmvec_expf() -> bool:
    """Whether the math header leaves expf to glibc's 8-wide variant here: AVX2 without AVX-512 (the header's test)."""
    out = subprocess.run(["g++", "-march=native", "-dM", "-E", "-x", "c++", "/dev/null"], capture_output=True, text=True).stdout
    return "__AVX2__" in out and "__AVX512F__" not in out


@pytest.mark.parametrize("dst_dtype", [torch.float16, torch.bfloat16])
def test_streamed_16_bit_rows_round_as_torch(lib, dst_dtype):
    """The narrowing non-temporal store (32-byte chunks of 16) on the values that round interestingly, everywhere in
    rows whose destination is aligned, so that nearly all of them go through the vector path."""
    gen = torch.Generator().manual_seed(5)
    src = torch.randn(3, 200, generator=gen) * 1000
    flat = src.view(-1)
    flat[::3] = torch.tensor(SPECIALS * (flat[::3].numel() // len(SPECIALS) + 1))[: flat[::3].numel()]
    dst = torch.full((3, 200), 7.0, dtype=dst_dtype)
    assert dst.data_ptr() % 16 == 0
    assert call(lib, "septran_cpu_stream", dst, CODES[dst_dtype], src, 0, 3, 200, 200, 200) == 0
    torch.testing.assert_close(dst, src.to(dst_dtype), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype,w_dtype", [(torch.float32, torch.float32), (torch.float16, torch.float16),
                                           (torch.bfloat16, torch.bfloat16), (torch.float16, torch.float32),
                                           (torch.bfloat16, torch.float32)],
                         ids=["fp32", "fp16", "bf16", "fp16-wfp32", "bf16-wfp32"])
@pytest.mark.parametrize("cols", [1, 15, 16, 17, 100, 511, 1300])  # 16 at a time in registers, the rest in chunks
@pytest.mark.parametrize("centred,bias", [(False, False), (True, True), (True, False), (False, True)])
def test_rows_affine_rounds_float32_math_once(lib, dtype, w_dtype, cols, centred, bias):
    """y = ((x - c) * s) * w + b over strided rows, w and b of the rows' type or float32: the float32 result of
    the same operations, rounded once to the rows' type (a fused multiply-add may round one step less: within one
    float32 rounding of each term)."""
    gen = torch.Generator().manual_seed(cols)
    x, ldx = strided(6, cols, 3, dtype, gen)
    y, ldy = strided(6, cols, 5, dtype, gen)
    c, s = torch.randn(6, generator=gen), torch.randn(6, generator=gen)
    w, b = torch.randn(cols, generator=gen).to(w_dtype), torch.randn(cols, generator=gen).to(w_dtype)
    fn = getattr(lib, "septran_cpu_rows_affine_w")
    fn.restype = ctypes.c_int32
    ptr = lambda t: ctypes.c_void_p(t.data_ptr()) if t is not None else ctypes.c_void_p(0)  # noqa: E731
    rc = fn(ptr(y), ptr(x), ctypes.c_int32(CODES[dtype]), ptr(c if centred else None), ptr(s), ptr(w),
            ptr(b if bias else None), ctypes.c_int32(CODES[w_dtype]), ctypes.c_int32(6), ctypes.c_int32(cols),
            ctypes.c_int32(ldy), ctypes.c_int32(ldx))
    assert rc == 0
    xf = x.double() - (c.double()[:, None] if centred else 0)
    want = xf * s.double()[:, None] * w.double() + (b.double() if bias else 0)
    bound = 4 * U32 * (xf.abs() * s.double().abs()[:, None] * w.double().abs() + (b.double().abs() if bias else 0))
    ulp = {torch.float32: 0.0, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}[dtype]
    assert ((y.double() - want).abs() <= bound + ulp * want.abs() + 2.0 ** -24).all()


def test_rows_affine_refuses_weights_of_a_third_type(lib):
    """w and b are of the rows' type or float32: a float16 weight beside float32 rows (or bfloat16 beside float16)
    is refused, not read as another type."""
    x, y, s_, w = torch.ones(2, 16), torch.empty(2, 16), torch.ones(2), torch.ones(16).half()
    fn = getattr(lib, "septran_cpu_rows_affine_w")
    fn.restype = ctypes.c_int32
    ptr = lambda t: ctypes.c_void_p(t.data_ptr())  # noqa: E731
    for rows_code, w_code in ((CODES[torch.float32], CODES[torch.float16]), (CODES[torch.float16], CODES[torch.bfloat16])):
        rc = fn(ptr(y), ptr(x), ctypes.c_int32(rows_code), ctypes.c_void_p(0), ptr(s_), ptr(w), ctypes.c_void_p(0),
                ctypes.c_int32(w_code), ctypes.c_int32(2), ctypes.c_int32(16), ctypes.c_int32(16), ctypes.c_int32(16))
        assert rc != 0
