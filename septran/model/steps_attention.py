"""The direct runner's attention steps (``septran.model.steps``): ``septran::attention`` on its kernel's plan, and
``septran::attention_written``, whose run-time check picks the causal kernel or the written-out torch ops."""
from __future__ import annotations

import torch

from septran.model import steps
from septran.model.written_attention_op import causal


class Attention(steps.Step):
    """The op on its plan: without a mask (causal, grouped or not: a prefill, a decode step over a KV cache), or
    with a bool mask (Hugging Face's static cache: the keys past the position hidden) on the kernel for that mask,
    called as the op calls it (``_mask4``). A float mask runs the op's own Python (its huge finite values are
    checked there, per call).

    A prefill's bool mask (more than ``DECODE_ROWS`` queries) is read first: where it is the static cache's
    ``key <= position`` (``causal_mask.visible_prefix``), the causal kernel runs over the keys up to the last
    position, about half the work of the masked kernel over the whole cache. That choice depends on the mask's
    values, so such a call is counted in ``decided`` and a launcher never records it (its segment runs its steps).
    A decode step's mask goes to the masked kernel as it is (its cost is the keys', not the mask's)."""

    without_optional = True
    relayouts = True  # a sequence-major result is a copy of the kernel's output (the launcher copies it too)
    splits = True  # under a launcher, a decode step may call its kernel once per KV head (``_per_kv_head``)

    def __init__(self, op):
        super().__init__(op)
        self._kernels: dict = {}
        self.decided = 0  # calls that took the causal kernel after reading the mask's values

    def __call__(self, out, q, k, v, mask, causal, scale, seq_major, lower_right=False):
        self.calls += 1
        from septran.ops import attention as ops_attention
        from septran.ops.heads import in_layout

        b, hq, sq, _ = q.shape
        sk = k.shape[2]
        masked = mask is not None
        if (masked and (mask.dtype != torch.bool or mask.device != q.device)) or not q.numel() or not sk \
                or not v.shape[3] or (causal and sq != sk and not lower_right):
            return self._slow(q, k, v, mask, causal, scale, seq_major, lower_right)
        if masked and not causal and sq > ops_attention.DECODE_ROWS:
            from septran.model.causal_mask import visible_prefix

            p = visible_prefix(mask, sq, sk)
            if p is not None:  # query i sees keys j <= i + p: causal, bottom-right, over the first p + sq keys
                self.decided += 1
                k, v, mask, masked, causal, lower_right, sk = k[:, :, :p + sq], v[:, :, :p + sq], None, False, \
                    True, True, p + sq
        variant = (causal, k.shape[1] != hq, sq <= ops_attention.DECODE_ROWS, masked)
        kernel = self._kernels.get(variant)
        if kernel is None:
            kernel = self._kernels[variant] = ops_attention.attention_kernel(
                steps._target(q.device), causal, variant[1], "bool" if masked else "none", decode=variant[2])
        if not masked and variant[2] and steps.recording_now():
            o = self._per_kv_head(kernel, variant, q, k, v, scale, seq_major)
            if o is not None:
                return o
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        if masked:  # the kernel for the mask passed: the optional tensor's own trace (septran.runtime.optional)
            from septran.runtime import optional

            m = ops_attention._mask4(mask, sq, sk)
            kernel, args, kwargs = optional.route(kernel, (q, k, v, m, float(scale)), {})
            self.kernel = kernel
            o = self._run((variant, q.shape, k.shape, v.shape, m.shape), args, kwargs)
        else:
            self.kernel = kernel
            o = self._run((variant, q.shape, k.shape, v.shape), (q, k, v, float(scale)), {})
        if o is None:
            return self._slow(q, k, v, mask, causal, scale, seq_major, lower_right)
        return in_layout(o, seq_major)

    def _per_kv_head(self, kernel, variant, q, k, v, scale, seq_major):
        """A decode step over a KV cache's slices, recorded by a launcher: one kernel call per batch and KV head,
        each on that head's keys and values where they lie in the cache (one contiguous block each, the blocks a
        cache's length apart) and writing that head's queries' rows of the result; None where the tensors do not
        lie so. The copies of the slices this saves read and wrote the whole cache at every step (about a tenth
        of a GPT-2 block's decode step, Zen 1); the launcher makes the calls from C. Without a launcher each call
        would cost Python time, so direct runs keep the one call on copies; so does the GPU launcher (a copy there
        runs at the device memory's speed, a launch per head does not)."""
        b, hq, sq, _ = q.shape
        hk, dv = k.shape[1], v.shape[3]
        if q.is_cuda or k.is_contiguous() and v.is_contiguous() or hq % hk or not q.is_contiguous() \
                or not all(_blocks(t) for t in (k, v)):
            return None
        from septran.ops.heads import empty_heads

        out = empty_heads((b, hq, sq, dv), q.dtype, q.device, seq_major)
        g = hq // hk
        parts = [(i, h) for i in range(b) for h in range(hk)]
        if not all(out[i:i + 1, h * g:(h + 1) * g].is_contiguous() for i, h in parts):
            return None  # (a sequence-major result of several queries: each head's rows are apart)
        self.kernel = kernel
        for i, h in parts:
            qs, ks, vs = q[i:i + 1, h * g:(h + 1) * g], k[i:i + 1, h:h + 1], v[i:i + 1, h:h + 1]
            if self._run(("per_kv_head", variant, qs.shape, ks.shape, vs.shape), (qs, ks, vs, float(scale)),
                         {"O": out[i:i + 1, h * g:(h + 1) * g]}) is None:
                return None
        return out


def _blocks(t: torch.Tensor) -> bool:
    """Each (batch, head) of a (B, H, S, D) tensor one contiguous block."""
    return (t.stride(3) == 1 or t.shape[3] == 1) and (t.stride(2) == t.shape[3] or t.shape[2] == 1)


class AttentionWritten(steps.Step):
    """``septran::attention_written``: the causal attention where the run-time check finds the mask causal, else the
    written-out torch ops. Not in ``FAST``: its check runs in Python at every call, so a launcher never replays it."""

    def __init__(self, op):
        super().__init__(op)
        self._attention = Attention(torch.ops.septran.attention.default)
        self.checked_calls = 0  # calls that ran the causal attention (tests count them)

    def __call__(self, out, q, k, v, keep, scale):
        self.calls += 1
        if not causal(q, k, keep):
            return self._slow(q, k, v, keep, scale)
        self.checked_calls += 1
        o = self._attention(None, q, k, v, None, True, scale, False, True)
        self.kernel = self._attention.kernel
        return o
