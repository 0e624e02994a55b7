"""Issue 22, the matrix: for every target, every leaf it lists, every primitive kind the leaf implements, every
dtype the target lists and every memory the leaf may hold operands in, one small generated kernel
(tests/support/matrix.py). On cpu and the DSAs (their simulators) it runs and matches torch, or is refused at a
line; on sm80, sm90 and gfx942 its device source is emitted (TileLang's lowering; no nvcc), or it is refused at a
line. Never a build failure, an unlocated or internal error, a raw exception or a wrong answer.

The table prints with ``pytest -s`` (or ``-rP``): targets x leaves x kinds x dtypes x memories.
"""
from __future__ import annotations

import pytest

from support import matrix

pytestmark = pytest.mark.build  # the cpu and DSA cells build and run their kernels; GPU cells lower through TileLang


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """One folder of logic files for every cell (one file per kind): the cache keys stay the same across cells."""
    return tmp_path_factory.mktemp("matrix")


@pytest.mark.parametrize("target", matrix.TARGETS)
def test_every_leaf_dtype_and_memory_runs_right_emits_or_is_refused_at_a_line(target, folder):
    runs = target in ("cpu", "dsa_ref", "dsa_acme")
    rows = [(cell, matrix.outcome(cell, folder, runs)) for cell in matrix.cells(target)]
    print("\n" + matrix.table(rows))
    bad = matrix.first_bad(rows)
    assert bad is None, bad
    assert any(r.startswith("ran right" if runs else "emitted") for _, r in rows)  # the matrix is not all refusals


def test_a_recorded_emission_is_what_tilelang_does(folder):
    """The GPU cells read TileLang's lowering from tests/golden/emitted.json (support/emit_records.py): one
    recorded cell, lowered again by TileLang, still gives a device source."""
    import septran
    from support import emit_records

    cell = next(c for c in matrix.cells("sm90") if matrix.outcome(c, folder, runs=False) == "emitted")
    logic = folder / f"mx_{cell.kind}.py"
    kernel = septran.compile(logic_file=logic, mapping=matrix.mapping_text(cell))
    described = {p: (tuple(a.shape), cell.dtype) for p, a in zip(matrix.PARAMS[cell.kind][1:], matrix.inputs(cell))}
    variant = kernel.specialize(**described)
    assert emit_records.key(variant.tilelang_source, "sm90") in emit_records._records()
    assert "__global__" in variant.device_source
