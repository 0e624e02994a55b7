"""2-D convolution as an implicit GEMM (examples/conv2d): windows of the input as GEMM operands, every target."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import septran
from conftest import REPO, mapping_path, needs_nvcc
from support.cuda_tools import nvcc_resource_usage

CONV_LOGIC = REPO / "examples" / "conv2d" / "conv2d.py"
GPU_SHAPES = dict(X=((2, 58, 58, 64), "float16"), W=((3, 3, 64, 128), "float16"), Y=((2, 56, 56, 128), "float16"))


def _kernel(target: str):
    return septran.compile(logic_file=CONV_LOGIC, mapping_file=mapping_path(target, "conv2d"))


@pytest.fixture(scope="module")
def cpu():
    return _kernel("cpu")


def _conv(kernel, x, w):
    y = torch.full((x.shape[0], x.shape[1] - w.shape[0] + 1, x.shape[2] - w.shape[1] + 1, w.shape[3]), float("nan"),
                   dtype=x.dtype)
    kernel.specialize(X=x, W=w, Y=y).build()(x, w, y)
    return y


def _reference(x, w):
    return F.conv2d(x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1)).permute(0, 2, 3, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("shape", [(2, 13, 13, 5, 7, 3, 3), (1, 9, 20, 3, 4, 2, 5), (3, 7, 6, 9, 130, 1, 1),
                                   (1, 17, 70, 300, 3, 3, 3)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.build
def test_conv2d_matches_torch_on_cpu(cpu, shape, dtype):
    """Odd shapes: windows run past the input's end, channels do not fill a tile, Co spans two tiles."""
    N, H, W, Ci, Co, KH, KW = shape
    gen = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(N, H, W, Ci, generator=gen).to(dtype)
    w = torch.randn(KH, KW, Ci, Co, generator=gen).to(dtype)
    y = _conv(cpu, x, w)
    ref = _reference(x.double(), w.double())
    torch_err = (_reference(x.float(), w.float()).to(dtype).double() - ref).abs().max().item()
    err = (y.double() - ref).abs().max().item()
    assert y.shape == ref.shape and err <= 2 * torch_err + 1e-5, (err, torch_err)


def test_conv2d_needs_the_output_shape(cpu):
    with pytest.raises(septran.CallError, match="cannot tell the shape of output Y"):
        cpu(torch.randn(1, 5, 5, 2), torch.randn(3, 3, 2, 4))


def test_conv2d_output_too_large_is_refused(cpu):
    """An output 64 columns too wide: its last program's windows would start past the input's last column."""
    with pytest.raises(septran.LoweringError, match="wholly past its end"):
        cpu.specialize(X=((1, 5, 5, 2), "float32"), W=((3, 3, 2, 4), "float32"), Y=((1, 3, 70, 4), "float32"))


@pytest.mark.parametrize("target", ["cpu", "sm80", "sm90", "gfx942"])
def test_emitted_conv2d_matches_golden(target, golden):
    shapes = GPU_SHAPES if target != "cpu" else {k: (s, "float32") for k, (s, _) in GPU_SHAPES.items()}
    golden(f"conv2d.{target}.py", _kernel(target).specialize(**shapes).tilelang_source)


# sm90 loads by cp.async, not TMA: see test_sm90_refuses_a_tma_pipeline_inside_the_taps_loops
@pytest.mark.parametrize("target,needles", [("sm90", ("cp_async", "wgmma")), ("sm80", ("cp_async", "mma")),
                                            ("gfx942", ("mfma",))])
@pytest.mark.build
def test_conv2d_device_code_uses_the_matrix_units(target, needles):
    src = _kernel(target).specialize(**GPU_SHAPES).device_source
    for needle in needles:
        assert needle in src


def test_sm90_refuses_a_tma_pipeline_inside_the_taps_loops():
    """TileLang 0.1.15 warp-specialises a TMA-fed pipelined loop and, inside the taps' loops, clears the
    accumulator at every tap (an H100 gave results wrong by 4.0): the shipped mapping without its cp.async copies
    is refused at its pipeline line, with the copy option to add."""
    text = mapping_path("sm90", "conv2d").read_text().replace("    copy: {X: {disable_tma: true}, W: {disable_tma: true}}\n", "")
    kernel = septran.compile(logic_file=REPO / "examples" / "conv2d" / "conv2d.py", mapping_file=text)
    with pytest.raises(septran.LoweringError, match="inside the sequential loop kw") as err:
        kernel.specialize(**GPU_SHAPES)
    pipeline_line = next(i for i, line in enumerate(text.splitlines(), 1) if line.strip().startswith("pipeline:"))
    assert err.value.loc.line == pipeline_line and "disable_tma: true" in str(err.value)


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("target,arch", [("sm90", "sm_90a"), ("sm80", "sm_80")])
def test_conv2d_cubin_has_no_spills(target, arch):
    usage = nvcc_resource_usage(_kernel(target).specialize(**GPU_SHAPES), arch)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage
