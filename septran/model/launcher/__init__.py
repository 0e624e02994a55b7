"""The cpu launcher: each segment of a lowered graph (its steps and the glue between them) runs as one generated C
function, called once per segment per call (one Python-to-C crossing, not one per kernel).

``segments.cut`` finds the segments, ``segments.replace`` puts a ``runner.Segment`` in their place; on its first
call a segment records itself (``record``) and its launcher's C (``source``) is built and cached (``build``).
Views, reshapes, transposes and slices become pointer offsets and strides; a KV-cache write and a contiguous
copy a kernel needs become copies inside the launcher; the dynamic sizes (a cache length) are arguments, so one
launcher serves every size. What it cannot express keeps the segment on its steps (today's path): never a guess.

``SEPTRAN_LAUNCHER=0`` turns it off (the direct runner's steps run as before). On a GPU target (a graph whose
tensors are on one CUDA device) the same segments run as CUDA launchers built with nvcc (``cuda_source``,
``cuda_build``, ``cuda_runner``: each kernel's TVM-FFI host entry called on the current stream, copies as
``cudaMemcpyAsync`` or a strided-copy kernel, scratch in a device arena, a CUDA graph captured per shape bucket);
never run on a device yet, so opt-in: ``SEPTRAN_LAUNCHER_CUDA=1`` (otherwise a GPU graph runs its steps).
"""
from __future__ import annotations

import logging

import torch.fx as fx

from septran import env

log = logging.getLogger(__name__)


def enabled() -> bool:
    return env.launcher()


def runs_on(devices: set) -> bool:
    """Whether a graph whose tensors are on ``devices`` (their types) gets launchers: the host's, or one CUDA device
    where ``SEPTRAN_LAUNCHER_CUDA=1``, torch sees a GPU and nvcc is installed."""
    import torch

    if devices == {torch.zeros(()).cpu().device.type}:  # the host's (the launcher calls host C functions)
        return True
    if devices != {"cuda"} or not env.launcher_cuda() or not torch.cuda.is_available() or torch.version.hip:
        return False
    from septran.build.toolchain import nvcc_path

    return nvcc_path() is not None


def launch(gm: fx.GraphModule, arena_node=None) -> list:
    """Replaces each segment of ``gm``'s graph by one launcher node (in place); returns the ``Segment``s."""
    from septran.model.launcher import segments

    _fill_meta(gm.graph)
    found = segments.cut(gm.graph, arena_node)
    make = _segment_class(gm.graph)
    out = [segments.replace(gm, nodes, f"septran_segment_{i}", make) for i, nodes in enumerate(found)]
    return out


def _segment_class(graph: fx.Graph):
    import torch

    from septran.model.launcher.runner import Segment

    devices = {v.device for n in graph.nodes for v in [n.meta.get("val")] if isinstance(v, torch.Tensor)}
    if len(devices) == 1 and next(iter(devices)).type == "cuda":
        from septran.model.launcher.cuda_runner import CudaSegment

        return CudaSegment
    return Segment


def _fill_meta(graph: fx.Graph) -> None:
    """Fake values for ATen nodes a rewrite added without one (the in-place KV-cache write's slice and copy_)."""
    import torch

    for n in graph.nodes:
        if n.op != "call_function" or n.meta.get("val") is not None or not isinstance(n.target, torch._ops.OpOverload):
            continue
        vals = [a.meta.get("val") for a in n.all_input_nodes]
        if any(v is None for v in vals):
            continue
        mode = torch._guards.detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
        if mode is None:
            continue
        try:
            with mode:
                n.meta["val"] = n.target(*fx.node.map_arg(n.args, lambda a: a.meta["val"]),
                                         **fx.node.map_arg(n.kwargs, lambda a: a.meta["val"]))
        except Exception:  # noqa: BLE001 - without a value the node stays with torch, as before
            log.debug("no fake value for %s", n.name, exc_info=True)
