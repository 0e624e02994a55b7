"""The suite's records of TileLang's C (support/lowering_records.py) answer what TileLang answers."""
from __future__ import annotations

import os

import pytest
import torch

import septran
from septran.build import tilelang_api
from support import lowering_records

from conftest import REPO

pytestmark = pytest.mark.build

MODE = os.environ.get("SEPTRAN_TEST_LOWERING", "")


@pytest.fixture(scope="module")
def variant():
    kern = septran.compile(REPO / "examples" / "gemm" / "gemm.py", mapping_file=REPO / "mappings" / "cpu" / "gemm.yaml")
    return kern.specialize(A=torch.empty(37, 29), B=torch.empty(29, 45))


def test_a_recorded_kernel_is_what_tilelang_prints(variant):
    job = variant.job
    k = lowering_records.key(job)
    recorded = lowering_records.records().get(k)
    if recorded is None:
        if MODE in ("record", "fresh"):
            pytest.skip("the records are being made, or not read")
        pytest.fail("tests/golden/lowered.json.xz lacks this kernel: SepTran's emitted source changed since the "
                    "records were made, and every changed cpu kernel is lowered again (slow, still right). Refresh "
                    "them: SEPTRAN_TEST_LOWERING=record make test; python tests/support/lowering_records.py pack")
    lower = getattr(tilelang_api.device_source_of, "lower", tilelang_api.device_source_of)  # TileLang's own
    assert lower(job) == recorded


def test_the_key_changes_with_the_source(variant):
    job = variant.job
    k = lowering_records.key(job)

    class Edited:
        program, target = job.program, job.target

        @staticmethod
        def text(name):
            return job.text(name) + "\n# edited"

    assert lowering_records.key(Edited) != k


def test_a_kernel_built_from_a_record_computes_the_gemm(variant):
    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(37, 29, generator=gen), torch.randn(29, 45, generator=gen)
    out = variant.kernel(a, b)
    assert torch.allclose(out.double(), a.double() @ b.double(), atol=1e-4)
