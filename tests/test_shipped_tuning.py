"""The tuning database that ships with SepTran (septran/tuned/<target>.jsonl, septran/records/shipped.py): read after
the user's, only where the device matches; off with SEPTRAN_SHIPPED_TUNING=0 (as the suite runs); the choice names
it; ``tune-model --ship`` rewrites it keeping other CPUs' records. Hand-written records only: nothing is tuned."""
from __future__ import annotations

import dataclasses

import pytest

import septran
from septran.commands import tune_model
from septran.records import Timing, TuningDB, TuningRecord, shipped
from conftest import GEMM_LOGIC, REPO, forbid_tilelang, mapping_path

BM = "task_mappings.gemm_host.tunables.BM"
SHAPES = dict(A=((64, 48), "float32"), B=((48, 40), "float32"))


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """The cpu GEMM, a user database and a shipped folder of their own, the shipped database switched on."""
    monkeypatch.setenv("SEPTRAN_TUNING_DB", str(tmp_path / "user.jsonl"))
    monkeypatch.setenv("SEPTRAN_SHIPPED_TUNING", "1")
    monkeypatch.setattr(shipped, "FOLDER", tmp_path / "tuned")
    monkeypatch.setattr(shipped, "_OPEN", {})
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu"))
    key = kernel.tuning_key(kernel.specialization(SHAPES, kernel.scalar_values({})))
    forbid_tilelang(monkeypatch, "a point is chosen before TileLang")
    return kernel, key, TuningDB(tmp_path / "user.jsonl"), TuningDB(shipped.path("cpu"))


def _record(key, point: dict, seconds: float, threads=None) -> TuningRecord:
    """A record timed at ``threads`` (default: the count the kernels run on now), as ``tune-model --ship`` writes."""
    import torch

    return TuningRecord(key=key, point=point, status="ok", timings=(seconds,), timing=Timing("wall", 1, 1), op="gemm",
                        features={"threads": threads or torch.get_num_threads()})


def _point(kernel, bm: int) -> dict:
    return {**kernel.mapping.space.first, BM: bm}


def test_the_shipped_record_is_read_on_its_cpu_and_the_source_names_it(setup):
    kernel, key, _, ship = setup
    ship.append(_record(key, _point(kernel, 128), 1e-3))
    variant = kernel.specialize(**SHAPES)
    assert dict(variant.choice.point) == _point(kernel, 128)
    assert "the shipped tuning database" in kernel.tuning["source"]
    assert "tuned/cpu.jsonl" in kernel.tuning["source"]
    from septran.model.profile import _point as profile_point  # septran.profile's "point" column

    assert profile_point(variant.choice).startswith("shipped: ")


def test_a_shipped_record_timed_at_another_thread_count_is_not_used(setup):
    """The key holds no thread count: a point tuned on one thread ran a Llama block's prefill 5 to 10 % slower on
    two, so a shipped record serves only the count it was timed at."""
    import torch

    kernel, key, _, ship = setup
    ship.append(_record(key, _point(kernel, 128), 1e-3, threads=torch.get_num_threads() + 1))
    variant = kernel.specialize(**SHAPES)
    assert dict(variant.choice.point) != _point(kernel, 128)
    assert "shipped" not in kernel.tuning["source"]


def test_the_users_record_wins_over_the_shipped_one(setup):
    kernel, key, user, ship = setup
    ship.append(_record(key, _point(kernel, 128), 1e-6))  # faster, but measured elsewhere (same CPU model)
    user.append(_record(key, _point(kernel, 64), 1e-3))  # measured on this machine
    variant = kernel.specialize(**SHAPES)
    assert dict(variant.choice.point) == _point(kernel, 64)
    assert kernel.tuning["source"].startswith("the tuning database")


def test_the_switch_turns_it_off(setup, monkeypatch):
    kernel, key, _, ship = setup
    ship.append(_record(key, _point(kernel, 128), 1e-3))
    monkeypatch.setenv("SEPTRAN_SHIPPED_TUNING", "0")
    variant = kernel.specialize(**SHAPES)
    assert dict(variant.choice.point) != _point(kernel, 128)
    assert "shipped" not in kernel.tuning["source"]


def test_a_record_of_another_cpu_is_ignored(setup):
    kernel, key, _, ship = setup
    other = dataclasses.replace(key, device={**dict(key.device), "cpu_model": "Some Other CPU [GenuineIntel 6 1]"})
    ship.append(_record(other, _point(kernel, 128), 1e-3))
    variant = kernel.specialize(**SHAPES)
    assert dict(variant.choice.point) != _point(kernel, 128)
    assert "shipped" not in kernel.tuning["source"]


def test_ship_rewrites_this_cpus_keys_and_keeps_other_cpus_and_drops_dead_versions(setup):
    kernel, key, user, ship = setup
    other = dataclasses.replace(key, device={**dict(key.device), "cpu_model": "Some Other CPU"})
    old = dataclasses.replace(key, septran_version="0.0.0-old")
    ship.extend([_record(other, _point(kernel, 32), 2e-3), _record(key, _point(kernel, 128), 1e-3),
                 _record(old, _point(kernel, 128), 1e-3)])
    user.append(_record(key, _point(kernel, 64), 5e-4))  # this run's winner for the key
    described = {n: (s, d) for n, (s, d) in SHAPES.items()}
    report = tune_model.ship([(kernel, described, {})], user, "")
    assert report["path"] == str(shipped.path("cpu"))
    assert (report["written"], report["kept"], report["dropped_stale"], report["devices"]) == (1, 1, 1, 2)
    records = TuningDB(shipped.path("cpu")).all()
    assert sorted((r.key.device == key.device, r.point[BM]) for r in records) == [(False, 32), (True, 64)]
    # shipped again after the mapping's own point won: the key's record goes, the other CPU's stays
    own = tune_model.mapping_point(kernel, kernel.specialization(SHAPES, kernel.scalar_values({})))
    user.append(_record(key, own, 1e-5))
    report = tune_model.ship([(kernel, described, {})], user, "")
    assert (report["written"], report["same"], report["records"]) == (0, 1, 1)


def test_the_repositorys_shipped_files_are_records_and_in_the_wheel():
    tomllib = pytest.importorskip("tomllib")  # (Python 3.11)

    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "tuned/*.jsonl" in data["septran"]
    files = sorted((REPO / "septran" / "tuned").glob("*.jsonl"))
    for file in files:
        lines = [line for line in file.read_text().splitlines() if line.strip()]
        records = TuningDB(file).all()
        assert len(records) == len(lines) and all(r.key.target == file.stem and r.status == "ok" for r in records)


def test_ship_leaves_out_a_point_that_beat_the_mappings_own_by_noise_only(setup):
    kernel, key, user, _ = setup
    own = tune_model.mapping_point(kernel, kernel.specialization(SHAPES, kernel.scalar_values({})))
    final = dict(timing=Timing("wall", 1, 1, True), op="gemm")
    for round_id, own_s in (("r1", 1.01e-3), ("r2", 1.2e-3)):  # the latest round decides: r2, a clear win
        user.extend([TuningRecord(key, _point(kernel, 64), "ok", timings=(1e-3,), features={"final_round": round_id},
                                  **final),
                     TuningRecord(key, own, "ok", timings=(own_s,), features={"final_round": round_id}, **final)])
        report = tune_model.ship([(kernel, dict(SHAPES), {})], user, "")
        assert (report["written"], report["same"]) == ((0, 1) if round_id == "r1" else (1, 0))
