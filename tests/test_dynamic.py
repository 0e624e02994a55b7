"""Dynamic dimensions (mapping `dynamic`): one compile serves every size, each size correct, bounds proven."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import septran
from conftest import mapping_path, needs_nvcc
from support.model_graphs import count_builds as _count_builds
from septran.errors import LoweringError, MappingError
from support.cuda_tools import nvcc_resource_usage

ROOT = Path(__file__).resolve().parents[1]
ATTN = str(ROOT / "examples/attention/attention.py")
sys.path.insert(0, str(ROOT / "examples/attention"))
from run_attention import reference  # noqa: E402


def _attention(target: str, dynamic: str = "dynamic: {Q: [2], K: [2]}\n"):
    return septran.compile(logic_file=ATTN, mapping=mapping_path(target, "attention").read_text() + dynamic,
                           target=target)


@pytest.mark.build
def test_attention_one_build_for_twenty_lengths(monkeypatch):
    built = _count_builds(monkeypatch)
    kernel = _attention("cpu")
    gen = torch.Generator().manual_seed(0)
    lengths = [1, 2, 3, 7, 17, 31, 63, 64, 65, 100, 127, 128, 129, 131, 200, 203, 255, 256, 257, 301]
    for n, sq in enumerate(lengths):
        sk = lengths[-1 - n]  # queries and keys of different lengths, each dynamic
        q = torch.randn(1, 2, sq, 64, generator=gen)
        k, v = torch.randn(1, 2, sk, 64, generator=gen), torch.randn(1, 2, sk, 64, generator=gen)
        out = kernel(q, k, v)
        ref = reference(q.double(), k.double(), v.double(), False)
        assert out.shape == (1, 2, sq, 64)
        torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=2e-5)
    assert len(kernel._variants) == 1
    assert len(built) == 1
    source = kernel.tilelang_source
    assert 'Q_dim2 = T.dynamic("Q_dim2", "int64")' in source and 'K_dim2 = T.dynamic("K_dim2", "int64")' in source


@pytest.mark.build
def test_static_dims_still_make_variants():
    kernel = _attention("cpu")
    for heads in (1, 2):
        kernel(*(torch.randn(1, heads, 5, 64) for _ in range(3)))
    assert len(kernel._variants) == 2  # heads is static: a new variant per value


def test_a_tie_makes_the_class_dynamic():
    kernel = _attention("cpu", "dynamic: {O: [2]}\n")  # O.2 is tied to Q.2
    v = kernel.specialize(Q=((1, 1, 9, 64), "float32"), K=((1, 1, 4, 64), "float32"), V=((1, 1, 4, 64), "float32"))
    assert 'Q_dim2 = T.dynamic("Q_dim2"' in v.tilelang_source and "K_dim2 = 4" in v.tilelang_source


@pytest.mark.parametrize("text, message", [
    ("dynamic: {X: [2]}\n", "not a tensor parameter"),
    ("dynamic: {Q: [4]}\n", "has 4 dimensions"),
    ("dynamic: {Q: 2}\n", "must be a list of axes"),
    ("dynamic: {Q: [-1]}\n", "integer from 0"),
    ("dynamic: {Q: [2, 2]}\n", "twice"),
])
def test_mapping_errors(text, message):
    with pytest.raises(MappingError, match=message):
        _attention("cpu", text)


def test_buffer_sized_by_a_dynamic_dimension_is_refused():
    # V's head dimension, and O's with it (tied): O's LOCAL tile is BM x D
    kernel = _attention("cpu", "dynamic: {V: [3]}\n")
    with pytest.raises(LoweringError, match="the buffer for O would be BM x V_dim3: an extent depends on a dynamic"):
        kernel.specialize(Q=((1, 1, 8, 64), "float32"), K=((1, 1, 8, 64), "float32"), V=((1, 1, 8, 64), "float32"))


@needs_nvcc
@pytest.mark.parametrize("target, arch", [("sm90", "sm_90a"), ("sm80", "sm_80")])
def test_gpu_program_with_dynamic_dimension_builds(target, arch):
    kernel = _attention(target)
    shape = ((1, 2, 200, 64), "float16")
    v = kernel.specialize(Q=shape, K=shape, V=shape)
    assert 'T.dynamic("Q_dim2", "int32")' in v.tilelang_source
    usage = nvcc_resource_usage(v, arch)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage


@pytest.mark.build
def test_softmax_rows_dynamic_with_an_overhanging_block(monkeypatch):
    """Rows as a dynamic dimension, blocks of 4 rows: the last block overhangs at most sizes; one build."""
    from conftest import REPO, load_module

    softmax = load_module(REPO / "examples" / "softmax" / "softmax.py")
    text = mapping_path("cpu", "softmax").read_text().replace("entrypoint: softmax_host",
                                                              "entrypoint: softmax_host\ndynamic: {X: [0]}")
    text = text.replace("BM: !tune [1, 2, 4, 8, 16, 32]", "BM: 4")
    kernel = septran.compile(softmax.softmax(), mapping=text, target="cpu")
    builds = _count_builds(monkeypatch)
    for rows in (1, 3, 4, 5, 37):
        x = torch.randn(rows, 300, generator=torch.Generator().manual_seed(rows))
        assert (kernel(x) - torch.softmax(x.double(), -1)).abs().max().item() < 1e-6
    assert len(kernel._variants) == 1 and len(builds) == 1


@pytest.mark.build
def test_a_tuned_dynamic_kernel_finds_its_record_at_any_size(tmp_path, monkeypatch):
    """septran.tune at one row count records the point under -1 (any size); a new kernel called at another row
    count runs that point from the database, as one compile serves every size."""
    from conftest import REPO, load_module

    from septran.tuning import measure

    monkeypatch.setenv("SEPTRAN_TUNING_DB", str(tmp_path / "db.jsonl"))
    # The tuner's prebuild (TileLang's own C build in worker processes, unused on cpu: the measurement builds each
    # point through the c builder's cache) is most of this test's time and none of its checks; test_tuning.py
    # covers it.
    monkeypatch.setattr(measure, "build_all", lambda jobs, n: [None] * len(jobs))
    softmax = load_module(REPO / "examples" / "softmax" / "softmax.py")
    text = mapping_path("cpu", "softmax_online").read_text().replace("entrypoint: softmax_host",
                                                                     "entrypoint: softmax_host\ndynamic: {X: [0]}")
    text = text.replace("BM: !tune [1, 2, 4, 8, 16, 32]", "BM: !tune [1, 2]").replace(
        "BN: !tune [1024, 256, 512, 2048, 4104, 128]", "BN: 256")
    septran.tune(septran.compile(softmax.softmax(), mapping=text, target="cpu"),
                 {"X": ((37, 300), "float32")}, progress=False)
    kernel = septran.compile(softmax.softmax(), mapping=text, target="cpu")
    x = torch.randn(5, 300)
    assert (kernel(x) - torch.softmax(x.double(), -1)).abs().max().item() < 1e-6
    assert "not tuned" not in kernel.tuning["source"], kernel.tuning


@pytest.mark.build
def test_an_elementwise_leaf_over_a_whole_dynamic_dimension(monkeypatch):
    """Rows of any length read and written in place: no tile extent needs the length's number (the read check
    and the matrix-unit multiples asked for it, and refused a program that needs none)."""
    from septran import task
    from support.rows import rows_logic, rows_mapping

    @task.define(leaf=True)
    def double(Y, X):
        task.compute(Y, lambda i, j: X[i, j] * 2.0)

    mapping = rows_mapping("double").replace("target: cpu", "target: cpu\ndynamic: {X: [1]}")
    kernel = septran.compile(rows_logic(double), mapping=mapping, target="cpu")
    builds = _count_builds(monkeypatch)
    for n in (1, 3, 17, 64):
        x = torch.randn(5, n, generator=torch.Generator().manual_seed(n))
        assert torch.equal(kernel(x), 2 * x)
    assert len(kernel._variants) == 1 and len(builds) == 1
