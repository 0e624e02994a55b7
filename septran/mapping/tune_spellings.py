"""The spellings of a ``!tune`` dimension: ``{type: choice|range|pow2, ...}`` read into its values.

Below both the YAML reader (which meets the spelling) and the search space (which documents it): it needs
neither.
"""
from __future__ import annotations

from septran.errors import MappingError, SourceLoc


def expand(spec, loc: SourceLoc) -> tuple:
    """``!tune {type: choice|range|pow2, ...}`` -> its values, in order. ``spec``: the braces as the YAML reader
    holds them (a ``yaml_source.LocatedDict``: each value located, ``key_locs`` for the keys)."""
    allowed = {"choice": ("type", "values"), "range": ("type", "min", "max", "step"), "pow2": ("type", "min", "max")}
    kind = spec["type"].value if "type" in spec else None
    if kind not in allowed:
        raise MappingError(f"!tune {{type: {kind}}}: the type must be one of {', '.join(allowed)}", loc,
                           hint="e.g. !tune {type: range, min: 16, max: 256, step: 16}")
    for key in spec:
        if key not in allowed[kind]:
            raise MappingError(f"!tune {{type: {kind}}} takes {', '.join(allowed[kind])}, not {key!r}", spec.key_locs[key])
    if kind == "choice":
        values = spec["values"].value if "values" in spec else None
        if not isinstance(values, list) or not values:
            raise MappingError("!tune {type: choice} needs `values: [...]`, a non-empty list", loc)
        return tuple(v.value for v in values)
    bounds = {}
    for key in allowed[kind][1:]:
        if key not in spec:
            raise MappingError(f"!tune {{type: {kind}}} needs {key!r}", loc)
        v = spec[key].value
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if key == "min" else 1) or v >= 2**31:
            raise MappingError(f"!tune {kind}: {key} must be an integer from {0 if key == 'min' else 1} to 2^31 - 1, got {v!r}",
                               spec[key].loc)
        bounds[key] = v
    if bounds["min"] > bounds["max"]:
        raise MappingError(f"!tune {kind}: min {bounds['min']} is larger than max {bounds['max']}", loc)
    if kind == "range":
        count = (bounds["max"] - bounds["min"]) // bounds["step"] + 1
        if count > 4096:
            raise MappingError(f"!tune range has {count} values; at most 4096", loc, hint="use a larger step")
        return tuple(range(bounds["min"], bounds["max"] + 1, bounds["step"]))
    out, v = [], 1
    while v <= bounds["max"]:
        if v >= bounds["min"]:
            out.append(v)
        v *= 2
    if not out:
        raise MappingError(f"!tune pow2 has no power of two from {bounds['min']} to {bounds['max']}", loc)
    return tuple(out)
