"""The two YAML readers (libyaml's fast one, PyYAML's reference one) compose the same nodes at the same places.

A warm process reads a target.yaml and a mapping before it runs anything, so the fast reader composes every
document; the reference reader composes it only when the fast one fails, and reports the error. Nothing may
depend on which one read a file: every shipped YAML and a sample of drawn documents compose alike.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from septran.errors import MappingError
from septran.mapping import yaml_source

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted([*REPO.glob("backends/*/target.yaml"), *REPO.glob("mappings/**/*.yaml"),
                  *REPO.glob("tests/mapping_cases/*.yaml"), *REPO.glob("septran/**/*.yaml")])

pytestmark = pytest.mark.skipif(yaml_source._FastLoader is None, reason="PyYAML without libyaml")


def _tree(node):
    """A node as plain data: tag, place, and its value (children in order)."""
    place = (node.start_mark.line, node.start_mark.column)
    if isinstance(node, yaml.MappingNode):
        return (node.tag, place, [(_tree(k), _tree(v)) for k, v in node.value])
    if isinstance(node, yaml.SequenceNode):
        return (node.tag, place, [_tree(n) for n in node.value])
    return (node.tag, place, node.value, node.style or None)  # libyaml says "" for plain, PyYAML None


def _compose(loader_type, text: str):
    loader = loader_type(text)
    try:
        node = loader.get_single_node()
    finally:
        loader.dispose()
    return None if node is None else _tree(node)


def _outcome(loader_type, text: str):
    try:
        return _compose(loader_type, text)
    except (yaml.YAMLError, MappingError):
        return "error"


def _check_alike(text: str) -> None:
    """Where the reference reader composes a document, the fast one composes the same nodes; where the reference
    reader fails, load_located reports its located error, whatever the fast one did."""
    slow = _outcome(yaml_source._Loader, text)
    if slow == "error":
        with pytest.raises(MappingError):
            yaml_source.load_located(text, "drawn.yaml")
    else:
        assert _outcome(yaml_source._FastLoader, text) == slow, text


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_shipped_yaml_composes_alike(path):
    _check_alike(path.read_text(encoding="utf-8"))


_SCALARS = st.sampled_from(["64", "-3", "1e-5", "0x1F", "true", "null", "~", "BM", "'q'", '"x y"', "é", "[1, 2]",
                            "{a: 1}", "!tune [16, 32]", "2001-12-14", "- 1", "*a", "&a 3", "<<: {b: 1}", "\t", "::"])


@settings(max_examples=150, deadline=None, derandomize=True)
@example([("a", 0, "\t")])  # "a: \t": libyaml composes it, PyYAML refuses it (found by a run of random draws)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "k k", "é", "1"]), st.integers(0, 3), _SCALARS), max_size=8))
def test_drawn_documents_compose_alike_or_fail_alike(lines):
    _check_alike("\n".join(f"{'  ' * depth}{key}: {value}" for key, depth, value in lines) + "\n")
