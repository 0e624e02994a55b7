"""Windows: tiles at element offsets (``task.window``, ``task.partition(..., by="windows")``): their starts.

A tile of ``task.partition(X, by="blocks", tile=(BM, BK))`` starts at a
multiple of its size; a window starts at any element. A convolution as an
implicit GEMM reads, for each filter tap (kh, kw), the input rows under the
output rows shifted by the tap: ``X[n, h + kh, w0 + kw : w0 + kw + BW, :]``.

A window's index is its start, in elements of what it is cut from. Where its
shape is None (the whole dimension) the start is 0. Whether the starts keep
the window inside its tensor (it may run past the tensor's end, read as 0
there like a tile's, but never start before 0 or past the end) or inside the
tile it is cut from is proven by the verification pass
(``septran/lowering/windows.py``).
"""
from __future__ import annotations

from septran.errors import FrontendError, SourceLoc
from septran.expr import Const
from septran.frontend.ir import FULL, Partition


def check_starts(part: Partition, index: tuple, loc: SourceLoc) -> tuple:
    """A window's starts: ``:`` or 0 where the window spans the whole dimension (kept as ``:``), an
    element offset elsewhere."""
    out = []
    for axis, (i, t) in enumerate(zip(index, part.tile)):
        if t is None:
            if i is not FULL and i != Const(0):
                raise FrontendError(f"{part.sym.name}[...]: the window spans all of dimension {axis} (shape None), "
                                    f"so it starts at 0 there, not at {i}", loc,
                                    hint="give the window a size along that dimension to start it elsewhere")
            out.append(FULL)
        elif i is FULL:
            raise FrontendError(f"{part.sym.name}[...]: `:` along dimension {axis}, where the window has {t} elements; "
                                "give the element it starts at", loc)
        else:
            out.append(i)
    return tuple(out)
