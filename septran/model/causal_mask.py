"""Is a bool mask the causal lower triangle? Checked on its content, and the answer kept while the tensor is unchanged.

GPT-2's and nanoGPT's causal mask is a registered buffer: after capture it is a graph input whose values the
compiler cannot see, so the written-out attention's pattern cannot prove it causal at compile time
(``septran.model.patterns.written_attention``). ``lower_right(keep, sq, sk)`` checks it at run time: True when
``keep`` (broadcast to (..., Sq, Sk)) is ``ones(Sq, Sk).tril(Sk - Sq)`` everywhere, the causal mask aligned
bottom-right (query i sees keys j <= i + Sk - Sq).

The check reads the whole mask (about 0.5 ms for a strided 512 x 512 slice of a bool buffer on one core), so its
answer is kept per tensor and reused while nothing can have changed it: the same storage (held by a weak
reference, so a new tensor at a freed address is never taken for the old one), the same offset, sizes and
strides, and the same version counter (``tensor._version``, shared by a tensor and its views, bumped by every
in-place write through them, ``masked_fill_``, ``copy_``, ``[...] =`` included). A tensor without a version counter
(an inference-mode tensor) is checked at every call. A write the version counter does not see (through
``tensor.data`` or memory shared with another library) is not seen here either, as for autograd's own check of
saved tensors.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import torch
from torch.multiprocessing.reductions import StorageWeakRef

_KEPT = 64  # answers kept (per process): one per mask view a model's graphs pass
_answers: OrderedDict = OrderedDict()
_lock = threading.Lock()
checks = 0  # how many times a mask's content was read (tests count them)


def lower_right(keep: torch.Tensor, sq: int, sk: int) -> bool:
    """``keep`` is True exactly where query i may see key j <= i + sk - sq, for every leading index."""
    if keep.dtype != torch.bool:
        return False
    key, ref, version = _key(keep)
    if key is not None:
        with _lock:
            found = _answers.get(key)
        if found is not None and not found[0].expired() and found[1] == version:
            return found[2]
    answer = _check(keep, sq, sk)
    if key is not None:
        with _lock:
            _answers[key] = (ref, version, answer)
            _answers.move_to_end(key)
            while len(_answers) > _KEPT:
                _answers.popitem(last=False)
    return answer


def _key(t: torch.Tensor):
    """(the key of ``t``'s place and layout, a weak reference to its storage, its version), or Nones when it has no
    version counter to trust."""
    try:
        version = t._version
    except RuntimeError:  # an inference tensor keeps no version counter
        return None, None, None
    ref = StorageWeakRef(t.untyped_storage())
    return (ref.cdata, t.device, t.storage_offset(), tuple(t.shape), tuple(t.stride())), ref, version


def _check(keep: torch.Tensor, sq: int, sk: int) -> bool:
    global checks
    checks += 1
    shape = _shape(keep, sq, sk)
    if shape is None or not keep.numel():
        return False
    return _is_tril(keep, shape, sk - sq)


def _shape(keep: torch.Tensor, sq: int, sk: int):
    """The shape ``keep`` broadcasts to with (Sq, Sk) when it ends in (Sq, Sk), else None."""
    try:
        shape = torch.broadcast_shapes(keep.shape, (sq, sk))
    except RuntimeError:
        return None
    return shape if tuple(shape[-2:]) == (sq, sk) else None


def _is_tril(keep: torch.Tensor, shape, diagonal: int) -> bool:
    """``keep``, broadcast to ``shape``, is ``ones(Sq, Sk).tril(diagonal)`` at every leading index."""
    ref = torch.ones(*shape[-2:], dtype=torch.bool, device=keep.device).tril(diagonal)
    return bool(torch.equal(keep.expand(shape), ref.expand(shape)))


def visible_prefix(keep: torch.Tensor, sq: int, sk: int):
    """``p`` where ``keep`` (bool, broadcast to (..., Sq, Sk)) is True exactly where key j <= i + p, with
    0 <= p and p + Sq <= Sk, for every leading index; else None. Hugging Face's static-cache mask is this, with p
    the cache position: the keys past each query's position hidden, the cache's unwritten tail included. Then the
    mask's attention is the causal attention aligned bottom-right over the first p + Sq keys. Read whole at each
    call (a mask a graph computes is a new tensor every call; about 0.1 ms for 512 x 512)."""
    global checks
    if keep.dtype != torch.bool or not keep.numel() or sq < 1:
        return None
    shape = _shape(keep, sq, sk)
    if shape is None:
        return None
    checks += 1
    first = keep.expand(shape)[(0,) * (len(shape) - 2) + (0,)]
    p = int(first.sum()) - 1
    if p < 0 or p + sq > sk:
        return None
    return p if _is_tril(keep, shape, p) else None
