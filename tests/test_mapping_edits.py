"""Typed edits of a frozen Mapping (with_dynamic, without_binding): new mappings whose values keep their YAML
lines, every schema check run again, a search space edited as a whole."""
from __future__ import annotations

import pytest

from conftest import REPO
from septran.errors import MappingError, SourceLoc
from septran.mapping import load_mapping, parse_mapping

EPILOGUE = REPO / "mappings" / "cpu" / "gemm_epilogue.yaml"


def _axes(table) -> dict:
    return {p: [a.value for a in axes] for p, axes in table.items()}


def test_with_dynamic_is_a_new_mapping_located_at_its_caller():
    m = load_mapping(EPILOGUE)
    d = m.with_dynamic({"A": [0]})
    assert _axes(d.dynamic) == {"A": [0]} and not m.dynamic  # the original is untouched
    assert d.dynamic["A"][0].loc.file == __file__ and d.dynamic_loc.file == __file__
    assert d.instance("epi_host").tunables["BM"].loc == m.instance("epi_host").tunables["BM"].loc  # YAML lines kept
    assert d.space.size == m.space.size and _axes(d.at(dict(list(d.space.points())[5])).dynamic) == {"A": [0]}
    assert _axes(d.with_dynamic({"A": [0, 1]}).dynamic) == {"A": [0, 1]}  # merged, an axis named once


def test_with_dynamic_keeps_the_files_own_axes_where_written():
    m = load_mapping(REPO / "mappings" / "cpu" / "attention.yaml")
    text = (REPO / "mappings" / "cpu" / "attention.yaml").read_text() + "dynamic: {Q: [2]}\n"
    own = parse_mapping(text, "attention_dyn.yaml").with_dynamic({"Q": [2], "K": [2]})
    assert _axes(own.dynamic) == {"Q": [2], "K": [2]}
    assert own.dynamic["Q"][0].loc.file == "attention_dyn.yaml" and own.dynamic["K"][0].loc.file == __file__
    assert not m.dynamic


def test_with_dynamic_errors_are_located():
    with pytest.raises(MappingError) as info:
        load_mapping(EPILOGUE).with_dynamic({"A": ["rows"]}, loc=SourceLoc("model.py", 7))
    assert "an axis of dynamic.A" in info.value.message and info.value.loc == SourceLoc("model.py", 7)


def test_static_axes_stay_numbers():
    m = load_mapping(REPO / "mappings" / "sm80" / "bmm.yaml")
    assert _axes(m.static) == {"A": [2]}
    assert _axes(m.with_dynamic({"A": [0, 1, 2], "B": [2]}).dynamic) == {"A": [0, 1], "B": [2]}
    text = (REPO / "mappings" / "sm80" / "bmm.yaml").read_text() + "dynamic: {A: [2]}\n"
    with pytest.raises(MappingError, match="static.A keeps a number") as info:
        parse_mapping(text, "bmm.yaml")
    assert info.value.loc.line == len(text.splitlines())


def test_without_binding_drops_one_binding_and_keeps_the_rest_located():
    m = load_mapping(EPILOGUE)
    e = m.without_binding("epi_act_leaf")
    block, before = e.instance("epi_block_cpu"), m.instance("epi_block_cpu")
    assert "epi_act_leaf" not in block.leaf_task_bindings and "epi_act_leaf" in before.leaf_task_bindings
    assert block.leaf_task_bindings["epi_bias_leaf"].loc == before.leaf_task_bindings["epi_bias_leaf"].loc
    assert e.space.size == m.space.size  # the space edited as a whole: its points keep the edit
    assert "epi_act_leaf" not in e.at(dict(list(e.space.points())[-1])).instance("epi_block_cpu").leaf_task_bindings


def test_without_binding_of_an_unbound_leaf_is_a_located_error():
    with pytest.raises(MappingError) as info:
        load_mapping(EPILOGUE).without_binding("epi_act_leaf").without_binding("epi_act_leaf")
    assert info.value.loc.file == __file__ and "epi_bias_leaf" in info.value.hint
    with pytest.raises(MappingError, match="no task mapping 'nope'"):
        load_mapping(EPILOGUE).without_binding("epi_act_leaf", instance="nope")
