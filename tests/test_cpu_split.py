"""The c builder's loop split (septran/build/c_split.py): a loop over an overhanging tile becomes two, where the
tensor ends, with the same body and the index test replaced by what it evaluates to in each."""
from __future__ import annotations

from septran.build.c_split import split_overhang_loops

MASKED = """\
int32_t k(float* X, float* S) {
  #pragma omp parallel for collapse(1) schedule(static) private(S)
  for (int64_t bx = (int64_t)0; bx < (int64_t)8; ++bx) {
    for (int64_t b = (int64_t)0; b < (int64_t)512; ++b) {
      float condval;
      if ((b < (int64_t)300)) {
        condval = X[((bx * (int64_t)300) + b)];
      } else {
        condval = -INFINITY;
      }
      S[b] = condval;
    }
  }
  return 0;
}"""


def test_a_masked_loop_is_split_where_the_tensor_ends():
    out = split_overhang_loops(MASKED)
    assert "for (int64_t b = (int64_t)0; b < (int64_t)300; ++b) {" in out
    assert "for (int64_t b = (int64_t)300; b < (int64_t)512; ++b) {" in out
    first, second = out.split("b < (int64_t)300; ++b)")[1], out.split("b < (int64_t)512; ++b)")[1]
    assert first.index("if ((true))") < first.index("for (") and "if ((false))" in second
    assert "(b < (int64_t)300)" not in out  # every test replaced by its value
    assert out.count("#pragma omp parallel for") == 1 and "bx < (int64_t)8; ++bx" in out  # the grid loop untouched


def test_loops_of_other_forms_are_left_as_they_are():
    dynamic = MASKED.replace("b < (int64_t)512; ++b", "b < n; ++b")  # a dynamic extent
    two_bounds = MASKED.replace("S[b] = condval;", "S[b] = condval + (float)(b < (int64_t)200);")
    past = MASKED.replace("(b < (int64_t)300)", "(b < (int64_t)600)")  # the test never fails inside the loop
    for src in (dynamic, two_bounds, past):
        assert split_overhang_loops(src) == src


def test_a_test_that_is_an_ifs_whole_condition_stays_a_condition():
    """TileLang prints ``if (j < N) {`` as well as ``if ((j < N)) {``: the value replaces the test in parentheses,
    so the split C still compiles (a bare ``if true {`` did not: test_split_reduce found it)."""
    out = split_overhang_loops(MASKED.replace("if ((b < (int64_t)300)) {", "if (b < (int64_t)300) {"))
    assert "if (true) {" in out and "if (false) {" in out and "if true" not in out and "if false" not in out


TILED = """\
int32_t k(float* X, float* S, int64_t X_dim1) {
  for (int64_t k_2 = (int64_t)0; k_2 < ((X_dim1 + (int64_t)1023) >> (int64_t)10); ++k_2) {
    for (int64_t b = (int64_t)0; b < (int64_t)1024; ++b) {
      float condval;
      if ((((k_2 * (int64_t)1024) + b) < X_dim1)) {
        condval = X[((k_2 * (int64_t)1024) + b)];
      } else {
        condval = 0.000000e+00f;
      }
      S[b] = condval;
    }
  }
  return 0;
}"""


def test_a_tile_of_a_loop_over_tiles_is_split_where_the_tensor_ends():
    """The test past the tile's start, against a dynamic end (or a literal one): the split point is that end less
    the tile's start, clamped to the tile; every test replaced by its value in each part."""
    out = split_overhang_loops(TILED)
    left = "(X_dim1 - (k_2 * (int64_t)1024))"
    split = f"(int64_t)({left} < 0 ? (int64_t)0 : {left} < (int64_t)1024 ? {left} : (int64_t)1024)"
    assert f"for (int64_t b = (int64_t)0; b < {split}; ++b) {{" in out
    assert f"for (int64_t b = {split}; b < (int64_t)1024; ++b) {{" in out
    assert out.count("if ((true))") == 1 and out.count("if ((false))") == 1 and "< X_dim1)) {" not in out
    static = split_overhang_loops(TILED.replace("< X_dim1)) {", "< (int64_t)4097)) {"))
    assert "((int64_t)4097 - (k_2 * (int64_t)1024)) < 0 ? (int64_t)0" in static


def test_a_tile_split_whose_point_the_body_moves_is_not_made():
    moved = TILED.replace("S[b] = condval;", "S[b] = condval; X_dim1 = X_dim1 - 1;")
    own = TILED.replace("((k_2 * (int64_t)1024) + b) < X_dim1", "((k_2 * (int64_t)1024) + b) < b")
    for src in (moved, own):
        assert split_overhang_loops(src) == src
