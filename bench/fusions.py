"""What each graph-level fusion is worth on an example block: the same block compiled with
``backend="septran"`` several times, each with some fusions turned off, timed in interleaved rounds against
eager torch (a prefill of --prompt tokens and a decode step at that position).

    python bench/fusions.py                         # llama, 1 thread: all / no residual / no view removal / neither
    python bench/fusions.py --block gpt2 --threads 2

The variants: ``all`` (what the backend does), ``-residual`` (the residual add left to an elementwise step,
not in the GEMM's epilogue: ``septran.model.patterns.residual``), ``-noops`` (views to their own shape kept:
``septran.model.patterns.noops``), ``-both``. The decode points in the mappings (``shape_points``) are not a
switch here: compare them by running this before and after the mapping change. Each variant is checked against
the block in float64 before it is timed. The machine is shared: read the spread, and the load printed last.
"""
from __future__ import annotations

import argparse
import copy
import functools
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "examples"))

VARIANTS = {"all": set(), "-residual": {"gemm_residual"}, "-noops": {"noops"}, "-both": {"gemm_residual", "noops"}}


def compiled(model, off: set):
    """The block compiled with the fusions ``off`` turned off (they are off only while it compiles)."""
    import torch

    import septran.model.patterns.noops as noops
    from septran.model import patterns
    from septran.model.backend import septran_backend

    kept, drop = list(patterns.PATTERNS), noops.drop_noops
    patterns.PATTERNS[:] = [p for p in kept if getattr(p, "name", "") not in off]
    if "noops" in off:
        noops.drop_noops = lambda graph: 0
    try:
        return torch.compile(copy.deepcopy(model), backend=functools.partial(septran_backend), fullgraph=True), kept
    finally:
        noops.drop_noops = drop


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--block", choices=("llama", "gpt2"), default="llama")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {','.join(VARIANTS)}")
    args = ap.parse_args(argv)

    import torch

    import models
    import model_runner
    from septran.model import patterns

    torch.set_num_threads(args.threads)
    model, sizes = models.block(args.block, False, args.prompt)
    hidden = model.cfg.hidden
    gen = torch.Generator().manual_seed(0)
    xp, xd = torch.randn(1, args.prompt, hidden, generator=gen), torch.randn(1, 1, hidden, generator=gen)
    ref_model = copy.deepcopy(model).double()
    kr, vr = ref_model.new_cache(dtype=torch.float64)
    ke, ve = model.new_cache()
    calls = {"eager": (model, ke, ve)}
    with torch.no_grad():
        ref = [ref_model(xp.double(), 0, kr, vr), ref_model(xd.double(), args.prompt, kr, vr)]
        eager = [model(xp, 0, ke, ve), model(xd, args.prompt, ke, ve)]
        eager_err = [(o.double() - r).abs().max().item() for o, r in zip(eager, ref)]
        for name in args.variants.split(","):
            fn, kept = compiled(model, VARIANTS[name])
            kc, vc = model.new_cache()
            try:
                outs = [fn(xp, 0, kc, vc), fn(xd, args.prompt, kc, vc)]  # compiled here, with the fusions off
            finally:
                patterns.PATTERNS[:] = kept
            for o, r, e in zip(outs, ref, eager_err):
                err, bound = (o.double() - r).abs().max().item(), model_runner.bound(e, r, torch.float32)
                if err > bound:
                    print(f"{name}: WRONG, max |out - float64| {err:.3g} > {bound:.3g}")
                    return 1
            calls[name] = (fn, kc, vc)
        print(f"{args.block} block ({sizes}), fp32, {args.threads} thread(s); ms per step: median [min, max] of "
              f"{args.rounds} interleaved rounds")
        for phase, x, pos, reps in (("decode", xd, args.prompt, 100), ("prefill", xp, 0, 3)):
            times = {k: [] for k in calls}
            for _ in range(args.rounds):
                for k, (fn, kc, vc) in calls.items():
                    fn(x, pos, kc, vc)
                    start = time.perf_counter()
                    for _ in range(reps):
                        fn(x, pos, kc, vc)
                    times[k].append((time.perf_counter() - start) / reps * 1e3)
            print(f"  {phase:8s}" + "  ".join(f"{k} {statistics.median(v):.3f} [{min(v):.3f}, {max(v):.3f}]"
                                              for k, v in times.items()))
    print("load average (1, 5, 15 min):", ", ".join(f"{x:.1f}" for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
