"""A cache that heals (issue 9): every cached artifact, truncated or filled with garbage, is rebuilt on the next call.

Each artifact is damaged on disk between two fresh processes (in one process,
in-memory caches would hide the damage): SepTran's generated TileLang source,
the kernel SepTran builds from C (the cpu target), the vendor C library of a
DSA, and each file of TileLang's cache entry (a DSA's kernels are TileLang's)
(``device_kernel.cu``, ``host_kernel.cu``, ``kernel_lib.so``, ``params.json``,
``manifest.json``). The next process must compute the right result, log one
warning naming the damaged entry, and leave the artifact whole again.
Concurrent processes sharing one cache must all get right results.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from septran.build import integrity, store, tl_cache

pytestmark = pytest.mark.build  # child processes build into a shared cache

CHILD = Path(__file__).resolve().parent / "support" / "cache_child.py"

# One job per artifact, so that the rebuild of one never repairs another by accident.
ARTIFACTS = {
    "cpu:33,17,29": "source",
    "cpu:34,17,29": "c_lib",
    "dsa_ref:33,48,40": "device_kernel.cu",
    "dsa_ref:34,48,40": "host_kernel.cu",
    "dsa_ref:35,48,40": "kernel_lib.so",
    "dsa_ref:36,48,40": "params.json",
    "dsa_ref:37,48,40": "manifest.json",
    "dsa_ref:32,48,40": "vendor",
}
FILES = ("source", "vendor", "c_lib")  # artifacts that are one file of their own (the others: files of an entry)


def _env(cache: Path) -> dict:
    env = dict(os.environ, SEPTRAN_CACHE_DIR=str(cache / "septran"), TILELANG_CACHE_DIR=str(cache / "tilelang"))
    for name in ("SEPTRAN_TARGET", "SEPTRAN_MAPPING", "SEPTRAN_MAPPING_PATH", "SEPTRAN_DUMP_DIR", "TILELANG_DISABLE_CACHE"):
        env.pop(name, None)
    return env


def _run(cache: Path, jobs, timeout: float = 240) -> tuple[dict, str]:
    done = subprocess.run([sys.executable, str(CHILD), *jobs], env=_env(cache), capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"the child process failed ({done.returncode}):\n{done.stderr[-4000:]}"
    results = {r["job"]: r for r in _results(done.stdout)}
    assert set(results) == set(jobs)
    return results, done.stdout + done.stderr  # TileLang logs to stdout


def _results(stdout: str) -> list[dict]:
    return [json.loads(line.removeprefix("RESULT ")) for line in stdout.splitlines() if line.startswith("RESULT ")]


def _path(result: dict, artifact: str) -> Path:
    if artifact in FILES:
        return Path(result[artifact])
    return Path(result["entry"]) / artifact


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garbage(path: Path) -> None:
    """Random bytes, not UTF-8, of the same size: TileLang checks only the size of its source files."""
    size = path.stat().st_size
    path.write_bytes(b"\xff" + random.Random(size).randbytes(size - 1))


def _intact(result: dict, artifact: str) -> bool:
    path = _path(result, artifact)
    if artifact in ("source", "c_lib"):  # build stages: each bound to its key by its sidecar
        return store.problem(path) is None
    if artifact == "vendor":
        return integrity.problem(path) is None
    return tl_cache.problem(path.parent) is None and path.exists()


def _warnings(logs: str) -> list[str]:
    """Warnings of the cache (a shipped mapping's search space running its first point is not one)."""
    return [line for line in logs.splitlines() if "WARNING" in line and "a search space of" not in line]


def test_every_cached_artifact_heals(tmp_path):
    jobs = list(ARTIFACTS)
    first, logs = _run(tmp_path, jobs)
    assert all(r["ok"] for r in first.values()), first
    assert not _warnings(logs), logs
    entries = [r["entry"] for r in first.values() if r["entry"]]
    assert len(set(entries)) == len(entries) == sum(j.startswith("dsa_ref") for j in jobs)  # one TileLang entry per job
    for damage in (_truncate, _garbage):
        for job, artifact in ARTIFACTS.items():
            damage(_path(first[job], artifact))
        again, logs = _run(tmp_path, jobs)
        for job, artifact in ARTIFACTS.items():
            r = again[job]
            where = f"{artifact} {damage.__name__}"
            assert r["ok"], f"{where}: wrong result after the damage (max error {r['err']})"
            assert _intact(r, artifact), f"{where}: not rebuilt"
            named = str(_path(r, artifact).parent if artifact not in FILES else _path(r, artifact))
            warnings = [line for line in logs.splitlines() if named in line and "WARNING" in line]
            assert len(warnings) == 1, f"{where}: expected one warning naming {named}, got:\n{logs}"
        assert {r["entry"] for r in again.values()} == {r["entry"] for r in first.values()}


def test_concurrent_processes_share_one_cache(tmp_path):
    """Three processes (more than this machine's two cores) compile the same kernel (a DSA's, with its vendor
    library) and one of their own, at once."""
    env = _env(tmp_path)
    procs = [subprocess.Popen([sys.executable, str(CHILD), "dsa_ref:48,32,40", f"cpu:{60 + i},20,30"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-4000:]
        results = _results(out)
        assert len(results) == 2 and all(r["ok"] for r in results), results
        assert not _warnings(out + err), out + err  # nobody saw a half-written artifact
