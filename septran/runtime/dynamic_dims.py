"""The runtime's side of dynamic dimensions: one variant for every size of them, each call's sizes checked.

The mapping's ``dynamic`` names dimensions; a shape tie makes the whole class
dynamic (``Q.shape[2]`` named, ``O.shape[2]`` tied to it). The variant cache
and the tuning key see a dynamic dimension as -1 ("any size"), so calls that
differ only there share one compile and one tuning record.
"""
from __future__ import annotations

import dataclasses
import math
from types import MappingProxyType

from septran.errors import CallError
from septran.frontend.bounds import INT32_MAX
from septran.lowering.dynamic import dynamic_members

ANY = -1  # a dynamic dimension in a variant's key and a tuning key


def dynamic_axes(mapping, shapes) -> frozenset:
    """(param, axis) of every dynamic dimension: those the mapping names and those tied to them."""
    named = dynamic_members(mapping)
    return frozenset(m for cls in shapes.classes if named & set(cls.members) for m in cls.members)


def masked(shapes, axes: frozenset) -> dict:
    """``shapes`` (param -> shape) with each dynamic dimension ANY."""
    return {name: tuple(ANY if (name, a) in axes else n for a, n in enumerate(shape)) for name, shape in shapes.items()}


def masked_described(described: dict, axes: frozenset) -> dict:
    """The inputs' (shape, dtype) with each dynamic dimension ANY: what a variant is cached by."""
    shapes = masked({name: shape for name, (shape, _) in described.items()}, axes)
    return {name: (shapes[name], dtype) for name, (_, dtype) in described.items()}


def check_sizes(shapes, axes: frozenset) -> None:
    """Every tensor with a dynamic dimension stays 32-bit indexable (the sizes the program was proven for)."""
    for name, shape in shapes.items():
        if any((name, a) in axes for a in range(len(shape))) and math.prod(shape) > INT32_MAX:
            raise CallError(f"{name} has shape {tuple(shape)}: {math.prod(shape)} elements, more than TileLang's "
                            f"32-bit indices reach ({INT32_MAX})", hint="split the call into smaller tensors")


def any_size(spec, axes: frozenset):
    """The specialisation a dynamic variant is lowered for: its dynamic dimensions ANY (the lowering never reads
    them: they are symbolic variables of the program)."""
    if not axes:
        return spec
    return dataclasses.replace(spec, shapes=MappingProxyType(masked(spec.shapes, axes)))
