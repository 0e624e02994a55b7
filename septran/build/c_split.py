"""Loops over a tile that overhangs its tensor, split where the tensor ends.

A leaf that writes a local tile reads its global operands "as a copy would
hold them" (0, or the logic's value, past the tensor's end), and TileLang's C
prints that as a test on every element::

    for (int64_t j = (int64_t)0; j < (int64_t)4104; ++j) {
      float condval;
      if ((j < (int64_t)4097)) {
        condval = X[((bx * (int64_t)4097) + j)];
      } else {
        condval = 0.000000e+00f;
      }

g++ vectorises that with masked loads and a 64-bit index comparison per vector
(on znver1 about twice the time of the plain loop), or not at all. Where the
bound and the loop's extent are literals (static shapes), the loop becomes two
with the same body, over [0, 4097) and [4097, 4104), and in each the test is the
literal it always evaluates to there: every occurrence of ``(j < (int64_t)4097)``
is ``(true)`` in the first and ``(false)`` in the second. The order of the
iterations is unchanged and nothing else in the body is touched, so the
program means what it meant.

A tile of a loop over tiles tests its index against the tensor's end past the
tile's start, ``(((k * (int64_t)1024) + b) < (int64_t)4097)`` (or ``< X_dim1``,
a dynamic size): there the loop (of a literal extent) splits where the test
turns false, at ``end - start`` clamped to [0, extent], an expression of the
enclosing loops' indices and the function's sizes that the body does not
assign. Loops with another form are left as they are.
"""
from __future__ import annotations

import re

_FOR = re.compile(r"^(\s*)for \((int(?:32|64)_t) (\w+) = (\(int(?:32|64)_t\))?0; \3 < (\(int(?:32|64)_t\))?(\d+); "
                  r"\+\+\3\) \{$")
MAX_SPLITS = 256  # each split copies a loop body: a bound on the source's growth


def split_overhang_loops(source: str) -> str:
    """``source`` with each literal-bounded loop whose body tests its index against one smaller literal split there."""
    lines = source.split("\n")
    at, splits = 0, 0
    while at < len(lines) and splits < MAX_SPLITS:
        m = _FOR.match(lines[at])
        if m is None or (at > 0 and lines[at - 1].lstrip().startswith("#pragma")):  # the grid's OpenMP loops stay
            at += 1
            continue
        indent, itype, var, cast, extent = m.group(1), m.group(2), m.group(3), m.group(5) or "", int(m.group(6))
        end = next((k for k in range(at + 1, len(lines)) if lines[k] == indent + "}"), None)
        if end is None:
            at += 1
            continue
        body = "\n".join(lines[at + 1:end])
        test = re.compile(rf"\({re.escape(var)} < (\(int(?:32|64)_t\))?(\d+)\)")
        bounds = {int(t.group(2)) for t in test.finditer(body)}
        if len(bounds) != 1 or not 0 < next(iter(bounds)) < extent:
            split = _tile_split(body, var, extent, cast)
            if split is None:
                at += 1
                continue
            test, bound = split
        else:
            bound = next(iter(bounds))
        first = test.sub("(true)", body)  # parenthesised: the test may be an if's whole condition
        second = test.sub("(false)", body)
        head = lambda lo, hi: (f"{indent}for ({itype} {var} = {cast}{lo}; {var} < {cast}{hi}; ++{var}) {{")  # noqa: E731
        lines[at:end + 1] = [head(0, bound), *first.split("\n"), indent + "}",
                             head(bound, extent), *second.split("\n"), indent + "}"]
        splits += 1
        at += 1  # the first copy's body may hold an inner loop to split in its turn
    return "\n".join(lines)


_NAME = re.compile(r"[A-Za-z_]\w*")


def _tile_split(body: str, var: str, extent: int, cast: str):
    """(the test, where the loop splits) for a body whose one index test is ``(((K * (int64_t)T) + var) < END)``,
    END a literal or a name, K a name the body does not assign; None for any other body."""
    offset = r"\((\w+) \* (?:\(int(?:32|64)_t\))?(\d+)\)"
    end = r"((?:\(int(?:32|64)_t\))?\d+|[A-Za-z_]\w*)"
    test = re.compile(rf"\(\({offset} \+ {re.escape(var)}\) < {end}\)")
    found = {(t.group(1), t.group(2), t.group(3)) for t in test.finditer(body)}
    if len(found) != 1:
        return None
    k, tile, stop = next(iter(found))
    names = {k} | set(_NAME.findall(stop)) - {"int32_t", "int64_t"}
    if var in names or any(re.search(rf"(^|[^\w.]){re.escape(n)}\s*(=[^=]|\+\+|--|\+=|-=)", body) for n in names):
        return None  # the split point would change inside the loop
    left = f"({stop} - ({k} * (int64_t){tile}))"
    return test, f"({left} < 0 ? (int64_t)0 : {left} < {cast}{extent} ? {left} : {cast}{extent})"
