"""septran.compile_onnx: ONNX models through the model level (import, rewrite, SepTran kernels, report), the
errors a user meets, and ``septran.onnx.cli.run_onnx`` (what ``septran run model.onnx`` calls)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import septran  # noqa: E402
from septran.onnx.errors import OnnxError  # noqa: E402

RNG = np.random.default_rng(0)
W = RNG.standard_normal((24, 16)).astype(np.float32)
B = RNG.standard_normal(24).astype(np.float32)


def _model(nodes, inputs, outputs, inits=(), opset=20):
    g = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def mlp_model(batch="N"):
    """Gemm (bias, W^T) + Gelu + Softmax, with a free batch dimension."""
    nodes = [helper.make_node("Gemm", ["x", "W", "B"], ["h"], transB=1, name="fc"),
             helper.make_node("Gelu", ["h"], ["g"], name="act"),
             helper.make_node("Softmax", ["g"], ["y"], axis=-1, name="sm")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 24])],
                  [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")])


def mlp_ref(x):
    h = torch.nn.functional.linear(torch.as_tensor(x), torch.from_numpy(W), torch.from_numpy(B))
    return torch.softmax(torch.nn.functional.gelu(h), -1)


@pytest.fixture(scope="module")
def mlp_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("onnx") / "mlp.onnx"
    onnx.save(mlp_model(), str(path))
    return path


@pytest.fixture(scope="module")
def mlp(mlp_file):
    return septran.compile_onnx(str(mlp_file))


def test_import_septran_never_imports_onnx():
    code = "import septran, sys; septran.compile_onnx; assert not any(m == 'onnx' or m.startswith('onnx.') for m in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.build
def test_mlp_runs_in_septran_kernels(mlp):
    x = torch.randn(5, 16)
    torch.testing.assert_close(mlp(x), mlp_ref(x), rtol=1e-4, atol=1e-5)
    report = mlp.report()
    assert [r.op for r in report.septran_nodes] == ["Gemm", "Gelu", "Softmax"], str(report)
    assert report.row("fc").runs.startswith("SepTran: examples/gemm_epilogue")
    assert report.row("sm").runs == "SepTran: examples/softmax (softmax, dim -1)"
    assert report.aten.septran_share == 1.0
    assert "3 in SepTran kernels" in report.summary()
    assert json.loads(json.dumps(report.to_json()))["septran_nodes"] == 3


@pytest.mark.build
def test_numpy_in_numpy_out_by_name_and_bytes(mlp, mlp_file):
    x = RNG.standard_normal((5, 16)).astype(np.float32)
    y = mlp(x=x)
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, mlp_ref(x).numpy(), rtol=1e-4, atol=1e-5)
    from_bytes = septran.compile_onnx(mlp_file.read_bytes())
    np.testing.assert_allclose(from_bytes(x), y, rtol=0, atol=0)
    assert "mlp.onnx" in repr(mlp)


@pytest.mark.build
def test_shapes_fold_at_import_and_the_rest_runs_in_torch():
    # x (2, 3, 4) -> Shape -> Gather -> Concat -> Reshape to (2, 12) -> MatMul -> Floor (no pattern: torch)
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
             helper.make_node("Concat", ["b", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["flat"]),
             helper.make_node("MatMul", ["flat", "M"], ["y0"], name="mm"),
             helper.make_node("Floor", ["y0"], ["y"], name="floor")]
    m = RNG.standard_normal((12, 5)).astype(np.float32)
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
                   [numpy_helper.from_array(np.array([0], np.int64), "zero"),
                    numpy_helper.from_array(np.array([-1], np.int64), "minus1"), numpy_helper.from_array(m, "M")])
    f = septran.compile_onnx(model)
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(f(x), torch.floor(x.reshape(2, 12) @ torch.from_numpy(m)))
    report = f.report()
    assert [r.runs for r in report.rows[:3]] == ["constant (folded at import)"] * 3
    assert report.row("mm").runs.startswith("SepTran: examples/gemm")
    assert report.row("floor").runs.startswith("torch")


def test_errors_name_the_model_and_node(tmp_path, mlp_file):
    with pytest.raises(OnnxError, match="no such file"):
        septran.compile_onnx(str(tmp_path / "missing.onnx"))
    with pytest.raises(OnnxError, match="not an ONNX model"):
        septran.compile_onnx(b"\x00garbage")
    with pytest.raises(OnnxError, match="takes a path, bytes or an onnx.ModelProto"):
        septran.compile_onnx(42)
    odd = _model([helper.make_node("Hardmax", ["x"], ["y"], name="hm")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    with pytest.raises(OnnxError, match=r'node 0 "hm" \(Hardmax\): SepTran\'s ONNX importer does not know Hardmax'):
        septran.compile_onnx(odd)(torch.randn(2, 3))
    f = septran.compile_onnx(str(mlp_file))
    with pytest.raises(OnnxError, match="input 'x' is float64, the model declares float32"):
        f(torch.randn(2, 16, dtype=torch.float64))
    with pytest.raises(OnnxError, match=r"input 'x' has shape \(2, 15\), the model declares \?x16"):
        f(torch.randn(2, 15))
    with pytest.raises(OnnxError, match="input 'x' is missing"):
        f()
    with pytest.raises(OnnxError, match="no input 'z'"):
        f(z=torch.randn(2, 16))


# -- septran run model.onnx ------------------------------------------------------------------------------------

from septran.onnx.cli import run_onnx  # noqa: E402


@pytest.mark.build
def test_run_onnx_table_and_json(mlp_file, capsys):
    assert run_onnx(str(mlp_file), ["x=3x16:float32"], as_json=False) == 0
    out = capsys.readouterr().out
    assert "output y: 3x24 float32" in out and "agrees" in out and "3 in SepTran kernels" in out
    assert run_onnx(str(mlp_file), ["x=4x16"], as_json=True) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["outputs"][0]["shape"] == [4, 24] and result["outputs"][0]["agrees"]
    assert result["reference"].startswith("onnxruntime") and result["septran_nodes"] == [0, 1, 2]


@pytest.mark.build
def test_run_onnx_takes_static_shapes(tmp_path, capsys):
    path = tmp_path / "static.onnx"
    onnx.save(mlp_model(batch=2), str(path))
    assert run_onnx(str(path), [], as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["inputs"] == [{"name": "x", "shape": [2, 16], "dtype": "float32"}]


@pytest.mark.parametrize("inputs, message", [
    (["x"], "expected NAME=DIMS"),
    (["x=3by16"], "are not integers joined by 'x'"),
    (["x=3x16:float99"], "unknown dtype 'float99'"),
    (["x=3x16:float64"], "asks for float64, the model declares float32"),
    (["q=3x16"], "the model has no input 'q'"),
    ([], r"input 'x' has no static shape \(\?x16\)"),
])
def test_run_onnx_user_mistakes_exit_2(mlp_file, capsys, inputs, message):
    assert run_onnx(str(mlp_file), inputs, as_json=False) == 2
    err = capsys.readouterr().err
    assert "septran run:" in err and "mlp.onnx" in err or "--input" in err
    assert __import__("re").search(message, err), err
    assert "Traceback" not in err


def test_run_onnx_missing_file_exit_2(tmp_path, capsys):
    assert run_onnx(str(tmp_path / "nope.onnx"), [], as_json=True) == 2
    assert "no such file" in capsys.readouterr().err
