"""Model-level test helpers: capture a module's ATen inference graph (as the septran backend does, through
AOTAutograd), rewrite it with given patterns through the real rewrite (septran/model/rewrite.py: last node
first, each match checked before it is applied), run and compare."""
from __future__ import annotations

import contextlib

import torch
from torch._dynamo.backends.common import aot_autograd

from septran.model import rewrite as rewrite_module
from septran.model.patterns.base import Match


class _Recording:
    """``pattern`` as the rewrite asks it, keeping every answer (Match or Refusal) in the order asked."""

    def __init__(self, pattern, answers: list):
        self.pattern, self.answers = pattern, answers
        self.name = getattr(pattern, "name", type(pattern).__name__)

    def match(self, node):
        result = self.pattern.match(node)
        if result is not None:
            self.answers.append(result)
        return result


@contextlib.contextmanager
def _applied_matches(applied: list):
    """Collects each Match the rewrite applies (its ``_apply``): a Match its check refused is not among them."""
    real = rewrite_module._apply

    def keep(graph, match):
        done = real(graph, match)
        applied.append(match)
        return done

    rewrite_module._apply = keep
    try:
        yield
    finally:
        rewrite_module._apply = real


def rewrite(gm, patterns) -> tuple[list, list]:
    """``septran.model.rewrite.rewrite(gm, patterns)``; returns (every answer the patterns gave, less the Matches
    the rewrite did not apply; the Matches applied), each in the order the rewrite met them."""
    answers, applied = [], []
    with _applied_matches(applied):
        rewrite_module.rewrite(gm, [_Recording(p, answers) for p in patterns])
    kept = {id(m) for m in applied}
    return [r for r in answers if not isinstance(r, Match) or id(r) in kept], applied


def apply_patterns(gm, patterns, results: list):
    """Rewrites ``gm`` with ``patterns`` (the real rewrite); appends every applied Match and every Refusal."""
    results.extend(rewrite(gm, patterns)[0])
    return gm


def compiled(fn, patterns, results: list, dynamic=False):
    """``fn`` under torch.compile with a backend that rewrites its AOTAutograd inference graph with ``patterns``."""

    def fw(gm, example_inputs):
        return apply_patterns(gm, patterns, results).forward

    torch._dynamo.reset()  # the tests compile new closures of one code object: no cache limit, no stale guards
    return torch.compile(fn, backend=aot_autograd(fw_compiler=fw), fullgraph=True, dynamic=dynamic)


def err(out, ref) -> float:
    return (out.double() - ref.double()).abs().max().item()


def assert_flash_rule(out, ref64, torch_out, eps: float = 1e-5):
    """FlashAttention's rule: SepTran's error vs float64 at most twice torch's own in the same dtype, plus eps."""
    assert out.dtype == torch_out.dtype and out.shape == torch_out.shape
    e, t = err(out, ref64), err(torch_out, ref64)
    assert e <= 2 * t + eps, f"septran's error {e:.3e} vs torch's {t:.3e}"


def capture(module, *inputs, dynamic=None) -> list:
    """The ATen inference graphs (GraphModules) that torch.compile makes of ``module`` for ``inputs``."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(module, backend=aot_autograd(fw_compiler=keep), dynamic=dynamic, fullgraph=True)
    with torch.no_grad():
        compiled(*inputs)
    return graphs


def matches(gm, pattern) -> list:
    """What ``pattern`` returns at each node (Matches and Refusals), in graph order."""
    out = []
    for node in list(gm.graph.nodes):
        r = pattern.match(node)
        if r is not None:
            out.append(r)
    return out


def apply(gm, *patterns) -> list:
    """Rewrites ``gm`` with ``patterns`` (the real rewrite); returns the Matches applied."""
    return rewrite(gm, patterns)[1]


def compile_with(module, *patterns, dynamic=None, record=None):
    """``torch.compile(module)`` whose ATen graphs the rewrite takes with ``patterns`` (``record`` collects the
    Matches applied)."""

    def fw(gm, example_inputs):
        found = apply(gm, *patterns)
        if record is not None:
            record.extend(found)
        return gm.forward

    torch._dynamo.reset()
    return torch.compile(module, backend=aot_autograd(fw_compiler=fw), dynamic=dynamic, fullgraph=True)


def count_builds(monkeypatch) -> list:
    """Every program SepTran builds from now on, by name: each variant's binary, the first time it is asked for,
    whether g++ runs or the build cache holds it (a test's count must not depend on what ran before it)."""
    from septran.build.job import Job

    built = []
    real = Job.binary

    def binary(job):
        if job._binary is None:
            built.append(job.program.name)
        return real(job)

    monkeypatch.setattr(Job, "binary", binary)
    return built
