"""The model level's core: the "septran" torch.compile backend, the rewrite, the report and the GEMM family."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import septran
from septran.ops import kernels
from septran.ops.gemm import reference as gemm_reference
from support.model_graphs import count_builds as _count_builds

pytestmark = pytest.mark.build  # every test here captures a graph or runs an op: kernels are built

torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()




def assert_flash_close(out, ref64, torch_out) -> None:
    """FlashAttention's rule: SepTran's error vs float64 at most twice torch's own, plus a small epsilon."""
    torch_err = (torch_out.double() - ref64).abs().max().item()
    err = (out.double() - ref64).abs().max().item()
    assert err <= 2 * torch_err + 1e-5, (err, torch_err)


class MLP(torch.nn.Module):
    def __init__(self, d=13, hidden=37, out=11, act=None, bias=True):
        super().__init__()
        self.fc1 = torch.nn.Linear(d, hidden, bias=bias)
        self.act = act or torch.nn.GELU()
        self.fc2 = torch.nn.Linear(hidden, out, bias=bias)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class WithCumsum(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(13, 19)
        self.fc2 = torch.nn.Linear(19, 7)

    def forward(self, x):
        return self.fc2(torch.cumsum(F.relu(self.fc1(x)), dim=1))


def _check(model, x, **compile_kw):
    with torch.no_grad():
        compiled = torch.compile(model, backend="septran", **compile_kw)
        out = compiled(x)
        ref64 = model.double()(x.double())
        model.float()
        assert_flash_close(out, ref64, model(x))


@pytest.mark.parametrize("act", [torch.nn.GELU(), torch.nn.GELU(approximate="tanh"), torch.nn.ReLU(), torch.nn.SiLU()],
                         ids=["gelu", "gelu_tanh", "relu", "silu"])
def test_mlp_matches_eager_fullgraph(act):
    _check(MLP(act=act), torch.randn(3, 29, 13), fullgraph=True)


def test_mlp_without_bias_and_2d_input():
    _check(MLP(bias=False), torch.randn(31, 13), fullgraph=True)


def test_bmm_of_activations():
    def f(a, b):
        return torch.bmm(a, b.transpose(1, 2)) * 0.5

    a, b = torch.randn(3, 17, 24), torch.randn(3, 9, 24)
    with torch.no_grad():
        out = torch.compile(f, backend="septran", fullgraph=True)(a, b)
    assert_flash_close(out, f(a.double(), b.double()), f(a, b))
    report = septran.explain_model(f, (a, b))
    assert any(r.runs == "SepTran: examples/bmm" for r in report.rows)


def test_unknown_op_stays_with_torch_and_report_says_so():
    model = WithCumsum()
    x = torch.randn(2, 23, 13)
    _check(model, x, fullgraph=True)
    report = septran.explain_model(model, (x,))
    cumsum = [r for r in report.rows if r.op == "aten.cumsum"]
    assert len(cumsum) == 1 and cumsum[0].runs == "torch: no pattern knows aten.cumsum"
    assert cumsum[0].flops == 2 * 23 * 19
    relu = [r for r in report.rows if r.op == "aten.relu"]
    assert relu[0].runs.startswith("SepTran: examples/gemm_epilogue (bias, relu")
    gemm_flops = 2 * 46 * (13 * 19 + 19 * 7) + 46 * (19 + 7) + 46 * 19  # two addmm, the bias, the relu
    assert report.total_flops == gemm_flops + 2 * 23 * 19
    assert report.septran_flops == gemm_flops
    assert report.septran_share == pytest.approx(gemm_flops / (gemm_flops + 2 * 23 * 19))
    assert "aten.cumsum" in str(report) and "% )" not in str(report)


def test_report_lists_every_node_of_the_captured_graph():
    captured = []

    def spy(gm, example_inputs):
        from torch._dynamo.backends.common import aot_autograd

        def keep(g, _):
            captured.append([n.name for n in g.graph.nodes])
            return g

        return aot_autograd(fw_compiler=keep)(gm, example_inputs)

    model, x = WithCumsum(), torch.randn(2, 5, 13)
    with torch.no_grad():
        torch.compile(model, backend=spy)(x)
    report = septran.explain_model(model, (x,))
    assert [r.name for r in report.rows] == captured[0]
    assert all(r.runs for r in report.rows)


def test_dump_dir_writes_the_report(monkeypatch, tmp_path):
    monkeypatch.setenv("SEPTRAN_DUMP_DIR", str(tmp_path))
    model = MLP()
    compiled = septran.compile_model(model, (torch.randn(2, 4, 13),))
    texts = sorted(tmp_path.glob("model_graph*.txt"))
    assert len(texts) == 1
    data = json.loads(texts[0].with_suffix(".json").read_text())
    assert data["septran_share"] == 1.0 and len(data["rows"]) == len(compiled.septran_report().rows)
    assert "SepTran: examples/gemm_epilogue (bias, gelu, W^T in place)" in texts[0].read_text()


def test_float64_is_refused_and_runs_in_torch():
    model = MLP().double()
    x = torch.randn(2, 3, 13, dtype=torch.float64)
    with torch.no_grad():
        out = torch.compile(model, backend="septran")(x)
        torch.testing.assert_close(out, model(x))
    report = septran.explain_model(model, (x,))
    addmm = [r for r in report.rows if r.op == "aten.addmm"]
    assert addmm and all(r.runs == "torch: gemm refused: float64 is not a SepTran GEMM dtype" for r in addmm)
    assert report.septran_share == 0.0


def test_a_failing_pattern_never_breaks_the_model(monkeypatch):
    from septran.model import patterns

    class Broken:
        name = "broken"

        def match(self, node):
            raise RuntimeError("a bug in a pattern")

    model, x = MLP(), torch.randn(2, 3, 13)
    monkeypatch.setattr(patterns, "PATTERNS", [Broken()] + patterns.PATTERNS)
    report = septran.explain_model(model, (x,))
    assert report.row("gelu").runs.startswith("SepTran: ")  # the next pattern is asked
    monkeypatch.setattr(patterns, "PATTERNS", [Broken()])
    report = septran.explain_model(model, (x,))
    assert report.row("gelu").runs == "torch: pattern broken failed: RuntimeError: a bug in a pattern"
    assert report.septran_share == 0.0
    _check(model, x)


def test_lengths_share_one_build(monkeypatch):
    """32 sequence lengths (rows folded into M, dynamic in the model mapping): no build after the first call in
    each shape bucket of the mapping (the cpu GEMM's shape_points: calls of at most 16 rows run their own point,
    so the first length past 16 builds each GEMM once more, and no later one does)."""
    kernels.clear()
    model = MLP()
    compiled = septran.compile_model(model, (torch.randn(1, 8, 13),))
    built = _count_builds(monkeypatch)
    after = {}
    with torch.no_grad():
        for n in range(9, 41):
            x = torch.randn(1, n, 13)
            assert_flash_close(compiled(x), model.double()(x.double()), model.float()(x))
            after[n] = len(built)
    assert after[16] == 0 and after[40] == after[17] <= len(kernels._CACHE)


class CallsTheOp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(7, 13))
        self.b = torch.nn.Parameter(torch.randn(7))

    def forward(self, x):
        return torch.ops.septran.gemm(x, self.w, self.b, True, "silu")


def test_torch_export_of_a_graph_with_the_septran_op():
    model, x = CallsTheOp(), torch.randn(2, 5, 13)
    exported = torch.export.export(model, (x,))
    assert any(n.target is torch.ops.septran.gemm.default for n in exported.graph.nodes)
    with torch.no_grad():
        out = exported.module()(x)
        ref = gemm_reference(x.double(), model.w.double(), model.b.double(), True, "silu")
        assert_flash_close(out, ref, gemm_reference(x, model.w, model.b, True, "silu"))
    report = septran.explain_model(model, (x,))
    assert report.row("gemm").runs == "SepTran: septran::gemm"


def test_import_septran_stays_light():
    code = "import sys, septran; print('torch._dynamo' in sys.modules, 'septran.model' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
    code = "import septran; print(callable(septran.compile_model), callable(septran.explain_model))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split() == [
        "True", "True"]


def test_backend_entry_point_is_declared():
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '[project.entry-points.torch_dynamo_backends]\n' in text
    assert 'septran = "septran.model.backend:septran_backend"' in text
    for package in ("septran.model", "septran.model.patterns", "septran.ops"):
        assert f'"{package}",' in text


def test_backend_is_found_by_name_without_import():
    from importlib.metadata import entry_points

    if "septran" not in entry_points(group="torch_dynamo_backends").names:
        pytest.skip("the installed septran predates its torch_dynamo_backends entry point: pip install -e . again")
    code = ("import sys, torch; m = torch.nn.Linear(5, 3); x = torch.randn(2, 5)\n"
            "with torch.no_grad(): y = torch.compile(m, backend='septran', fullgraph=True)(x)\n"
            "print(bool((y - m(x)).abs().max() < 1e-5), 'septran.model' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["True", "True"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mlp_in_half_precision(dtype):
    model, x = MLP(d=64, hidden=96, out=40), torch.randn(2, 33, 64)
    ref64 = model.double()(x.double())
    model.to(dtype)
    with torch.no_grad():
        out = torch.compile(model, backend="septran", fullgraph=True)(x.to(dtype))
        assert_flash_close(out, ref64, model(x.to(dtype)))
    assert septran.explain_model(model, (x.to(dtype),)).septran_share == 1.0


@pytest.mark.parametrize("target", ["sm80", "sm90", "gfx942"])
def test_gpu_model_mappings_keep_the_rows_dynamic(target):
    from septran.ops import gemm

    kernel = gemm.gemm_kernel(target, "gelu_tanh", True, plain=False)
    v = kernel.specialize(A=((200, 128), "float16"), B=((256, 128), "float16"), bias=((256,), "float16"))
    assert 'T.dynamic("A_dim0"' in v.tilelang_source


class ThreeHeads(torch.nn.Module):
    """Three Linears read one input (the input's view is shared) and a GEMM result used twice (its activation
    cannot be fused: the plain result is needed too)."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(24, 8) for _ in range(3))

    def forward(self, x):
        h = self.q(x)
        return torch.relu(h) + h, self.k(x) * self.v(x)


def test_shared_inputs_and_results_used_twice():
    model, x = ThreeHeads(), torch.randn(2, 9, 24)
    with torch.no_grad():
        out = torch.compile(model, backend="septran", fullgraph=True)(x)
        ref, eager = model.double()(x.double()), model.float()(x)
    for o, r, e in zip(out, ref, eager):
        assert_flash_close(o, r, e)
    report = septran.explain_model(model, (x,))
    assert not report.row("relu").runs.startswith("SepTran: examples/gemm")  # not an epilogue: h is used as is
    assert sum(r.runs == "SepTran: examples/gemm_epilogue (bias, W^T in place)" for r in report.rows) == 3


def test_dynamic_shapes_and_inference_mode():
    model = MLP()
    compiled = septran.compile_model(model, dynamic=True, fullgraph=True)
    with torch.inference_mode():
        for n in (3, 17):
            x = torch.randn(2, n, 13)
            assert_flash_close(compiled(x), model.double()(x.double()), model.float()(x))
    report = compiled.septran_report()
    assert report.septran_share == 1.0 and any("s" in r.shape for r in report.rows if r.op == "aten.gelu")


@settings(max_examples=6, deadline=None, derandomize=True)
@given(d=st.integers(1, 40), hidden=st.integers(1, 70), out=st.integers(1, 30), lead=st.lists(st.integers(1, 9), max_size=2),
       act=st.sampled_from(["gelu", "gelu_tanh", "relu", "silu"]), bias=st.booleans())
def test_mlps_of_any_size(d, hidden, out, lead, act, bias):
    acts = {"gelu": torch.nn.GELU(), "gelu_tanh": torch.nn.GELU(approximate="tanh"), "relu": torch.nn.ReLU(),
            "silu": torch.nn.SiLU()}
    torch._dynamo.reset()
    model, x = MLP(d, hidden, out, acts[act], bias), torch.randn(*lead, d)
    _check(model, x, fullgraph=True)


def test_a_graph_that_needs_gradients_runs_with_torch():
    model, x = MLP(), torch.randn(2, 5, 13)
    reports: list = []
    from septran.model.backend import septran_backend

    compiled = torch.compile(model, backend=lambda gm, ex: septran_backend(gm, ex, reports=reports))
    compiled(x).sum().backward()
    grad = model.fc1.weight.grad.clone()
    model.zero_grad()
    model(x).sum().backward()
    torch.testing.assert_close(grad, model.fc1.weight.grad)
    assert reports == []  # nothing rewritten: SepTran's ops have no backward


def test_a_failing_rewrite_runs_the_graph_with_torch(monkeypatch):
    from septran.model import rewrite

    def broken(gm, patterns=None):
        next(iter(gm.graph.nodes)).name = "renamed"  # a partial change, then a bug
        raise RuntimeError("a bug in the rewrite")

    monkeypatch.setattr(rewrite, "rewrite", broken)
    model, x = WithCumsum(), torch.randn(2, 5, 13)
    compiled = septran.compile_model(model, (x,))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    rows = compiled.septran_report().rows
    assert rows and all(r.runs in ("input", "output") or r.runs.endswith("RuntimeError: a bug in the rewrite")
                        for r in rows)


def test_a_graph_that_needs_gradients_runs_with_torch_and_says_so_once(monkeypatch, caplog):
    """Called without torch.no_grad(), a model's graph has a backward: it runs with torch (right, at torch's
    speed), and one warning says how to get SepTran's kernels; a second such graph adds no warning."""
    from septran.model import backend

    monkeypatch.setattr(backend, "_warned_gradients", False)
    model, x = MLP(d=16, hidden=24, out=8), torch.randn(3, 16)
    with caplog.at_level("WARNING", logger="septran.model.backend"):
        out = torch.compile(model, backend="septran")(x)
        torch.compile(MLP(d=8, hidden=8, out=8), backend="septran")(torch.randn(2, 8))
    assert torch.allclose(out, model(x), atol=1e-6) and out.requires_grad
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "torch.no_grad()" in warned[0], warned
