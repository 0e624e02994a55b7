"""The cpu target's float16 (backends/cpu/vendor/septran_cpu_half.h): TileLang's `half` as a type g++ vectorises.

The header replaces the bundled half.hpp's class (whose conversions g++ could not vectorise) with branch-free
integer conversions. These tests hold it to IEEE binary16 as torch converts: every one of the 65,536 bit patterns
widened, floats around every rounding boundary narrowed (ties to even, overflow to inf, subnormals, NaN), and
the loops the kernels are made of vectorised. They also check that the bundled half.hpp still has the include
guard the header defines, so that a TileLang upgrade cannot silently bring the slow class back.
"""
from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import REPO
from septran.build import toolchain

HEADER = REPO / "backends" / "cpu" / "vendor" / "septran_cpu_half.h"
FLAGS = ["-std=c++17", "-O3", "-march=native", "-mprefer-vector-width=512", "-fno-math-errno", "-fopenmp"]

SOURCE = r"""
#include <tl_templates/cpp/common.h>
extern "C" void widen(const half* h, float* f, long n) { for (long i = 0; i < n; ++i) f[i] = (float)h[i]; }
extern "C" void narrow(const float* f, half* h, long n) { for (long i = 0; i < n; ++i) h[i] = (half)f[i]; }
extern "C" void scale(half* y, float s, long n) { for (long i = 0; i < n; ++i) y[i] = (half)((float)y[i] * s); }
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("half")
    (folder / "half.cpp").write_text(SOURCE)
    lib = folder / "half.so"
    out = subprocess.run([toolchain.cxx(), *FLAGS, "-shared", "-fPIC", "-include", str(HEADER),
                          f"-I{toolchain.tilelang_templates()}", str(folder / "half.cpp"), "-o", str(lib),
                          "-fopt-info-vec-optimized"], capture_output=True, text=True, check=True)
    return ctypes.CDLL(str(lib)), out.stderr


def _widen(lib, bits: torch.Tensor) -> torch.Tensor:
    out = torch.empty(bits.numel(), dtype=torch.float32)
    lib.widen(ctypes.c_void_p(bits.data_ptr()), ctypes.c_void_p(out.data_ptr()), ctypes.c_long(bits.numel()))
    return out


def _narrow(lib, x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.numel(), dtype=torch.int16)
    lib.narrow(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(out.data_ptr()), ctypes.c_long(x.numel()))
    return out


def test_every_float16_widens_as_torch_widens_it(built):
    lib, _ = built
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    ours, theirs = _widen(lib, bits), bits.view(torch.float16).float()
    nan = theirs.isnan()
    assert torch.equal(ours.isnan(), nan)
    assert torch.equal(ours[~nan].view(torch.int32), theirs[~nan].view(torch.int32))  # bit for bit: -0, subnormals


def test_floats_narrow_to_the_nearest_float16_ties_to_even_as_torch(built):
    lib, _ = built
    halves = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
    halves = halves[halves.isfinite()]
    ordered = halves.unique()  # sorted
    mid = (ordered[:-1].double() + ordered[1:].double()) / 2  # every tie, exact in float32
    mid = mid.float()
    up = torch.nextafter(mid, torch.tensor(float("inf")))
    down = torch.nextafter(mid, torch.tensor(float("-inf")))
    gen = torch.Generator().manual_seed(0)
    special = torch.tensor([65504.0, 65519.99, 65520.0, 1e5, -1e5, float("inf"), float("-inf"), 1e-8, -1e-8,
                            2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0000001, 2.0 ** -14, 0.0, -0.0, 1e-45, 3e38])
    x = torch.cat([halves, mid, up, down, special, torch.randn(200_000, generator=gen) * 1000,
                   torch.randn(200_000, generator=gen) * 1e-5])
    ours, theirs = _narrow(lib, x), x.to(torch.float16).view(torch.int16)
    bad = (ours != theirs).nonzero().flatten()
    assert bad.numel() == 0, f"{bad.numel()} differ, e.g. {x[bad[:4]].tolist()}: {ours[bad[:4]].tolist()} vs {theirs[bad[:4]].tolist()}"
    nan = _narrow(lib, torch.tensor([float("nan"), -float("nan")])).view(torch.float16)
    assert nan.isnan().all()


def test_the_conversion_loops_vectorise(built):
    """The point of the header: with half.hpp's class, none of these loops vectorised."""
    _, report = built
    vectorised = {line.split(":")[1] for line in report.splitlines() if "loop vectorized" in line}
    assert len(vectorised) == 3, report  # widen, narrow, scale: one line each


def test_the_bundled_half_hpp_has_the_guard_this_header_defines():
    templates = Path(toolchain.tilelang_templates()) / "tl_templates" / "cpp"
    assert "#ifndef HALF_HALF_HPP" in (templates / "half.hpp").read_text()
    common = (templates / "common.h").read_text()
    assert '#include "half.hpp"' in common and "using half_float::half;" in common
    assert "#define HALF_HALF_HPP" in HEADER.read_text()
