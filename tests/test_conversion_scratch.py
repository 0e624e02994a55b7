"""The runtime's conversions on the host (a bfloat16 tensor computed in float32) reuse per-thread scratch instead of
allocating their float32 temporaries per call (septran/runtime/conversion_scratch.py): glibc returned large ones
to the OS and faulted them in again on every call."""
from __future__ import annotations

import threading

import pytest
import torch

import septran
from conftest import REPO, edited_mapping
from septran.runtime import conversion_scratch

pytestmark = pytest.mark.build


@pytest.fixture(scope="module")
def softmax(tmp_path_factory):
    """The softmax computing bfloat16 in the runtime's float32 copies (the shipped mapping keeps bfloat16)."""
    path = edited_mapping(tmp_path_factory.mktemp("converts"), "cpu", "softmax", ("keep_dtypes: [bfloat16]\n", ""))
    return septran.compile(logic_file=REPO / "examples" / "softmax" / "softmax.py", mapping_file=path)


def _buffers():
    return {k: (b.data_ptr(), b.numel()) for k, b in getattr(conversion_scratch._local, "bufs", {}).items()}


def test_converted_calls_reuse_their_temporaries_and_return_their_own_outputs(softmax):
    conversion_scratch.clear()
    gen = torch.Generator().manual_seed(0)
    x1, x2 = (torch.randn(33, 700, generator=gen).bfloat16() for _ in range(2))
    y1 = softmax(x1)
    held = _buffers()
    assert len(held) == 2  # X's float32 copy and the float32 Y, each a slot
    y2 = softmax(x2)
    assert _buffers() == held  # the same buffers, not new ones
    assert y1.dtype == torch.bfloat16 and y1.data_ptr() != y2.data_ptr()
    assert all(y1.data_ptr() != ptr for ptr, _ in held.values())
    for x, y in ((x1, y1), (x2, y2)):  # the first result is intact after the second call
        torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), rtol=1e-2, atol=1e-2)
    smaller = softmax(x1[:5])  # a smaller call fits in the same buffers
    assert _buffers() == held
    torch.testing.assert_close(smaller.float(), torch.softmax(x1[:5].float(), -1), rtol=1e-2, atol=1e-2)
    conversion_scratch.clear()
    assert _buffers() == {}


def test_each_thread_has_its_own_scratch(softmax):
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randn(17, 300, generator=gen).bfloat16() for _ in range(4)]
    want = [torch.softmax(x.float(), -1) for x in xs]
    got, errors = [None] * 4, []

    def run(i):
        try:
            for _ in range(20):
                got[i] = softmax(xs[i])
        except Exception as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for g, w in zip(got, want):
        torch.testing.assert_close(g.float(), w, rtol=1e-2, atol=1e-2)
