"""The vendor library built for CPUs older than this one: its scalar paths (``-march=x86-64``), its AVX2 paths
(``x86-64-v3``: AVX2, FMA and F16C, no AVX-512) and AVX-512 without the bfloat16 instructions (``x86-64-v4``). The
machines here all have AVX-512 and build ``-march=native``, so the other paths would otherwise never run; a newer
CPU runs code for an older level, so each build runs the native build's numeric tests here, against the same
float64 references. A level this CPU lacks is skipped.

The tests are the native ones (``test_cpu_vendor``, ``test_cpu_moments``), collected again here with this module's
``lib``: one build per level, shared by the module.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from septran.runtime import vendor
from septran.target import load_target_file
from test_cpu_vendor import write_target

pytestmark = pytest.mark.build

# Each level's /proc/cpuinfo flags (g++'s x86-64-v3 and v4, as the psABI defines them)
LEVELS = {
    "x86-64": (),
    "x86-64-v3": ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe"),
    "x86-64-v4": ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "avx512f", "avx512bw", "avx512cd",
                  "avx512dq", "avx512vl"),
}


def _cpu_flags() -> set:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return next((set(line.split(":", 1)[1].split()) for line in text.splitlines() if line.startswith("flags")), set())


@pytest.fixture(scope="module", params=sorted(LEVELS))
def lib(request, tmp_path_factory):
    missing = set(LEVELS[request.param]) - _cpu_flags()
    if missing:
        pytest.skip(f"this CPU lacks {', '.join(sorted(missing))} ({request.param})")
    path = write_target(tmp_path_factory.mktemp(request.param), march=request.param,
                        sources=("septran_cpu.c", "septran_cpu_gemv.c", "septran_cpu_moments.c"))
    return vendor.library(load_target_file(path))


# (imported under their own names, so that pytest collects them here too, with the lib above)
from test_cpu_vendor import (  # noqa: E402,F401
    test_fill_zero, test_few_rows_stream_b_once, test_gemm_any_shape, test_load_pads_with_zeros_and_converts,
    test_reduce, test_reduce_of_16_bit_rows_is_the_float32_reduction_of_their_values,
    test_reduce_of_squared_deviations, test_rows_affine_rounds_float32_math_once, test_store_writes_only_the_valid_part,
    test_stream_writes_what_store_writes, test_streamed_16_bit_rows_round_as_torch)
from test_cpu_moments import (  # noqa: E402,F401
    test_a_constant_row_has_no_deviation, test_a_nan_or_inf_is_not_hidden,
    test_a_row_in_tiles_joins_to_the_whole_row, test_a_row_mean_and_squared_deviations_in_one_pass,
    test_a_row_whose_first_elements_stand_apart)
