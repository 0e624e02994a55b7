"""GEMM numerics on the cpu target: C = A @ B against a float64 torch reference."""
from __future__ import annotations

import pytest
import torch

import septran
from conftest import GEMM_LOGIC, assert_gemm_close, mapping_path

pytestmark = pytest.mark.build  # 4 of its 4 tests build kernels

# (M, N, K): round, rectangular, odd, degenerate; tiles are 32, so most overhang.
SHAPES = [(64, 64, 64), (128, 96, 160), (257, 129, 95), (1, 64, 1), (1, 1, 64), (33, 1, 17), (100, 37, 300)]
DRAWS = 3


@pytest.fixture(scope="module")
def kernel():
    return septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_matches_torch(kernel, shape, dtype):
    M, N, K = shape
    gen = torch.Generator().manual_seed(M * 10007 + N * 101 + K)
    for _ in range(DRAWS):
        a = (torch.rand(M, K, generator=gen) * 2 - 1 + 0.01).to(dtype)
        b = (torch.rand(K, N, generator=gen) * 2 - 1 + 0.01).to(dtype)
        c = kernel(a, b)
        assert c.shape == (M, N) and c.dtype == dtype
        assert_gemm_close(c, a, b)


def test_fp16_accumulates_in_fp32(kernel):
    """A long K in fp16 would lose digits if the accumulator were fp16."""
    a = torch.full((16, 4096), 1.0, dtype=torch.float16)
    b = torch.full((4096, 16), 1.0, dtype=torch.float16)
    b[0, :] = 1.0 / 1024
    c = kernel(a, b)
    # 4095 + 1/1024 in fp32, then rounded to fp16 once: 4096 (an fp16 accumulator stalls at 2048).
    assert torch.all(c == 4096)


def test_one_kernel_caches_each_shape(kernel):
    a, b = torch.randn(48, 40), torch.randn(40, 24)
    kernel(a, b)
    v1 = kernel._last
    kernel(torch.randn(48, 40), torch.randn(40, 24))
    assert kernel._last is v1, "a second call with the same shapes and dtypes must reuse the variant"
    kernel(torch.randn(49, 40), torch.randn(40, 24))
    assert kernel._last is not v1


def test_empty_problem_returns_without_running(kernel):
    c = kernel(torch.randn(8, 0), torch.randn(0, 5))
    assert c.shape == (8, 5) and torch.all(c == 0)  # the sum over an empty K is 0
    assert kernel(torch.randn(0, 4), torch.randn(4, 3)).shape == (0, 3)
