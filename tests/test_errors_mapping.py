"""One test per mapping error: the message, and the mapping file and line (before TileLang runs)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import septran
from conftest import GEMM_LOGIC

CASES = Path(__file__).resolve().parent / "mapping_cases"
SHAPES = dict(A=((256, 128), "float16"), B=((128, 256), "float16"))


def marked_line(path: Path) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "# <- error here" in text)


def compile_case(name: str):
    kernel = septran.compile(logic_file=GEMM_LOGIC, mapping_file=CASES / f"{name}.yaml")
    return kernel.specialize(**SHAPES)


def expect(name: str, error=septran.MappingError, *phrases: str):
    path = CASES / f"{name}.yaml"
    with pytest.raises(error) as info:
        compile_case(name)
    err = info.value
    assert err.loc is not None and err.loc.file == str(path), err
    assert err.loc.line == marked_line(path), f"reported at line {err.loc.line}:\n{err}"
    text = str(err)
    assert text.startswith(f"{path}:{err.loc.line}:") and "# <- error here" in text
    for phrase in phrases:
        assert phrase in text, text
    return err


def test_unknown_key_with_did_you_mean():
    expect("unknown_key", septran.MappingError, "unknown key 'tunabels'", "did you mean 'tunables'?")


def test_unknown_task():
    expect("unknown_task", septran.MappingError, "gemm_blok_logic", "did you mean 'gemm_block_logic'?")


def test_unknown_instance():
    expect("unknown_instance", septran.MappingError, "'gemm_block_gpo', which is not a task mapping", "did you mean 'gemm_block_gpu'?")


def test_instance_never_reached():
    expect("unreached", septran.MappingError, "gemm_block_spare is never reached from the entrypoint gemm_host")


def test_memory_the_host_cannot_hold():
    expect("host_shared", septran.MappingError, "HOST, which cannot hold A in SHARED", "HOST on sm90 holds: GLOBAL")


def test_memory_the_target_does_not_have():
    expect("cpu_shared", septran.MappingError, "cannot hold A in SHARED", "BLOCK on cpu holds: GLOBAL, LOCAL")


def test_tunable_the_logic_needs():
    expect("missing_tunable", septran.LoweringError, "uses tunable BK", "does not set it", "examples/gemm/gemm.py:")


def test_name_that_is_not_an_identifier():
    expect("bad_name", septran.MappingError, "must be a plain identifier, got 'gemm host'")


def test_mems_key_that_is_not_an_identifier():
    expect("bad_mems_key", septran.MappingError, "must be a plain identifier, got 'A-1'")


def test_duplicate_key():
    expect("duplicate_key", septran.MappingError, "key 'pipeline' appears twice")


def test_python_tags_never_run(tmp_path, monkeypatch):
    """A mapping is data: a tag that would construct a Python object is refused, and nothing runs."""
    monkeypatch.chdir(tmp_path)
    expect("python_tag", septran.MappingError, "tag:yaml.org,2002:python/object/apply:os.system", "only !tune is")
    assert not os.path.exists(tmp_path / "PWNED_MARKER")


def test_tune_is_parsed_but_not_searched():
    mapping = septran.mapping.load_mapping(CASES / "tune.yaml")
    (inst, key, val), = mapping.search_dimensions
    assert (inst, key, val.value.choices) == ("gemm_host", "BN", (128, 256))
    expect("tune", septran.LoweringError, "search dimension (!tune)", "autotuning is not implemented")


def test_shared_memory_overflow_counts_stages():
    err = expect("smem_overflow", septran.LoweringError, "SHARED needs", "x 4 stages", "but sm90 has 232448")
    assert "524288 bytes" in str(err)  # (256x128 + 128x256) fp16 x 4 stages


def test_tile_the_matrix_unit_cannot_take():
    expect("bad_mma_tile", septran.LoweringError, "gemm_leaf_tensorcore needs dimension 1 of A ('k' of gemm A[m, k]) to be a multiple of 16", "has 24")


def test_threads_not_a_multiple_of_the_warpgroup():
    expect("bad_threads", septran.LoweringError, "threads is 96", "multiple of 128")


def test_threads_over_the_limit():
    expect("too_many_threads", septran.LoweringError, "threads is 2048", "up to 1024")


def test_leaf_operand_in_the_wrong_memory():
    expect("leaf_wrong_mem", septran.LoweringError, "gemm_leaf_tensorcore takes C in REGISTER", "holds C in SHARED")


def test_dsa_scratchpad_overflow():
    expect("dsa_ref_scratch_overflow", septran.LoweringError, "SCRATCH needs 327680 bytes", "dsa_ref has 262144")


def test_dsa_matrix_unit_tile():
    expect("dsa_acme_bad_mxu_tile", septran.LoweringError, "gemm_leaf_mxu needs dimension 1 of C ('n' of gemm C[m, n]) to be a multiple of 32", "has 48")
