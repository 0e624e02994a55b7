"""`make test`'s order of files over the pytest-xdist workers: the longest first (LPT), so that the run ends on
short files and no worker idles while the other finishes a long one.

xdist's ``--dist loadfile`` sends whole files and, by default, the files with the most tests first: the files
of one or two long tests (the models bench's smoke run, the fuzzers, the cache and wheel tests) then came last,
and a worker that took one of them near the end decided the wall time alone. The seconds below are what each
file took on the 2-core reference machine (a full run, idle machine); they only order the queue, so a stale
number costs a little balance, never a result. A file not listed counts ``DEFAULT_S`` per test."""
from __future__ import annotations

from xdist.scheduler import LoadFileScheduling

DEFAULT_S = 0.2
SECONDS = {
    "test_attention.py": 160, "test_model_attention.py": 110, "test_model_norms.py": 100,
    "test_model_elementwise.py": 90, "test_issue22_matrix.py": 70, "test_cache_heal.py": 65,
    "test_build_cache.py": 60, "test_bench_models.py": 55, "test_model_rope_swiglu.py": 50, "test_tuning.py": 45,
    "test_model_core.py": 45, "test_packaging.py": 40, "test_gemm_epilogue.py": 40, "test_bmm.py": 40,
    "test_reduce.py": 38, "test_model_blocks.py": 35, "test_dsa.py": 35, "test_any_axis.py": 34,
    "test_cross_entropy.py": 34, "test_dynamic.py": 32, "test_hf_models.py": 30, "test_norms.py": 30,
    "test_softmax.py": 29, "test_examples.py": 28, "test_fuzz_logic.py": 25, "test_onnx_conformance.py": 22,
    "test_bench.py": 22, "test_swiglu_mlp.py": 21, "test_attention_masks.py": 19, "test_fuzz_mapping.py": 18,
    "test_lowering_property.py": 16, "test_gpu_codegen.py": 15,
}


def seconds(path: str, tests: int) -> float:
    """The expected seconds of a test file (its path as xdist names it) of ``tests`` tests."""
    return SECONDS.get(path.rsplit("/", 1)[-1], DEFAULT_S * tests)


class LongestFileFirst(LoadFileScheduling):
    """LoadFileScheduling with its queue sorted by :func:`seconds`, longest first (ties keep xdist's order)."""

    _sorted = False

    def _assign_work_unit(self, node) -> None:
        if not self._sorted:  # the queue is complete when the first unit is handed out (schedule())
            units = sorted(self.workqueue.items(), key=lambda unit: -seconds(unit[0], len(unit[1])))
            self.workqueue.clear()
            self.workqueue.update(units)
            self._sorted = True
        super()._assign_work_unit(node)
