"""The mapping loader turns any byte sequence into a mapping or a MappingError with the file and line.

One test per kind of input that used to escape as a raw exception (issue 9):
undecodable bytes, control characters, deep nesting, tags, huge numbers, names
that are keywords, values beyond the target's limits.
"""
from __future__ import annotations

import pytest

import septran
from septran.mapping import load_mapping
from conftest import GEMM_LOGIC, first_point_text, mapping_path

BASE = first_point_text("cpu").encode()
TUNABLE_LINE = BASE.decode().splitlines().index("    tunables: {BM: 256, BN: 256, BK: 512}") + 1


def load(tmp_path, data: bytes):
    path = tmp_path / "gemm.yaml"
    path.write_bytes(data)
    with pytest.raises(septran.MappingError) as info:
        load_mapping(path)
    err = info.value
    assert err.loc is not None and err.loc.file == str(path), f"no location in the file:\n{err}"
    return err


def test_utf16_file_is_not_utf8_at_line_1(tmp_path):
    err = load(tmp_path, BASE.decode().encode("utf-16"))
    assert err.loc.line == 1 and "not UTF-8" in str(err)


def test_latin1_byte_is_located_at_its_line(tmp_path):
    err = load(tmp_path, BASE.replace(b"BM: 256", b"B\xe9: 256"))
    assert err.loc.line == TUNABLE_LINE and "not UTF-8" in str(err)


@pytest.mark.parametrize("char", [b"\x1b", b"\x00", b"\x07"])
def test_control_character_is_located(tmp_path, char):
    err = load(tmp_path, BASE.replace(b"BM: 256", b"BM" + char + b": 256"))
    assert err.loc.line == TUNABLE_LINE and "not allowed in a YAML file" in str(err)


@pytest.mark.parametrize("opening, closing", [(b"[", b"]"), (b"{a: ", b"}")])
def test_deep_nesting_is_refused(tmp_path, opening, closing):
    err = load(tmp_path, b"target: " + opening * 1000 + b"1" + closing * 1000)
    assert err.loc.line == 1 and "nested more than 32 levels" in str(err)


@pytest.mark.parametrize("value", ["!!int abc", "!!float abc", "!!map 3", "!!seq 3", "!!bool x", "!!str 3",
                                   "!!binary aGk=", "!!python/name:os.system", "!custom 3", "2001-12-14"])
def test_tags_are_refused_at_their_line(tmp_path, value):
    err = load(tmp_path, BASE.replace(b"BM: 256", f"BM: {value}".encode()))
    assert err.loc.line == TUNABLE_LINE and "tag" in str(err)


def test_integer_of_5000_digits_is_refused(tmp_path):
    err = load(tmp_path, BASE.replace(b"BM: 256", b"BM: " + b"9" * 5000))
    assert err.loc.line == TUNABLE_LINE and "characters" in str(err)


def test_long_string_is_refused(tmp_path):
    err = load(tmp_path, BASE.replace(b"gemm_host_logic", b"g" * 300))
    assert "at most 256" in str(err)


@pytest.mark.parametrize("value", ["2147483647", "2147483648", "1000000000000000000000000000000", "0", "-4", "1.5", ".inf"])
def test_tunable_out_of_range_is_refused(tmp_path, value):
    err = load(tmp_path, BASE.replace(b"BM: 256", f"BM: {value}".encode()))
    assert err.loc.line == TUNABLE_LINE and "tunable BM must be an integer from 1 to 2147483646" in str(err)


@pytest.mark.parametrize("name", ["None", "import", "lambda", "print", "float", "__import__", "match"])
def test_tunable_named_like_python_is_refused(tmp_path, name):
    err = load(tmp_path, BASE.replace(b"BM: 256", f"{name}: 256".encode()))
    assert err.loc.line == TUNABLE_LINE and "rename it" in str(err)


def test_name_with_a_trailing_newline_is_refused(tmp_path):
    """The old check used `$`, which matches before a trailing newline."""
    err = load(tmp_path, BASE.replace(b"entrypoint: gemm_host", b'entrypoint: "gemm_host\\n"'))
    assert "plain identifier" in str(err)


def test_pipeline_stages_are_bounded(tmp_path):
    text = first_point_text("sm90").encode().replace(b"pipeline: 3", b"pipeline: 1000")
    err = load(tmp_path, text)
    assert "pipeline must be an integer from 0 to 8" in str(err)


def test_threads_beyond_the_target_are_refused_at_their_line(tmp_path):
    path = tmp_path / "gemm.yaml"
    path.write_bytes(first_point_text("sm90").encode().replace(b"threads: 256", b"threads: 4294967296"))
    with pytest.raises(septran.MappingError) as info:
        septran.compile(logic_file=GEMM_LOGIC, mapping_file=path)
    assert info.value.loc.file == str(path) and "threads must be an integer" in str(info.value)


def test_file_over_a_mebibyte_is_refused(tmp_path):
    err = load(tmp_path, BASE + b"#" * (1 << 20))
    assert err.loc.line == 1 and "larger than" in str(err)
