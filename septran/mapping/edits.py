"""Typed edits of a located mapping file: what ``Mapping.with_dynamic`` and ``Mapping.without_binding`` do.

An edit takes the located tree a mapping was parsed from (``!tune`` values still in place where the mapping
has a search space) and returns a new tree; the caller parses it again, so every check of the schema runs on
the edited mapping too. Nodes the edit keeps keep their ``file:line:col``: an error about them still points at
the YAML line. Nodes an edit adds are located at ``loc``, the Python line that asked for the edit.
"""
from __future__ import annotations

from typing import Mapping as TMapping, Optional, Sequence

from septran.errors import MappingError, SourceLoc
from septran.mapping.yaml_source import Located, LocatedDict


def add_dynamic(root: Located, axes: TMapping[str, Sequence[int]], loc: SourceLoc) -> Located:
    """``root`` with ``dynamic:`` holding ``axes`` too (param -> axes): an axis already named stays as written, an
    axis the file's ``static:`` names is left out (the mapping's author keeps it a number on this target)."""
    top = _top(root)
    if not isinstance(axes, TMapping) or not axes:
        raise MappingError(f"with_dynamic takes {{parameter: [axis, ...]}}, got {axes!r}", loc,
                           hint='e.g. mapping.with_dynamic({"X": [0]})')
    old = top.get("dynamic")
    table = old.value if old is not None and isinstance(old.value, LocatedDict) else None
    if old is not None and table is None:  # the file's own `dynamic:` is malformed: the parse reports it there
        return root
    items = dict(table.items()) if table is not None else {}
    key_locs = dict(table.key_locs) if table is not None else {}
    for param, new in axes.items():
        if isinstance(new, (str, bytes)) or not isinstance(new, Sequence):
            raise MappingError(f"with_dynamic: the axes of {param!r} must be a list of integers, got {new!r}", loc)
        have = items.get(param)
        listed = list(have.value) if have is not None and isinstance(have.value, list) else []
        known = {a.value for a in listed} | _static_axes(top, param)
        listed += [Located(a, loc) for a in new if a not in known]
        if not listed:  # every axis asked for is static
            continue
        items[param] = Located(listed, have.loc if have is not None else loc)
        key_locs.setdefault(param, loc)
    table_loc = table.loc if table is not None else loc
    return _with_top_key(root, "dynamic", Located(LocatedDict(items, key_locs, table_loc), table_loc),
                         old.loc if old is not None else loc)


def set_target(root: Located, name: str, loc: SourceLoc) -> Located:
    """``root`` with ``target: name`` (for a file that names no target; one that names another is refused before)."""
    _top(root)
    return _with_top_key(root, "target", Located(name, loc), loc)


def drop_binding(root: Located, leaf: str, loc: SourceLoc, instance: Optional[str] = None) -> Located:
    """``root`` with the ``leaf_task_bindings`` entry of logic task ``leaf`` removed from every instance that binds
    it (or from ``instance`` only): for a logic variant that never launches that leaf task."""
    top = _top(root)
    table_val = top.get("task_mappings")
    table = table_val.value if table_val is not None else None
    if not isinstance(table, LocatedDict):  # no task_mappings: the parse reports it
        return root
    if instance is not None and instance not in table:
        raise MappingError(f"without_binding: the mapping has no task mapping {instance!r}", loc,
                           hint="task mappings: " + ", ".join(name for name, _ in table.items()))
    found, bound, items = False, [], {}
    for name, val in table.items():
        inst = val.value
        bindings = inst.get("leaf_task_bindings") if isinstance(inst, LocatedDict) else None
        if bindings is None or not isinstance(bindings.value, LocatedDict) or instance not in (None, name):
            items[name] = val
            continue
        bound += [k for k, _ in bindings.value.items()]
        if leaf not in bindings.value:
            items[name] = val
            continue
        found = True
        kept = {k: v for k, v in bindings.value.items() if k != leaf}
        locs = {k: v for k, v in bindings.value.key_locs.items() if k != leaf}
        new_bindings = Located(LocatedDict(kept, locs, bindings.value.loc), bindings.loc)
        inst_items = {k: (new_bindings if k == "leaf_task_bindings" else v) for k, v in inst.items()}
        items[name] = Located(LocatedDict(inst_items, dict(inst.key_locs), inst.loc), val.loc)
    if not found:
        raise MappingError(f"without_binding: no task mapping binds the leaf task {leaf!r}", loc,
                           hint="bound leaf tasks: " + (", ".join(sorted(set(bound))) or "none"))
    new_table = Located(LocatedDict(items, dict(table.key_locs), table.loc), table_val.loc)
    return _with_top_key(root, "task_mappings", new_table, top.key_locs["task_mappings"])


def _static_axes(top: LocatedDict, param: str) -> set:
    """The axes of ``param`` the file's ``static:`` keeps numbers (malformed entries: the parse reports them)."""
    table = top.get("static")
    axes = table.value.get(param) if table is not None and isinstance(table.value, LocatedDict) else None
    if axes is None or not isinstance(axes.value, list):
        return set()
    return {a.value for a in axes.value if isinstance(a.value, int)}


def _top(root: Optional[Located]) -> LocatedDict:
    if root is None or not isinstance(root.value, LocatedDict):
        raise MappingError("this mapping was not parsed from a file, so it cannot be edited", None)
    return root.value


def _with_top_key(root: Located, key: str, value: Located, key_loc: SourceLoc) -> Located:
    top = root.value
    items = dict(top.items())
    items[key] = value
    key_locs = dict(top.key_locs)
    key_locs[key] = key_loc
    return Located(LocatedDict(items, key_locs, top.loc), root.loc)
