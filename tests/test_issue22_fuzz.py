"""Issue 22, the fuzzers' new dimensions (bench/fuzz.py): element types drawn for temps and outputs (the ``dtype``
family), and probes that call an accepted kernel from threads at once and with an output over an input. A few
seeded cases each, cheap; bench/fuzz.py runs thousands."""
from __future__ import annotations

import collections
import random

import pytest

from conftest import REPO, load_module

pytestmark = pytest.mark.build  # the cases build kernels

fuzz = load_module(REPO / "bench" / "fuzz_case.py")
mutate = load_module(REPO / "bench" / "fuzz_mutate.py")


def test_typed_temps_and_outputs_run_right_or_fail_located():
    counts = collections.Counter()
    for case in fuzz.logic_cases(10, seed=22, families=("dtype",)):
        result = fuzz.run_case({**case, "probes": ()})
        counts[result["outcome"]] += 1
        assert result["outcome"] in ("correct", "located"), f"{case['mutation']}: {result}"
    assert counts["correct"], counts


@pytest.mark.parametrize("op", ["gemm", "softmax"])
def test_threads_and_an_overlapping_output_are_probed(op):
    """A shipped cpu mapping, unmutated: right from 3 threads at once, and an output over an input refused."""
    path = REPO / "mappings" / "cpu" / f"{op}.yaml"
    case = {"kind": "mapping", "index": 0, "op": op, "target": "cpu", "seed": 7, "data": path.read_bytes(),
            "mutation": "none", "probes": ("threads", "overlap")}
    assert fuzz.run_case(case) == {"outcome": "correct", "detail": ""}


def test_the_new_mapping_mutators_draw_types_memories_and_leaves():
    rng = random.Random(5)
    data = (REPO / "mappings" / "sm90" / "softmax.yaml").read_bytes()
    notes = [f(rng, data)[1] for f in (mutate.m_accum_dtype, mutate.m_memory, mutate.m_leaf)]
    assert notes[0].startswith("accum_dtype") and notes[1].startswith("mems ") and notes[2].startswith("leaf ")
