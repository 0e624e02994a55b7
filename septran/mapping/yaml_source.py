"""Reading YAML as data that remembers where each value was written.

The file is composed with PyYAML's safe loader (so a mapping can never
construct Python objects or run code) and turned into ``LocatedDict`` /
lists / scalars, each carrying its ``file:line:col``. ``!tune [..]`` becomes a
``Tune``: a search dimension, the one tag a mapping may use.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import yaml

from septran.errors import MappingError, SourceLoc
from septran.mapping.tune_spellings import expand

# Bounds on what a mapping file may hold: any byte sequence becomes a mapping or a located error.
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32  # nesting of mappings and lists (a real mapping needs 5)
MAX_SCALAR_CHARS = 256  # a name, a number: also bounds integers (Python refuses more than 4300 digits)


@dataclass(frozen=True)
class Tune:
    """``!tune [64, 128]``: the values an autotuner may choose from."""

    choices: tuple


@dataclass(frozen=True, repr=False)
class Located:
    value: Any
    loc: SourceLoc

    def __repr__(self) -> str:  # as the YAML said it: error messages show values with !r
        return repr(self.value)


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

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in self._items.items()) + "}"


class _Checked:
    """The checks every node passes while it is composed, whichever parser reads the text."""

    file = "<mapping>"
    depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        # Nested aliases expand exponentially ("billion laughs"): a small file could hang the compiler.
        if isinstance(event, yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, f"YAML aliases (*{event.anchor}) are not supported in a mapping; "
                                              "write the value out", event.start_mark)
        loc = SourceLoc(self.file, event.start_mark.line + 1, event.start_mark.column + 1)
        tag = getattr(event, "tag", None)
        if tag not in (None, "!", "!tune"):  # every explicit tag but !tune: !!int abc, !!map 3, !!python/...
            tag = tag if tag.startswith("!") or ":" in tag else "!" + tag
            on_key = isinstance(parent, yaml.MappingNode) and index is None
            raise MappingError(f"the YAML tag {tag} is not allowed " + ("on a mapping key" if on_key else "in a mapping"),
                               loc, hint="a mapping is plain data; a key is a plain name" if on_key
                               else "a mapping is plain data; only !tune is")
        if isinstance(event, yaml.ScalarEvent) and len(event.value) > MAX_SCALAR_CHARS:
            raise MappingError(f"a value of {len(event.value)} characters; a mapping's values are names and numbers "
                               f"of at most {MAX_SCALAR_CHARS}", loc)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise MappingError(f"values nested more than {MAX_DEPTH} levels deep", loc,
                                   hint="a mapping nests a few levels: task_mappings, an instance, its tables")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


class _Loader(_Checked, yaml.SafeLoader):
    """PyYAML in Python: the reference reader, whose errors SepTran reports."""


if yaml.__with_libyaml__:
    from yaml._yaml import CParser

    class _FastLoader(_Checked, yaml.composer.Composer, CParser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
        """libyaml's scanner and parser under PyYAML's composer, so the checks above still see every node: ten
        times faster on a target.yaml (4 ms against 40), which a warm process reads before it runs anything."""

        def __init__(self, text: str):
            CParser.__init__(self, text)
            yaml.composer.Composer.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
else:  # PyYAML built without libyaml
    _FastLoader = None


# Plain data: what untagged YAML resolves to. Anything else (Python objects,
# binary, timestamps, sets) is refused before it is constructed.
_PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")}


def _loc(file: str, node: yaml.Node) -> SourceLoc:
    return SourceLoc(file, node.start_mark.line + 1, node.start_mark.column + 1)


def _convert(file: str, loader: _Loader, node: yaml.Node) -> Located:
    loc = _loc(file, node)
    if node.tag == "!tune":
        if isinstance(node, yaml.MappingNode):  # !tune {type: range, min: 16, max: 256, step: 16}
            node.tag = "tag:yaml.org,2002:map"
            choices = expand(_convert(file, loader, node).value, loc)
        elif isinstance(node, yaml.SequenceNode) and node.value:
            choices = tuple(_convert(file, loader, n).value for n in node.value)
        else:
            raise MappingError("!tune takes a non-empty list of values, e.g. !tune [64, 128], "
                               "or {type: choice|range|pow2, ...}", loc)
        for c in choices:
            if not isinstance(c, (str, int, float, bool)):
                raise MappingError(f"!tune chooses among plain values (numbers, names), got {c!r}", loc)
        if len(set(choices)) != len(choices):
            raise MappingError(f"!tune lists a value twice: {list(choices)}", loc)
        return Located(Tune(tuple(choices)), loc)
    if node.tag not in _PLAIN_TAGS:  # an implicit one: a timestamp (2001-12-14), say
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
            key = _construct(file, loader, key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                shown = repr(key_node.value) if isinstance(key_node, yaml.ScalarNode) else f"a {key_node.id}"
                raise MappingError(f"a mapping key must be a name, got {shown}", _loc(file, key_node))
            key = str(key)
            if key in items:
                raise MappingError(f"key {key!r} appears twice (first at {key_locs[key]})", _loc(file, key_node))
            key_locs[key] = _loc(file, key_node)
            items[key] = _convert(file, loader, value_node)
        return Located(LocatedDict(items, key_locs, loc), loc)
    if isinstance(node, yaml.SequenceNode):
        return Located([_convert(file, loader, n) for n in node.value], loc)
    return Located(_construct(file, loader, node), loc)


def _construct(file: str, loader: _Loader, node: yaml.ScalarNode):
    """A plain scalar's value; what PyYAML cannot make of it (an integer too long, say) is a located error."""
    try:
        value = loader.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, KeyError, TypeError, OverflowError) as err:
        raise MappingError(f"cannot read the value {node.value[:40]!r}: {getattr(err, 'problem', None) or err}",
                           _loc(file, node)) from None
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, (str, int, float, bool, type(None))):
        raise MappingError(f"the value {node.value[:40]!r} is not plain data (a {type(value).__name__})", _loc(file, node))
    return value


def _line_of(text: str, position: int) -> tuple[int, int]:
    before = text[:position]
    return before.count("\n") + 1, position - (before.rfind("\n") + 1) + 1


def read_mapping_text(path: Path) -> str:
    """The text of a mapping file: UTF-8 (a BOM is allowed), at most MAX_FILE_BYTES."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise MappingError(f"cannot read mapping file {path}: {err.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise MappingError(f"the file is larger than {MAX_FILE_BYTES} bytes; a mapping is a few hundred",
                           SourceLoc(str(path), 1))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        before = data[:err.start].decode("utf-8", "replace")
        line, col = _line_of(before, len(before))
        raise MappingError(f"the file is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start})",
                           SourceLoc(str(path), line, col), hint="save it as UTF-8") from None


def load_located(text: str, file: str) -> Located:
    """Parses ``text`` (the contents of ``file``) into located values."""
    if not isinstance(text, str):
        raise MappingError(f"a mapping is text, got {type(text).__name__}", SourceLoc(file, 1))
    try:
        loader = _Loader(text)  # PyYAML's reader checks every character here
    except yaml.reader.ReaderError as err:
        line, col = _line_of(text, err.position)
        char = chr(err.character) if isinstance(err.character, int) else err.character
        raise MappingError(f"not valid YAML: the character {char!r} is not allowed in a YAML file",
                           SourceLoc(file, line, col), hint="remove control characters") from None
    loader.file = file
    node = _fast_node(text, file)
    try:
        node = node or loader.get_single_node()
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        loc = SourceLoc(file, mark.line + 1, mark.column + 1) if mark else SourceLoc(file, 1)
        raise MappingError(f"not valid YAML: {getattr(err, 'problem', None) or err}", loc) from None
    finally:
        loader.dispose()
    if node is None:
        raise MappingError("the file is empty", SourceLoc(file, 1))
    return _convert(file, _Loader(""), node)


def _fast_node(text: str, file: str):
    """The document's node through libyaml, or None: then PyYAML's reader composes it again and reports any error
    as it always has (libyaml words its errors and counts columns its own way)."""
    if _FastLoader is None or "\t" in text:
        # Tabs: libyaml takes some that PyYAML's scanner refuses ("a: \t", a tab after the value), and the
        # reference reader's verdict is the one reported (a random draw of the test below found it).
        return None
    fast = _FastLoader(text)
    fast.file = file
    try:
        return fast.get_single_node()
    except Exception:  # noqa: BLE001 - every failure is reported by the reference reader
        return None
    finally:
        fast.dispose()
