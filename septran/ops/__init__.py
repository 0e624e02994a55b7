"""SepTran's kernel library: the operators the model level (and a user) calls, with their logic and mappings.

Each operator is a torch custom op (``torch.ops.septran.<name>``), registered when its module is imported:

    gemm        ``septran.ops.gemm``         act(x @ w + bias): relu, gelu, gelu_tanh, silu or none
    gemm_residual ``septran.ops.gemm_residual`` x @ w + bias + residual (the residual in the epilogue)
    bmm         ``septran.ops.bmm``          C[b] = A[b] @ B[b]
    attention   ``septran.ops.attention``    FlashAttention: causal, masks, grouped heads, a KV cache's decode
    softmax, layer_norm, rms_norm  ``septran.ops.norms``
    rope        ``septran.ops.rope``         Llama's rotary embedding
    swiglu      ``septran.ops.swiglu``       silu(x @ Wg) * (x @ Wu)
    elementwise ``septran.ops.elementwise``  a fused chain of elementwise ops, generated

The logic files are ``septran/ops/logic/<op>.py``; the mappings are the shipped ``mappings/<target>/<op>.yaml``
(``septran.mappings`` in a wheel), with the dimensions a model varies made dynamic by ``Mapping.with_dynamic``.
``septran.ops.kernels`` compiles and caches them. Importing this package imports nothing heavy: ``load()``
registers every op.
"""
from __future__ import annotations

import importlib

MODULES = ("gemm", "gemm_residual", "bmm", "attention", "norms", "rope", "swiglu", "elementwise")


def load() -> None:
    """Registers every ``torch.ops.septran.*`` op of the library (imports torch)."""
    for name in MODULES:
        importlib.import_module(f"septran.ops.{name}")
