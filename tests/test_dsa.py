"""DSA targets: TileLang's C target calling a vendor's C library, with the GEMM logic unchanged."""
from __future__ import annotations

import re

import pytest
import torch

import septran
from septran.build import tilelang_api as build
from septran.runtime import vendor
from conftest import GEMM_LOGIC, assert_gemm_close, mapping_path

pytestmark = pytest.mark.build  # 5 of its 5 tests build kernels

# Per DSA: the prefix of its vendor calls, and the call that completes transfers.
DSAS = {"dsa_ref": ("dsa_ref_", "dsa_ref_sync"), "dsa_acme": ("acme_", "acme_fence")}
SHAPES = [(64, 64, 64), (128, 64, 96), (257, 129, 95), (1, 33, 17), (100, 37, 300)]


@pytest.fixture(scope="module", params=sorted(DSAS))
def dsa(request):
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path(request.param))
    return request.param, kernel


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_on_the_dsa_matches_torch(dsa, shape, dtype):
    _, kernel = dsa
    M, N, K = shape
    gen = torch.Generator().manual_seed(M + 7 * N + 31 * K)
    for _ in range(2):
        a = (torch.rand(M, K, generator=gen) * 2 - 1).to(dtype)
        b = (torch.rand(K, N, generator=gen) * 2 - 1).to(dtype)
        c = kernel(a, b)
        assert c.dtype == dtype and c.shape == (M, N)
        assert_gemm_close(c, a, b)


def _vendor_calls(c_source: str) -> set[str]:
    """Every function the generated C declares besides the kernel itself."""
    declared = set(re.findall(r"^int32_t (\w+)\(", c_source, re.M))
    return {name for name in declared if not name.endswith("_kernel")}


def test_generated_c_holds_only_this_vendors_calls(dsa, golden):
    name, kernel = dsa
    variant = kernel.specialize(A=((200, 96), "float16"), B=((96, 150), "float16"))
    prefix, sync = DSAS[name]
    calls = _vendor_calls(variant.device_source)
    assert calls and all(c.startswith(prefix) for c in calls), calls
    assert sync in calls
    assert "T.copy" not in variant.tilelang_source and "T.gemm" not in variant.tilelang_source
    golden(f"gemm.{name}.py", variant.tilelang_source)
    golden(f"gemm.{name}.c", variant.device_source)


def test_dump_dir_shows_the_vendor_program(dsa, monkeypatch, tmp_path):
    name, _ = dsa
    monkeypatch.setenv("SEPTRAN_DUMP_DIR", str(tmp_path))
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path(name))
    a, b = torch.randn(40, 24), torch.randn(24, 40)
    assert_gemm_close(kernel(a, b), a, b)
    c_file = next(tmp_path.glob("*.device.c"))
    assert DSAS[name][1] in c_file.read_text()
    assert next(tmp_path.glob("*.tilelang.py")).read_text() == kernel.tilelang_source


def _without_first_sync(source: str, sync: str) -> str:
    lines = source.splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if f'"{sync}"' in line)
    return "".join(lines[:first] + lines[first + 1:])


def test_a_missing_sync_is_caught_by_the_debug_mode(dsa):
    """The asynchrony is real: drop the sync before the matrix unit reads its tiles and the library sees it."""
    name, kernel = dsa
    a, b = torch.randn(96, 64), torch.randn(64, 80)
    variant = kernel.specialize(A=a, B=b)
    target = kernel.target
    vendor.set_debug(target, True)
    try:
        c = kernel(a, b)
        assert vendor.debug_violations(target) == 0, "the generated program must be clean"
        assert_gemm_close(c, a, b)
        broken_src = _without_first_sync(variant.tilelang_source, DSAS[name][1])
        broken = build.compile_kernel(build.load_prim_func(broken_src, variant.program.name), target, "broken")
        c_broken = torch.zeros(96, 80)
        broken(a, b, c_broken)
        assert vendor.debug_violations(target) > 0
    finally:
        vendor.set_debug(target, False)
        vendor.check_errors(target, "cleanup")
    vendor.debug_violations(target)
    broken(a, b, c_broken := torch.zeros(96, 80))
    assert not torch.allclose(c_broken, a @ b, atol=1e-3), "without the sync the matrix unit computes on stale tiles"


def test_vendor_errors_surface_as_device_errors(dsa):
    name, kernel = dsa
    lib = vendor.library(kernel.target)
    prefix = DSAS[name][0]
    # A transfer of a tile far larger than the on-chip memory: the library refuses it.
    if name == "dsa_ref":
        lib.dsa_ref_fill_zero(0, 0, 1024, 1024)
    else:
        lib.acme_tile_desc(0, 1024, 1024, 2)
    with pytest.raises(septran.DeviceError, match=f"{prefix}\\w+: .*exceeds") as info:
        vendor.check_errors(kernel.target, "probe")
    assert name in str(info.value)
