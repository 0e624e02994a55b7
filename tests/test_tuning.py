"""Issue 10: septran.tune on the cpu target: pruning, measuring, the database, the kernel's choice, the CLI."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

import septran
from conftest import GEMM_LOGIC, REPO, edited_mapping, needs_nvcc
from septran.errors import MappingError
from septran.records.db import TuningDB
from support import lowering_records
from septran.tuning import measure
from septran.tuning.search import search

SHAPES = {"A": ((64, 48), "float32"), "B": ((48, 40), "float32")}
BM = "task_mappings.gemm_host.tunables.BM"


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "tuning.jsonl"
    monkeypatch.setenv("SEPTRAN_TUNING_DB", str(path))
    return TuningDB(path)


def _space(tmp_path, tunables="{BM: !tune [16, 32], BN: !tune [16, 32], BK: 16}", **kw):
    path = edited_mapping(tmp_path, "cpu", "gemm", ("{BM: 256, BN: 256, BK: 512}", tunables))
    return septran.compile(logic_file=GEMM_LOGIC, mapping_file=path, **kw), path


@pytest.mark.build
def test_a_small_space_is_measured_whole_then_cached(tmp_path, db, monkeypatch):
    # The tuner's prebuild (TileLang's own C build, in advance) is half this test's time and none of its checks:
    # the measurement builds each point itself through the c builder's cache. The prebuild still runs in
    # test_a_wrong_candidate_is_recorded_and_never_chosen (in process) and test_a_kernel_runs_the_recorded_point
    # (in build workers).
    monkeypatch.setattr(measure, "build_all", lambda jobs, n: [None] * len(jobs))
    kernel, _ = _space(tmp_path)
    first = septran.tune(kernel, SHAPES, db=db, jobs=1, progress=False)
    assert (first.space, first.pruned, first.measured, first.cached, first.wrong) == (4, 0, 4, False, 0)
    assert set(first.best) == {BM, "task_mappings.gemm_host.tunables.BN"} and first.best_s > 0 and first.first_s > 0
    records = db.all()
    final = [r for r in records if r.status == "ok" and r.timing.interleaved]
    assert sum(r.status == "ok" for r in records) == 4 + len(final) and 3 <= len(final) <= 4  # the best three (or
    # any within 5 % of the best) again, interleaved
    assert all(r.timings and r.timing.method == "wall" for r in records)
    again = septran.tune(kernel, SHAPES, db=db, jobs=1, progress=False)
    assert (again.cached, again.measured, again.best) == (True, 0, first.best)
    other = septran.tune(kernel, {"A": ((32, 48), "float32"), "B": ((48, 40), "float32")}, db=db, jobs=1, progress=False)
    assert not other.cached and other.measured == 4  # another shape is another key


@pytest.mark.build
def test_a_kernel_runs_the_recorded_point(tmp_path, db):
    kernel, path = _space(tmp_path, autotune=True)
    import torch

    a, b = torch.randn(64, 48), torch.randn(48, 40)
    torch.testing.assert_close(kernel(a, b), a @ b)
    assert kernel.tuning["source"].startswith("tuned now")
    later = septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)  # no autotune: the database's point
    torch.testing.assert_close(later(a, b), a @ b)
    assert later.tuning["source"].startswith("the tuning database") and later.tuning["point"] == kernel.tuning["point"]
    later(torch.randn(8, 48), b)  # a shape never tuned: the first point
    assert later.tuning["source"].startswith("the space's first point") and later.tuning["point"][BM] == 16


def test_every_point_pruned_names_the_rule(tmp_path, db):
    kernel, path = _space(tmp_path, "{BM: !tune [4096, 8192], BN: 512, BK: 512}")  # LOCAL holds 1 MiB per program
    with pytest.raises(MappingError) as info:
        septran.tune(kernel, {"A": ((8192, 512), "float32"), "B": ((512, 512), "float32")}, db=db, jobs=1, progress=False)
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "!tune" in t)
    assert info.value.loc.line == line and "capacity" in str(info.value) and "every one of the 2 points" in str(info.value)
    assert {r.status for r in db.all()} == {"pruned"} and all("capacity" in r.rule for r in db.all())


@pytest.mark.build
def test_a_wrong_candidate_is_recorded_and_never_chosen(tmp_path, db, monkeypatch):
    """A test target whose second gemm leaf adds 1 to one element: its point is 'wrong', never the answer."""
    folder = tmp_path / "cpu_wrong"
    shutil.copytree(REPO / "backends" / "cpu", folder)
    text = (folder / "target.yaml").read_text().replace("name: cpu", "name: cpu_wrong")
    text = text.replace("\nleaves:\n", "\nleaves:\n  gemm_leaf_wrong:\n    implements: gemm\n    meaning: a deliberately wrong gemm\n"
                        "    mems: {C: [LOCAL], A: [LOCAL], B: [LOCAL]}\n    tilelang: |-\n"
                        "      T.gemm({A}, {B}, {C}{flags})\n      {C}[0, 0] = {C}[0, 0] + T.float32(1)\n", 1)
    (folder / "target.yaml").write_text(text)
    import septran.resources as resources

    real = resources.target_folders
    monkeypatch.setattr(resources, "target_folders", lambda: {**real(), "cpu_wrong": folder})
    path = edited_mapping(tmp_path, "cpu", "gemm", ("target: cpu", "target: cpu_wrong"),
                          ("{C: LOCAL, A: GLOBAL, B: GLOBAL}", "{C: LOCAL, A: LOCAL, B: LOCAL}"),
                          ("{BM: 256, BN: 256, BK: 512}", "{BM: 64, BN: 64, BK: 64}"),
                          ("{gemm_leaf_logic: gemm_leaf_blas}", "{gemm_leaf_logic: !tune [gemm_leaf_cpu, gemm_leaf_wrong]}"))
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
    result = septran.tune(kernel, SHAPES, db=db, jobs=1, progress=False)
    assert result.wrong == 1 and result.best == {"task_mappings.gemm_block_cpu.leaf_task_bindings.gemm_leaf_logic": "gemm_leaf_cpu"}
    (bad,) = [r for r in db.all() if r.status == "wrong"]
    assert bad.point["task_mappings.gemm_block_cpu.leaf_task_bindings.gemm_leaf_logic"] == "gemm_leaf_wrong"
    assert "max |out - reference|" in bad.rule


def test_a_guided_search_finds_the_best_measuring_a_third():
    """200 points: the search measures at most a third and lands within 5 % of the best (a noisy cost-model order)."""
    import random

    rng = random.Random(0)
    points = [{"a": a, "b": b, "c": c} for a in range(10) for b in range(5) for c in range(4)]
    truth = {json.dumps(p): 1.0 + (p["a"] - 6) ** 2 * 0.1 + (p["b"] - 2) ** 2 * 0.3 + p["c"] * 0.05 for p in points}
    noisy = sorted(points, key=lambda p: truth[json.dumps(p)] * rng.uniform(0.7, 1.4))
    calls = []

    def measure(i):
        calls.append(i)
        return truth[json.dumps(noisy[i])]

    results = search(noisy, measure, seed=0)
    assert len(set(calls)) <= len(points) // 3
    assert min(v for v in results.values() if v is not None) <= 1.05 * min(truth.values())


def _cli(*args, env):
    return subprocess.run([sys.executable, "-m", "septran.cli", *args], capture_output=True, text=True, env=env, timeout=600)


def _built(root) -> list[str]:
    """What the builds left in the cache: libraries (the c builder) and TileLang's sources (the tilelang one)."""
    return sorted(str(p.relative_to(root)) for p in [*root.rglob("*.so"), *root.glob("sources/*")])


@pytest.mark.build  # `septran tune` in a child process
def test_septran_tune_json_and_a_second_process_measures_nothing(tmp_path, db):
    import os

    _, path = _space(tmp_path)
    cache = tmp_path / "cache"  # its own: the suite's other tests build into the shared one meanwhile
    env = lowering_records.child_env(dict(os.environ, SEPTRAN_TUNING_DB=str(db.path), SEPTRAN_CACHE_DIR=str(cache)))
    args = ("tune", str(GEMM_LOGIC), str(path), "--input", "A=64x48:float32", "--input", "B=48x40:float32", "--json",
            "--jobs", "1")
    first = _cli(*args, env=env)
    assert first.returncode == 0, first.stderr
    one = json.loads(first.stdout.strip().splitlines()[-1])
    assert {"best", "best_s", "first_s", "space", "pruned", "measured", "cached"} <= set(one) and one["measured"] == 4
    built = _built(cache)
    assert built
    second = _cli(*args, env=env)
    two = json.loads(second.stdout.strip().splitlines()[-1])
    assert (two["cached"], two["measured"], two["best"]) == (True, 0, one["best"])
    assert _built(cache) == built  # nothing compiled
    table = _cli(*args[:-3], env=env)
    assert "from the tuning database" in table.stdout and "speed-up" in table.stdout


@pytest.mark.build  # tunes through ray's workers
def test_ray_path_writes_the_same_records(tmp_path, db):
    pytest.importorskip("ray")
    kernel, _ = _space(tmp_path, "{BM: !tune [16, 32], BN: 16, BK: 16}")
    septran.tune(kernel, SHAPES, db=db, jobs=1, progress=False)
    ray_db = TuningDB(tmp_path / "ray.jsonl")
    result = septran.tune(kernel, SHAPES, db=ray_db, jobs=1, progress=False, ray=True)
    assert result.measured == 2 and not result.cached
    local, remote = db.all(), ray_db.all()
    assert [sorted(r.to_json()) for r in local] == [sorted(r.to_json()) for r in remote]
    assert {r.key.digest() for r in local} == {r.key.digest() for r in remote}


@needs_nvcc
def test_nvcc_prunes_a_point_whose_registers_spill(tmp_path):
    """sm90, no GPU: a 128x256 fp32 accumulator over 128 threads needs 256 registers a thread: it spills."""
    from septran.runtime.kernel import Kernel
    from septran.tuning.prune import prune_resources, prune_static

    path = edited_mapping(tmp_path, "sm90", "gemm", ("    threads: 256", "    threads: !tune [256, 128]"))
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
    shapes = {"A": ((1024, 512), "float16"), "B": ((512, 1024), "float16")}
    spec = kernel.specialization(shapes, {})
    cands = prune_static(kernel.graph, kernel.shapes, kernel.mapping, kernel.target, spec)
    assert all(c.ok for c in cands)
    out = prune_resources(cands, kernel.target, lambda c: Kernel(kernel.graph, c.mapping, kernel.target).specialize(**shapes).device_source)
    assert out[0].ok and out[0].resources["spill_stores"] == 0
    assert out[1].rule == "nvcc: registers spill" and out[1].resources["spill_stores"] > 0


@pytest.mark.build
def test_the_runtime_calls_only_the_tuner_it_is_handed(tmp_path, db):
    """The runtime stands below the tuner: a Kernel given a tuner calls it for a shape the database lacks (once per
    variant), one given none runs the first point; the tuner sees the kernel's public specialisation API."""
    import torch
    from septran.runtime.kernel import Kernel
    from septran.runtime.points import Tuned

    plain, _ = _space(tmp_path)
    seen = []

    def tuner(kernel, described, scalars):
        seen.append(described)
        spec = kernel.specialization(described, kernel.scalar_values(scalars))
        assert kernel.tuning_key(spec).shapes == (("A", (64, 48)), ("B", (48, 40)), ("C", (64, 40)))
        return Tuned({BM: 32, "task_mappings.gemm_host.tunables.BN": 16}, "handed in")

    kernel = Kernel(plain.graph, plain.mapping, plain.target, tuner=tuner, logic=plain.logic)
    a, b = torch.randn(64, 48), torch.randn(48, 40)
    torch.testing.assert_close(kernel(a, b), a @ b)
    torch.testing.assert_close(kernel(A=a, B=b), a @ b)
    assert kernel.tuning == {"point": {BM: 32, "task_mappings.gemm_host.tunables.BN": 16}, "source": "handed in",
                             "space": 4}
    assert seen == [{"A": ((64, 48), "float32"), "B": ((48, 40), "float32")}]
    assert plain.tuner is None
    plain(a, b)
    assert plain.tuning["source"].startswith("the space's first point") and db.all() == []
    point = kernel.at(kernel.tuning["point"])
    assert point.mapping.space is None and point.specialize(A=a, B=b).choice.source == "the mapping has no !tune"


def test_an_unknown_sampler_or_a_missing_optuna_stops_the_tuner_before_any_build(tmp_path, db, monkeypatch):
    """A tuning run on a device without optuna built 36 candidates for 110 s before the search imported it: the
    sampler and optuna are checked first."""
    kernel, _ = _space(tmp_path)
    with pytest.raises(ValueError, match="sampler must be one of tpe, evolution"):
        septran.tune(kernel, SHAPES, db=db, jobs=1, progress=False, sampler="annealing")
    monkeypatch.setitem(sys.modules, "optuna", None)  # an import of it fails
    with pytest.raises(ImportError):
        septran.tune(kernel, SHAPES, db=db, jobs=1, progress=False)
    assert db.path.exists() is False or not db.path.read_text().strip()
