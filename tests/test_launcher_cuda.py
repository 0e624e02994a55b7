"""The GPU segment launcher (septran/model/launcher/cuda_*), as far as a machine without a GPU checks it: the CUDA
source of a small decode-like segment (a golden file), nvcc accepting it (and its cache), its host half run with
stand-ins for TVM-FFI (each kernel gets DLTensors with the right pointers, shapes, strides and types, on the
stream passed in, which is put back), and a real TileLang sm_80 kernel's host entry accepting the launcher's
arguments up to the driver call (no GPU: it fails there) and refusing a wrong shape with its own message. The
device half (kernels, copies, CUDA graphs) runs only in test_launcher_cuda_gpu.py, where a GPU is lent."""
from __future__ import annotations

import ctypes

import pytest
import sympy
import torch

from conftest import has_cuda_gpu, needs_nvcc
from septran.model.launcher import cuda_source as cs
from septran.model.launcher.source import Copy, Program, Ptr, Zero

L = sympy.Symbol("kv_len", integer=True)  # a cache length
ONE, SIXTEEN = sympy.Integer(1), sympy.Integer(16)


def _dense(*sizes):
    from septran.model.launcher.views import contiguous_strides

    sizes = tuple(sympy.Integer(s) if isinstance(s, int) else s for s in sizes)
    return sizes, contiguous_strides(sizes)


def _program() -> Program:
    """A norm into a scratch row, the row written into a (3, L, 16) KV cache at position L - 1, an accumulator
    zeroed, and a kernel reading the cache (bfloat16) and writing the accumulator."""
    row, cache, acc = _dense(1, 48), _dense(3, L, 16), _dense(1, 48)
    p = Program()
    p.scratch.append(sympy.Integer(48 * 4))
    p.ops.append(cs.KernelCall(0, (cs.Tensor(Ptr(0, sympy.Integer(0)), *row, torch.float32),
                                   cs.Tensor(Ptr(("tmp", 0), sympy.Integer(0)), *row, torch.float32))))
    p.ops.append(Copy(Ptr(1, (L - 1) * 16 * 4), Ptr(("tmp", 0), sympy.Integer(0)), (sympy.Integer(3), ONE, SIXTEEN),
                      (L * 16, SIXTEEN, ONE), (SIXTEEN, SIXTEEN, ONE), 4))
    p.ops.append(Zero(Ptr(2, sympy.Integer(0)), sympy.Integer(48 * 4)))
    p.ops.append(cs.KernelCall(1, (cs.Tensor(Ptr(3, sympy.Integer(0)), *cache, torch.bfloat16),
                                   cs.Tensor(Ptr(2, sympy.Integer(0)), *acc, torch.float32))))
    return p


def test_source_matches_its_golden_and_is_deterministic(golden):
    text = cs.emit(_program(), {L: 0})
    golden("launcher_cuda_segment.cu", text)
    assert cs.emit(_program(), {L: 0}) == text
    assert "kv_len" not in text  # sizes are S[...]: no name of the graph's in it


def test_escaping_scratch_becomes_a_buffer_slot():
    from septran.model.launcher.cuda_runner import _with_slots

    p = Program(scratch=[sympy.Integer(8), sympy.Integer(192)])  # scratch 0 escapes (an output the caller reads)
    p.ops.append(cs.KernelCall(0, (cs.Tensor(Ptr(("tmp", 0), sympy.Integer(0)), *_dense(2), torch.float32),
                                   cs.Tensor(Ptr(("tmp", 1), sympy.Integer(4)), *_dense(1), torch.float32))))
    p.ops.append(Zero(Ptr(("tmp", 1), sympy.Integer(0)), sympy.Integer(4)))
    out = _with_slots(p, {("tmp", 0): 4})
    assert out.scratch == [sympy.Integer(192)]
    assert [t.ptr for t in out.ops[0].args] == [Ptr(4, sympy.Integer(0)), Ptr(("tmp", 0), sympy.Integer(4))]
    assert out.ops[1].dst == Ptr(("tmp", 0), sympy.Integer(0))


class _DLDevice(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int32), ("id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Any(ctypes.Structure):
    _fields_ = [("type_index", ctypes.c_int32), ("padding", ctypes.c_uint32), ("v", ctypes.c_void_p)]


_CALL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_Any), ctypes.c_int32, ctypes.POINTER(_Any))
_SET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p,
                        ctypes.POINTER(ctypes.c_void_p))


@pytest.mark.build
@needs_nvcc
def test_nvcc_builds_it_once_and_its_host_half_passes_the_kernels_their_tensors():
    from septran.model.launcher import cuda_build

    text = cs.emit(_program(), {L: 0})
    before = cuda_build.BUILDS[0]
    lib, fn, arena = cuda_build.load(text, "sm_80")
    again = cuda_build.load(text, "sm_80")  # the cache: no second nvcc run
    assert cuda_build.BUILDS[0] - before <= 1 and again[0]._name == lib._name
    assert cuda_build.key(text, "sm_80") != cuda_build.key(text, "sm_90a")
    S = (ctypes.c_int64 * 1)(7)
    assert arena(S) == 256  # one scratch row of 192 bytes, aligned
    if has_cuda_gpu():
        pytest.skip("the stand-in pointers below would reach a real device (test_launcher_cuda_gpu.py runs it)")
    seen, streams = [], []

    def call(handle, args, n, result):
        for i in range(n):
            t = ctypes.cast(args[i].v, ctypes.POINTER(_DLTensor)).contents
            seen.append((handle, args[i].type_index, t.data, (t.device.type, t.device.id), (t.dtype.code, t.dtype.bits),
                         [t.shape[k] for k in range(t.ndim)], [t.strides[k] for k in range(t.ndim)], t.byte_offset))
        assert result.contents.type_index == 0
        return 0

    def set_stream(device_type, device, stream, before):
        streams.append((device_type, device, stream))
        if before:
            before[0] = 555
        return 0

    c, s = _CALL(call), _SET(set_stream)
    F = (ctypes.c_void_p * 4)(ctypes.cast(c, ctypes.c_void_p).value, ctypes.cast(s, ctypes.c_void_p).value, 11, 12)
    P = (ctypes.c_void_p * 4)(1 << 20, 2 << 20, 3 << 20, 4 << 20)
    rc = fn(F, P, S, 9 << 20, 777, 1)
    # the norm got its input and the arena's row; the copy after it needs the CUDA runtime, which has no device
    # here: "a CUDA call failed" at op 1 (the copy: 1000 * 2 + 2), and the caller's stream is put back
    assert seen == [(11, 7, 1 << 20, (2, 1), (2, 32), [1, 48], [48, 1], 0),
                    (11, 7, 9 << 20, (2, 1), (2, 32), [1, 48], [48, 1], 0)]
    assert rc == 2002
    assert streams == [(2, 1, 777), (2, 1, 555)]


@pytest.mark.build
@needs_nvcc
def test_a_tilelang_kernels_host_entry_takes_the_launchers_arguments():
    """TileLang's own argument checks (ndim, dtype, shape, strides, byte offset, device) pass for the launcher's
    DLTensors: the call gets to the device (which this machine lacks); a wrong size is refused with its message."""
    if has_cuda_gpu():
        pytest.skip("the stand-in pointers would reach a real device")
    import tilelang
    import tilelang.language as T

    from septran.model.launcher import cuda_build
    from septran.model.launcher.cuda_record import host_entry

    n = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((n, 16), "float32"), B: T.Tensor((n, 16), "float32")):
        with T.Kernel(T.ceildiv(n, 4), threads=64) as bx:
            for i, j in T.Parallel(4, 16):
                B[bx * 4 + i, j] = A[bx * 4 + i, j] * 2.0

    kernel = tilelang.compile(main, target={"kind": "cuda", "arch": "sm_80"}, execution_backend="tvm_ffi")
    width = sympy.Symbol("s1", integer=True)  # B's width from S: 16 is right, 15 is not
    p = Program()
    p.ops.append(cs.KernelCall(0, (cs.Tensor(Ptr(0, sympy.Integer(0)), *_dense(L, 16), torch.float32),
                                   cs.Tensor(Ptr(1, L * 64), *_dense(L, width), torch.float32))))
    lib, fn, _ = cuda_build.load(cs.emit(p, {L: 0, width: 1}), "sm_80")
    entry = host_entry(kernel)
    F = (ctypes.c_void_p * 3)(*cuda_build.api(), entry.__chandle__())
    P = (ctypes.c_void_p * 2)(1 << 20, 2 << 20)
    assert fn(F, P, (ctypes.c_int64 * 2)(5, 16), 0, None, 0) == 1001
    assert "CUDA" in cuda_build.raised_error()  # past every argument check: no driver here
    assert fn(F, P, (ctypes.c_int64 * 2)(5, 15), 0, None, 0) == 1001
    assert "shape[1]" in cuda_build.raised_error()
    assert cuda_build.raised_error() is None  # taken


def test_gpu_graphs_get_launchers_only_when_asked_and_able(monkeypatch):
    from septran.model import launcher

    monkeypatch.delenv("SEPTRAN_LAUNCHER_CUDA", raising=False)
    assert launcher.runs_on({"cpu"}) and not launcher.runs_on({"cuda"}) and not launcher.runs_on({"cpu", "cuda"})
    monkeypatch.setenv("SEPTRAN_LAUNCHER_CUDA", "1")
    from conftest import has_nvcc

    # no device (or no nvcc): the graph runs its steps, as before
    assert launcher.runs_on({"cuda"}) == (has_cuda_gpu() and has_nvcc())


@pytest.mark.build
@needs_nvcc
def test_a_llama_decode_segment_recorded_for_cuda_builds_with_nvcc(monkeypatch):
    """The CUDA recorder and source on a real segment: the odd-sized Llama block's decode graph, compiled on cpu
    (no GPU here), has its segments re-recorded by the CUDA recorder with each cpu kernel standing in for a GPU
    one (same tensors, TileLang-like parameters); every segment records, its CUDA source names none of the
    graph's nodes, holds one kernel call per step, and nvcc builds one of them."""
    import functools
    from types import SimpleNamespace

    from conftest import REPO, load_module
    from septran.build.c_builder import CKernel
    from septran.model.backend import septran_backend
    from septran.model import executor
    from septran.model.launcher import cuda_build, cuda_record, cuda_runner, cuda_source
    from septran.model.launcher.cexpr import Unsupported
    from septran.model.launcher.runner import Segment

    model_runner = load_module(REPO / "examples" / "model_runner.py")
    if model_runner.unavailable("septran") is not None:
        pytest.skip(str(model_runner.unavailable("septran")))
    llama = model_runner.load(REPO / "examples" / "llama_block" / "model.py", "septran_example_llama_block_model")

    class StandIn(cuda_record.CudaRecorder):
        def _takes(self, fn):
            return isinstance(fn, CKernel)

        def _call(self, n, plan, fn, params):
            shapes = [[object() if e.free_symbols else int(e) for e in d.sizes] for d in params]
            like = SimpleNamespace(adapter=SimpleNamespace(params=[SimpleNamespace(shape=s) for s in shapes]))
            super()._call(n, plan, like, params)

    class Probe(cuda_runner.CudaSegment):
        recorder = StandIn

        def _load(self, rec, slot, index):
            self.source = cuda_source.emit(cuda_runner._with_slots(rec.program, slot), index)
            raise Unsupported("probe: no launcher built")

    monkeypatch.setattr(cuda_record, "host_entry", lambda fn: SimpleNamespace(__chandle__=lambda: 0))
    monkeypatch.setenv("SEPTRAN_DIRECT", "1")
    monkeypatch.setenv("SEPTRAN_LAUNCHER", "1")
    made, real = [], executor.lower
    monkeypatch.setattr(executor, "lower", lambda gm, **kw: made.append(real(gm, **kw)) or made[-1])
    seen, launch = {}, Segment._launch
    monkeypatch.setattr(Segment, "_launch", lambda self, inputs: (seen.__setitem__(self, inputs),
                                                                   launch(self, inputs))[1])
    torch._dynamo.reset()
    try:
        model = llama.build(llama.LlamaConfig(hidden=48, heads=3, kv_heads=1, head_dim=16, intermediate=100,
                                              max_len=48))
        fn = torch.compile(model, backend=functools.partial(septran_backend), fullgraph=True)
        caches, gen, pos = model.new_cache(), torch.Generator().manual_seed(0), 0
        with torch.no_grad():
            for i in range(3):  # the prefill, the decode step that records, one that launches
                x = torch.randn(1, 7 if i == 0 else 1, 48, generator=gen)
                fn(x, pos, *caches)
                pos += x.shape[1]
            decode = made[-1].segments
            assert decode and all(s in seen for s in decode)
            sources = []
            for s in decode:  # its nodes run once more on the same inputs (the KV write writes the same values)
                probe = Probe(s.sub, s.__name__, s.nsteps)
                probe._record(seen[s])
                assert probe.why_not == "Unsupported: probe: no launcher built", probe.why_not
                sources.append(probe.source)
    finally:
        torch._dynamo.reset()
    for s, text in zip(decode, sources):
        assert text.count("if (call(F[") == s.nsteps
        names = {n.name for n in s.sub.graph.nodes if len(n.name) >= 6}
        assert not [name for name in names if name in text]
    biggest = max(sources, key=len)
    assert "st_copy(" in "".join(sources)  # the KV-cache write, as a copy on the stream
    cuda_build.built(biggest, "sm_80")
