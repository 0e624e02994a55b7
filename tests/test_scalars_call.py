"""Scalars at call time (issue 9): NaN, ±inf, out-of-range values, NumPy scalars and ints, consistently.

The rule (septran/runtime/scalars.py): any real number is taken (bool is not)
if its float32 value is finite or it is ±inf / NaN itself; a finite value that
float32 cannot hold is a CallError naming the scalar. Taken values compute what
torch computes with them.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import septran
from conftest import REPO, assert_flash_rule, forbid_tilelang, load_module, mapping_path
from septran.runtime import scalars

KERNELS: dict = {}


def layernorm():
    if "ln" not in KERNELS:
        KERNELS["ln"] = septran.compile(REPO / "examples" / "layernorm" / "layernorm.py", mapping_file=mapping_path("cpu", "layernorm"))
    return KERNELS["ln"]


def attention():
    if "attn" not in KERNELS:
        logic = load_module(REPO / "examples" / "attention" / "attention.py")
        KERNELS["attn"] = septran.compile(logic.attention(False), mapping_file=mapping_path("cpu", "attention"))
    return KERNELS["attn"]


def _ln_inputs():
    gen = torch.Generator().manual_seed(7)
    return torch.randn(5, 70, generator=gen), torch.randn(70, generator=gen), torch.randn(70, generator=gen)


def _qkv():
    gen = torch.Generator().manual_seed(8)
    return tuple(torch.randn(1, 2, s, 16, generator=gen) for s in (20, 24, 24))


def _attention_ref(q, k, v, sm_scale):
    """The logic's rule: sm_scale when it is > 0, else 1 / sqrt(head dim) (so NaN, 0 and -inf mean the default)."""
    scale = sm_scale if sm_scale > 0 else 1 / math.sqrt(q.shape[-1])
    return torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1) @ v


# Accepted: every real type, the same value the same variant ---------------------------------------------
@pytest.mark.parametrize("value", [0.25, np.float16(0.25), np.float32(0.25), np.float64(0.25), np.longdouble(0.25),
                                   Fraction(1, 4)], ids=lambda v: type(v).__name__)
@pytest.mark.build
def test_every_float_type_is_taken(value):
    x, w, b = _ln_inputs()
    out = layernorm()(x, w, b, eps=value)
    ref = F.layer_norm(x, (70,), w, b, 0.25)
    assert_flash_rule(out, ref, ref)
    assert layernorm().specialize(X=x, W=w, B=b, eps=value) is layernorm().specialize(X=x, W=w, B=b, eps=0.25)


@pytest.mark.parametrize("value", [2, np.int8(2), np.int64(2), np.uint16(2)], ids=lambda v: type(v).__name__)
@pytest.mark.build
def test_ints_are_taken(value):
    x, w, b = _ln_inputs()
    out = layernorm()(x, w, b, value)  # by position too
    ref = F.layer_norm(x, (70,), w, b, 2.0)
    assert_flash_rule(out, ref, ref)


def test_float32_edge_is_taken_and_just_past_it_refused():
    assert scalars.value("eps", 3.4028235e38) == 3.4028235e38  # rounds to float32's largest
    assert scalars.value("eps", -3.4028234663852886e38) == -3.4028234663852886e38
    assert scalars.value("eps", 1e-50) == 1e-50  # underflows to 0 in float32: finite, taken
    with pytest.raises(septran.CallError, match="eps"):
        scalars.value("eps", 3.41e38)


# Infinities and NaN compute what torch computes --------------------------------------------------------
@pytest.mark.parametrize("eps", [math.inf, -math.inf, np.float32("inf")], ids=["inf", "-inf", "np_inf"])
@pytest.mark.build
def test_layernorm_with_infinite_eps_matches_torch(eps):
    x, w, b = _ln_inputs()
    ref = F.layer_norm(x, (70,), w, b, float(eps))  # inf: the bias alone; -inf: NaN
    assert_flash_rule(layernorm()(x, w, b, eps=eps), ref, ref)


@pytest.mark.build
def test_layernorm_with_nan_eps_is_nan_as_in_torch():
    x, w, b = _ln_inputs()
    ref = F.layer_norm(x, (70,), w, b, math.nan)
    assert bool(ref.isnan().all())
    assert_flash_rule(layernorm()(x, w, b, eps=math.nan), ref, ref)


@pytest.mark.parametrize("sm_scale", [math.nan, -math.inf, math.inf, 8.0, np.float16(0.5)],
                         ids=["nan", "-inf", "inf", "8", "np_float16"])
@pytest.mark.build
def test_attention_scale_follows_the_logics_rule(sm_scale):
    q, k, v = _qkv()
    ref = _attention_ref(q, k, v, float(sm_scale))
    assert_flash_rule(attention()(q, k, v, sm_scale=sm_scale), ref, ref, f"sm_scale={sm_scale}")


def test_nan_is_one_variant_and_infinities_two():
    x, w, b = _ln_inputs()
    kern = layernorm()
    nans = [kern.specialize(X=x, W=w, B=b, eps=v) for v in (float("nan"), -float("nan"), np.float32("nan"), np.longdouble("nan"))]
    assert all(v is nans[0] for v in nans)  # nan != nan, yet one program
    assert ".epsnan" in nans[0].tag
    pos, neg = (kern.specialize(X=x, W=w, B=b, eps=v) for v in (math.inf, -math.inf))
    assert pos is not neg and ".epsinf" in pos.tag and ".eps-inf" in neg.tag
    close = (1e-5, np.nextafter(1e-5, 1.0))  # the same to six digits, not the same number
    assert kern.specialize(X=x, W=w, B=b, eps=close[0]) is not kern.specialize(X=x, W=w, B=b, eps=close[1])


# Refused: a CallError naming the scalar, before anything is built ---------------------------------------
@pytest.mark.parametrize("value", [1e300, -1e39, np.float64(1e39), np.longdouble("1e4000"), 10**400, Fraction(10**400)],
                         ids=["1e300", "-1e39", "np_1e39", "longdouble_1e4000", "int_10e400", "fraction"])
def test_finite_values_beyond_float32_are_refused(monkeypatch, value):
    x, w, b = _ln_inputs()
    kern = layernorm()
    forbid_tilelang(monkeypatch, "an out-of-range scalar must be refused before TileLang")
    for call in (lambda: kern(x, w, b, eps=value), lambda: kern.specialize(X=x, W=w, B=b, eps=value)):
        with pytest.raises(septran.CallError, match=r"scalar eps = .* is out of float32's range"):
            call()
    q, k, v = _qkv()
    with pytest.raises(septran.CallError, match=r"scalar sm_scale = .* is out of float32's range"):
        attention()(q, k, v, sm_scale=value)


@pytest.mark.parametrize("value", [True, np.bool_(False), "1e-5", None, 1j, torch.tensor(1e-5), np.array(1e-5)],
                         ids=["bool", "np_bool", "str", "None", "complex", "tensor", "ndarray"])
def test_non_numbers_are_refused(value):
    x, w, b = _ln_inputs()
    with pytest.raises(septran.CallError, match="scalar eps must be a number"):
        layernorm()(x, w, b, eps=value)
