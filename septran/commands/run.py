"""``septran run LOGIC [MAPPING] --input A=MxK:dtype ...``: compiles, runs on random inputs, checks the result
against the logic's ``reference`` (a plain Python function the logic file defines, called on the inputs in
float64, scalars by name) where it has one, and times it. Exit status 1 where the check fails.

``septran run MODEL.onnx --input ...`` runs an ONNX model through ``septran.onnx`` (the ``onnx`` extra).
``--json``: one object with ``checked``, ``max_error``, ``ok``, ``first_call_s``, ``median_s``, ``times_s``."""
from __future__ import annotations

import argparse
import statistics
import time

from septran.inputs import at_least, parse_scalars
from septran.commands.kernels import add_kernel_arguments, head, print_json, variant_for
from septran.errors import CallError

# max |out - ref| / max(1, max |ref|) allowed, by the output's dtype (the reference computes in float64)
TOLERANCE = {"float64": 1e-10, "float32": 1e-4, "float16": 2e-2, "bfloat16": 2e-2}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_kernel_arguments(parser, mapping_help="the mapping file (default: as septran.compile chooses; none for .onnx)")
    parser.add_argument("--repeat", type=at_least(1), default=10, help="timed calls after one warm-up (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="the random inputs' seed")
    parser.add_argument("--tolerance", type=float, help="max |out - ref| / max(1, max |ref|) (default: by dtype)")


def run(args) -> int:
    if args.logic.endswith(".onnx"):
        return _onnx(args)
    kernel, variant, inputs = variant_for(args, _check_device)
    import torch

    torch.manual_seed(args.seed)
    device = torch.device(kernel.target.torch_device)
    tensors = [_random(inputs[a.name], device) for a in kernel.inputs]
    # optional tensors given an --input, and scalars, by name
    named = {n: _random(inputs[n], device) for n in kernel.optional if n in inputs} | parse_scalars(args.scalar)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    start = time.perf_counter()
    out = kernel(*[t.clone() for t in tensors], **{k: v.clone() if hasattr(v, "clone") else v for k, v in named.items()})
    sync()
    first = time.perf_counter() - start
    check = _check(kernel, tensors, named, out, args.tolerance)
    kernel(*tensors, **named)  # warm-up
    times = []
    for _ in range(args.repeat):
        sync()
        start = time.perf_counter()
        kernel(*tensors, **named)
        sync()
        times.append(time.perf_counter() - start)
    result = {**head(kernel, variant), **check, "first_call_s": first, "median_s": statistics.median(times),
              "times_s": times}
    if args.json:
        print_json(result)
    else:
        shapes = ", ".join(f"{n}: {'x'.join(map(str, s))} {d}" for n, (s, d) in inputs.items())
        print(f"{kernel.signature()} on {kernel.target.name} ({shapes}); point: {variant.choice.source}")
        if check["checked"]:
            print(f"  against the logic's reference: max error {check['max_error']:.3e} "
                  f"(allowed {check['tolerance']:.1e}): {'ok' if check['ok'] else 'WRONG'}")
        else:
            print("  not checked: the logic defines no `reference`")
        print(f"  first call (compile + run) {first:.3f} s; median of {len(times)} calls {result['median_s'] * 1e3:.3f} ms")
    return 0 if check["ok"] else 1


def _check_device(kernel) -> None:
    """Before anything is lowered: a target whose tensors live on a device torch does not see here is refused."""
    import torch

    if torch.device(kernel.target.torch_device).type == "cuda" and not torch.cuda.is_available():
        raise CallError(f"target {kernel.target.name} runs on a CUDA device, and torch sees none here",
                        hint="`septran compile` builds it and `septran explain` shows it without a device; "
                             "run where the GPU is, or pass --target for this machine")


def _random(described, device):
    import torch

    shape, dtype = described
    kind = getattr(torch, dtype)
    if kind.is_floating_point:
        return torch.randn(shape, dtype=torch.float32).to(kind).to(device)
    if kind == torch.bool:
        return (torch.rand(shape) < 0.5).to(device)
    return torch.randint(0, 16, shape, dtype=kind).to(device)


def _reference(kernel):
    logic = kernel.logic
    fn = getattr(logic, "top", logic)  # (an implicit host: the logic's top task)
    found = fn.fn.__globals__.get("reference") if fn is not None and hasattr(fn, "fn") else None
    return found if callable(found) else None


def _check(kernel, tensors, named, out, tolerance) -> dict:
    import torch

    reference = _reference(kernel)
    if reference is None:
        return {"checked": False, "max_error": None, "tolerance": None, "ok": True}
    def wide(t):
        return (t.cpu().to(torch.float64) if t.is_floating_point() else t.cpu()) if isinstance(t, torch.Tensor) else t

    try:
        expected = reference(*map(wide, tensors), **{k: wide(v) for k, v in named.items()})
    except Exception as err:  # noqa: BLE001 - the user's reference: its failure is theirs, reported without a traceback
        raise CallError(f"the logic's reference failed: {type(err).__name__}: {err}",
                        hint="reference(...) takes the kernel's inputs in order, optional tensors and scalars by name") from None
    outs = out if isinstance(out, tuple) else (out,)
    refs = expected if isinstance(expected, (tuple, list)) else (expected,)
    if len(outs) != len(refs):
        raise CallError(f"the logic's reference returns {len(refs)} values, the kernel {len(outs)}")
    worst, allowed = 0.0, None
    for o, r in zip(outs, refs):
        r = torch.as_tensor(r).to(torch.float64)
        o64 = o.cpu().to(torch.float64)
        if o64.shape != r.shape:
            raise CallError(f"the logic's reference returns shape {tuple(r.shape)}, the kernel {tuple(o64.shape)}")
        dtype = str(o.dtype).removeprefix("torch.")
        limit = tolerance if tolerance is not None else TOLERANCE.get(dtype, 0.0)
        allowed = limit if allowed is None else max(allowed, limit)
        if o64.numel():
            scale = max(1.0, r.abs().nan_to_num(posinf=0.0, neginf=0.0).max().item())
            same = (o64 == r) | (o64.isnan() & r.isnan())  # inf and NaN where expected
            diff = (o64 - r).abs().masked_fill(same, 0.0)
            worst = max(worst, diff.nan_to_num(nan=float("inf")).max().item() / scale)
    return {"checked": True, "max_error": worst, "tolerance": allowed, "ok": worst <= allowed}


def _onnx(args) -> int:
    """An ONNX model: septran.onnx's runner, imported only now (the ``onnx`` extra may be missing)."""
    if args.mapping is not None:
        raise CallError(f"septran run {args.logic}: an ONNX model takes no mapping (got {args.mapping!r})",
                        hint="the model's nodes are matched to SepTran's kernel library and their shipped mappings")
    try:
        from septran.onnx.cli import run_onnx
    except ModuleNotFoundError as err:
        raise CallError(f"septran run {args.logic}: running ONNX models needs {err.name!r}, which is not installed",
                        hint="pip install septran[onnx]") from None
    return int(run_onnx(args.logic, list(args.input), args.json) or 0)
