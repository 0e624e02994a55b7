"""The imported graph goes the way ``torch.compile(backend="septran")`` takes a captured one: AOTAutograd to
ATen, then the model level's inference compiler (``septran.model.backend``): the rewrite, the kernels, the
report. Dynamo is not needed (the graph is already FX, specialised to its shapes). Before the rewrite the ATen
nodes' ONNX origins are read off their ``stack_trace`` (set by ``builder.Builder``)."""
from __future__ import annotations

import torch

from septran.model.report import Report


def compile_fx(gm: torch.fx.GraphModule, example_inputs: list, labels: dict):
    """``(run, report, origin)``: ``run(*inputs)`` gives the outputs as a list, ``report`` is the model level's
    (one row per ATen node), ``origin`` maps an ATen node's name to its ONNX node's index."""
    from torch._dynamo.backends.common import aot_autograd

    from septran.model import backend

    reports: list = []
    origin: dict = {}
    rewrite_and_build = backend._inference_compiler(reports, dry=False)

    def inference(aten_gm, aten_inputs):
        for node in aten_gm.graph.nodes:
            index = labels.get(node.meta.get("stack_trace"))
            if index is not None:
                origin[node.name] = index
        return rewrite_and_build(aten_gm, aten_inputs)

    compiler = aot_autograd(fw_compiler=backend._training_compiler, inference_compiler=inference)
    with torch.no_grad():
        run = compiler(gm, example_inputs)
    merged = Report()
    for r in reports:
        merged.extend(r)
    return run, merged, origin
