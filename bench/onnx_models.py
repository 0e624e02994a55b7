"""Small ONNX models through septran.compile_onnx against onnxruntime (CPU execution provider).

    python bench/onnx_models.py                      # every model; the table, and bench/results/onnx_models.json
    python bench/onnx_models.py --models mlp,softmax --rounds 5

The models are built here with onnx.helper (weights from a fixed seed): an MLP (Gemm + Gelu + Gemm), a softmax,
a LayerNorm, an RMSNorm and a causal attention (opset 23's Attention). Each is compiled once (compile_s: import,
AOTAutograd, rewrite, kernels; warm from the kernel cache after the first run), checked against onnxruntime, then
timed in interleaved rounds (SepTran, onnxruntime, SepTran, ...): each sample is the mean of enough calls to fill
--sample-s, and the table shows the median of the rounds with their min-max. Both run on --threads threads
(torch.set_num_threads, which SepTran's OpenMP kernels follow; onnxruntime's intra-op pool). Ratio = onnxruntime time / SepTran time (> 1: SepTran is
faster). Column torch: the same imported graph run eagerly in torch (no rewrite), for scale. "nodes": the ONNX
nodes that ran in SepTran kernels, of all.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from interleave import Others, interleaved, stats  # noqa: E402


def _models() -> dict:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def weight(name, *shape, scale=0.05):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    def model(name, nodes, inputs, outputs, inits=(), opset=23):
        g = helper.make_graph(nodes, name, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], list(inits))
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 10  # onnxruntime 1.31 reads up to 13; onnx 1.23 writes 14 by default
        onnx.checker.check_model(m)
        return m

    out = {}
    n, d, h = 256, 512, 2048
    out["mlp"] = (model("mlp", [
        helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], transB=1),
        helper.make_node("Gelu", ["h"], ["g"]),
        helper.make_node("Gemm", ["g", "W2", "b2"], ["y"], transB=1)],
        [("x", [n, d])], [("y", [n, d])],
        [weight("W1", h, d), weight("b1", h), weight("W2", d, h), weight("b2", d)]), [(n, d)], f"{n}x{d}->{h}->{d}")
    rows, cols = 512, 1024
    out["softmax"] = (model("softmax", [helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
                            [("x", [rows, cols])], [("y", [rows, cols])]), [(rows, cols)], f"{rows}x{cols}")
    out["layernorm"] = (model("layernorm", [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)],
                              [("x", [rows, cols])], [("y", [rows, cols])],
                              [weight("s", cols, scale=1.0), weight("b", cols)]), [(rows, cols)], f"{rows}x{cols}")
    out["rmsnorm"] = (model("rmsnorm", [helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=-1)],
                            [("x", [rows, cols])], [("y", [rows, cols])], [weight("s", cols, scale=1.0)]),
                      [(rows, cols)], f"{rows}x{cols}")
    b, heads, s, hd = 1, 8, 256, 64
    out["attention"] = (model("attention", [helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)],
                              [(x, [b, heads, s, hd]) for x in "qkv"], [("y", [b, heads, s, hd])]),
                        [(b, heads, s, hd)] * 3, f"{b}x{heads}x{s}x{hd} causal")
    return out


def machine() -> dict:
    import onnxruntime
    import torch

    import septran

    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        cpu = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")), None)
    except OSError:
        cpu = None
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"cpu_model": cpu or platform.processor(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "onnxruntime": onnxruntime.__version__, "septran": septran.__version__,
            "python": platform.python_version(), "commit": commit or None, "loadavg_start": os.getloadavg()}


def run_model(name, proto, shapes, label, rounds, sample_s, threads) -> dict:
    import onnxruntime as ort
    import torch

    import septran

    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    tensors = [torch.from_numpy(a) for a in arrays]
    t0 = time.perf_counter()
    model = septran.compile_onnx(proto, example_inputs=tensors)
    compile_s = time.perf_counter() - t0
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = dict(zip(model.input_names, arrays))
    got = model(*tensors).numpy()
    want = session.run(None, feeds)[0]
    err = float(np.abs(got - want).max())
    ok = bool(np.allclose(got, want, rtol=1e-4, atol=1e-4))
    report = model.report()
    row = {"model": name, "shape": label, "compile_s": compile_s, "max_abs_diff": err, "agrees": ok,
           "septran_nodes": f"{len(report.septran_nodes)}/{len(report.rows)}", "runs": [r.runs for r in report.rows]}
    if not ok:
        return row
    from septran.onnx.graph import import_graph

    eager = import_graph(proto, name, tensors, model._consts).module  # the same imported graph, all in torch

    def torch_eager():
        with torch.no_grad():
            return eager(*tensors)

    others = Others()
    samples, reps = interleaved({"septran": lambda: model(*tensors), "onnxruntime": lambda: session.run(None, feeds),
                                 "torch": torch_eager}, rounds, sample_s)
    row.update({"septran_ms": stats(samples["septran"]), "onnxruntime_ms": stats(samples["onnxruntime"]),
                "torch_ms": stats(samples["torch"]), "calls_per_sample": reps, "others_cores": others.cores()})
    row["ratio"] = row["onnxruntime_ms"]["median"] / row["septran_ms"]["median"]
    return row


def fmt(s) -> str:
    return f"{s['median']:9.3f} ({s['min']:.3f}-{s['max']:.3f})" if s else f"{'-':>9}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="", help="comma-separated names (default: all)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sample-s", type=float, default=0.2)
    ap.add_argument("--threads", type=int, default=1, help="torch's threads and onnxruntime's intra-op threads")
    ap.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "onnx_models.json")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)  # SepTran's kernels share torch's OpenMP runtime
    models = _models()
    wanted = [m for m in args.models.split(",") if m] or list(models)
    info = machine()
    info["threads"] = args.threads
    print(f"{info['cpu_model']}, {info['cores']} cores; {args.threads} thread(s) each: torch {info['torch']}, "
          f"onnxruntime {info['onnxruntime']} (CPU EP); load {info['loadavg_start'][0]:.1f}")
    rows, status = [], 0
    print(f"{'model':10} {'shape':26} {'SepTran ms (min-max)':>26} {'onnxruntime ms (min-max)':>26} {'ratio':>6} "
          f"{'torch ms (min-max)':>26} {'nodes':>6} {'compile s':>9} {'other':>5}")
    for name in wanted:
        row = run_model(name, *models[name], args.rounds, args.sample_s, args.threads)
        rows.append(row)
        if not row["agrees"]:
            status = 1
            print(f"{name:10} {row['shape']:28} WRONG: max |septran - onnxruntime| {row['max_abs_diff']:.3g}")
            continue
        other = f"{row['others_cores']:5.2f}" if row["others_cores"] is not None else "    -"
        print(f"{name:10} {row['shape']:26} {fmt(row['septran_ms']):>26} {fmt(row['onnxruntime_ms']):>26} "
              f"{row['ratio']:6.2f} {fmt(row['torch_ms']):>26} {row['septran_nodes']:>6} {row['compile_s']:9.2f} {other}",
              flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"machine": info, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.json}")
    return status


if __name__ == "__main__":
    sys.exit(main())
