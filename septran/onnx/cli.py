"""``septran run model.onnx --input NAME=2x3:float32 ... [--json]``: an ONNX model on random inputs.

``run_onnx`` is what the command line calls: it compiles the model with ``septran.compile_onnx``, makes random
inputs (the shapes given, else the model's own static shapes), runs them, compares with onnxruntime when it is
installed (CPU execution provider) and prints a table, or one JSON object with ``--json``. Exit status: 0 when
every output agrees with onnxruntime (or there is none to compare with), 1 when one does not, 2 on a user's
mistake (a file that is not a model, an input spec that does not parse or fit), printed without a traceback.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch

from septran.onnx.errors import OnnxError

USAGE = "--input NAME=DIMS[:DTYPE], DIMS like 2x3 (empty for a scalar), DTYPE like float32 (default: the model's)"


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple
    dtype: torch.dtype | None


def parse_input(text: str) -> InputSpec:
    from septran.onnx.dtypes import NAMES

    name, eq, rest = text.partition("=")
    if not eq or not name:
        raise OnnxError(f"--input {text!r}: expected NAME=DIMS[:DTYPE]", hint=USAGE)
    dims, _, dtype = rest.partition(":")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x")) if dims.strip() else ()
    except ValueError:
        raise OnnxError(f"--input {text!r}: the dimensions {dims!r} are not integers joined by 'x'", hint=USAGE) from None
    if any(d < 0 for d in shape):
        raise OnnxError(f"--input {text!r}: a dimension is negative", hint=USAGE)
    if dtype and dtype not in NAMES:
        raise OnnxError(f"--input {text!r}: unknown dtype {dtype!r}", hint="one of " + ", ".join(sorted(NAMES)))
    return InputSpec(name, shape, NAMES[dtype] if dtype else None)


def random_input(shape: tuple, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) < 0.5
    return torch.randint(0, 4, shape, generator=gen).to(dtype)  # small: indices and counts stay in range


def make_inputs(model, specs: list[InputSpec], seed: int = 0) -> list[torch.Tensor]:
    given = {}
    for s in specs:
        if s.name not in model.input_names:
            raise OnnxError(f"{model.name}: the model has no input {s.name!r}",
                            hint="its inputs: " + ", ".join(model.input_names))
        if s.name in given:
            raise OnnxError(f"{model.name}: --input {s.name} given twice")
        given[s.name] = s
    gen = torch.Generator().manual_seed(seed)
    out = []
    for name, dtype, declared in zip(model.input_names, model.input_dtypes(), model.static_shapes_any()):
        spec = given.get(name)
        if spec is not None and spec.dtype is not None and spec.dtype != dtype:
            raise OnnxError(f"{model.name}: --input {name} asks for {str(spec.dtype).removeprefix('torch.')}, the "
                            f"model declares {str(dtype).removeprefix('torch.')}")
        if spec is not None:
            shape = spec.shape
        elif declared is not None and None not in declared:
            shape = declared
        else:
            text = "x".join("?" if d is None else str(d) for d in declared) if declared is not None else "unknown"
            raise OnnxError(f"{model.name}: input {name!r} has no static shape ({text})",
                            hint=f"give it: --input {name}=" + "x".join("2" if d is None else str(d) for d in (declared or ())))
        out.append(random_input(shape, dtype, gen))
    return out


def _reference(model, inputs):
    """onnxruntime's outputs (CPU execution provider) and its version, or (None, why)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None, "onnxruntime is not installed"
    from septran.onnx.dtypes import numpy_from_tensor

    try:
        session = ort_session(model.proto)
        feeds = {n: numpy_from_tensor(t) for n, t in zip(model.input_names, inputs)}
        return session.run(None, feeds), f"onnxruntime {ort.__version__}"
    except Exception as err:  # noqa: BLE001 - onnxruntime refusing the model is reported, not fatal
        return None, f"onnxruntime could not run the model: {type(err).__name__}: {err}"


def ort_session(proto):
    """An onnxruntime session (CPU execution provider) of ``proto``. A model whose IR version is newer than
    onnxruntime reads (onnx 1.23 writes 14, onnxruntime 1.31 reads 13) is given onnxruntime's newest: the IR
    version numbers the file format, the ops are named by the opset."""
    import re

    import onnxruntime as ort

    try:
        return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001
        found = re.search(r"max supported IR version: (\d+)", str(err))
        if not found:
            raise
        older = type(proto)()
        older.CopyFrom(proto)
        older.ir_version = int(found.group(1))
        return ort.InferenceSession(older.SerializeToString(), providers=["CPUExecutionProvider"])


def _time(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_onnx(path: str, inputs: list[str], as_json: bool) -> int:
    """``septran run model.onnx --input ...``: the exit status (0 agree, 1 differ, 2 a user's mistake)."""
    try:
        return _run(path, inputs, as_json)
    except OnnxError as err:
        print(f"septran run: {err}", file=sys.stderr)
        return 2


def _run(path: str, inputs: list[str], as_json: bool) -> int:
    from septran.onnx.api import compile_onnx
    from septran.onnx.dtypes import numpy_from_tensor

    specs = [parse_input(t) for t in inputs]
    model = compile_onnx(path)
    tensors = make_inputs(model, specs)
    t0 = time.perf_counter()
    outs = model(*tensors)
    first = time.perf_counter() - t0
    outs = outs if isinstance(outs, tuple) else (outs,)
    each = _time(lambda: model(*tensors))
    ref, ref_name = _reference(model, tensors)
    rows, ok = [], True
    for i, (name, o) in enumerate(zip(model.output_names, outs)):
        row = {"name": name, "shape": list(o.shape), "dtype": str(o.dtype).removeprefix("torch.")}
        if ref is not None:
            got = numpy_from_tensor(o).astype(np.float64)
            want = np.asarray(ref[i]).astype(np.float64)
            tol = 1e-2 if o.dtype in (torch.float16, torch.bfloat16) else 1e-4
            same = got.shape == want.shape and np.allclose(got, want, rtol=tol, atol=tol, equal_nan=True)
            finite = np.isfinite(got) & np.isfinite(want) if got.shape == want.shape else np.zeros(0, bool)
            row["max_abs_diff"] = float(np.abs(got - want)[finite].max()) if finite.any() else 0.0
            row["agrees"] = bool(same)
            ok &= same
        rows.append(row)
    report = model.report()
    if as_json:
        print(json.dumps({"model": model.name, "inputs": [{"name": n, "shape": list(t.shape),
                                                           "dtype": str(t.dtype).removeprefix("torch.")}
                                                          for n, t in zip(model.input_names, tensors)],
                          "outputs": rows, "reference": ref_name, "first_call_s": first, "call_s": each,
                          "septran_nodes": [r.index for r in report.septran_nodes], "report": report.to_json()}))
    else:
        print(report)
        print()
        for r in rows:
            diff = f"max |septran - ort| {r['max_abs_diff']:.3g}  {'agrees' if r['agrees'] else 'DIFFERS'}" \
                if "agrees" in r else ""
            print(f"output {r['name']}: {'x'.join(map(str, r['shape']))} {r['dtype']}  {diff}".rstrip())
        print(f"reference: {ref_name}")
        print(f"first call (import, build, run) {first:.2f} s; then {each * 1e3:.3f} ms a call (median of 5)")
    return 0 if ok else 1
