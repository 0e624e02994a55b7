"""The cpu target's GEMM leaves side by side: which one a mapping should name on this CPU.

    python bench/gemm_leaves.py                        # the GEMM family, float32, bfloat16, float16; 2 then 1 threads
    python bench/gemm_leaves.py --cases gemm_bf16 --threads 1 --json /tmp/leaves.json

At each thread count, each case is compiled at the point the shipped mapping runs for its shapes there (its
``shape_points`` entry, or the space's first point; no tuning database), then once more per GEMM leaf of the
mapping's ``!tune`` list, the rest of the point unchanged: OpenBLAS (gemm_leaf_blas), torch's MKL (gemm_leaf_mkl), the matrix units
(gemm_leaf_amx, gemm_leaf_avx512bf16, where the CPU reports them). gemm_leaf_cpu (TileLang's scalar T.gemm) is
left out. All of them and torch are timed in interleaved rounds (bench/interleave.py: medians, min-max); each is
checked against torch first. The table gives each leaf's rate and its ratio to torch, `*` marking the shipped
point's leaf; at 1 thread a plain GEMM's leaves also run as one call over the whole of A and B (`..._one_call`: the
vendor function through ctypes), what the per-tile calls cost against one call of the same library. float16 operands reach the leaf as they are (GLOBAL): OpenBLAS's leaf widens each tile to float32,
MKL's does the same (its cblas_gemm_f16f16f32 was the slower); the matrix units' leaves take bfloat16 only.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import logging
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from cpu import machine, shipped_point  # noqa: E402
from interleave import Others, interleaved, stats  # noqa: E402

LEAF_KEYS = ("gemm_leaf_logic", "bmm_leaf_logic", "epi_gemm_leaf")
SKIPPED = ("gemm_leaf_cpu",)


def cases() -> list[dict]:
    import torch
    import torch.nn.functional as F

    def gemm(n, dtype, m=None, k=None):
        m, k = m or n, k or n
        return dict(logic="gemm", shapes=[(m, k), (k, n)], dtype=dtype, torch=torch.matmul, flops=2.0 * m * n * k,
                    shape=f"{m}x{n}x{k}" if (m, k) != (n, n) else f"{n}^3")

    out = [dict(name="gemm_f32", **gemm(n, torch.float32)) for n in (512, 1000, 1024)]
    out.append(dict(name="bmm_f32", logic="bmm", shapes=[(8, 512, 512)] * 2, dtype=torch.float32, torch=torch.bmm,
                    flops=2.0 * 8 * 512 ** 3, shape="8x512^3"))
    out.append(dict(name="epilogue_f32", logic=("gemm_epilogue", ("gelu", False, False)), shapes=[(1024, 1024), (1024, 1024), (1024,)],
                    dtype=torch.float32, torch=lambda a, w, bias: F.gelu(torch.matmul(a, w) + bias),
                    flops=2.0 * 1024 ** 3, shape="1024^3 +gelu"))
    for m, n, k in ((1024, 1024, 1024), (128, 1024, 256), (512, 4096, 1024)):  # a Linear's (n, k) weight: the model level's form
        out.append(dict(name="linear_f32", logic=("gemm_epilogue", ("gelu", False, True)), shapes=[(m, k), (n, k), (n,)],
                        dtype=torch.float32, torch=lambda a, w, bias: F.gelu(F.linear(a, w, bias)),
                        flops=2.0 * m * n * k, shape=f"{m}x{n}x{k} +gelu"))
    out += [dict(name="gemm_bf16", **gemm(n, torch.bfloat16)) for n in (512, 1024)]
    out.append(dict(name="gemm_bf16", **gemm(4096, torch.bfloat16, m=512, k=4096)))
    out.append(dict(name="gemm_f16", **gemm(512, torch.float16)))  # torch's float16 matmul is slow without AVX512-FP16
    return out


def leaves_of(kernel, point: dict) -> tuple[str, list[str]]:
    """(the point's leaf path, the leaves to time): the mapping's choices this CPU can run."""
    from septran.records import device

    path = next(p for p in point if p.endswith(LEAF_KEYS))
    dim = next(d for d in kernel.mapping.space.dimensions if d.path == path)
    flags = device.host_flags()
    usable = [leaf for leaf in dim.choices if leaf not in SKIPPED
              and all(f in flags for f in kernel.target.leaves[leaf].cpu_flags)]
    return path, usable


def mkl_found() -> int:
    """septran_cpu_mkl()'s bits, from the vendor library the kernels load (0: gemm_leaf_mkl runs OpenBLAS)."""
    from septran.build import vendor
    from septran.target import load_target

    f = vendor.library(load_target("cpu")).septran_cpu_mkl
    f.restype = ctypes.c_int32
    return f()


def leaf_kernels(case: dict, inputs: list) -> tuple[str, dict, dict]:
    """At the thread count now: (the shipped point's leaf, that point, {leaf: kernel}) with one kernel per leaf this
    CPU runs for these types, each built here, outside the timing (a leaf refused for them is left out). The
    shipped kernel picks its point with no tuning database (bench/cpu.py's shipped_point); the others are it with
    only the leaf changed."""
    from septran.errors import SepTranError

    kernel = shipped_point(dict(logic=case["logic"], mapping=None), REPO / "mappings" / "cpu", inputs, {})
    point = dict(kernel.latest.choice.mapping.point)
    path, leaves = leaves_of(kernel, point)
    kernels = {}
    for leaf in leaves:
        k = kernel if leaf == point[path] else kernel.at({**point, path: leaf})
        try:
            k(*inputs)
        except SepTranError as e:
            logging.getLogger("gemm_leaves").info("%s: %s refused (%s)", case["name"], leaf, str(e).splitlines()[0])
            continue
        kernels[leaf] = k
    return point[path], point, kernels


SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}


def one_call(kernel, leaf: str, inputs: list):
    """At 1 thread, a plain GEMM's leaf called once over the whole of A and B (its vendor function through ctypes,
    C += A B into a float32 C): what the per-tile calls cost against one call of the same library. (C, the call);
    None where the leaf has no such function."""
    import re

    import torch

    from septran.build import vendor

    m = re.search(r'"(septran_cpu_gemm[^"]*)"', kernel.target.leaves[leaf].templates.get("gemm", ""))
    if m is None:
        return None
    a, b = inputs
    kind = SHORT.get(str(a.dtype).removeprefix("torch."))
    name = m.group(1).replace("{A.type}", kind or "").replace("{B.type}", kind or "")
    fn = getattr(vendor.library(kernel.target), name, None)
    if fn is None or kind is None:
        return None
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn.argtypes, fn.restype = [ptr, ptr, ptr, ctypes.c_int32, ctypes.c_int32] + [i64] * 9, ctypes.c_int32
    (rows, depth), cols = a.shape, b.shape[1]
    c = torch.zeros(rows, cols)
    sizes = (rows, cols, rows, depth, depth, cols, cols, depth, cols)
    return c, lambda: fn(c.data_ptr(), a.data_ptr(), b.data_ptr(), 0, 0, *sizes)


def run_case(case: dict, threads: list[int], rounds: int, sample_s: float) -> list[dict]:
    """Per thread count (the point may depend on it: shape_points' `threads`), every leaf and torch interleaved."""
    import torch

    gen = torch.Generator().manual_seed(0)
    inputs = [torch.randn(*s, generator=gen).to(case["dtype"]) for s in case["shapes"]]
    atol = 0.5 if case["dtype"] != torch.float32 else 1e-3
    rows = []
    for n in threads:
        torch.set_num_threads(n)
        shipped, point, kernels = leaf_kernels(case, inputs)
        ref = case["torch"](*inputs).float()
        row = dict(case=case["name"], shape=case["shape"], dtype=str(case["dtype"]).removeprefix("torch."), threads=n,
                   shipped_leaf=shipped, point={p.rsplit(".", 1)[-1]: v for p, v in point.items()}, wrong={})
        fns = {}
        for leaf, k in kernels.items():
            out = k(*inputs).float()
            if torch.allclose(out, ref, rtol=2e-2, atol=atol):
                fns[leaf] = lambda k=k: k(*inputs)
            else:
                row["wrong"][leaf] = (out - ref).abs().max().item()
        if n == 1 and case["logic"] == "gemm":  # the same leaves, one call over the whole GEMM
            for leaf, k in kernels.items():
                whole = one_call(k, leaf, inputs)
                if whole is None:
                    continue
                c, call = whole
                if call() == 0 and torch.allclose(c, ref, rtol=2e-2, atol=atol):
                    fns[f"{leaf}_one_call"] = call
                else:
                    row["wrong"][f"{leaf}_one_call"] = (c - ref).abs().max().item()
        fns["torch"] = lambda: case["torch"](*inputs)
        others = Others()
        samples, _ = interleaved(fns, rounds, sample_s)
        row["others_cores"] = others.cores()
        row["ms"] = {name: stats(s) for name, s in samples.items()}
        row["gflops"] = {name: case["flops"] / (s["median"] * 1e-3) / 1e9 for name, s in row["ms"].items()}
        row["ratio"] = {name: row["gflops"][name] / row["gflops"]["torch"] for name in row["ms"] if name != "torch"}
        rows.append(row)
        print_row(row, flush=True)
    return rows


def print_row(r: dict, flush: bool = False) -> None:
    parts = [f"{leaf.removeprefix('gemm_leaf_')}{'*' if leaf == r['shipped_leaf'] else ''} {r['gflops'][leaf]:7.1f} "
             f"({r['ratio'][leaf]:.2f}x)" for leaf in r["ratio"]]
    parts += [f"{leaf.removeprefix('gemm_leaf_')} WRONG ({err:.3g})" for leaf, err in r["wrong"].items()]
    other = f"{r['others_cores']:.2f}" if r.get("others_cores") is not None else "-"
    print(f"{r['case']:13} {r['shape']:16} {r['threads']:>3} torch {r['gflops']['torch']:7.1f}  " + "  ".join(parts)
          + f"  other {other}", flush=flush)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default="2,1")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--sample-s", type=float, default=0.3)
    p.add_argument("--cases", default="", help="comma-separated case names (gemm_f32, bmm_f32, epilogue_f32, "
                                                "linear_f32, gemm_bf16, gemm_f16); default: all")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    threads = [int(t) for t in a.threads.split(",")]
    wanted = set(filter(None, a.cases.split(",")))
    unknown = wanted - {c["name"] for c in cases()}
    if unknown:
        p.error(f"no case {', '.join(sorted(unknown))}: the cases are {', '.join(sorted({c['name'] for c in cases()}))}")
    info = dict(machine(), mkl=mkl_found())
    print(f"{info['cpu_model']} (family {info['cpu_family']} model {info['cpu_model_number']}), {info['usable_cores']} "
          f"cores, torch {info['torch']}; MKL in this process: {'yes' if info['mkl'] else 'no (gemm_leaf_mkl runs OpenBLAS)'}; "
          f"GFLOP/s (x torch), * the shipped point's leaf")
    rows = []
    for case in cases():
        if not wanted or case["name"] in wanted:
            rows += run_case(case, threads, a.rounds, a.sample_s)
    if a.json:
        a.json.write_text(json.dumps({"machine": info, "rows": rows}, indent=1))
    return 1 if any(r["wrong"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
