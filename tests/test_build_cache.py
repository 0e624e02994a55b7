"""The build cache (septran/build/): keyed before TileLang runs, entries bound to their key, a moved cache still hits.

Each check runs fresh processes (tests/support/cache_child.py), as a warm
cache is what a second process finds: in one process the in-memory caches
would answer first.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

import septran
from conftest import GEMM_LOGIC, mapping_path, swap_entries
from septran.build import build_many, c_builder, shared_lib, store
from septran.errors import BuildError

CHILD = Path(__file__).resolve().parent / "support" / "cache_child.py"
GEMM = "cpu:96,64,80"  # the 96x80 GEMM (K = 64) of examples/gemm on the cpu target
OTHER = "cpu:96,64,81"
NEW = "cpu:96,64,82"  # in no cache the tests copy: a build
# The warm path from a kernel's first call to its result: lowering, the key, loading the library, the run.
WARM_CALL_BUDGET_S = 0.05

pytestmark = pytest.mark.build  # every test here builds (or finds built) kernels


def _run(cache: Path, *jobs: str) -> tuple[dict, str]:
    env = dict(os.environ, SEPTRAN_CACHE_DIR=str(cache / "septran"), TILELANG_CACHE_DIR=str(cache / "tilelang"))
    for name in ("SEPTRAN_TARGET", "SEPTRAN_MAPPING", "SEPTRAN_MAPPING_PATH", "SEPTRAN_DUMP_DIR", "CXX", "CC"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, str(CHILD), *jobs], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"the child process failed ({done.returncode}):\n{done.stderr[-4000:]}"
    results = {r["job"]: r for r in (json.loads(line.removeprefix("RESULT ")) for line in done.stdout.splitlines()
                                     if line.startswith("RESULT "))}
    assert set(results) == set(jobs)
    return results, done.stdout + done.stderr


def _warnings(logs: str) -> list[str]:
    return [line for line in logs.splitlines() if "WARNING" in line and "a search space of" not in line]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A cache where a cold process built GEMM and OTHER (the vendor library and the precompiled header too):
    each test works on its own copy, so that only the first pays for a cold build."""
    cache = tmp_path_factory.mktemp("built")
    cold, _ = _run(cache, GEMM, OTHER)
    assert cold[GEMM]["ok"] and cold[OTHER]["ok"] and cold[OTHER]["compilers"] >= 1
    return cache


def _copy(built: Path, to: Path) -> Path:
    """A copy of the built cache at ``to``: a cache in another folder than the one it was built in."""
    shutil.copytree(built, to, symlinks=True)
    return to


def test_a_warm_process_runs_the_gemm_without_tilelang(built, tmp_path):
    _copy(built, tmp_path / "c")
    tmp_path = tmp_path / "c"
    warm = []
    for _ in range(3):
        results, logs = _run(tmp_path, GEMM)
        r = results[GEMM]
        assert r["ok"], r
        assert r["compilers"] == 0, "a warm cache runs no compiler"
        assert r["tilelang"] is False, "a warm process must not import TileLang"
        assert not _warnings(logs), logs
        warm.append(r)
    call = statistics.median(r["call_seconds"] for r in warm)
    assert call <= WARM_CALL_BUDGET_S, (f"first call on a warm cache: median {call * 1e3:.1f} ms; whole "
                                        f"septran.compile -> result: {[round(r['seconds'] * 1e3, 1) for r in warm]} ms")


def test_a_moved_cache_still_hits(built, tmp_path):
    _copy(built, tmp_path / "a")  # built in another folder, copied: moved once already
    os.rename(tmp_path / "a", tmp_path / "b")  # the old folder is gone: nothing may point into it
    moved, logs = _run(tmp_path / "b", GEMM)
    r = moved[GEMM]
    assert r["ok"] and r["compilers"] == 0 and r["tilelang"] is False, r
    assert not _warnings(logs), logs
    assert Path(r["c_lib"]).parent.parent == tmp_path / "b" / "septran"


def test_swapped_entries_are_rebuilt_not_run(built, tmp_path):
    tmp_path = _copy(built, tmp_path / "c")
    first, _ = _run(tmp_path, GEMM, OTHER)
    libs = [Path(first[j]["c_lib"]) for j in (GEMM, OTHER)]
    assert libs[0] != libs[1]
    swap_entries(*libs)  # each library and its sidecar swapped with the other's
    again, logs = _run(tmp_path, GEMM, OTHER)
    for job, lib in zip((GEMM, OTHER), libs):
        assert again[job]["ok"], again[job]  # a swapped library run would compute the other GEMM's shape
        named = [line for line in _warnings(logs) if str(lib) in line]
        assert len(named) == 1 and "another key" in named[0], logs
        assert store.problem(lib) is None
    assert again[OTHER]["compilers"] == 2, "both rebuilt (by g++ from the cached C)\n" + logs
    assert again[OTHER]["tilelang"] is False, "the C stage was cached: no TileLang for the rebuild"


@pytest.mark.parametrize("where", ["entry", "sidecar"])
def test_a_directory_where_an_entry_should_be_is_rebuilt(built, tmp_path, where):
    tmp_path = _copy(built, tmp_path / "c")
    first, _ = _run(tmp_path, GEMM)
    lib = Path(first[GEMM]["c_lib"])
    path = lib if where == "entry" else lib.with_name(lib.name + store.SIDECAR)
    path.unlink()
    (path / "inside").mkdir(parents=True)
    again, logs = _run(tmp_path, GEMM)
    assert again[GEMM]["ok"] and again[GEMM]["compilers"] == 1
    assert len([line for line in _warnings(logs) if str(lib) in line]) == 1, logs
    assert store.problem(lib) is None


def test_a_foreign_file_is_rebuilt_with_a_warning(tmp_path, caplog):
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu"))
    variant = kernel.specialize(A=((40, 24), "float32"), B=((24, 8), "float32"))
    job = variant.job
    path = job.path("c")
    job.entries.folder.mkdir(parents=True, exist_ok=True)
    for p in (path, store.sidecar(path)):
        p.unlink(missing_ok=True)
    path.write_text("int not_from_septran;\n")  # no sidecar: not SepTran's
    with caplog.at_level(logging.WARNING, logger="septran.build.store"):
        c = variant.device_source
    assert "not_from_septran" not in c and "gemm_host_kernel" in c
    assert any(str(path) in r.getMessage() and "no sidecar" in r.getMessage() for r in caplog.records)
    assert store.problem(path) is None


def test_a_failed_compile_is_a_build_error_with_the_compilers_message():
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu"))
    variant = kernel.specialize(A=((40, 24), "float32"), B=((24, 8), "float32"))
    job = variant.job
    bad = job.device_source() + "\nint broken( { this is not C\n"
    with pytest.raises(BuildError, match="this is not C|error"):
        c_builder.build(job.program, bad, job.target, job.entries)
    assert not list(job.entries.folder.glob(f".{job.entries.path('so').name}.*")), "no temporary file left behind"


def test_a_failed_link_is_a_build_error_not_a_missing_file(tmp_path, monkeypatch):
    """The linker removes its output when it fails; the cleanup must not turn that into FileNotFoundError."""
    monkeypatch.setenv("SEPTRAN_CACHE_DIR", str(tmp_path))
    with pytest.raises(BuildError, match="undefined|no_such_function"):
        shared_lib.built("vendor", "libbroken", "0" * 16,
                         lambda out, src: ["gcc", "-shared", "-fPIC", "-Wl,-z,defs", src, "-o", out],
                         "a library that calls nothing defined",
                         source=(".c", "int no_such_function(void);\nint f(void) { return no_such_function(); }\n"))
    assert not list((tmp_path / "vendor").glob("*")), "no temporary file left behind"


def test_a_missing_compiler_is_a_build_error():
    with pytest.raises(BuildError, match="septran-no-such-compiler"):
        shared_lib.run_compiler(["septran-no-such-compiler", "-v"], "nothing")


def test_the_key_does_not_depend_on_the_cache_folder(tmp_path, monkeypatch):
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu"))
    keys = set()
    for sub in ("x", "y"):
        monkeypatch.setenv("SEPTRAN_CACHE_DIR", str(tmp_path / sub))
        variant = kernel.specialize(A=((40, 24), "float32"), B=((24, 8), "float32"))
        variant._job = None
        keys.add(variant.job.key)
        record = json.loads(store.sidecar(variant.source_path).read_text())
        assert str(tmp_path) not in json.dumps(record)
    assert len(keys) == 1


def test_build_many_builds_in_parallel(tmp_path, monkeypatch):
    monkeypatch.setenv("SEPTRAN_CACHE_DIR", str(tmp_path))
    import torch

    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=mapping_path("cpu"))
    variants = [kernel.specialize(A=((40 + k, 24), "float32"), B=((24, 8), "float32")) for k in range(3)]
    built = build_many(variants, jobs=3)
    assert len(built) == 3 and len({str(b.path) for b in built}) == 3
    for k, fn in enumerate(built):
        a, b = torch.randn(40 + k, 24), torch.randn(24, 8)
        c = torch.empty(40 + k, 8)
        fn(a, b, c)
        torch.testing.assert_close(c, a @ b)


_DEVICE_CHILD = """
import json, sys
import septran
kernel = septran.compile(logic_file=sys.argv[1], mapping_file=sys.argv[2])
source = kernel.specialize(A=((256, 128), "float16"), B=((128, 256), "float16")).device_source
print("RESULT " + json.dumps({"tilelang": "tilelang" in sys.modules, "source": source}))
"""


def test_a_warm_process_shows_gpu_device_source_without_tilelang(tmp_path):
    """The tilelang builder's device-source stage is cached under the key: kernel.device_source needs no TileLang."""
    env = dict(os.environ, SEPTRAN_CACHE_DIR=str(tmp_path / "septran"), TILELANG_CACHE_DIR=str(tmp_path / "tilelang"))
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", _DEVICE_CHILD, str(GEMM_LOGIC), str(mapping_path("sm90"))], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-4000:]
        runs.append(json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:]))
    cold, warm = runs
    assert cold["tilelang"] and not warm["tilelang"]
    assert warm["source"] == cold["source"] and "__global__" in warm["source"]


def test_a_damaged_precompiled_header_costs_time_not_correctness(built, tmp_path):
    """The kernels' precompiled header (septran/build/precompiled.py) is made once; garbage in its .gch still
    gives right kernels (g++ reads the header's text, or the build is retried without it and it is made anew)."""
    tmp_path = _copy(built, tmp_path / "c")
    gchs = list((tmp_path / "septran" / "pch").glob("*/septran_pch.h.gch"))
    assert len(gchs) == 1
    gchs[0].write_bytes(b"gpch" + b"\0garbage" * 1000)
    results, _ = _run(tmp_path, NEW)  # a new kernel: g++ runs with the damaged header
    assert results[NEW]["ok"] and results[NEW]["compilers"] >= 1, results[NEW]
