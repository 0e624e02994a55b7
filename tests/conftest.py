"""Shared fixtures: repository paths, golden files, markers for optional hardware/tools, the quick tier's guard."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path

import pytest

from support import build_guard

# The tuning database that ships with SepTran (septran/tuned/) is read only on the CPU model that made it: off here,
# and in every child process, so that the suite's kernels and the lowering records do not depend on CI's machine.
os.environ["SEPTRAN_SHIPPED_TUNING"] = "0"

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).resolve().parent / "golden"
GEMM_LOGIC = REPO / "septran" / "ops" / "logic" / "gemm.py"  # the kernel library's; examples/gemm imports it


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent without xdist (-p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with the longest files first (support/schedule.py); other modes as xdist has them."""
    if config.getvalue("dist") != "loadfile":
        return None
    from support.schedule import LongestFileFirst

    return LongestFileFirst(config, log)


def pytest_configure(config):
    """TileLang's device source from the records where SepTran's source is unchanged (each process, each xdist
    worker): support/lowering_records.py."""
    from support import lowering_records

    problem = None if hasattr(config, "workerinput") else lowering_records.warm_cache_problem()  # before any build
    if problem:
        raise pytest.UsageError(problem)
    lowering_records.install()


# The records' hits and misses, summed over the workers and shown at the end: misses are kernels TileLang lowered
# because SepTran's source changed since the records were made (time, not results: re-make them).
_RECORD_COUNTS = {"hits": 0, "misses": 0}


def pytest_sessionfinish(session):
    from support import lowering_records

    out = getattr(session.config, "workeroutput", None)  # an xdist worker: hand the counts to the controller
    if out is not None:
        out["lowering_records"] = dict(lowering_records.stats)
    else:
        for k, v in lowering_records.stats.items():
            _RECORD_COUNTS[k] += v


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook, on the controller
def pytest_testnodedown(node, error):
    for k, v in getattr(node, "workeroutput", {}).get("lowering_records", {}).items():
        _RECORD_COUNTS[k] += v


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    hits, misses = _RECORD_COUNTS["hits"], _RECORD_COUNTS["misses"]
    if hits or misses:
        terminalreporter.write_line(
            f"lowering records: {hits} kernels read, {misses} lowered by TileLang"
            + (" (their source changed since the records were made: SEPTRAN_TEST_LOWERING=record make test with an "
               "empty SEPTRAN_CACHE_DIR, then python tests/support/lowering_records.py pack; --prune would also drop the "
               "records of the other CPU family's programs)" if misses else ""))


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files from the current output")


# The quick tier's guard (support/build_guard.py): from setup to teardown of a test that no marker takes out of
# `make quick`, every build entry point refuses. Hooks, not a fixture, so a module fixture that builds is seen too.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    if build_guard.in_quick_tier(item):
        item.stash[_GUARD] = build_guard.Guard(item.nodeid)
    return _checked(item, (yield from _phase(item)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return _checked(item, (yield from _phase(item)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        result = yield from _phase(item)
    finally:
        guard = item.stash.get(_GUARD, None)
        if guard is not None:
            guard.undo()
    return _checked(item, result)


_GUARD = pytest.StashKey()


def _phase(item):
    """The phase's result; where it raised, the guard's error (if any) has been reported by it."""
    try:
        return (yield)
    except BaseException:
        guard = item.stash.get(_GUARD, None)
        if guard is not None and guard.calls:
            guard.reported = True
        raise


def _checked(item, result):
    guard = item.stash.get(_GUARD, None)
    if guard is not None:
        guard.check()  # the guard's error was swallowed by the code under test: fail the test anyway
    return result


GOLDEN_THREADS = 3  # more than any shipped shape_points entry's `threads` bound: goldens show the mapping's own point


@pytest.fixture
def cpu_maker(monkeypatch):
    """``cpu_maker("GenuineIntel")``: this process's CPU reads as made by that vendor for the test (the mappings'
    ``shape_points: cpu_vendor`` entries, e.g. an Intel CPU's float32 GEMMs on MKL)."""
    from septran.records import device

    def made_by(vendor: str) -> None:
        monkeypatch.setattr(device, "host_vendor", lambda: vendor)

    return made_by


@pytest.fixture
def cpu_flags(monkeypatch):
    """``cpu_flags({"avx2", "avx512_bf16"})``: this process's CPU reads as reporting exactly those flags for the test
    (the mappings' ``shape_points: cpu_flags`` entries, and the units' leaves, refused where a flag is missing)."""
    from septran.records import device

    def reports(flags=()) -> None:
        monkeypatch.setattr(device, "host_flags", lambda: frozenset(flags))

    return reports


@pytest.fixture
def golden(request, cpu_maker, cpu_flags):
    """``golden("name.py", text)``: compares text with tests/golden/name.py (or rewrites it with --update-golden).
    The test runs on GOLDEN_THREADS threads (torch's count, restored after) and as on an AMD CPU that reports none
    of the flags a shape point asks for (a test may set some: ``cpu_flags``), so that its programs, whose point may
    depend on the count, the CPU's maker and its flags (``shape_points: threads, cpu_vendor, cpu_flags``), do not
    depend on the machine."""
    import torch

    cpu_maker("AuthenticAMD")
    cpu_flags()
    before = torch.get_num_threads()
    torch.set_num_threads(GOLDEN_THREADS)
    request.addfinalizer(lambda: torch.set_num_threads(before))

    def check(name: str, text: str) -> None:
        path = GOLDEN / name
        if request.config.getoption("--update-golden") or not path.exists():
            if not request.config.getoption("--update-golden"):
                pytest.fail(f"golden file {path} is missing; run pytest --update-golden to create it")
            path.write_text(text)
            return
        assert text == path.read_text(), f"output differs from {path}; if the change is intended, run pytest --update-golden"

    return check


def assert_gemm_close(out, a, b) -> None:
    """FlashAttention's rule: SepTran's error is at most twice torch's own in the input dtype (ref in float64)."""
    ref = a.double() @ b.double()
    torch_err = ((a.float() @ b.float()).to(a.dtype).double() - ref).abs().max().item()
    err = (out.double() - ref).abs().max().item()
    assert err <= 2 * torch_err + 1e-5, f"max |C - ref| = {err:.3e}, torch's = {torch_err:.3e}"


def first_point_text(target: str, op: str = "gemm") -> str:
    """mappings/<target>/<op>.yaml as the plain mapping of its search space's first point (each ``!tune [a, ...]``
    written as ``a``, and no ``shape_points``, which name the space's points): what tests edit, so that they do not
    depend on the shipped spaces."""
    text = re.sub(r"^shape_points:\n(?:[ -].*\n?)*", "", mapping_path(target, op).read_text(), flags=re.M)
    return re.sub(r"!tune \[([^,\]]+)(?:, [^\]]*)?\]", r"\1", text)


def edited_mapping(tmp_path: Path, target: str, op: str, *edits: tuple[str, str]) -> Path:
    """mappings/<target>/<op>.yaml (its first point) with each ``(old, new)`` replaced (``old`` must be there),
    written under tmp_path."""
    text = first_point_text(target, op)
    for old, new in edits:
        assert old in text, f"{old!r} is not in mappings/{target}/{op}.yaml"
        text = text.replace(old, new)
    path = tmp_path / f"{op}.yaml"
    path.write_text(text)
    return path


# Leaves a single-leaf test logic binds in place of softmax's three (which also drops softmax's temps).
SOFTMAX_WITHOUT_TEMPS = (", m: LOCAL, m_prev: LOCAL, l: LOCAL, S: LOCAL", "")


def load_module(path: Path):
    """A Python file (an example's logic, a run script, a benchmark) as a module, without importing it by name."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_flash_rule(out, ref, torch_out, what: str = "") -> None:
    """The issue's rule for every operator (FlashAttention's): max |out - ref| <= 2 x max |torch - ref| + 1e-5,
    with ``ref`` computed in float32 from the same inputs and ``torch_out`` torch's result in the input dtype.
    NaN must appear exactly where the reference has it (rows that see nothing)."""
    ref = ref.float()
    nan = ref.isnan()
    assert bool((out.float().isnan() == nan).all()), f"{what}: NaN where the reference has none (or the reverse)"
    err = (out.float() - ref)[~nan].abs().max().item() if bool((~nan).any()) else 0.0
    torch_err = (torch_out.float() - ref)[~nan].abs().max().item() if bool((~nan).any()) else 0.0
    assert err <= 2 * torch_err + 1e-5, f"{what}: max |out - ref| = {err:.3e}, torch's = {torch_err:.3e}"


def forbid_tilelang(monkeypatch, what: str) -> None:
    """Makes any hand-over to TileLang fail the test: the error under test must come first."""

    def refuse(*args, **kwargs):
        raise AssertionError(what)

    from septran.build import tilelang_api as build

    for name in ("load_prim_func", "compile_kernel", "lower_device_source"):
        monkeypatch.setattr(build, name, refuse)


def swap_entries(a: Path, b: Path) -> None:
    """Two build-cache entries exchanged, each with its sidecar (what a cache that must never run the wrong one
    is tested with)."""
    from septran.build.store import sidecar

    for x, y in ((a, b), (sidecar(a), sidecar(b))):
        tmp = x.with_name("swap")
        x.rename(tmp)
        y.rename(x)
        tmp.rename(y)


def mapping_path(target: str, op: str = "gemm") -> Path:
    if (target, op) == ("cpu", "softmax_online"):  # the online algorithm's cpu mapping (the shipped one is exp-once)
        return REPO / "tests" / "mapping_cases" / "softmax_online_cpu.yaml"
    return REPO / "mappings" / target / f"{op}.yaml"


def has_nvcc() -> bool:
    return shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()


def has_cuda_gpu() -> bool:
    import torch

    return torch.cuda.is_available() and torch.version.hip is None


def needs_nvcc(test):
    """Runs where nvcc is installed; marked ``nvcc`` (out of ``make quick``)."""
    return pytest.mark.nvcc(pytest.mark.skipif(not has_nvcc(), reason="nvcc is not installed")(test))


def needs_gpu(test):
    """Runs where torch sees an NVIDIA GPU; marked ``gpu`` (what ``make gpu`` selects)."""
    return pytest.mark.gpu(pytest.mark.skipif(not has_cuda_gpu(), reason="no NVIDIA GPU")(test))
