"""The Llama block example on this machine's NVIDIA GPU in float16: the first prefill and decode step's time
(the compile), then prefill and decode step times for eager, inductor and SepTran (``backend="septran"`` with the
CUDA launcher and its CUDA graphs, SEPTRAN_LAUNCHER_CUDA=1), in interleaved rounds; each backend's largest
difference from eager's output. Prints a table and writes bench/results/models_gpu.json. Without an NVIDIA GPU it
says so and exits 0. ``make gpu`` runs it (bench/gpu.py).

    python bench/models_gpu.py                 # the example's block and a 2048-wide one
    python bench/models_gpu.py --rounds 3 --sizes small
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# (hidden, heads, kv_heads, head_dim, intermediate, max_len, prompt)
SIZES = {"small": (256, 8, 2, 32, 688, 1024, 64), "large": (2048, 16, 4, 128, 5632, 2048, 512)}
BACKENDS = ("eager", "inductor", "septran")


def _run(fn, x, pos, caches):
    import torch

    with torch.no_grad():
        return fn(x, pos, *caches)


def measure(size: str, rounds: int, steps: int) -> dict:
    import torch

    sys.path.insert(0, str(REPO / "examples"))
    import model_runner

    import septran.model  # noqa: F401  (registers the backend)

    llama = model_runner.load(REPO / "examples" / "llama_block" / "model.py", "septran_bench_llama_gpu")
    hidden, heads, kv, hd, inter, max_len, prompt = SIZES[size]
    cfg = llama.LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv, head_dim=hd, intermediate=inter, max_len=max_len)
    model = llama.build(cfg, dtype=torch.float16).cuda()
    gen = torch.Generator(device="cuda").manual_seed(0)
    xp = torch.randn(1, prompt, hidden, device="cuda", generator=gen, dtype=torch.float16)
    xd = torch.randn(1, 1, hidden, device="cuda", generator=gen, dtype=torch.float16)
    torch._dynamo.reset()
    fns = {"eager": model, "inductor": torch.compile(model, fullgraph=True, dynamic=False),
           "septran": torch.compile(model, backend="septran", fullgraph=True, dynamic=False)}
    row: dict = {"size": size, "config": dict(zip(("hidden", "heads", "kv_heads", "head_dim", "intermediate",
                                                   "max_len", "prompt"), SIZES[size]))}
    outs = {}
    for name, fn in fns.items():  # first calls: the prefill graph and two decode positions (each backend's compile)
        start, caches = time.perf_counter(), model.new_cache(device="cuda")
        first = _run(fn, xp, 0, caches)
        _run(fn, xd, prompt, caches)
        second = _run(fn, xd, prompt + 1, caches)
        torch.cuda.synchronize()
        row[f"{name}_first_s"] = time.perf_counter() - start
        outs[name] = (first.float().cpu(), second.float().cpu())
    for name in fns:
        row[f"{name}_maxdiff"] = max((outs[name][k] - outs["eager"][k]).abs().max().item() for k in (0, 1))
    times = {n: {"prefill": [], "decode": []} for n in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            caches = model.new_cache(device="cuda")
            torch.cuda.synchronize()
            start = time.perf_counter()
            _run(fn, xp, 0, caches)
            torch.cuda.synchronize()
            times[name]["prefill"].append(time.perf_counter() - start)
            step = []
            for i in range(steps):  # two positions in turn: a graph replays where the launcher captured one
                start = time.perf_counter()
                _run(fn, xd, prompt + i % 2, caches)
                torch.cuda.synchronize()
                step.append(time.perf_counter() - start)
            times[name]["decode"].append(statistics.median(step))
    for name in fns:
        for phase, samples in times[name].items():
            row[f"{name}_{phase}_ms"] = [statistics.median(samples) * 1e3, min(samples) * 1e3, max(samples) * 1e3]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", choices=tuple(SIZES), default=list(SIZES))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=20, help="decode steps per round (their median is the round's)")
    ap.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "models_gpu.json")
    args = ap.parse_args(argv)
    import torch

    if not (torch.cuda.is_available() and torch.version.hip is None):
        print("bench/models_gpu.py: no NVIDIA GPU, skipped")
        return 0
    os.environ.setdefault("SEPTRAN_LAUNCHER_CUDA", "1")
    rows = [measure(size, args.rounds, args.steps) for size in args.sizes]
    print(f"Llama block, float16, {torch.cuda.get_device_name()}, torch {torch.__version__}: ms, median of "
          f"{args.rounds} interleaved rounds (decode: each round's median of {args.steps} steps)")
    print(f"{'size':>6} {'phase':>8} " + " ".join(f"{b:>9}" for b in BACKENDS)
          + f" {'x eager':>8} {'x inductor':>10}")
    for r in rows:
        for phase in ("prefill", "decode"):
            ms = {b: r[f"{b}_{phase}_ms"][0] for b in BACKENDS}
            print(f"{r['size']:>6} {phase:>8} " + " ".join(f"{ms[b]:>9.3f}" for b in BACKENDS)
                  + f" {ms['eager'] / ms['septran']:>8.2f} {ms['inductor'] / ms['septran']:>10.2f}")
        print(f"{r['size']:>6} {'first s':>8} " + " ".join(f"{r[f'{b}_first_s']:>9.1f}" for b in BACKENDS)
              + f"   max |out - eager|: " + ", ".join(f"{b} {r[f'{b}_maxdiff']:.4f}" for b in BACKENDS[1:]))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                     "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.json.relative_to(REPO) if args.json.is_relative_to(REPO) else args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
