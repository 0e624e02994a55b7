"""One test per mapping error: a clear message at the mapping file's line, before TileLang runs.

Each case under tests/mapping_cases/ is a valid mapping from mappings/ with
one mistake, on the line marked ``# <- error here``. Errors that only show
once shapes are known are reached with ``kernel.specialize``, which generates
code without building it (so GPU targets are checked without a GPU).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import septran
from conftest import GEMM_LOGIC, forbid_tilelang
CASES = Path(__file__).resolve().parent / "mapping_cases"
SHAPES = dict(A=((256, 128), "float16"), B=((128, 256), "float16"))


@pytest.fixture(autouse=True)
def tilelang_never_runs(monkeypatch):
    """Every error here must be raised before SepTran hands anything to TileLang."""
    forbid_tilelang(monkeypatch, "TileLang was invoked for a mapping SepTran should have refused")


def marked_line(path: Path) -> int:
    hits = [i for i, text in enumerate(path.read_text().splitlines(), 1) if text.rstrip().endswith("# <- error here")]
    assert len(hits) == 1, f"{path} must mark exactly one line"
    return hits[0]


def compile_case(name: str):
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=CASES / f"{name}.yaml")
    return kernel.specialize(**SHAPES)


def check(err: septran.SepTranError, name: str, at: str, *phrases: str) -> None:
    """``err`` is at the marked line of mapping_cases/<name>.yaml, its caret under the text ``at``."""
    path = CASES / f"{name}.yaml"
    line = marked_line(path)
    assert err.loc is not None, f"no location:\n{err}"
    assert (err.loc.file, err.loc.line) == (str(path), line), f"reported at {err.loc}, expected line {line}:\n{err}"
    text = str(err)
    assert text.startswith(f"{path}:{line}:{err.loc.col}: {err.stage} error: "), text
    source = path.read_text().splitlines()[line - 1]
    rendered = text.splitlines()
    assert rendered[1] == "    " + source, f"the offending line is not shown:\n{text}"
    assert rendered[2].strip() == "^", f"no caret line:\n{text}"
    col = rendered[2].index("^") - 4
    assert col == err.loc.col - 1 and source[col:].startswith(at), f"the caret is not under {at!r}:\n{text}"
    for phrase in phrases:
        assert phrase in text, f"{phrase!r} not in:\n{text}"


def expect(name: str, error: type, at: str, *phrases: str) -> septran.SepTranError:
    with pytest.raises(error) as info:
        compile_case(name)
    assert type(info.value) is error, f"{type(info.value).__name__}, expected {error.__name__}: {info.value}"
    check(info.value, name, at, *phrases)
    return info.value


# keys and names ----------------------------------------------------------------------------


def test_unknown_key_with_did_you_mean():
    expect("unknown_key", septran.MappingError, "tunabels", "unknown key 'tunabels' in task mapping gemm_host",
           "did you mean 'tunables'?")


def test_duplicate_key():
    err = expect("duplicate_key", septran.MappingError, "pipeline", "key 'pipeline' appears twice")
    assert f"duplicate_key.yaml:{marked_line(CASES / 'duplicate_key.yaml') - 2}:" in str(err)  # the first one


def test_task_name_that_is_not_an_identifier():
    expect("bad_name", septran.MappingError, '"gemm host"', "gemm_host.task_name must be a plain identifier, got 'gemm host'")


def test_mems_key_that_is_not_an_identifier():
    expect("bad_mems_key", septran.MappingError, "A-1", "a key of gemm_block_gpu.mems must be a plain identifier, got 'A-1'")


def test_instance_name_that_is_not_an_identifier():
    expect("bad_instance_name", septran.MappingError, "gemm-block-gpu", "must be a plain identifier, got 'gemm-block-gpu'")


# tasks and instances -----------------------------------------------------------------------


def test_unknown_task():
    expect("unknown_task", septran.MappingError, "gemm_blok_logic", "unknown task 'gemm_blok_logic'",
           "did you mean 'gemm_block_logic'?")


def test_unknown_entry_task():
    expect("unknown_entry_task", septran.MappingError, "gemm_hots_logic", "the logic has no task 'gemm_hots_logic'",
           "did you mean 'gemm_host_logic'?")


def test_unknown_instance_in_calls():
    expect("unknown_instance", septran.MappingError, "gemm_block_gpo",
           "gemm_host.calls maps gemm_block_logic to 'gemm_block_gpo', which is not a task mapping",
           "did you mean 'gemm_block_gpu'?")


def test_unknown_instance_as_entrypoint():
    expect("unknown_entrypoint", septran.MappingError, "gemm_hots", "entrypoint 'gemm_hots' is not a task mapping",
           "did you mean 'gemm_host'?")


def test_instance_never_reached():
    expect("unreached", septran.MappingError, "gemm_block_spare",
           "task mapping gemm_block_spare is never reached from the entrypoint gemm_host")


# memories -------------------------------------------------------------------------------------


def test_memory_the_host_cannot_hold():
    expect("host_shared", septran.MappingError, "SHARED", "gemm_host runs on HOST, which cannot hold A in SHARED",
           "HOST on sm90 holds: GLOBAL")


def test_memory_the_target_does_not_have():
    expect("cpu_shared", septran.MappingError, "SHARED", "gemm_block_cpu runs on BLOCK, which cannot hold A in SHARED",
           "BLOCK on cpu holds: GLOBAL, LOCAL")


def test_leaf_operand_in_the_wrong_memory():
    expect("leaf_wrong_mem", septran.LoweringError, "SHARED", "gemm_leaf_tensorcore takes C in REGISTER",
           "holds C in SHARED")


# tunables -------------------------------------------------------------------------------------


def test_tunable_the_logic_needs():
    err = expect("missing_tunable", septran.LoweringError, "tunables", "the logic uses tunable BK",
                 "but the mapping does not set it", "add `tunables: {BK: <int>}`")
    use = next(i for i, t in enumerate(GEMM_LOGIC.read_text().splitlines(), 1) if '"BK"' in t)
    assert f"{GEMM_LOGIC}:{use}" in str(err), "the message names where the logic uses BK"


def test_tune_makes_a_space_whose_first_point_runs(caplog):
    """A mapping with !tune is a search space; with no tuned point it runs the first, with one warning."""
    mapping = septran.mapping.load_mapping(CASES / "tune.yaml")
    (dim,) = mapping.space.dimensions
    assert (dim.path, dim.choices, dim.loc.line) == ("task_mappings.gemm_host.tunables.BN", (128, 256), 10)
    assert mapping.point == {dim.path: 128} and mapping.instance("gemm_host").tunables["BN"].value == 128
    assert mapping.at({dim.path: 256}).instance("gemm_host").tunables["BN"].loc == dim.loc
    with caplog.at_level("WARNING", logger="septran"):
        kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=CASES / "tune.yaml")
        kernel.specialize(A=((256, 128), "float16"), B=((128, 512), "float16"))
        kernel.specialize(A=((128, 128), "float16"), B=((128, 512), "float16"))
    assert sum("first point" in r.getMessage() for r in caplog.records) == 1
    assert kernel.tuning["point"] == {dim.path: 128} and "first point" in kernel.tuning["source"]


# a mapping is data ----------------------------------------------------------------------------


def test_python_tags_never_run(tmp_path, monkeypatch):
    """A tag that would construct a Python object is refused, and nothing runs."""
    monkeypatch.chdir(tmp_path)  # the case runs `touch PWNED_MARKER` if it is ever executed
    expect("python_tag", septran.MappingError, "!!python/object/apply:os.system",
           "the YAML tag tag:yaml.org,2002:python/object/apply:os.system is not allowed", "only !tune is")
    with pytest.raises(septran.MappingError):
        septran.mapping.load_mapping(CASES / "python_tag.yaml")
    assert not os.path.exists(tmp_path / "PWNED_MARKER")


def test_python_tag_on_a_key():
    """A tagged key is refused as well (not left to PyYAML, whose error has no mapping line)."""
    expect("python_tag_key", septran.MappingError, "!!python/name:os.system",
           "the YAML tag tag:yaml.org,2002:python/name:os.system is not allowed", "plain data")


def test_nested_aliases_are_refused_at_once():
    """Billion laughs: refused at the first alias, in a child process so a regression fails instead of hanging."""
    import subprocess
    import sys

    probe = ("import septran\n"
             f"try: septran.compile(logic_file={str(GEMM_LOGIC)!r}, mapping_file={str(CASES / 'yaml_alias_bomb.yaml')!r})\n"
             "except septran.MappingError as e: print(e.loc.line, e.loc.col, e.message)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    line, col, message = done.stdout.strip().split(" ", 2)
    path = CASES / "yaml_alias_bomb.yaml"
    assert int(line) == marked_line(path), done.stdout + done.stderr
    assert path.read_text().splitlines()[int(line) - 1][int(col) - 1:].startswith("*l0")
    assert "YAML aliases (*l0) are not supported in a mapping" in message
    with pytest.raises(septran.MappingError) as info:  # in process too: now instant
        septran.mapping.load_mapping(path)
    check(info.value, "yaml_alias_bomb", "*l0", "aliases (*l0) are not supported", "write the value out")


# what the target can do (found at specialisation, before TileLang) ----------------------------


def test_shared_memory_overflow_counts_stages():
    err = expect("smem_overflow", septran.LoweringError, "SHARED", "SHARED needs 524288 bytes per program",
                 "A_shared 256x128 float16 x 4 stages", "but sm90 has 232448", "smaller tunables or fewer pipeline stages")
    assert "524288" in str(err)  # (256x128 + 128x256) fp16 x 4 stages


def test_local_memory_overflow_on_cpu_when_called():
    """The same check at a real call on the cpu target: refused before TileLang builds anything."""
    import torch

    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=CASES / "cpu_local_overflow.yaml")
    with pytest.raises(septran.LoweringError) as info:
        kernel(torch.randn(256, 512), torch.randn(512, 256))
    check(info.value, "cpu_local_overflow", "LOCAL", "LOCAL needs 1310720 bytes per program", "but cpu has 1048576")


def test_k_tile_the_matrix_unit_cannot_take():
    expect("bad_mma_tile", septran.LoweringError, "24",
           "gemm_leaf_tensorcore needs dimension 1 of A ('k' of gemm A[m, k]) to be a multiple of 16", "has 24")


def test_m_tile_the_matrix_unit_cannot_take():
    expect("bad_mma_tile_bm", septran.LoweringError, "40",
           "gemm_leaf_tensorcore needs dimension 0 of C ('m' of gemm C[m, n]) to be a multiple of 16", "has 40",
           "multiples of m=16, n=8, k=16")


def test_threads_not_a_multiple_of_the_warpgroup():
    expect("bad_threads", septran.LoweringError, "96", "gemm_block_gpu.threads is 96", "a multiple of 128")


def test_threads_over_the_limit():
    expect("too_many_threads", septran.LoweringError, "2048", "gemm_block_gpu.threads is 2048", "up to 1024")


def test_dsa_scratchpad_overflow():
    expect("dsa_ref_scratch_overflow", septran.LoweringError, "SCRATCH", "SCRATCH needs 327680 bytes",
           "dsa_ref has 262144")


def test_dsa_matrix_unit_tile():
    expect("dsa_acme_bad_mxu_tile", septran.LoweringError, "48",
           "gemm_leaf_mxu needs dimension 1 of C ('n' of gemm C[m, n]) to be a multiple of 32", "has 48")
