"""A segment on a GPU target: one ctypes call into its CUDA launcher on the current stream, captured as a CUDA
graph per shape bucket.

Recording, the outputs' layouts and the fallback to the steps are the cpu segment's (``runner.Segment``); the
source is ``cuda_source``'s, built by nvcc (``cuda_build``) for the device's architecture. Scratch buffers lie in
a device arena per shape bucket and stream (work on one stream is ordered, so a call reuses the arena its
previous call on that stream used; another stream gets its own).

CUDA graphs: the first launch of a bucket (sizes) on a stream runs directly and writes down the input addresses;
the second with the same addresses is captured (``torch.cuda.graph``) into a graph that owns its own arena and
its own output buffers, and replayed; later calls with the same addresses replay it, and their outputs held in
the graph's buffers are cloned (the next replay overwrites them). A call whose input addresses differ from the
captured ones runs directly (a graph replays the addresses it captured: never a guess). A capture that fails
leaves the bucket on direct launches. ``SEPTRAN_CUDA_GRAPHS=0`` turns capture off.
"""
from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass, field
from typing import Optional

import torch

from septran import env
from septran.errors import BuildError, DeviceError
from septran.model.launcher import cuda_build, cuda_source
from septran.model.launcher.cexpr import Unsupported
from septran.model.launcher.cuda_record import CudaRecorder
from septran.model.launcher.runner import Segment, _with_slots
from septran.runtime.vendor import check_errors

log = logging.getLogger(__name__)
GRAPHS_KEPT = 8  # captured graphs kept per segment (buckets x streams)


def arch_of(device: torch.device) -> str:
    """nvcc's architecture for ``device`` (sm_90a, not sm_90: TileLang's Hopper code needs the a-variant)."""
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}{'a' if major == 9 else ''}"


@dataclass
class _Bucket:
    """One (sizes, stream): the arena of its direct launches, the input addresses seen last, and its graph."""

    arena: Optional[torch.Tensor] = None
    seen: Optional[tuple] = None  # input addresses of the last direct launch
    graph: Optional[object] = None  # torch.cuda.CUDAGraph
    ptrs: Optional[tuple] = None  # the addresses the graph captured
    held: dict = field(default_factory=dict)  # the graph's own arena and output buffers (slot -> tensor)
    failed: bool = False  # capture failed: direct launches only


class CudaSegment(Segment):
    """``runner.Segment`` on one CUDA device."""

    recorder = CudaRecorder

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._buckets: dict = {}
        self.captures = 0  # graphs captured (tests count them)
        self.replays = 0

    def _load(self, rec: CudaRecorder, slot: dict, index: dict) -> None:
        """As ``Segment._load``; a launcher nvcc cannot build leaves the segment on its steps (said in the log)."""
        device = next((v.device for v in rec.inputs if isinstance(v, torch.Tensor)), None)
        if device is None or device.type != "cuda":
            raise Unsupported("the segment has no input on a CUDA device")
        self._device = device
        self.source = cuda_source.emit(_with_slots(rec.program, slot), index)
        try:
            self._lib, self.fn_c, self._arena_bytes = cuda_build.load(self.source, arch_of(device))
        except BuildError as err:
            raise Unsupported(f"nvcc did not build its launcher: {str(err)[:500]}") from err
        handles = [h for h, _, _ in rec.kernels]
        self._F = (ctypes.c_void_p * (cuda_source.API + max(1, len(handles))))(*cuda_build.api(), *handles)
        self._kernels = [(entry, fn) for _, entry, fn in rec.kernels]  # kept alive: they own the handles in F

    # launching -------------------------------------------------------------------------------------------------
    def _launch(self, inputs: tuple):
        key, allocs, outs = self._sized(inputs)
        stream = torch.cuda.current_stream(self._device)
        ptrs = tuple(inputs[i].data_ptr() for i in self._tensor_inputs)
        b = self._buckets.get((key, stream.cuda_stream))
        if b is None:
            b = self._buckets[(key, stream.cuda_stream)] = _Bucket()
            while len(self._buckets) > GRAPHS_KEPT:
                old = self._buckets.pop(next(iter(self._buckets)))
                if old.graph is not None:  # a replay of it may still run: its graph and buffers go after it
                    torch.cuda.synchronize(self._device)
        if b.graph is not None and b.ptrs == ptrs:
            b.graph.replay()
            self.replays += 1
            self.launches += 1
            return self._results(inputs, b.held, outs, clone=True)
        if b.graph is None and not b.failed and b.seen == ptrs and env.cuda_graphs():
            held = self._capture(b, inputs, key, allocs)
            if held is not None:
                return self._results(inputs, held, outs, clone=True)
        if b.arena is None:
            b.arena = self._new_arena(key)
        buffers = self._allocate(allocs, self._device)
        self._call(inputs, key, buffers, b.arena, stream.cuda_stream)
        b.seen = ptrs
        return self._results(inputs, buffers, outs, clone=False)

    def _new_arena(self, key: tuple) -> torch.Tensor:
        n = self._arena_bytes(self._S(*key))
        return torch.empty(max(n, 1), dtype=torch.uint8, device=self._device)

    def _call(self, inputs: tuple, key: tuple, buffers: dict, arena: torch.Tensor, stream: int) -> None:
        P, S = self._P(), self._S(*key)
        for j, ptr in self._pinned_ptrs:
            P[j] = ptr
        for i in self._tensor_inputs:
            P[i] = inputs[i].data_ptr()
        for slot, buf in buffers.items():
            P[slot] = buf.data_ptr()
        rc = self.fn(self._F, P, S, arena.data_ptr(), stream, self._device.index or 0)
        self.launches += 1
        if rc:
            said = cuda_build.raised_error() if rc < 0 or rc % 1000 == 1 else None  # (taken: the slot is emptied)
            raise DeviceError(f"segment {self.__name__}: its GPU launcher returned {rc} (op {rc // 1000 - 1}, code "
                              f"{rc % 1000}: 1 a kernel's host entry refused or failed, 2 a CUDA call failed, 3 a copy "
                              f"it cannot do){': ' + said if said else ''}" if rc > 0 else
                              f"segment {self.__name__}: setting the stream failed: {said}")
        for target in self._checks:
            check_errors(target, f"a kernel of segment {self.__name__}")

    def _capture(self, b: _Bucket, inputs: tuple, key: tuple, allocs: list) -> Optional[dict]:
        """Captures this call into a graph (with its own arena and outputs) and replays it: the outputs' buffers,
        or None where capture failed (then the bucket stays on direct launches)."""
        held = self._allocate(allocs, self._device)
        arena = self._new_arena(key)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self._call(inputs, key, held, arena, torch.cuda.current_stream(self._device).cuda_stream)
        except (RuntimeError, DeviceError) as err:
            b.failed = True
            log.info("septran: segment %s: no CUDA graph for sizes %s (%s); launching directly", self.__name__,
                     key, err)
            return None
        held["arena"] = arena
        b.graph, b.ptrs, b.held = graph, tuple(inputs[i].data_ptr() for i in self._tensor_inputs), held
        self.captures += 1
        graph.replay()
        self.replays += 1
        return held
