"""Which builder builds for a target: the target's fact (``tilelang.builder`` in backends/<t>/target.yaml), looked up
here; no code outside ``septran/build/`` asks which builder it is."""
from __future__ import annotations

from septran.build import c_builder, tilelang_builder
from septran.build.stages import Builder
from septran.errors import InternalError
from septran.target import Target

BUILDERS: dict[str, Builder] = {b.name: b for b in (c_builder.BUILDER, tilelang_builder.BUILDER)}


def builder_for(target: Target) -> Builder:
    try:
        return BUILDERS[target.builder]
    except KeyError:
        raise InternalError("build", f"target {target.name} names builder {target.builder!r}; SepTran has "
                            f"{', '.join(BUILDERS)}", target.name) from None


def builds_in_threads(target: Target) -> bool:
    """Whether ``build_many`` (threads) is how to build many variants for ``target`` at once: its builder runs the
    compiler itself, outside the GIL, and TileLang's own compile (the tuner's worker processes) would make
    nothing this builder loads."""
    return builder_for(target).runs_compiler
