"""Issue 8's property: for drawn tile sizes, shapes, tile-index offsets and loop bounds, every outcome of
compiling and running GEMM-, softmax- and attention-shaped logic is EITHER the result a model of what was
written gives (FlashAttention's rule) OR a located SepTranError (in the generated logic file or the
mapping file). Never a crash, a wrong answer, a BuildError or another exception.

The logic is generated as Python text from templates that follow examples/gemm/gemm.py,
examples/softmax/softmax.py and examples/attention/attention.py, with ``k + OFF`` in tile indices and
``task.range(n + DELTA)`` in loop bounds; the mappings are mappings/cpu/*.yaml with the drawn tunables.

The models read a tile that overhangs the tensor, or lies wholly outside it, as zeros (outside the
tensor is zero-padding), so a program whose tile indices leave their partition's grid may EITHER be
refused (what issue 8's verification does) OR give the model's answer; a program whose indices all stay
in their grids must run and be correct (a refusal there is allowed only at the mapping, e.g. capacity).
Examples: 40 GEMM, 25 softmax, 20 attention; each is one compile and one build on the cpu target.
"""
from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import septran
from conftest import assert_flash_rule, first_point_text, mapping_path

pytestmark = pytest.mark.build  # 3 of its 3 tests build kernels

TILES = st.sampled_from([1, 3, 7, 8, 16, 17, 32, 64])
SMALL_TILES = st.sampled_from([1, 3, 7, 8, 16, 17, 32])
OFFSETS = st.sampled_from([0] * 6 + [-2, -1, 1, 2])  # mostly as written in the examples
DELTAS = st.sampled_from([0] * 6 + [-2, -1, 1, 2])
ALLOWED = (septran.LoweringError, septran.MappingError, septran.FrontendError)
# No shrinking: every step would be a compile and a build; the first failing example is reported as drawn.
SETTINGS = dict(derandomize=True, deadline=None, phases=[Phase.explicit, Phase.generate], suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow, HealthCheck.data_too_large])


def _plus(n: int) -> str:
    return "" if n == 0 else f" + {n}" if n > 0 else f" - {-n}"


def _write(folder: Path, stem: str, text: str, suffix: str) -> Path:
    path = folder / f"{stem}_{hashlib.sha1(text.encode()).hexdigest()[:12]}{suffix}"
    path.write_text(text)
    return path


def _mapping(folder: Path, op: str, old: str, new: str) -> Path:
    text = first_point_text("cpu", op)
    assert old in text
    return _write(folder, op, text.replace(old, new), ".yaml")


def _outcome(logic: Path, mapping: Path, in_grid: bool, run):
    """``run(kernel)``'s result, or None when the program was refused where it may be; asserts the rest."""
    try:
        kernel = septran.compile(logic_file=logic, mapping_file=mapping)
        return run(kernel)
    except ALLOWED as err:
        assert err.loc is not None, f"refused without a location:\n{err}"
        allowed = {mapping.resolve()} if in_grid else {logic.resolve(), mapping.resolve()}
        assert Path(err.loc.file).resolve() in allowed, (
            f"{'a program whose tiles stay in their grids' if in_grid else 'refused'} at {err.loc}:\n{err}\n"
            f"--- {logic}:\n{logic.read_text()}")
        assert "Traceback" not in str(err) and "septran/" not in str(err).replace(str(logic), "").replace(str(mapping), "")
        return None


def _assert_model(out, ref, torch_out, what: str, scaled: bool = False) -> None:
    """FlashAttention's rule where the model is finite; infinities and NaN exactly where the model has them.
    ``scaled``: the rule's 1e-5 floor times the result's magnitude (GEMM: float32 sums of up to 300 products in
    another order than torch's; a wrong tile is off by far more)."""
    finite = ref.isfinite()
    assert torch.equal(out.double()[~finite].nan_to_num(0.0), ref[~finite].nan_to_num(0.0)) and torch.equal(
        out[~finite].isnan(), ref[~finite].isnan()), f"{what}: infinities or NaN not where the model has them"
    if not bool(finite.any()):
        return
    if scaled:
        err = (out.double()[finite] - ref[finite]).abs().max().item()
        torch_err = (torch_out.double()[finite] - ref[finite]).abs().max().item()
        floor = 1e-5 * max(1.0, ref[finite].abs().max().item())
        assert err <= 2 * torch_err + floor, f"{what}: max |out - model| = {err:.3e}, torch's = {torch_err:.3e}"
        return
    assert_flash_rule(out[finite], ref[finite], torch_out[finite], what)


def _pad_blocks(x: torch.Tensor, dim: int, tile: int, index: int) -> torch.Tensor:
    """Tile ``index`` of ``x`` along ``dim`` (extent ``tile``), zeros where it lies outside ``x``."""
    shape = list(x.shape)
    shape[dim] = tile
    out = x.new_zeros(shape)
    lo, hi = index * tile, (index + 1) * tile
    a, b = max(lo, 0), min(hi, x.shape[dim])
    if a < b:
        out.narrow(dim, a - lo, b - a).copy_(x.narrow(dim, a, b - a))
    return out


# GEMM -------------------------------------------------------------------------------------------------

GEMM = '''"""Generated by tests/test_lowering_property.py from examples/gemm/gemm.py."""
from septran import task


@task.define(leaf=True)
def gemm_leaf_logic(C, A, B):
    task.call_primitive("gemm", C, A, B)


@task.define
def gemm_block_logic(C, A, B):
    Ap = task.partition(A, by="blocks", tile=("BM", "BK"))
    Bp = task.partition(B, by="blocks", tile=("BK", "BN"))
    for k in task.range(Ap.shape[1]{delta}):
        task.launch(gemm_leaf_logic, C, Ap[0, k{off_a}], Bp[k{off_b}, 0])


@task.define
def gemm_host_logic(C, A, B):
    Cp = task.partition(C, by="blocks", tile=("BM", "BN"))
    Ap = task.partition(A, by="blocks", tile=("BM", None))
    Bp = task.partition(B, by="blocks", tile=(None, "BN"))
    for i, j in task.parallel_range(Cp.shape):
        task.launch(gemm_block_logic, Cp[i, j], Ap[i, 0], Bp[0, j])
'''


def gemm_model(a, b, bk: int, steps: int, off_a: int, off_b: int):
    """C = sum over the k steps of A's tile k + off_a times B's tile k + off_b, zero-padded."""
    c = a.new_zeros(a.shape[0], b.shape[1])
    for k in range(max(steps, 0)):
        c = c + _pad_blocks(a, 1, bk, k + off_a) @ _pad_blocks(b, 0, bk, k + off_b)
    return c


@settings(max_examples=40, **SETTINGS)
@given(bm=TILES, bn=TILES, bk=TILES, m=st.integers(1, 300), n=st.integers(1, 300), k=st.integers(1, 300),
       off_a=OFFSETS, off_b=OFFSETS, delta=DELTAS)
def test_gemm_is_correct_or_refused_at_a_line(tmp_path, bm, bn, bk, m, n, k, off_a, off_b, delta):
    logic = _write(tmp_path, "gemm", GEMM.format(delta=_plus(delta), off_a=_plus(off_a), off_b=_plus(off_b)), ".py")
    mapping = _mapping(tmp_path, "gemm", "{BM: 256, BN: 256, BK: 512}", f"{{BM: {bm}, BN: {bn}, BK: {bk}}}")
    tiles = math.ceil(k / bk)
    steps = tiles + delta
    in_grid = steps >= 0 and all(0 <= s + off < tiles for s in range(steps) for off in (off_a, off_b))
    gen = torch.Generator().manual_seed(m * 7 + n * 13 + k)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    out = _outcome(logic, mapping, in_grid, lambda kernel: kernel(a, b))
    if out is None:
        return
    assert steps >= 0, f"task.range({steps}) ran:\n{logic.read_text()}"
    ref = gemm_model(a.double(), b.double(), bk, steps, off_a, off_b)
    _assert_model(out, ref, gemm_model(a, b, bk, steps, off_a, off_b), f"gemm {m}x{k}x{n}, tiles {bm}/{bn}/{bk}", scaled=True)


# softmax ----------------------------------------------------------------------------------------------

SOFTMAX_EDITS = (
    ("        for k in task.range(Xp.shape[1]):\n            task.launch(softmax_stats, m, m_prev, l, S, Xp[0, k])",
     "        for k in task.range(Xp.shape[1]{delta}):\n            task.launch(softmax_stats, m, m_prev, l, S, Xp[0, k{off}])"),
)


def softmax_source(delta: int, off: int) -> str:
    text = (Path(__file__).resolve().parents[1] / "septran" / "ops" / "logic" / "softmax.py").read_text()
    for old, new in SOFTMAX_EDITS:
        assert old in text
        text = text.replace(old, new.format(delta=_plus(delta), off=_plus(off)))
    return text


def softmax_model(x, bn: int, stats_tiles):
    """Row maxima m and sums l over the stats loop's tiles (columns past the row's end masked, the
    zero-padding before its start counted as zeros), then exp(x - m) / l on every column."""
    cols = x.shape[1]
    seen = [_pad_blocks(x, 1, bn, t).masked_fill(torch.arange(t * bn, (t + 1) * bn) >= cols, float("-inf"))
            for t in stats_tiles]
    if not seen:  # m = -inf, l = 0
        return torch.exp(x + float("inf")) / 0.0
    vals = torch.cat(seen, dim=1)
    m = vals.max(dim=1, keepdim=True).values
    l = torch.exp(vals - m).sum(dim=1, keepdim=True)
    return torch.exp(x - m) / l


@settings(max_examples=25, **SETTINGS)
@given(bm=SMALL_TILES, bn=TILES, rows=st.integers(1, 300), cols=st.integers(1, 300), delta=DELTAS, off=OFFSETS)
def test_softmax_is_correct_or_refused_at_a_line(tmp_path, bm, bn, rows, cols, delta, off):
    logic = _write(tmp_path, "softmax", softmax_source(delta, off), ".py")
    # the online algorithm (whose stats loop is edited): the shipped cpu mapping runs the exp-once one
    mapping = _mapping(tmp_path, "softmax_online", "{BM: 1, BN: 1024}", f"{{BM: {bm}, BN: {bn}}}")
    tiles = math.ceil(cols / bn)
    steps = tiles + delta
    stats_tiles = [k + off for k in range(max(steps, 0))]
    in_grid = steps >= 0 and all(0 <= t < tiles for t in stats_tiles)
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(rows * 3 + cols))
    out = _outcome(logic, mapping, in_grid, lambda kernel: kernel(x))
    if out is None:
        return
    assert steps >= 0, f"task.range({steps}) ran:\n{logic.read_text()}"
    ref, torch_out = softmax_model(x.double(), bn, stats_tiles), softmax_model(x, bn, stats_tiles)
    _assert_model(out, ref, torch_out, f"softmax {rows}x{cols}, tiles {bm}/{bn}, stats over tiles {stats_tiles}")


# attention --------------------------------------------------------------------------------------------

ATTENTION_EDITS = (
    ("for k in task.range(tiles):", "for k in task.range(tiles{delta}):"),
    ("task.launch(attn_mask, S, Q, Kp[0, 0, k, 0])", "task.launch(attn_mask, S, Q, Kp[0, 0, k{off}, 0])"),
    ("task.launch(attn_scores, S, Q, Kp[0, 0, k, 0])", "task.launch(attn_scores, S, Q, Kp[0, 0, k{off}, 0])"),
    ("task.launch(attn_values, O, P, Vp[0, 0, k, 0])", "task.launch(attn_values, O, P, Vp[0, 0, k{off}, 0])"),
)


def attention_source(delta: int, off: int) -> str:
    text = (Path(__file__).resolve().parents[1] / "septran" / "ops" / "logic" / "attention.py").read_text()
    for old, new in ATTENTION_EDITS:
        assert text.count(old) == 1
        text = text.replace(old, new.format(delta=_plus(delta), off=_plus(off)))
    return text


def attention_model(q, k, v, bn: int, key_tiles):
    """Non-causal attention over the keys of the visited tiles: keys past Sk masked, keys before 0 zeros
    (a score of 0, a value of 0); no key at all: 0 / 0."""
    sk = k.shape[2]
    ks, vs = [], []
    for t in key_tiles:
        for p in range(t * bn, (t + 1) * bn):
            if p < sk:
                ks.append(k[:, :, p] if p >= 0 else torch.zeros_like(k[:, :, 0]))
                vs.append(v[:, :, p] if p >= 0 else torch.zeros_like(v[:, :, 0]))
    if not ks:
        return torch.full_like(q, float("nan"))
    keys, values = torch.stack(ks, dim=2), torch.stack(vs, dim=2)
    s = q @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ values


@settings(max_examples=20, **SETTINGS)
@given(bm=SMALL_TILES, bn=SMALL_TILES, sq=st.integers(1, 120), sk=st.integers(1, 120),
       d=st.sampled_from([8, 16, 40]), delta=DELTAS, off=OFFSETS)
def test_attention_is_correct_or_refused_at_a_line(tmp_path, bm, bn, sq, sk, d, delta, off):
    logic = _write(tmp_path, "attention", attention_source(delta, off), ".py")
    mapping = _mapping(tmp_path, "attention", "{BM: 64, BN: 64}", f"{{BM: {bm}, BN: {bn}}}")
    tiles = math.ceil(sk / bn)
    steps = tiles + delta
    key_tiles = [k + off for k in range(max(steps, 0))]
    in_grid = steps >= 0 and all(0 <= t < tiles for t in key_tiles)
    gen = torch.Generator().manual_seed(sq * 5 + sk + d)
    q, k, v = (torch.randn(1, 2, s, d, generator=gen) for s in (sq, sk, sk))
    out = _outcome(logic, mapping, in_grid, lambda kernel: kernel(q, k, v))
    if out is None:
        return
    assert steps >= 0, f"task.range({steps}) ran:\n{logic.read_text()}"
    ref = attention_model(q.double(), k.double(), v.double(), bn, key_tiles)
    torch_out = attention_model(q, k, v, bn, key_tiles)
    _assert_model(out, ref, torch_out, f"attention Sq {sq} Sk {sk} D {d}, tiles {bm}/{bn}, keys {key_tiles}")
