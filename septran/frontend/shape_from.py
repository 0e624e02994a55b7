"""``task.partition(X, by="blocks", shape_from="A")``: the design notes' spelling of a partition's tile shape."""
from __future__ import annotations

from septran.errors import FrontendError
from septran.frontend import tracer
from septran.frontend.ir import Param, Temp, TileRef

# The tunable whose tiles a ``shape_from=`` partition cuts along every dimension.
DESIGN_TILE = "block_size"


def design_tiles(frame, source, shape_from, loc) -> tuple:
    """``shape_from="A"``: the tile the design notes' GEMM example describes. Its mapping sets one tunable,
    ``block_size``, and cuts C, A and B alike, after A: so each dimension gets a tile of ``block_size``
    (``Ap[i, :]`` then spans a row of tiles: under the implicit host, a loop over them). The rank is the
    tensor's where known (a tile's, or an earlier partition's of the same tensor), else 2: a matrix, as the
    example's are; other shapes are written with ``tile=``."""
    named = shape_from if isinstance(shape_from, str) else None
    if isinstance(shape_from, tracer.TensorHandle) and isinstance(shape_from._arg, Param):
        named = shape_from._arg.name
    if named is None or named not in frame.task.param_names:
        raise FrontendError(f"task.partition: shape_from={shape_from!r} names no tensor parameter of {frame.task.name}",
                            loc, hint=f"name one of {', '.join(frame.task.param_names)}, or give the tile with tile=(...)")
    rank = source.rank if isinstance(source, (TileRef, Temp)) else next(
        (p.rank for p in frame.partitions if isinstance(p.source, Param) and p.source == source), 2)
    return (DESIGN_TILE,) * rank
