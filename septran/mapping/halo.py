"""The ``halo`` key of an instance: extra elements around an operand's tile, staged with it.

``halo: {X: [0, 1]}`` gives, per dimension of X's tile, how many more elements
the leaf may read on each side (a number: as many before as after), or a
``[before, after]`` pair (``halo: {X: [0, [1, 2]]}``). A staged copy holds the
widened box (0 past the tensor's ends); an operand read in place is read
there, 0 past the tensor's ends. The logic's ranks are checked in lowering.
"""
from __future__ import annotations

from dataclasses import dataclass

from septran.errors import MappingError, SourceLoc
from septran.mapping.yaml_source import Located

MAX_HALO = 2**20  # far above any stencil's reach; keeps index arithmetic within int32


@dataclass(frozen=True)
class Halo:
    pairs: tuple[tuple[int, int], ...]  # per dimension: (before, after)
    loc: SourceLoc

    @property
    def any(self) -> bool:
        return any(b or a for b, a in self.pairs)


def _size(item: Located, what: str) -> int:
    v = item.value
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_HALO:
        raise MappingError(f"{what} must be an integer from 0 to {MAX_HALO}, got {v!r}", item.loc,
                           hint="a halo counts extra elements on a side; 0 for none")
    return v


def parse_halo(table: dict, inst: str) -> dict[str, Halo]:
    """``table``: the instance's ``halo`` entries (names checked already) -> one Halo per operand."""
    out = {}
    for param, val in table.items():
        what = f"{inst}.halo.{param}"
        if not isinstance(val.value, list) or not val.value:
            raise MappingError(f"{what} must be a list with one entry per dimension of {param}'s tile, got {val.value!r}",
                               val.loc, hint=f"e.g. `halo: {{{param}: [0, 1]}}` (one element on each side along dimension 1)")
        pairs = []
        for d, item in enumerate(val.value):
            if isinstance(item.value, list):
                if len(item.value) != 2:
                    raise MappingError(f"{what}[{d}] must be a number or a [before, after] pair, got {len(item.value)} "
                                       "entries", item.loc)
                pairs.append((_size(item.value[0], f"{what}[{d}][0]"), _size(item.value[1], f"{what}[{d}][1]")))
            else:
                n = _size(item, f"{what}[{d}]")
                pairs.append((n, n))
        out[param] = Halo(tuple(pairs), val.loc)
    return out
