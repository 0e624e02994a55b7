"""A mapping's two element-type keys: ``keep_dtypes`` and ``stage_dtypes``.

``keep_dtypes: [bfloat16]``: types the program is handed as they are where the target would convert them
(cpu: bfloat16 tensors stay bfloat16 for a matrix unit's leaf instead of float32 copies made before the call).

``stage_dtypes: {float16: float32}``: a tile of a tensor of the first type that the mapping places in an on-chip
memory holds the second; the memory's copies convert as they load and store (cpu: the vendor's F16C copies),
and the code that computes on the tile computes in the wider type. Why: on a CPU without float16 arithmetic
each element code reads or writes in float16 converts in software (tens of instructions an element); one
conversion per element on the way in and one on the way out costs less than one per use. Tensors the mapping
leaves where they lie, temps and accumulators are not affected.

Both are checked against the target in ``septran.lowering.bind``.
"""
from __future__ import annotations

from typing import Optional

from septran.dtypes import DTYPES
from septran.errors import MappingError
from septran.mapping.yaml_source import Located, LocatedDict

# What a tile may be widened to: a float type that holds every value of the narrower ones exactly.
STAGE_TO = {"float32": ("float16", "bfloat16"), "float64": ("float16", "bfloat16", "float32")}


def keep_dtypes(val: Optional[Located]) -> tuple[Located, ...]:
    """``keep_dtypes: [bfloat16]``: distinct element types SepTran knows."""
    if val is None:
        return ()
    items = val.value if isinstance(val.value, list) else None
    if not items:
        raise MappingError(f"keep_dtypes must be a list of element types, got {val.value!r}", val.loc,
                           hint="e.g. `keep_dtypes: [bfloat16]`")
    seen = set()
    for item in items:
        if item.value not in DTYPES:
            raise MappingError(f"keep_dtypes: {item.value!r} is not an element type", item.loc,
                               hint=f"types: {', '.join(DTYPES)}")
        if item.value in seen:
            raise MappingError(f"keep_dtypes names {item.value} twice", item.loc)
        seen.add(item.value)
    return tuple(items)


def stage_dtypes(val: Optional[Located]) -> tuple[tuple[Located, Located], ...]:
    """``stage_dtypes: {float16: float32}``: (narrow type, the wider float type its on-chip tiles hold) pairs."""
    if val is None:
        return ()
    if not isinstance(val.value, LocatedDict) or not len(val.value):
        raise MappingError(f"stage_dtypes must map element types to the types their on-chip tiles hold, got "
                           f"{val.value!r}", val.loc, hint="e.g. `stage_dtypes: {float16: float32}`")
    out = []
    for name, wide in val.value.items():
        narrow = Located(name, val.value.key_locs[name])
        if name not in DTYPES:
            raise MappingError(f"stage_dtypes: {name!r} is not an element type", narrow.loc,
                               hint=f"types: {', '.join(DTYPES)}")
        if not isinstance(wide.value, str) or name not in STAGE_TO.get(wide.value, ()):
            fits = [w for w, narrower in STAGE_TO.items() if name in narrower]
            raise MappingError(f"stage_dtypes.{name}: a {name} tile cannot be held as {wide.value!r}", wide.loc,
                               hint=f"a wider float type: {', '.join(fits)}" if fits else
                               f"delete {name} from stage_dtypes (only float16, bfloat16 and float32 tiles widen)")
        out.append((narrow, wide))
    return tuple(out)
