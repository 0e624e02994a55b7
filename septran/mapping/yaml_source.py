"""Reading YAML as data that remembers where each value was written.

The file is composed with PyYAML's safe loader (so a mapping can never
construct Python objects or run code) and turned into ``LocatedDict`` /
lists / scalars, each carrying its ``file:line:col``. ``!tune [..]`` becomes a
``Tune``: a search dimension, the one tag a mapping may use.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import yaml

from septran.errors import MappingError, SourceLoc


@dataclass(frozen=True)
class Tune:
    """``!tune [64, 128]``: the values an autotuner may choose from."""

    choices: tuple


@dataclass(frozen=True)
class Located:
    value: Any
    loc: SourceLoc


class LocatedDict:
    """A YAML mapping: keys to ``Located`` values, with each key's location."""

    def __init__(self, items: dict[str, Located], key_locs: dict[str, SourceLoc], loc: SourceLoc):
        self._items = items
        self.key_locs = key_locs
        self.loc = loc

    def __contains__(self, key) -> bool:
        return key in self._items

    def __getitem__(self, key) -> Located:
        return self._items[key]

    def get(self, key, default=None):
        return self._items.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def items(self):
        return self._items.items()

    def __len__(self) -> int:
        return len(self._items)


class _Loader(yaml.SafeLoader):
    def compose_node(self, parent, index):
        # Nested aliases expand exponentially ("billion laughs"): a small file could hang the compiler.
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, f"YAML aliases (*{event.anchor}) are not supported in a mapping; "
                                              "write the value out", event.start_mark)
        return super().compose_node(parent, index)


# Plain data: what untagged YAML resolves to. Anything else (Python objects,
# binary, timestamps, sets) is refused before it is constructed.
_PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")}


def _loc(file: str, node: yaml.Node) -> SourceLoc:
    return SourceLoc(file, node.start_mark.line + 1, node.start_mark.column + 1)


def _convert(file: str, loader: _Loader, node: yaml.Node) -> Located:
    loc = _loc(file, node)
    if node.tag == "!tune":
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            raise MappingError("!tune takes a non-empty list of values, e.g. !tune [64, 128]", loc)
        return Located(Tune(tuple(_convert(file, loader, n).value for n in node.value)), loc)
    if node.tag not in _PLAIN_TAGS:
        raise MappingError(f"the YAML tag {node.tag} is not allowed in a mapping", loc, hint="a mapping is plain data; only !tune is")
    if isinstance(node, yaml.MappingNode):
        items: dict[str, Located] = {}
        key_locs: dict[str, SourceLoc] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise MappingError("YAML merge keys (<<) are not supported in a mapping", _loc(file, key_node))
            if key_node.tag not in _PLAIN_TAGS:  # refused before PyYAML constructs (or fails on) it
                raise MappingError(f"the YAML tag {key_node.tag} is not allowed on a mapping key", _loc(file, key_node),
                                   hint="a mapping is plain data; a key is a plain name")
            key = loader.construct_object(key_node, deep=True) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise MappingError(f"a mapping key must be a name, got {key_node.value!r}", _loc(file, key_node))
            key = str(key)
            if key in items:
                raise MappingError(f"key {key!r} appears twice (first at {key_locs[key]})", _loc(file, key_node))
            key_locs[key] = _loc(file, key_node)
            items[key] = _convert(file, loader, value_node)
        return Located(LocatedDict(items, key_locs, loc), loc)
    if isinstance(node, yaml.SequenceNode):
        return Located([_convert(file, loader, n) for n in node.value], loc)
    return Located(loader.construct_object(node, deep=True), loc)


def load_located(text: str, file: str) -> Located:
    """Parses ``text`` (the contents of ``file``) into located values."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        loc = SourceLoc(file, mark.line + 1, mark.column + 1) if mark else SourceLoc(file, 1)
        raise MappingError(f"not valid YAML: {getattr(err, 'problem', err)}", loc) from None
    finally:
        loader.dispose()
    if node is None:
        raise MappingError("the file is empty", SourceLoc(file, 1))
    return _convert(file, _Loader(""), node)
