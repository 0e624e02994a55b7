"""The ops SepTran's model patterns take: Gemm and MatMul (-> the GEMM kernels, bias and W^T read in place),
Softmax and LogSoftmax, LayerNormalization and RMSNormalization, Conv (2-D, one group: im2col and a SepTran GEMM;
others with torch's convolution)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from septran.onnx.ops.registry import op


def _t(x):
    return x.transpose(0, 1)


def _scaled(y, alpha):
    return y * alpha


@op("Gemm")
def gemm(b, n):
    a, w, c = n.input(0), n.input(1), n.input(2)
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    if n.attr("transA", 0):
        a = n.call(_t, a)
    trans_b = bool(n.attr("transB", 0))
    cols = n.shape(1)[0 if trans_b else 1]
    bias = None
    if c is not None and alpha == 1.0 and beta == 1.0 and n.shape(2) in ((cols,), (1, cols)):
        bias = c if len(n.shape(2)) == 1 else n.call(torch.reshape, c, (cols,))
    if trans_b:  # Y = A @ W^T (+ bias): torch's linear, which the GEMM pattern reads with W in place
        y = n.call(F.linear, a, w, bias)
    elif bias is not None:
        y = n.call(torch.addmm, bias, a, w)
    else:
        y = n.call(torch.matmul, a, w)
    if c is not None and bias is None:
        if alpha != 1.0:
            y = n.call(_scaled, y, alpha)
        y = n.call(torch.add, y, c if beta == 1.0 else n.call(_scaled, c, beta))
    elif c is None and alpha != 1.0:
        y = n.call(_scaled, y, alpha)
    return [y]


@op("MatMul")
def matmul(b, n):
    return [n.call(torch.matmul, n.input(0), n.input(1))]


def _coerced(x, axis, log):
    """Softmax before opset 13: over everything from ``axis`` on, as one dimension."""
    shape = x.shape
    flat = x.reshape(math.prod(shape[:axis]), math.prod(shape[axis:]))
    return (torch.log_softmax if log else torch.softmax)(flat, 1).reshape(shape)


@op("Softmax", "LogSoftmax")
def softmax(b, n):
    fn = torch.softmax if n.op_type == "Softmax" else torch.log_softmax
    rank = len(n.shape(0))
    if n.opset >= 13:
        return [n.call(fn, n.input(0), n.attr("axis", -1))]
    axis = n.attr("axis", 1) % max(rank, 1)
    if axis == rank - 1:
        return [n.call(fn, n.input(0), -1)]
    return [n.call(_coerced, n.input(0), axis, n.op_type == "LogSoftmax")]


def _affine(n, i, shape):
    """Scale or bias input ``i`` with the normalised shape (broadcast from a shorter one if needed)."""
    v = n.input(i)
    if v is None or tuple(n.shape(i)) == tuple(shape):
        return v
    return n.call(torch.Tensor.contiguous, n.call(torch.Tensor.expand, v, tuple(shape)))


def _stats(x, dims, eps, stash):
    xf = x.to(stash)
    mean = xf.mean(dims, keepdim=True)
    var = ((xf - mean) * (xf - mean)).mean(dims, keepdim=True)
    return mean, torch.rsqrt(var + eps)


@op("LayerNormalization")
def layer_norm(b, n):
    from septran.onnx.dtypes import to_torch

    shape = n.shape(0)
    axis = n.attr("axis", -1) % len(shape)
    norm = tuple(shape[axis:])
    eps = float(n.attr("epsilon", 1e-5))
    y = n.call(F.layer_norm, n.input(0), norm, _affine(n, 1, norm), _affine(n, 2, norm), eps)
    if not (n.wants(1) or n.wants(2)):
        return [y]
    # Mean and InvStdDev asked for too: computed beside, so that Y stays the one LayerNorm SepTran takes.
    stats = n.call(_stats, n.input(0), tuple(range(axis, len(shape))), eps, to_torch(n.attr("stash_type", 1)))
    return [y, stats[0], stats[1]]


@op("RMSNormalization")
def rms_norm(b, n):
    shape = n.shape(0)
    axis = n.attr("axis", -1) % len(shape)
    norm = tuple(shape[axis:])
    return [n.call(F.rms_norm, n.input(0), norm, _affine(n, 1, norm), float(n.attr("epsilon", 1e-5)))]


def _conv_gemm(x, w, bias, stride, dilation):
    """A 2-D convolution as im2col and one GEMM (``linear``: the SepTran GEMM with W read in place)."""
    batch, cout = x.shape[0], w.shape[0]
    kh, kw = w.shape[2], w.shape[3]
    oh = (x.shape[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (x.shape[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    cols = F.unfold(x, (kh, kw), dilation=dilation, stride=stride)  # (B, C*kh*kw, OH*OW)
    y = F.linear(cols.transpose(1, 2), w.reshape(cout, -1), bias)  # (B, OH*OW, Cout)
    return y.transpose(1, 2).reshape(batch, cout, oh, ow)


def _conv(x, w, bias, stride, dilation, groups):
    fn = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[x.dim()]
    return fn(x, w, bias, stride, 0, dilation, groups)


@op("Conv")
def conv(b, n):
    xs, ws = n.shape(0), n.shape(1)
    k = len(xs) - 2
    if k not in (1, 2, 3):
        raise n.error(f"a Conv over {k} dimensions is not taken (1, 2 or 3)")
    kernel = list(n.attr("kernel_shape") or ws[2:])
    strides = list(n.attr("strides") or [1] * k)
    dil = list(n.attr("dilations") or [1] * k)
    pads = list(n.attr("pads") or [0] * (2 * k))
    auto = n.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * k)
        for d in range(k):
            out = -(-xs[2 + d] // strides[d])
            total = max(0, (out - 1) * strides[d] + (kernel[d] - 1) * dil[d] + 1 - xs[2 + d])
            small, big = total // 2, total - total // 2
            pads[d], pads[k + d] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        pads = [0] * (2 * k)
    x = n.input(0)
    if any(pads):
        torch_pads = []
        for d in reversed(range(k)):
            torch_pads += [pads[d], pads[k + d]]
        x = n.call(F.pad, x, torch_pads)
    groups = n.attr("group", 1)
    if k == 2 and groups == 1 and n.dtype(0).is_floating_point:
        return [n.call(_conv_gemm, x, n.input(1), n.input(2), tuple(strides), tuple(dil))]
    return [n.call(_conv, x, n.input(1), n.input(2), tuple(strides), tuple(dil), groups)]
