"""Every shipped operator on the cpu target (fp32) against torch, on 2 threads and on 1.

    python bench/cpu.py                                  # every case, 2 then 1 threads (a few minutes)
    python bench/cpu.py --quick --cases gemm,softmax --threads 1
    python bench/cpu.py --mapping-dir my_mappings/cpu --json /tmp/mine.json

The machine is shared, so SepTran and torch are timed in interleaved rounds
(SepTran, torch, SepTran, torch, ...); each round's sample is the mean of enough
calls to fill --sample-s, and the table shows the median of the rounds with their
min-max (the JSON also has the quartiles and every sample). Each case is compiled once
(specialize + build: compile_s), then runs one block of rounds per --threads value, with
torch.set_num_threads(n) called before it; SepTran's kernels get the same setting. Each
block first checks SepTran's output against torch's with torch.allclose: a wrong or
failing case is reported and not timed, and the exit status is then 1.
Ratio = SepTran throughput / torch throughput (> 1: SepTran is faster). Column "other":
the cores other processes used during the block (a row with ~1 is not to be trusted at
2 threads); --wait-idle S waits up to S seconds for a quiet moment before each block.
Rows: the GEMM family (square, odd), decode-shaped GEMMs (M = 1 to 16 rows, N and K in the thousands: the
mapping's shape_points give them their own point), a bf16 GEMM (the header line says whether the CPU has
bf16 matrix units), the row operators (rows16: on bfloat16 and float16 rows too; rows_odd: widths no shape point
names, float32 and bfloat16), attention; --inductor OPS
adds torch.compile of the torch code as a second baseline. Call overhead: a 16x16x16 GEMM called --calls times through SepTran (and with its output
passed by keyword), through
the built kernel's own call (tensors to addresses), the compiled function through ctypes with
the addresses computed once (the floor), and torch.matmul.
"""
from __future__ import annotations

import argparse
import atexit
import ctypes
import importlib.util
import json
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from interleave import Others, interleaved, stats, wait_idle  # noqa: E402
OPS = ("gemm", "decode", "bmm", "gemm_epilogue", "bf16", "fp16", "softmax", "log_softmax", "layernorm", "rmsnorm", "rows16",
       "rows_odd", "attention", "overhead")
INDUCTOR: set = set()  # operators also timed against torch.compile (inductor) of the same torch code (--inductor)
MATRIX_UNIT_FLAGS = ("amx_bf16", "avx512_bf16")  # what the bf16 GEMM leaves on the matrix units need (target.yaml cpu_flags)


def _example(op: str):
    """examples/<op>/<op>.py by path (bench/attention.py would shadow `import attention`)."""
    spec = importlib.util.spec_from_file_location(f"septran_example_{op}", REPO / "examples" / op / f"{op}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cases(small: bool) -> list[dict]:
    """Each case: its inputs' shapes (tensors are made when the case runs; `first` adjusts the first input), the
    logic, the baselines (the first is the reference for the check), the work per call and its unit, the tolerance."""
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(0)
    out = []

    def add(op, label, shape, logic, shapes, baselines, work, unit, atol=1e-4, scalars=None, first=lambda x: x,
            dtype=torch.float32, rtol=1e-4, mapping=None):
        def inputs():
            made = [torch.randn(*s, generator=gen) for s in shapes]
            return [t.to(dtype) for t in [first(made[0])] + made[1:]]
        # torch.compile of the first baseline, compiled in each block of rounds (run_case)
        # (a row case's own operator counts too: --inductor rmsnorm times rows16's and rows_odd's RMSNorm rows)
        inductor_of = next(iter(baselines.values())) if op in INDUCTOR or label.split()[0] in INDUCTOR else None
        out.append(dict(op=op, label=label, shape=shape, logic=logic, inputs=inputs, baselines=baselines, work=work,
                        unit=unit, atol=atol, rtol=rtol, scalars=scalars or {}, mapping=mapping, inductor_of=inductor_of))

    for n in ((64, 100, 128) if small else (512, 1000, 1024)):
        add("gemm", "gemm", f"{n}^3", "gemm", [(n, n)] * 2, {"matmul": torch.matmul}, 2.0 * n ** 3, "GFLOP/s", atol=1e-3)
    # odd shapes of a few to a few hundred tiles, where how the programs share out over the threads decides
    for m, n, k in (() if small else ((255, 257, 129), (333, 555, 777))):
        add("gemm", "gemm", f"{m}x{n}x{k}", "gemm", [(m, k), (k, n)], {"matmul": torch.matmul}, 2.0 * m * n * k,
            "GFLOP/s", atol=1e-3)
    for m, n, k in (((1, 256, 256), (4, 256, 256), (16, 256, 256)) if small else
                    ((1, 4096, 4096), (4, 4096, 4096), (16, 4096, 4096), (1, 11008, 4096))):
        add("decode", "gemm decode", f"{m}x{n}x{k}", "gemm", [(m, k), (k, n)], {"matmul": torch.matmul}, 2.0 * m * n * k,
            "GFLOP/s", atol=1e-3)
    # a batch of four's decode step through a Linear (its (n, k) weight, with its bias): the model level's form
    m, n, k = (4, 384, 256) if small else (4, 11008, 4096)
    add("decode", "linear+relu decode", f"{m}x{n}x{k}", ("gemm_epilogue", ("relu", False, True)), [(m, k), (n, k), (n,)],
        {"relu(linear)": lambda x, w, bias: F.relu(F.linear(x, w, bias))}, 2.0 * m * n * k, "GFLOP/s", atol=1e-3)
    n = 128 if small else 1024
    add("bf16", "gemm bf16", f"{n}^3", "gemm", [(n, n)] * 2, {"matmul": torch.matmul}, 2.0 * n ** 3, "GFLOP/s",
        atol=0.5, rtol=2e-2, dtype=torch.bfloat16)
    if not small:  # an odd depth and a C of a few tiles
        m, n2, k = 333, 555, 777
        add("bf16", "gemm bf16", f"{m}x{n2}x{k}", "gemm", [(m, k), (k, n2)], {"matmul": torch.matmul}, 2.0 * m * n2 * k,
            "GFLOP/s", atol=0.5, rtol=2e-2, dtype=torch.bfloat16)
    # a decode step's bf16 GEMMs: B k x n (gemm), and a Linear's (n, k) weight with its bias (the model level's form)
    m, n, k = (1, 256, 256) if small else (1, 4096, 4096)
    add("bf16", "gemm bf16 decode", f"{m}x{n}x{k}", "gemm", [(m, k), (k, n)], {"matmul": torch.matmul}, 2.0 * m * n * k,
        "GFLOP/s", atol=0.5, rtol=2e-2, dtype=torch.bfloat16)
    for m in (1, 4):  # one sequence's step, and a batch of four's
        n, k = (384, 256) if small else (11008, 4096)
        add("bf16", "linear+relu bf16 decode", f"{m}x{n}x{k}", ("gemm_epilogue", ("relu", False, True)),
            [(m, k), (n, k), (n,)], {"relu(linear)": lambda x, w, bias: F.relu(F.linear(x, w, bias))}, 2.0 * m * n * k,
            "GFLOP/s", atol=0.5, rtol=2e-2, dtype=torch.bfloat16)
    # float16: torch's matmul is scalar code on a CPU without AVX512-FP16 (about 3 GFLOP/s on AMD EPYC Zen 4), so
    # the shape stays small enough to time
    n = 128 if small else 512
    add("fp16", "gemm fp16", f"{n}^3", "gemm", [(n, n)] * 2, {"matmul": torch.matmul}, 2.0 * n ** 3, "GFLOP/s",
        atol=0.5, rtol=2e-2, dtype=torch.float16)
    b, n = (2, 64) if small else (8, 512)
    add("bmm", "bmm", f"{b}x{n}x{n}x{n}", "bmm", [(b, n, n)] * 2, {"bmm": torch.bmm}, 2.0 * b * n ** 3, "GFLOP/s", atol=1e-3)
    n = 128 if small else 1024
    add("gemm_epilogue", "gemm+bias+gelu", f"{n}^3", ("gemm_epilogue", ("gelu", False, False)), [(n, n), (n, n), (n,)],
        {"gelu(matmul+bias)": lambda a, w, bias: F.gelu(torch.matmul(a, w) + bias),
         "matmul": lambda a, w, bias: torch.matmul(a, w)},
        2.0 * n ** 3, "GFLOP/s", atol=1e-3)
    if not small:  # the model level's form: a Linear's weight stored (n, k), an odd shape
        m, n, k = 333, 555, 777
        add("gemm_epilogue", "linear+gelu", f"{m}x{n}x{k}", ("gemm_epilogue", ("gelu", False, True)), [(m, k), (n, k), (n,)],
            {"gelu(linear)": lambda x, w, bias: F.gelu(F.linear(x, w, bias))}, 2.0 * m * n * k, "GFLOP/s", atol=1e-3)
    for r, c in (((256, 1024), (64, 4097)) if small else ((4096, 1024), (512, 4097))):
        add("softmax", "softmax", f"{r}x{c}", ("softmax", (False,)), [(r, c)], {"softmax": lambda x: torch.softmax(x, -1)},
            2.0 * r * c * 4, "GB/s", first=lambda x: 3 * x)
        add("log_softmax", "log_softmax", f"{r}x{c}", ("softmax", (True,)), [(r, c)],
            {"log_softmax": lambda x: torch.log_softmax(x, -1)}, 2.0 * r * c * 4, "GB/s", first=lambda x: 3 * x)
        add("layernorm", "layernorm", f"{r}x{c}", "layernorm", [(r, c), (c,), (c,)],
            {"layer_norm": lambda x, w, bias: F.layer_norm(x, x.shape[-1:], w, bias, 1e-5)}, (2.0 * r * c + 2 * c) * 4,
            "GB/s", scalars={"eps": 1e-5}, first=lambda x: x + 1)
        add("rmsnorm", "rmsnorm", f"{r}x{c}", "rmsnorm", [(r, c), (c,)],
            {"rms_norm": lambda x, w: F.rms_norm(x, x.shape[-1:], w, 1e-6)}, (2.0 * r * c + c) * 4, "GB/s", scalars={"eps": 1e-6})
    def row_ops(case, r, c, dtype, tag, ops=("softmax", "layernorm", "rmsnorm")):
        """The row operators on (r, c) rows of ``dtype``, in and out in that type."""
        size, tol = (4, {}) if dtype == torch.float32 else (2, dict(atol=5e-2, rtol=2e-2))
        if "softmax" in ops:
            add(case, f"softmax {tag}", f"{r}x{c}", ("softmax", (False,)), [(r, c)],
                {"softmax": lambda x: torch.softmax(x, -1)}, 2.0 * r * c * size, "GB/s", first=lambda x: 3 * x,
                dtype=dtype, **({} if size == 4 else dict(atol=1e-2, rtol=2e-2)))
        if "layernorm" in ops:
            add(case, f"layernorm {tag}", f"{r}x{c}", "layernorm", [(r, c), (c,), (c,)],
                {"layer_norm": lambda x, w, bias: F.layer_norm(x, x.shape[-1:], w, bias, 1e-5)},
                (2.0 * r * c + 2 * c) * size, "GB/s", scalars={"eps": 1e-5}, first=lambda x: x + 1, dtype=dtype, **tol)
        if "rmsnorm" in ops:
            add(case, f"rmsnorm {tag}", f"{r}x{c}", "rmsnorm", [(r, c), (c,)],
                {"rms_norm": lambda x, w: F.rms_norm(x, x.shape[-1:], w, 1e-6)}, (2.0 * r * c + c) * size, "GB/s",
                scalars={"eps": 1e-6}, dtype=dtype, **tol)

    # the row operators on 16-bit rows (a bfloat16 or float16 model's activations), in and out in that type
    r, c = (256, 1024) if small else (4096, 1024)
    for dtype, tag in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
        row_ops("rows16", r, c, dtype, tag)
    # rows of widths no shape point names (about 2M elements a call): a tile that overhangs its row, vocabularies'
    # softmaxes (32000: Llama 2's, 128256: Llama 3's, 256000: Gemma's)
    for c in ((300, 1500) if small else (700, 1500, 5000, 32000, 128256, 256000)):
        for dtype, tag in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            row_ops("rows_odd", (20_000 if small else 2_000_000) // c, c, dtype, tag,
                    ("softmax",) if c > 8192 else ("softmax", "layernorm", "rmsnorm"))
    bt, h, sq, d = (1, 2, 128, 64) if small else (1, 8, 512, 64)
    for causal in (False, True):  # Sq == Sk: SepTran's bottom-right causal mask is torch's is_causal
        # the mapping torch.ops.septran.attention runs (septran/ops/attention.py): attention_full.yaml without the mask
        add("attention", "attention" + (" causal" if causal else ""), f"{bt}x{h}x{sq}x{sq}x{d}", ("attention", (causal,)),
            [(bt, h, sq, d)] * 3,
            {"sdpa": lambda q, k, v, causal=causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal)},
            4.0 * bt * h * sq * sq * d * (0.5 if causal else 1.0), "GFLOP/s",
            mapping=None if causal else "attention_full")
    return out


AUTOTUNE: set = set()  # operators whose kernels tune each shape on its first call (--autotune)


def compile_op(logic, mapping_dir: Path, tune: bool | None = None, mapping: str | None = None):
    """``tune``: True tunes each new shape; None (default: True for the --autotune operators) runs the database's
    point for the shape, or the mapping's own. ``mapping``: the mapping file's name where the folder has it, else the
    operator's."""
    import septran

    op, build = (logic, None) if isinstance(logic, str) else logic
    mapping = mapping_dir / f"{mapping}.yaml" if mapping and (mapping_dir / f"{mapping}.yaml").exists() else \
        mapping_dir / f"{op}.yaml"
    tune = True if tune is None and op in AUTOTUNE else tune
    if build is None:
        return septran.compile(logic_file=REPO / "examples" / op / f"{op}.py", mapping_file=mapping, autotune=tune)
    return septran.compile(getattr(_example(op), op)(*build), mapping_file=mapping, autotune=tune)


def shipped_point(case: dict, mapping_dir: Path, inputs: list, scalars: dict):
    """The kernel as a fresh machine runs it: the mapping's own point for these shapes (its ``shape_points`` entry or
    the space's first point), with no tuning database (an empty one named for its first call, which fixes the
    point), so that the tuned kernel's gain is measured in the same rounds."""
    import tempfile

    kernel = compile_op(case["logic"], mapping_dir, tune=False, mapping=case["mapping"])
    before = os.environ.get("SEPTRAN_TUNING_DB")
    with tempfile.TemporaryDirectory() as empty:
        os.environ["SEPTRAN_TUNING_DB"] = str(Path(empty) / "tuning.jsonl")
        try:
            kernel(*inputs, **scalars)
        finally:
            if before is None:
                del os.environ["SEPTRAN_TUNING_DB"]
            else:
                os.environ["SEPTRAN_TUNING_DB"] = before
    return kernel


def run_case(case: dict, threads: list[int], mapping_dir: Path, rounds: int, sample_s: float, idle_s: float) -> list[dict]:
    import torch

    inputs, scalars = case["inputs"](), case["scalars"]
    shipped = shipped_point(case, mapping_dir, inputs, scalars) if case["op"] in AUTOTUNE else None
    kernel = compile_op(case["logic"], mapping_dir, mapping=case["mapping"])
    start = time.perf_counter()
    kernel.specialize(**{a.name: t for a, t in zip(kernel.inputs, inputs)}, **scalars).build()
    compile_s = time.perf_counter() - start
    base = dict(op=case["op"], label=case["label"], shape=case["shape"], unit=case["unit"], work=case["work"],
                inputs=[list(t.shape) for t in inputs], compile_s=compile_s, mapping=str(kernel.mapping.file))
    rows = []
    for n in threads:
        torch.set_num_threads(n)
        row = dict(base, threads=n)
        rows.append(row)
        out = kernel(*inputs, **scalars)  # checked at each thread count: a race would show at 2 only
        row["tuning"] = kernel.tuning
        ref = next(iter(case["baselines"].values()))(*inputs)
        row["max_abs_err"] = (out - ref).abs().max().item() if out.shape == ref.shape else float("inf")
        if out.shape != ref.shape or not torch.allclose(out.float(), ref.float(), rtol=case["rtol"], atol=case["atol"]):
            row["error"] = (f"WRONG: max |septran - torch| = {row['max_abs_err']:.3g} (rtol {case['rtol']:g}, "
                            f"atol {case['atol']:g})")
            continue
        fns = {"septran": lambda: kernel(*inputs, **scalars)}
        if shipped is not None:  # --autotune: the shipped point in the same rounds, for the tuned gain
            fns["shipped_point"] = lambda: shipped(*inputs, **scalars)
            row["shipped_tuning"] = shipped.tuning
        fns.update({name: (lambda f=f: f(*inputs)) for name, f in case["baselines"].items()})
        if case["inductor_of"] is not None:
            # compiled anew at each thread count (on its warm-up call, outside the timing), with that count named in
            # inductor's config: its C++ keeps the count it was compiled at, and its graph cache's key holds the
            # config, not torch's count (torch 2.11 on a 16-core Intel host ran the 1-thread rows as fast as the 2,
            # where eager's and SepTran's times doubled)
            torch._dynamo.reset()
            torch._inductor.config.cpp.threads = torch.get_num_threads()
            # compiled in this process, so that no pool of compile workers starts up beside the timing: with one, the
            # first block's "other" read 0.5 and 0.6 of a core in two runs (softmax 4096x1024 at 2 threads 0.94x torch
            # in one, 1.38 alone), without it 0.2
            torch._inductor.config.compile_threads = 1
            compiled = torch.compile(case["inductor_of"], dynamic=False)
            fns["inductor"] = lambda: compiled(*inputs)
        row["waited_s"] = wait_idle(idle_s)
        others = Others()
        samples, row["reps"] = interleaved(fns, rounds, sample_s)
        row["others_cores"], row["stall_share"] = others.cores(), others.stalls()
        row["septran"] = stats(samples.pop("septran"))
        if "shipped_point" in samples:  # > 1: the tuned point is faster than the one a fresh machine runs
            row["shipped_point"] = stats(samples.pop("shipped_point"))
            row["tuned_gain"] = row["shipped_point"]["median"] / row["septran"]["median"]
        row["torch"] = {name: stats(s) for name, s in samples.items()}
        rate = lambda ms: case["work"] / (ms * 1e-3) / 1e9  # noqa: E731
        row["septran_rate"] = rate(row["septran"]["median"])
        row["torch_rate"] = {name: rate(s["median"]) for name, s in row["torch"].items()}
        row["ratio"] = {name: row["septran_rate"] / r for name, r in row["torch_rate"].items()}
    return rows


def overhead(threads: list[int], mapping_dir: Path, calls: int, idle_s: float) -> list[dict]:
    """A 16x16x16 GEMM: SepTran's call, TileLang's, and the compiled function through ctypes (the floor)."""
    import torch

    kernel = compile_op("gemm", mapping_dir)
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    c = kernel(a, b)
    built = kernel._last.build()  # the variant that just ran: SepTran's CKernel (a target it builds) or TileLang's
    args = [a, b, c]  # the program's parameters: the inputs, then the outputs (as Kernel.__call__ passes them)
    out = torch.empty(16, 16)
    kernel(a, b, C=out)  # the keyword-output path: its own plan
    c_entry = _c_entry(kernel, lambda: kernel(a, b), lambda: kernel(a, b, C=out))
    fns = {"septran": lambda: kernel(a, b), "septran_kw_out": lambda: kernel(a, b, C=out), "compiled": lambda: built(*args)}
    if hasattr(built, "function"):  # SepTran's C build: the ctypes function with the addresses computed once
        ptrs = [args[k].data_ptr() for k in built.order]
        c.zero_()
        built.function(*ptrs)
        assert torch.allclose(c, a @ b, rtol=1e-4, atol=1e-4), "the raw ctypes call did not compute the GEMM"
        fns["ctypes_floor"] = lambda: built.function(*ptrs)
    else:  # TileLang's JITKernel: its adapter's library, as _forward_from_prebuild_lib calls it
        lib_call = getattr(getattr(getattr(built, "adapter", None), "lib", None), "call", None)
        if lib_call is not None:
            ptrs = [ctypes.c_void_p(t.data_ptr()) for t in args] + [ctypes.c_void_p(0)]
            fns["ctypes_floor"] = lambda: lib_call(*ptrs)
    fns["torch_matmul"] = lambda: torch.matmul(a, b)
    rows = []
    for n in threads:
        torch.set_num_threads(n)
        for fn in fns.values():
            fn()
        waited, others = wait_idle(idle_s), Others()
        samples, _ = interleaved(fns, 10, 0, reps={k: -(-calls // 10) for k in fns})  # 10 rounds of calls / 10
        us = {k: stats(s, 1e6) for k, s in samples.items()}
        mean = {k: statistics.fmean(s["samples"]) for k, s in us.items()}  # the mean over all the calls
        floor = "ctypes_floor" if "ctypes_floor" in mean else "compiled"
        rows.append({"op": "overhead", "label": "call overhead", "shape": "16^3", "threads": n, "waited_s": waited,
                     "point": kernel.tuning["source"], "c_entry": c_entry, "loadavg": os.getloadavg(),
                     "ratio_to_matmul": {k: us[k]["median"] / us["torch_matmul"]["median"] for k in us},
                     "others_cores": others.cores(), "stall_share": others.stalls(), "calls": -(-calls // 10) * 10, "us": us, "mean_us": mean,
                     "floor": floor, "septran_overhead_us": mean["septran"] - mean[floor],
                     "septran_overhead_us_median": us["septran"]["median"] - us[floor]["median"]})
    return rows


def _c_entry(kernel, *calls) -> str:
    """Calls each signature until the kernel's C entry of calls holds it (septran/runtime/fast_call.py; built on
    a background thread the first time, waited for here): "yes", or why the calls stay in Python."""
    from septran.build import pyext
    from septran.runtime import fast_call

    for _ in range(2):
        for call in calls:
            for _ in range(fast_call.CALLS_BEFORE + 1):
                call()
        if pyext.module(wait=None) is None:
            return f"no: {pyext.why()}"
    held = kernel._fast.size() if kernel._fast is not None else 0
    return "yes" if held >= len(calls) else f"no: it holds {held} of the {len(calls)} signatures"


def machine() -> dict:
    import tilelang
    import torch

    import septran

    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    field = lambda key: next((ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith(key)), None)  # noqa: E731
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"cpu_model": field("model name") or platform.processor(), "cpu_family": field("cpu family"),
            "cpu_model_number": field("model"), "avx512f": " avx512f" in (field("flags") or ""),
            "matrix_units": [f for f in MATRIX_UNIT_FLAGS if f in (field("flags") or "").split()],
            "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)), "torch": torch.__version__,
            "tilelang": tilelang.__version__, "septran": septran.__version__, "python": platform.python_version(),
            "commit": commit or None, "loadavg_start": os.getloadavg(), "openblas_core": openblas_core(),
            "openblas_coretype_env": os.environ.get("OPENBLAS_CORETYPE")}


def openblas_core() -> str | None:
    """The kernel set OpenBLAS runs the cpu leaves' GEMMs with (its CPU detection, or OPENBLAS_CORETYPE where set:
    forced to Haswell on an AVX-512 CPU, its sgemm runs 256-bit FMAs, half of a Zen 5 core's peak)."""
    import ctypes
    import importlib.util

    try:
        from septran.build import vendor
        from septran.target import load_target

        vendor.load(load_target("cpu"))  # OpenBLAS chooses when it loads: with the vendor library, as a kernel does
        spec = importlib.util.find_spec("scipy_openblas32")
        lib = ctypes.CDLL(str(Path(spec.submodule_search_locations[0]) / "lib" / "libscipy_openblas.so"))
        lib.scipy_openblas_get_corename.restype = ctypes.c_char_p
        return lib.scipy_openblas_get_corename().decode()
    except Exception:  # noqa: BLE001 - a machine fact for the JSON, not worth failing the run over
        return None


def fmt(s: dict | None) -> str:
    return f"{s['median']:9.3f} ({s['min']:.3f}-{s['max']:.3f})" if s else f"{'-':>9}"


def busy(r: dict) -> str:
    """Cores other processes used during the block; `!` where tasks stalled on memory over 1 % of the time."""
    mark = "!" if r.get("stall_share", {}).get("memory", 0) > 0.01 else " "
    return f"{r['others_cores']:5.2f}{mark}" if r.get("others_cores") is not None else f"{'-':>5} "


def print_rows(rows: list[dict]) -> None:
    head = f"{'operator':16} {'shape':15} {'thr':>3} {'SepTran ms (min-max)':>28} {'torch op':>18} {'torch ms (min-max)':>28} " \
           f"{'SepTran':>8} {'torch':>8} {'unit':8} {'ratio':>6} {'other':>5}"
    print(head + "\n" + "-" * len(head))
    for r in rows:
        if "error" in r:
            print(f"{r['label']:16} {r['shape']:15} {r['threads']:>3} {r['error']}")
        elif r["op"] == "overhead":
            print(f"{r['label']:16} {r['shape']:15} {r['threads']:>3} us/call, median of 10 rounds (min-max) over "
                  f"{r['calls']} calls; C entry: {r.get('c_entry', '-')}; other {busy(r).strip()}, load {r['loadavg'][0]:.2f}")
            for k, v in r["us"].items():
                print(f"{'':36} {k:15} {fmt(v):>28}   x torch.matmul {r['ratio_to_matmul'][k]:5.2f}")
            print(f"{'':36} SepTran - {r['floor']} = {r['septran_overhead_us_median']:.2f} us (medians)")
        else:
            for i, (name, t) in enumerate(r["torch"].items()):
                sep = fmt(r["septran"]) if i == 0 else f"{'(same)':>9}"
                print(f"{r['label']:16} {r['shape']:15} {r['threads']:>3} {sep:>28} {name:>18} {fmt(t):>28} "
                      f"{r['septran_rate']:8.2f} {r['torch_rate'][name]:8.2f} {r['unit']:8} {r['ratio'][name]:6.3f} {busy(r)}")
            if "tuned_gain" in r:
                print(f"{'':36} tuned gain {r['tuned_gain']:.2f}x over the shipped point {fmt(r['shipped_point']).strip()} ms "
                      f"({_point(r['shipped_tuning'])} -> {_point(r['tuning'])})")


def _point(tuning: dict) -> str:
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in sorted((tuning or {}).get("point", {}).items())) or "-"


def speedups(rows: list[dict]) -> list[dict]:
    """Per case: median at the fewest threads / median at the most, for SepTran and each torch baseline."""
    out, by = [], {}
    for r in rows:
        if r["op"] != "overhead" and "error" not in r:
            by.setdefault((r["label"], r["shape"]), {})[r["threads"]] = r
    for (label, shape), per in by.items():
        if len(per) < 2:
            continue
        lo, hi = per[min(per)], per[max(per)]
        out.append({"label": label, "shape": shape, "from_threads": lo["threads"], "to_threads": hi["threads"],
                    "septran": lo["septran"]["median"] / hi["septran"]["median"],
                    "torch": {k: lo["torch"][k]["median"] / hi["torch"][k]["median"] for k in lo["torch"]}})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 rounds of short samples, 1,000 overhead calls (the smoke test)")
    ap.add_argument("--sizes", choices=("full", "small"), default="full", help="small: every shape cut down (tests)")
    ap.add_argument("--cases", default=",".join(OPS), help=f"comma-separated, of: {','.join(OPS)}")
    ap.add_argument("--threads", default="2,1", help="torch.set_num_threads values, each a block of rounds")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 9, --quick 3)")
    ap.add_argument("--sample-s", type=float, default=None, help="seconds per sample (default 0.2, --quick 0.02)")
    ap.add_argument("--calls", type=int, default=None, help="overhead GEMM calls (default 10,000, --quick 1,000)")
    ap.add_argument("--mapping-dir", type=Path, default=REPO / "mappings" / "cpu")
    ap.add_argument("--cold-compile", action="store_true", help="empty TileLang and SepTran caches (a temporary folder): "
                    "compile_s is a full build, and no tuning database is read")
    ap.add_argument("--wait-idle", type=float, default=0.0, metavar="S", help="before each block of rounds, wait up to S "
                    "seconds for other work to drop below 0.3 cores (a shared machine); each row records what other work used")
    ap.add_argument("--autotune", default="", metavar="OPS", help="comma-separated operators whose kernels are tuned for each "
                    "shape before they are timed (septran's autotune; the tuning database keeps the result); their "
                    "rows also time the shipped point in the same rounds and print the tuned gain")
    ap.add_argument("--inductor", default="", metavar="OPS", help="comma-separated operators (or cases: rows16, "
                    "rows_odd) also timed against torch.compile (inductor) of the torch baseline, e.g. "
                    "softmax,layernorm,rmsnorm,gemm_epilogue (an operator's rows in rows16 and rows_odd too)")
    ap.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "cpu.json")
    args = ap.parse_args(argv)
    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    if unknown := sorted(set(wanted) - set(OPS)):
        ap.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(OPS)}")
    threads = [int(t) for t in args.threads.split(",")]
    if min(threads) < 1 or (args.rounds is not None and args.rounds < 1):
        ap.error("--threads and --rounds take positive numbers")
    mapping_dir = args.mapping_dir.resolve()
    AUTOTUNE.update(op for op in args.autotune.split(",") if op)
    INDUCTOR.update(op for op in args.inductor.split(",") if op)
    rounds = args.rounds or (3 if args.quick else 9)
    sample_s = args.sample_s or (0.02 if args.quick else 0.2)
    calls = args.calls or (1_000 if args.quick else 10_000)
    if args.cold_compile:  # before TileLang is imported: it reads its cache folder then
        tmp = tempfile.mkdtemp(prefix="septran-bench-cpu-")
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
        os.environ.update(TILELANG_CACHE_DIR=f"{tmp}/tilelang", SEPTRAN_CACHE_DIR=f"{tmp}/septran")
    import tilelang  # noqa: F401  (imported now so that its logger's level below sticks)
    import torch

    logging.basicConfig(level=logging.ERROR)
    for name in ("tilelang", "TileLang", "septran"):
        logging.getLogger(name).setLevel(logging.ERROR)
    info = machine()
    print(f"cpu: {info['cpu_model']} ({info['usable_cores']} of {info['cores']} cores, avx512f {info['avx512f']}, "
          f"bf16 matrix units: {', '.join(info['matrix_units']) or 'none (no AMX, no AVX512-BF16)'}), "
          f"torch {info['torch']}, tilelang {info['tilelang']}, OpenBLAS kernels {info['openblas_core']}"
          + (f" (OPENBLAS_CORETYPE={info['openblas_coretype_env']})" if info["openblas_coretype_env"] else "")
          + f", mappings {mapping_dir}, {rounds} rounds")
    start, rows = time.perf_counter(), []
    for case in [c for c in cases(args.sizes == "small") if c["op"] in wanted] + ([None] if "overhead" in wanted else []):
        try:  # a case that cannot compile or run is reported; the others still run
            new = overhead(threads, mapping_dir, calls, args.wait_idle) if case is None else \
                run_case(case, threads, mapping_dir, rounds, sample_s, args.wait_idle)
        except Exception as err:
            case = case or {"op": "overhead", "label": "call overhead", "shape": "16^3"}
            new = [dict(op=case["op"], label=case["label"], shape=case["shape"], threads=n,
                        error=f"FAILED: {type(err).__name__}: {str(err).splitlines()[0][:200]}") for n in threads]
        rows += new
        for r in new:
            if "error" in r or r["op"] == "overhead":
                continue
            print(f"  {r['label']} {r['shape']} threads {r['threads']}: compile {r['compile_s']:.2f} s, septran "
                  f"{r['septran']['median']:.3f} ms, ratio " + ", ".join(f"{k} {v:.3f}" for k, v in r["ratio"].items())
                  + f"; other work {busy(r).strip()} cores; point: {r['tuning']['source']}", flush=True)
    elapsed = time.perf_counter() - start
    torch.set_num_threads(max(threads))
    print(f"\nfp32; ms: median of {rounds} interleaved rounds (min-max); ratio = SepTran / torch throughput; "
          "other: cores other processes used meanwhile (!: memory stalls)\n")
    print_rows(rows)
    if "bf16" in wanted:
        print("\ngemm bf16: " + (f"this CPU has {', '.join(info['matrix_units'])}"
                                + ("" if "amx_bf16" in info["matrix_units"] else " and lacks AMX")
                                + ": the gemm mapping's shape_points run bf16 GEMMs of more than 16 rows on it "
                                "(gemm_leaf_amx / gemm_leaf_avx512bf16; the row's point column names it; fewer rows stream "
                                "B through the widening leaf)"
                                if info["matrix_units"]
                                else "this CPU lacks AMX and AVX512-BF16 (no bf16 matrix unit): the gemm mapping keeps bf16 "
                                "tensors (keep_dtypes) and OpenBLAS's leaf widens each tile to fp32; the row times that "
                                "against torch's bf16 matmul"))
    ups = speedups(rows)
    if ups:
        print(f"\nspeed-up from {ups[0]['from_threads']} to {ups[0]['to_threads']} threads (median / median)")
        for u in ups:
            print(f"  {u['label']:16} {u['shape']:15} SepTran {u['septran']:5.2f}x   torch "
                  + "  ".join(f"{k} {v:.2f}x" for k, v in u["torch"].items()))
    compiled = {f"{r['label']} {r['shape']}": r["compile_s"] for r in rows if "compile_s" in r}
    print("\ncompile (specialize + build), s: " + ", ".join(f"{k} {v:.2f}" for k, v in compiled.items()))
    print(f"compile {sum(compiled.values()):.1f} s in all; the whole run {elapsed:.1f} s")
    info["loadavg_end"] = os.getloadavg()
    report = {"machine": info, "settings": {"rounds": rounds, "sample_s": sample_s, "calls": calls, "threads": threads,
                                            "sizes": args.sizes, "quick": args.quick, "cases": wanted,
                                            "mapping_dir": str(mapping_dir), "cold_compile": args.cold_compile},
              "rows": rows, "speedups": ups, "seconds": elapsed}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
