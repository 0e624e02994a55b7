"""``shape_points`` entries that can never act: refused at their line.

A call takes each dimension from the first entry it meets that sets it (``point_of``), and stops at the first entry
without ``continue``. So an entry is dead where earlier entries hold for every call it holds for and set every
dimension it sets (their ``continue`` lets the call reach it, but its values never stand), or where an earlier
entry without ``continue`` holds for every such call (no call reaches it). The cpu RMSNorm mapping shipped one:
``{when: {X: [null, 2048]}, dtypes: {X: bfloat16}, ..., point: {...BM: 2}}`` below an entry for every bfloat16 X
that set BM to 8, so no row ran blocks of 2.

"Holds for every call it holds for" is judged on the conditions as written: each of the earlier entry's bounds
is met by a bound of this one at least as tight (element counts too), its types, ranks and CPU flags are among
this one's, its maker and thread bound are this one's or absent. An earlier entry that holds on other grounds
(bounds that cover it together, say) is not seen, so what is refused is dead, and some dead entries pass.
"""
from __future__ import annotations

from septran.errors import MappingError


def refuse_shadowed(entries: tuple) -> None:
    """Raises at the first entry that no call can take a value from (see the module's docstring)."""
    for k, e in enumerate(entries):
        covered: set = set()
        for j, p in enumerate(entries[:k]):
            if not _implies(e, p):
                continue
            if not p.goes_on:
                raise MappingError(
                    f"shape_points: no call reaches this entry: the entry at line {p.loc.line} holds for every call "
                    "this one holds for, and the search stops there (it has no `continue: true`)", e.loc,
                    hint="move this entry above that one, or narrow that one's conditions")
            covered |= set(p.point)
        if e.point and set(e.point) <= covered:
            raise MappingError(
                "shape_points: this entry sets nothing: entries above it that hold for every call it holds for set "
                f"{', '.join(sorted(k.removeprefix('task_mappings.') for k in e.point))} first (the first entry that "
                "sets a dimension gives its value)", e.loc,
                hint="move this entry above them: a narrower condition goes first")


def _implies(e, p) -> bool:
    """Whether entry ``p``'s conditions hold wherever ``e``'s do, judged on the conditions as written."""
    if p.threads is not None and (e.threads is None or e.threads > p.threads):
        return False
    if p.cpu_vendor is not None and p.cpu_vendor != e.cpu_vendor:
        return False
    if any(e.dtypes.get(name) != want for name, want in p.dtypes.items()):
        return False
    if any(e.ranks.get(name) != want for name, want in p.ranks.items()):
        return False
    if any(e.numel.get(name, most + 1) > most for name, most in p.numel.items()):
        return False
    if not set(p.cpu_flags) <= set(e.cpu_flags):
        return False
    return _tighter(e.when, p.when, upper=True) and _tighter(e.above, p.above, upper=False)


def _tighter(mine, theirs, upper: bool) -> bool:
    """Whether each of ``theirs``'s bounds is met by one of ``mine`` at least as tight."""
    for name, bounds in theirs.items():
        own = mine.get(name, ())
        for axis, bound in enumerate(bounds):
            if bound is None:
                continue
            have = own[axis] if axis < len(own) else None
            if have is None or (have > bound if upper else have < bound):
                return False
    return True
