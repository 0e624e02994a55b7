"""The vendor's row statistics in one pass (backends/cpu/vendor/septran_cpu_moments.c, LayerNorm's ``row_moments``):
each row's mean and sum of squared deviations, joined into running ones, against float64; stable where the data sit
far from zero (E[x^2] - E[x]^2 in float32 would lose every digit there), for float16 rows too, and a row taken in
column tiles gives what the whole row gives."""
from __future__ import annotations

import ctypes

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from septran.build import vendor
from septran.target import load_target_file
from test_cpu_vendor import SETTINGS, U32, write_target

pytestmark = pytest.mark.build


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    # (septran_cpu.c for the tile copy that widens float16 rows)
    path = write_target(tmp_path_factory.mktemp("cpu_moments"),
                        sources=("septran_cpu.c", "septran_cpu_gemv.c", "septran_cpu_moments.c"))
    return vendor.library(load_target_file(path))


def moments(lib, x: torch.Tensor, ld: int, state=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean, m2, count) after joining x's rows (a strided view, row stride ld) into ``state`` (default: none)."""
    rows, cols = x.shape
    mean, m2, count = (t.clone() for t in state) if state is not None else (torch.zeros(rows) for _ in range(3))
    name = {torch.float16: "septran_cpu_moments_half", torch.bfloat16: "septran_cpu_moments_bf16"}.get(x.dtype,
                                                                                                     "septran_cpu_moments")
    size = ctypes.c_int64 if x.dtype == torch.bfloat16 else ctypes.c_int32  # (the bfloat16 entry: the kernels' form)
    fn = getattr(lib, name)
    fn.restype = ctypes.c_int32
    ptr = lambda t: ctypes.c_void_p(t.data_ptr())  # noqa: E731
    assert fn(ptr(mean), ptr(m2), ptr(count), ptr(x), size(rows), size(cols), size(ld)) == 0
    return mean, m2, count


def rows_of(rows: int, cols: int, pad: int, dtype, scale: float, offset: float, seed: int):
    """A rows x cols strided view of values scale * N(0, 1) + offset (in dtype), and its row stride."""
    gen = torch.Generator().manual_seed(seed)
    whole = (torch.randn(rows, cols + pad, generator=gen) * scale + offset).to(dtype)
    return whole[:, :cols], cols + pad


def check(mean, m2, count, x):
    """Within a few roundings of float64's: the mean 2 ulp of itself plus 8 of the deviations' size (4.6 measured at
    most), m2 64 ulp of itself (55 measured at most over 1 to 9000 columns, offsets 0 to 10^4, float16 rows, rows
    whose first 64 elements stand apart)."""
    xd = x.double()
    want_mean = xd.mean(dim=1)
    want_m2 = ((xd - want_mean[:, None]) ** 2).sum(dim=1)
    spread = (xd - want_mean[:, None]).abs().max(dim=1).values
    assert ((mean.double() - want_mean).abs() <= 2 * U32 * want_mean.abs() + 8 * U32 * spread).all(), (mean, want_mean)
    assert ((m2.double() - want_m2).abs() <= 64 * U32 * want_m2).all(), (m2, want_m2)
    assert (count == x.shape[1]).all()


@settings(max_examples=45, **SETTINGS)
@given(rows=st.integers(1, 5), cols=st.sampled_from([1, 2, 31, 64, 65, 511, 512, 513, 1023, 1500, 4097]),
       pad=st.sampled_from([0, 3]), offset=st.sampled_from([0.0, 1e4]),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))
def test_a_row_mean_and_squared_deviations_in_one_pass(lib, rows, cols, pad, offset, dtype):
    """Rows shorter than the shift's 64 elements (their own mean the shift) and longer ones (the mean of their first
    64), float32, float16 and bfloat16 rows (widened in registers with AVX-512), data far from 0."""
    half = dtype != torch.float32
    x, ld = rows_of(rows, cols, pad, dtype, 3.0, offset if not half else offset / 10, seed=cols + rows)
    check(*moments(lib, x, ld), x)


@pytest.mark.parametrize("cols", [100, 1030, 5000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
def test_a_row_in_tiles_joins_to_the_whole_row(lib, cols, dtype):
    """Columns in three tiles, joined one after another (count 0 first), as the logic's loop over column tiles does."""
    x, ld = rows_of(4, cols, 0, dtype, 2.0, 50.0, seed=cols)
    cuts = [0, cols // 3, cols // 3 + 7, cols]
    state = None
    for a, b in zip(cuts, cuts[1:]):
        state = moments(lib, x[:, a:b], ld, state)
    check(*state, x)
    whole = moments(lib, x, ld)
    assert torch.allclose(state[0], whole[0], rtol=1e-6) and torch.allclose(state[1], whole[1], rtol=1e-4)


def test_an_empty_tile_leaves_the_statistics_as_they_were(lib):
    x = torch.randn(3, 8)
    state = (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0, 5.0, 6.0]), torch.tensor([7.0, 8.0, 9.0]))
    after = moments(lib, x[:, :0], 8, state)
    assert all(torch.equal(a, b) for a, b in zip(after, state))


@pytest.mark.parametrize("cols", [100, 1024, 4097, 9000])
@pytest.mark.parametrize("apart", [10.0, 1e3, 1e5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
def test_a_row_whose_first_elements_stand_apart(lib, cols, apart, dtype):
    """The shift (the mean of the first 64) lies far from the row's mean: the one-pass subtraction would cancel (at 9000
    columns 2569 roundings off), so the row is summed again from its mean (16-bit rows: widened as they are read)."""
    if dtype == torch.float16 and apart > 1e4:
        pytest.skip("10^5 is past float16's range")
    x = torch.randn(4, cols, generator=torch.Generator().manual_seed(cols))
    x[:, :64] += apart
    x = x.to(dtype)
    check(*moments(lib, x, cols), x)


def test_a_nan_or_inf_is_not_hidden(lib):
    x = torch.randn(3, 700)
    x[0, 5], x[1, 600], x[2, 0] = float("nan"), float("inf"), float("-inf")
    mean, m2, _ = moments(lib, x, 700)
    assert torch.isnan(mean[0]) and torch.isnan(m2[0])
    assert not torch.isfinite(mean[1:]).any() and not torch.isfinite(m2[1:]).any()


def test_a_constant_row_has_no_deviation(lib):
    x = torch.full((2, 3000), 12345.678)
    mean, m2, _ = moments(lib, x, 3000)
    assert torch.equal(mean, x[:, 0]) and torch.equal(m2, torch.zeros(2))
