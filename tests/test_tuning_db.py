"""The tuning database: whole-key lookups, every trial kept, safe concurrent appends, damaged lines tolerated."""
from __future__ import annotations

import csv
import importlib.metadata
import io
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import pytest

import septran
from septran.cli import main as septran_main
from septran.records import Timing, TuningDB, TuningKey, TuningRecord, device_identity, device_string
from septran.tuning.cli_db import short_point

from conftest import REPO

GPU_A = {"gpu_name": "NVIDIA H100 80GB HBM3", "capability": "9.0", "sm_count": 132, "memory_bytes": 85520809984, "runtime": "cuda 12.8"}
BM = "task_mappings.gemm_host.tunables.BM"


def make_key(**changes) -> TuningKey:
    fields = dict(
        logic_hash="1" * 64, space_hash="2" * 64, target="sm90", device=GPU_A,
        dtypes={"A": "float16", "B": "float16", "C": "float16"},
        shapes={"A": (256, 128), "B": (128, 64), "C": (256, 64)}, scalars={"alpha": 1.0},
    )
    fields.update(changes)
    return TuningKey(**fields)


def ok(key: TuningKey, bm: int, *timings: float, **extra) -> TuningRecord:
    return TuningRecord(key=key, point={BM: bm}, status="ok", timings=timings, timing=Timing("cuda_events", 3, len(timings)), op="gemm", **extra)


@pytest.fixture
def db(tmp_path) -> TuningDB:
    return TuningDB(tmp_path / "tuning.jsonl")


def test_round_trip_keeps_every_trial_and_field(db):
    key = make_key()
    written = [
        ok(key, 64, 3e-3, 1e-3, 2e-3, features={"flops": 2.5e9, "waves": 1}),
        TuningRecord(key=key, point={BM: 512}, status="pruned", rule="shared memory: 264 KB > 227 KB"),
        TuningRecord(key=key, point={BM: 32}, status="compile_error", rule="x" * 5000),
        TuningRecord(key=key, point={BM: 16}, status="timeout", timings=(0.5,)),
    ]
    for record in written:
        db.append(record)
    read = TuningDB(db.path).records(key)
    assert read == written
    assert read[0].median_s == 2e-3 and read[0].timings == (3e-3, 1e-3, 2e-3)
    assert read[0].timing == Timing("cuda_events", 3, 3) and read[0].features["waves"] == 1
    assert len(read[2].rule) == 2000
    assert {r.host for r in read} == {os.uname().nodename} and read[0].created.endswith("+00:00")
    lines = db.path.read_bytes().splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["key"] == key.digest()


def test_key_versions_and_digest_are_canonical():
    key = make_key()
    assert key.septran_version == septran.__version__
    assert key.tilelang_version == importlib.metadata.version("tilelang")
    same = make_key(device=dict(reversed(GPU_A.items())), shapes={"C": [256, 64], "B": [128, 64], "A": [256, 128]}, scalars={"alpha": 1})
    assert same == key and same.digest() == key.digest()
    assert TuningKey.from_json(json.loads(json.dumps(key.to_json()))) == key
    pinned = make_key(septran_version="0.1.0", tilelang_version="0.1.15")
    assert pinned.digest() == "c9dbe940689366a4da931d95027c983a85ce2b973283aab72e9ea5b4e2b4ead2"  # the canonical form is a format


@pytest.mark.parametrize("change", [
    {"logic_hash": "3" * 64},
    {"space_hash": "4" * 64},
    {"target": "sm80"},
    {"device": dict(GPU_A, gpu_name="NVIDIA H200", memory_bytes=150754820096)},
    {"device": dict(GPU_A, sm_count=114)},
    {"dtypes": {"A": "float32", "B": "float16", "C": "float16"}},
    {"shapes": {"A": (256, 128), "B": (128, 65), "C": (256, 65)}},
    {"scalars": {"alpha": 1.0000000000000002}},
    {"scalars": {"alpha": float("nan")}},
    {"scalars": {}},
    {"septran_version": "0.2.0"},
    {"tilelang_version": "0.1.16"},
], ids=lambda c: next(iter(c)))
def test_a_record_is_reused_only_for_the_whole_key(db, change):
    key = make_key()
    db.append(ok(key, 64, 1e-3))
    other = make_key(**change)
    assert other.digest() != key.digest()
    assert db.records(other) == [] and db.best(other) is None
    assert db.best(key) is not None


def test_nan_and_infinite_scalars_have_one_spelling():
    for value in (float("nan"), float("inf"), float("-inf"), -0.0):
        key = make_key(scalars={"alpha": value})
        assert TuningKey.from_json(json.loads(json.dumps(key.to_json()))) == key
    assert make_key(scalars={"alpha": float("nan")}) == make_key(scalars={"alpha": -float("nan")})


def test_best_is_the_lowest_median_of_ok_trials_earliest_first(db):
    key = make_key()
    assert db.best(key) is None
    db.append(TuningRecord(key=key, point={BM: 256}, status="pruned", rule="threads"))
    assert db.best(key) is None
    db.extend([ok(key, 64, 2e-3), ok(key, 128, 1e-3, 9e-3, 1e-3), ok(key, 32, 1e-3)])
    db.extend([ok(key, 16, 0.5e-3), TuningRecord(key=key, point={BM: 16}, status="wrong", rule="max |err| 3.1")])
    best = db.best(key)
    assert best.point == {BM: 128} and best.median_s == 1e-3  # the earlier of two 1 ms points; 0.5 ms was wrong


def test_an_extended_space_finds_the_points_already_measured(db):
    small, large = make_key(space_hash="a" * 64), make_key(space_hash="b" * 64)
    db.extend([ok(small, 64, 1e-3), ok(small, 128, 2e-3), ok(make_key(shapes={"A": (1, 1)}), 64, 1e-3)])
    db.append(ok(large, 256, 3e-3))
    found = db.records_by_point(large)
    assert sorted(r[0].point[BM] for r in found.values()) == [64, 128, 256]
    assert all(pid == rs[0].point_id for pid, rs in found.items())
    assert db.records(large) == [ok(large, 256, 3e-3, created=db.records(large)[0].created)]
    assert db.best(large).point == {BM: 256}


def test_damaged_lines_are_skipped_with_one_warning(db, caplog):
    key = make_key()
    good = ok(key, 64, 1e-3)
    other = ok(key, 128, 2e-3).to_line()
    db.path.write_bytes(
        good.to_line() + b"not json\n" + b"[1, 2]\n" + b'{"schema": 99}\n' + b"\xff\xfe\n\n"
        + json.dumps(dict(json.loads(other), status="melted")).encode() + b"\n" + other[:40]
    )
    with caplog.at_level(logging.WARNING, logger="septran.records"):
        assert TuningDB(db.path).records(key) == [good]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "skipped 6 line(s)" in warnings[0].getMessage() and "unfinished" in warnings[0].getMessage()
    db.append(ok(key, 32, 3e-3))  # the writer starts a fresh line after the unfinished one
    assert [r.point[BM] for r in TuningDB(db.path).records(key)] == [64, 32]


def test_a_lookup_parses_only_its_own_keys_lines(db, monkeypatch, caplog):
    """A record's line is indexed by the key digest it starts with and parsed when that key is asked for: a warm
    process's first kernel call parsed every record (0.4 ms each) before. A damaged line of another key is
    reported when that key is read; one whose written digest lies is found under its real key only."""
    from septran.records import db as db_module

    keys = [make_key(shapes={"A": (n, 128), "B": (128, 64), "C": (n, 64)}) for n in (16, 32, 48)]
    for key in keys:
        for bm in (64, 128):
            db.append(ok(key, bm, bm * 1e-5))
    honest = ok(keys[2], 256, 9e-3).to_line()
    liar = honest.replace(keys[2].digest().encode(), keys[1].digest().encode(), 1)
    broken = ok(keys[0], 8, 1e-3).to_line()[:-30] + b"}\n"
    with open(db.path, "ab") as f:
        f.write(liar + broken)
    parsed = []
    real = db_module._record_of
    monkeypatch.setattr(db_module, "_record_of", lambda line: parsed.append(line) or real(line))
    reader = TuningDB(db.path)
    assert not reader.empty() and not parsed
    assert [r.point[BM] for r in reader.records(keys[1])] == [64, 128] and len(parsed) == 3  # its two, and the liar
    assert [r.point[BM] for r in reader.records(keys[2])] == [64, 128, 256]  # the liar, under its real key
    with caplog.at_level(logging.WARNING, logger="septran.records"):
        assert [r.point[BM] for r in reader.records(keys[0])] == [64, 128]
    assert any("skipped 1 line(s)" in r.getMessage() for r in caplog.records)
    assert [r.point[BM] for r in reader.all()] == [64, 128] * 3 + [256]  # the order written


def test_a_reader_sees_what_other_writers_append(db):
    key = make_key()
    db.append(ok(key, 64, 1e-3))
    assert len(db.records(key)) == 1
    TuningDB(db.path).append(ok(key, 128, 2e-3))
    assert [r.point[BM] for r in db.records(key)] == [64, 128]


def test_the_default_reader_is_kept_while_its_file_is_unchanged(monkeypatch, tmp_path):
    """A kernel's first call asks default_db(): the same parsed reader while the file is as it was; an append, or a
    rewrite in place of the same size, gives a fresh one that sees it."""
    import time

    from septran.records.db import default_db

    path = tmp_path / "tuning.jsonl"
    monkeypatch.setenv("SEPTRAN_TUNING_DB", str(path))
    key = make_key()
    assert default_db().empty()  # no file yet
    TuningDB(path).append(ok(key, 64, 1e-3))
    first = default_db()
    assert [r.point[BM] for r in first.records(key)] == [64] and default_db() is first
    TuningDB(path).append(ok(key, 128, 2e-3))
    assert [r.point[BM] for r in default_db().records(key)] == [64, 128]
    time.sleep(0.01)  # a rewrite in place, same inode and size, other content: its modification time tells
    path.write_bytes(path.read_bytes().replace(b'"ok"', b'"no"', 1))  # the first record's status: unknown
    assert len(default_db().records(key)) == 1  # the damaged first line is skipped now


def _append_many(path: str, worker: int) -> None:
    store = TuningDB(path)
    key = make_key()
    for i in range(50):  # lines of ~9 KB: larger than PIPE_BUF, so only the lock keeps them whole
        store.append(ok(key, i, 1e-3 * (i + 1), features={"worker": worker, "pad": "x" * 9000}))


def test_concurrent_processes_append_whole_lines(db):
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_append_many, args=(str(db.path), w)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    lines = db.path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 201
    parsed = [json.loads(line) for line in lines[:-1]]
    assert sorted((p["features"]["worker"], p["point"][BM]) for p in parsed) == [(w, i) for w in range(4) for i in range(50)]
    assert len(db.all()) == 200


def test_the_default_file_is_in_the_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("SEPTRAN_TUNING_DB", raising=False)
    monkeypatch.setenv("SEPTRAN_CACHE_DIR", str(tmp_path / "cache"))
    assert TuningDB().path == tmp_path / "cache" / "tuning.jsonl"
    monkeypatch.setenv("SEPTRAN_TUNING_DB", str(tmp_path / "elsewhere.jsonl"))
    assert TuningDB().path == tmp_path / "elsewhere.jsonl"
    monkeypatch.setenv("SEPTRAN_TUNING_DB", "bad\nname")
    with pytest.raises(septran.SepTranError, match="SEPTRAN_TUNING_DB"):
        TuningDB()


def test_records_check_themselves():
    key = make_key()
    with pytest.raises(ValueError, match="status"):
        TuningRecord(key=key, point={BM: 64}, status="fast")
    with pytest.raises(ValueError, match="rule"):
        TuningRecord(key=key, point={BM: 64}, status="pruned")
    with pytest.raises(ValueError, match="timings"):
        TuningRecord(key=key, point={BM: 64}, status="ok")
    with pytest.raises(ValueError, match="timings"):
        ok(key, 64, float("nan"))
    with pytest.raises(ValueError, match="method"):
        Timing("sundial", 1, 1)
    with pytest.raises(ValueError, match="shapes"):
        make_key(shapes={"A": (-2,)})  # -1 is "any size" (a dynamic dimension)
    assert ok(key, 64, 1e-3).point_id == ok(key, 64, 5e-3).point_id != ok(key, 65, 1e-3).point_id


def test_this_machine_has_a_stable_identity():
    identity = device_identity("cpu")
    assert identity["cpu_count"] == os.cpu_count() and identity["cpu_model"]
    assert device_string(identity) == device_string(device_identity("cpu"))
    assert all(f in identity["cpu_flags"].split() or f not in open("/proc/cpuinfo").read().split() for f in ("avx2", "avx512f"))


def _fill(path) -> TuningKey:
    store = TuningDB(path)
    key = make_key()
    store.extend([ok(key, 64, 2e-3), ok(key, 128, 1e-3), TuningRecord(key=key, point={BM: 512}, status="pruned", rule="smem")])
    store.append(ok(make_key(target="sm80", device=dict(GPU_A, gpu_name="NVIDIA A100")), 64, 4e-3))
    return key


def test_cli_lists_one_row_per_key(tmp_path):
    path = tmp_path / "t.jsonl"
    key = _fill(path)
    before = path.read_bytes()
    out = subprocess.run([sys.executable, "-m", "septran.cli", "db", "--db", str(path), "list", "--json"],
                         cwd=REPO, check=True, capture_output=True, text=True).stdout
    rows = json.loads(out)
    assert [(r["target"], r["trials"]) for r in rows] == [("sm80", 1), ("sm90", 3)]
    sm90 = rows[1]
    assert sm90["key"] == key.digest() and sm90["best"] == {BM: 128} and sm90["best_s"] == 1e-3
    assert sm90["statuses"] == {"ok": 2, "pruned": 1} and sm90["shapes"]["A"] == [256, 128]
    assert path.read_bytes() == before


def test_cli_table_and_export(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    _fill(path)
    assert septran_main(["db", "--db", str(path), "list", "--target", "sm90"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:4] == ["op", "logic", "target", "device"] and len(table) == 2
    assert "BM=128" in table[1] and "1.000 ms" in table[1] and "3 (2 ok)" in table[1] and "A=256x128" in table[1]
    assert septran_main(["db", "--db", str(path), "export", str(tmp_path / "out.jsonl")]) == 0
    assert (tmp_path / "out.jsonl").read_bytes() == path.read_bytes()
    assert septran_main(["db", "--db", str(path), "export", str(tmp_path / "out.csv"), "--format", "csv", "--target", "sm90"]) == 0
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out.csv").read_text())))
    assert [json.loads(r["point"])[BM] for r in rows] == [64, 128, 512] and rows[2]["status"] == "pruned"
    assert septran_main(["db", "--db", str(path), "export", str(path)]) == 2
    assert "is the tuning database itself" in capsys.readouterr().err
    assert septran_main(["db", "--db", str(tmp_path / "none.jsonl"), "list"]) == 0
    assert "no tuning records" in capsys.readouterr().out


def test_short_point_keeps_paths_only_where_names_clash():
    assert short_point({"a.tunables.BM": 64, "a.pipeline": 3}) == "pipeline=3 BM=64"
    assert short_point({"a.BM": 64, "b.BM": 32}) == "a.BM=64 b.BM=32"


def test_console_script_is_declared():
    assert 'septran = "septran.cli:main"' in (REPO / "pyproject.toml").read_text()


def test_a_gpu_identity_tells_an_h100_from_an_h200(monkeypatch):
    """Without a GPU here, torch's device properties are faked; the identity must differ in SMs and memory."""
    import types

    import torch

    from septran.records import device as device_module

    def identity_of(name: str, sms: int, memory: int) -> dict:
        props = types.SimpleNamespace(name=name, major=9, minor=0, multi_processor_count=sms, total_memory=memory)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
        device_module._gpu_identity.cache_clear()
        try:
            return device_identity("cuda")
        finally:
            device_module._gpu_identity.cache_clear()

    h100 = identity_of("NVIDIA H100 80GB HBM3", 132, 85520809984)
    h200 = identity_of("NVIDIA H200", 132, 150754820096)
    assert h100["capability"] == h200["capability"] == "9.0" and h100["sm_count"] == 132
    assert make_key(device=h100) != make_key(device=h200)


@pytest.mark.gpu
def test_this_gpu_has_an_identity():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    identity = device_identity("cuda")
    assert identity["gpu_name"] and identity["sm_count"] > 0 and identity["memory_bytes"] > 0
