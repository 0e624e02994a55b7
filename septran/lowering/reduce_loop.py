"""A reduction over any axis as a loop nest, for targets whose template for it is a loop (``{body}``).

The loop runs over X's tile (its in-bounds part, when X is read in place and
overhangs its tensor) and folds each element into ``out`` at X's indices less
the reduced one: ``out[i, k] = T.max(out[i, k], X[i, j, k])``. The loop is
sequential, so it suits a target whose programs are single threads (a C target's
``T.grid``); a target with threads per program reduces with its own unit
(``T.reduce_sum(X, out, dim=...)``) instead.
"""
from __future__ import annotations

from septran.frontend import elementwise as el
from septran.lowering import elem_types, index_reads
from septran.lowering import tile_ir as ir

_COMBINE = {"sum": lambda a, b: el.Bin("+", a, b), "max": lambda a, b: el.Call("maximum", (a, b)),
            "min": lambda a, b: el.Call("minimum", (a, b))}


def lower(st, prim, args, by_param, impl, why, safe_names) -> ir.LeafCall:
    sig = prim.signature
    out_name, x_name = prim.args[0].name, prim.args[1].name
    x_view, out_view = by_param[x_name], by_param[out_name]
    rank = len(sig.dims[1])
    pad = len(x_view.extents) - rank  # leading dimensions of one the tile carries (a batch of one)
    names = safe_names(st, [f"r{d}" for d in range(len(x_view.extents))])
    loop = tuple(names[f"r{d}"] for d in range(len(x_view.extents)))
    attrs = dict(sig.attrs)
    kept = tuple(n for d, n in enumerate(loop[pad:]) if d != attrs["dim"])

    def element(view, idx) -> el.Elt:  # plain indices: no shape expressions to resolve
        return index_reads.element(view, idx, None, st.dtypes)[0]

    store = element(out_view, kept)
    # computed as every element expression is (float16 in float32), stored in out's type
    value = elem_types.typed(_COMBINE[attrs["op"]](store, element(x_view, loop)), lambda x: st.dtypes[x],
                             st.dtypes[store.of], prim.loc)
    return ir.LeafCall(impl.name, impl.template(sig), tuple(args), why, attrs=tuple(attrs.items()),
                       store=store, expr=value, loop=loop)
