"""The report's FLOPs where the graph's sizes are symbolic: counted at the example's size (the size's hint), not
as 1 (torch 2.13 renamed the hint function the report used, and every symbolic size had counted as 1)."""
from __future__ import annotations

import torch

import septran


def test_a_dynamic_graph_counts_its_flops_at_the_examples_sizes():
    lin = torch.nn.Linear(24, 40, bias=False)
    x = torch.randn(3, 17, 24)
    torch._dynamo.reset()
    report = septran.explain_model(lin, (x,), dynamic=True)  # dry: nothing built
    torch._dynamo.reset()
    assert any("s" in r.shape for r in report.rows), str(report)  # the sizes are symbolic
    assert report.total_flops == 2 * 3 * 17 * 24 * 40, str(report)
