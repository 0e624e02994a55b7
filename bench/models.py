"""Models timed whole, in their own terms: the example blocks (examples/llama_block, examples/gpt2_block) and
Hugging Face LlamaForCausalLM (grouped KV heads), Qwen2, GPT-2 and BERT built from small configs with random
weights (bench/hf_models.py; no download). A prefill (batch 1, 512 tokens) and a decode step (one token at
position 512, over the 512 cached; for the HF models, with generate's static KV cache), BERT a forward of 512
tokens, through eager torch, torch.compile's default backend (inductor) and torch.compile(backend="septran"):
ms per step, tokens/s, and the peak memory a step allocates.

    python bench/models.py                                   # everything, eager, inductor and septran, fp32, 2 then 1 threads
    python bench/models.py --blocks llama --hf none --backends eager,septran --threads 2,1
    python bench/models.py --quick --sizes small --backends eager,aot_eager   # the smoke test
    python bench/models.py --hf none --dtype bfloat16                        # the example blocks in bfloat16

Each backend compiles the block once (``fullgraph=True``; compile_s: the first prefill and the first decode step,
compiles included) and is checked before it is timed: its prefill and decode outputs against the same block in
float64, under the FlashAttention rule (at most twice eager torch's error, plus two roundings; see
examples/model_runner.py). A wrong or failing backend is reported and not timed, and the exit status is then 1;
a backend that is not available here (septran before its model level is registered) is a row saying so, which
does not fail the run. The machine is shared, so the backends are timed in interleaved rounds (eager, inductor,
septran, eager, ...), as bench/cpu.py does: each round's sample is the mean of enough calls to fill --sample-s,
and the table shows the median of the rounds with their min-max (the JSON also has the quartiles and every
sample). Speed-up = eager's median / the backend's (> 1: faster than eager). Column "other": the cores other
processes used during the block of rounds.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "examples"))

from cpu import busy, machine  # noqa: E402
from interleave import Others, interleaved, stats, wait_idle  # noqa: E402
import model_runner  # noqa: E402

BLOCKS = ("llama", "gpt2")
HF_MODELS = ("llama", "qwen2", "gpt2", "bert")  # bench/hf_models.py
BACKENDS = ("eager", "inductor", "septran", "aot_eager")
PHASES = ("prefill", "decode")


def block(name: str, small: bool, prompt: int):
    """The block's model (seeded weights, fp32) with its cache long enough for the prompt and one step (``prepare``
    converts it to the run's dtype)."""
    if name == "llama":
        module = model_runner.load(REPO / "examples" / "llama_block" / "model.py", "septran_example_llama_block_model")
        sizes = dict(hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=172) if small else {}
        return module.build(module.LlamaConfig(max_len=prompt + 8, **sizes)), ", ".join(
            f"{k} {v}" for k, v in (sizes or dict(hidden=256, heads=8, kv_heads=2, head_dim=32, intermediate=688)).items())
    module = model_runner.load(REPO / "examples" / "gpt2_block" / "model.py", "septran_example_gpt2_block_model")
    sizes = dict(hidden=64, heads=4, mlp=256) if small else {}
    return module.build(module.GPT2Config(max_len=prompt + 8, **sizes)), ", ".join(
        f"{k} {v}" for k, v in (sizes or dict(hidden=256, heads=8, mlp=1024)).items())


def prepare(model, backends: list[str], prompt: int, dtype=None) -> tuple[dict, dict, list[dict]]:
    """Per backend that runs and passes the check: its prefill and decode calls. Also each one's compile seconds
    and errors, and a note per backend that is skipped or failed. ``dtype``: the model's weights, inputs and cache
    (float32 by default); the reference is the same weights widened to float64."""
    import copy

    import torch

    dtype = dtype or torch.float32
    model = model.to(dtype)
    gen = torch.Generator().manual_seed(0)
    xp, xd = (torch.randn(1, n, model.cfg.hidden, generator=gen).to(dtype) for n in (prompt, 1))
    ref_model = copy.deepcopy(model).double()
    kr, vr = ref_model.new_cache(dtype=torch.float64)
    ref = [ref_model(xp.double(), 0, kr, vr), ref_model(xd.double(), prompt, kr, vr)]
    calls, info, notes, eager_err = {}, {}, [], None
    for name in ["eager"] + [b for b in backends if b != "eager"]:  # eager first: its error sets the bound
        if why := model_runner.unavailable(name):
            notes.append({"backend": name, "skipped": why})
            continue
        try:
            fn, (kc, vc) = model_runner.compiled(model, name), model.new_cache(dtype=dtype)
            start = time.perf_counter()
            outs = [fn(xp, 0, kc, vc), fn(xd, prompt, kc, vc)]
            compile_s = time.perf_counter() - start
        except Exception as err:  # a backend that cannot compile or run is reported; the others still run
            notes.append({"backend": name, "error": f"FAILED: {type(err).__name__}: {str(err).splitlines()[0][:200]}"})
            continue
        errs = [(o.double() - r).abs().max().item() for o, r in zip(outs, ref)]
        eager_err = eager_err or errs
        bounds = [model_runner.bound(e, r, dtype) for e, r in zip(eager_err, ref)]
        info[name] = {"compile_s": compile_s, "max_abs_err": dict(zip(PHASES, errs)), "bound": dict(zip(PHASES, bounds))}
        if any(e > b for e, b in zip(errs, bounds)):
            notes.append({"backend": name, "error": "WRONG: max |out - float64| " + ", ".join(
                f"{p} {e:.3g} (bound {b:.3g})" for p, e, b in zip(PHASES, errs, bounds))})
            continue
        if name not in backends:
            continue
        calls[name] = {"prefill": lambda fn=fn, kc=kc, vc=vc: fn(xp, 0, kc, vc),
                       "decode": lambda fn=fn, kc=kc, vc=vc: fn(xd, prompt, kc, vc)}
    return calls, info, notes


def peak_bytes(fn) -> int | None:
    """The most bytes torch's allocator held above what it held before, during one call of ``fn`` (torch's
    profiler's memory events: every tensor a backend allocates, its kernels' workspaces included); None where the
    profiler gives no memory events."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    sizes = [(e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    if not sizes:
        return None
    held = peak = 0
    for _, n in sorted(sizes):
        held += n
        peak = max(peak, held)
    return peak


def measure(name: str, sizes: str, calls: dict, info: dict, notes: list, phases: dict, threads: list[int], rounds: int,
            sample_s: float, idle_s: float, memory: bool) -> list[dict]:
    """The rows of one model: per thread count and phase (``phases``: name -> (tokens, position)), every backend's
    calls timed in interleaved rounds, its tokens/s and, with ``memory``, its peak bytes."""
    import torch

    rows = []
    with torch.no_grad():
        for n in threads:
            torch.set_num_threads(n)
            for phase, (tokens, position) in phases.items():
                row = {"block": name, "sizes": sizes, "phase": phase, "tokens": tokens, "position": position, "threads": n,
                       "notes": notes, "compile_s": {b: i["compile_s"] for b, i in info.items()},
                       "max_abs_err": {b: i["max_abs_err"][phase] for b, i in info.items() if phase in i["max_abs_err"]}}
                rows.append(row)
                fns = {b: c[phase] for b, c in calls.items()}
                if not fns:
                    continue
                row["waited_s"] = wait_idle(idle_s)
                others = Others()
                samples, row["reps"] = interleaved(fns, rounds, sample_s)
                row["others_cores"], row["stall_share"] = others.cores(), others.stalls()
                row["ms"] = {b: stats(s) for b, s in samples.items()}
                row["tokens_per_s"] = {b: tokens / (s["median"] / 1e3) for b, s in row["ms"].items()}
                if "eager" in row["ms"]:
                    row["speedup"] = {b: row["ms"]["eager"]["median"] / s["median"] for b, s in row["ms"].items()}
                if memory:
                    row["peak_bytes"] = {b: peak_bytes(fn) for b, fn in fns.items()}
    return rows


def run_block(name: str, backends: list[str], threads: list[int], small: bool, prompt: int, rounds: int,
              sample_s: float, idle_s: float, memory: bool = False, dtype=None) -> list[dict]:
    import torch

    model, sizes = block(name, small, prompt)
    with torch.no_grad():
        calls, info, notes = prepare(model, backends, prompt, dtype)
    return measure(name, sizes, calls, info, notes, {"prefill": (prompt, 0), "decode": (1, prompt)}, threads, rounds,
                   sample_s, idle_s, memory)


def run_hf(name: str, backends: list[str], threads: list[int], small: bool, prompt: int, rounds: int,
           sample_s: float, idle_s: float, memory: bool = False) -> list[dict]:
    import hf_models

    calls, info, notes, sizes = hf_models.prepare(name, backends, "small" if small else "full", prompt,
                                                  model_runner.unavailable, model_runner.bound)
    phases = {"forward": (prompt, 0)} if name == "bert" else {"prefill": (prompt, 0), "decode": (1, prompt)}
    return measure(f"hf-{name}", sizes, calls, info, notes, phases, threads, rounds, sample_s, idle_s, memory)


def fmt(s: dict | None) -> str:
    return f"{s['median']:8.3f} ({s['min']:.3f}-{s['max']:.3f})" if s else f"{'-':>8}"


def print_rows(rows: list[dict], backends: list[str]) -> None:
    head = f"{'model':9} {'phase':8} {'tokens':>6} {'thr':>3} " + " ".join(f"{b + ' ms (min-max)':>27}" for b in backends) \
        + " " + " ".join(f"{'x ' + b:>11}" for b in backends if b != "eager") \
        + " " + " ".join(f"{'tok/s ' + b:>14}" for b in backends) \
        + " " + " ".join(f"{'MiB ' + b:>12}" for b in backends) + f" {'other':>5}"
    print(head + "\n" + "-" * len(head))
    for r in rows:
        ms, peak = r.get("ms", {}), r.get("peak_bytes", {})
        print(f"{r['block']:9} {r['phase']:8} {r['tokens']:>6} {r['threads']:>3} "
              + " ".join(f"{fmt(ms.get(b)):>27}" for b in backends) + " "
              + " ".join(f"{r.get('speedup', {}).get(b, float('nan')):11.3f}" for b in backends if b != "eager") + " "
              + " ".join(f"{r.get('tokens_per_s', {}).get(b, float('nan')):14.1f}" for b in backends) + " "
              + " ".join(f"{peak[b] / 2**20:12.2f}" if peak.get(b) is not None else f"{'-':>12}" for b in backends)
              + f" {busy(r)}")
    seen = set()
    for r in rows:
        for note in r["notes"]:
            line = f"  {r['block']}: {note['backend']}: {note.get('skipped') or note.get('error') or note.get('note')}"
            if line not in seen:
                seen.add(line)
                print(line)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 rounds of short samples (the smoke test)")
    ap.add_argument("--sizes", choices=("full", "small"), default="full", help="small: the blocks cut down (tests)")
    ap.add_argument("--blocks", default=",".join(BLOCKS), help=f"comma-separated, of: {','.join(BLOCKS)}")
    ap.add_argument("--hf", default=",".join(HF_MODELS), help=f"Hugging Face models, comma-separated, of: "
                    f"{','.join(HF_MODELS)}; none: only the blocks (needs transformers: the bench extra)")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak memory (one profiled call per backend)")
    ap.add_argument("--backends", default="eager,inductor,septran", help=f"comma-separated, of: {','.join(BACKENDS)}")
    ap.add_argument("--prompt", type=int, default=512, help="the prefill's tokens (the decode step's position)")
    ap.add_argument("--threads", default="2,1", help="torch.set_num_threads values, each a block of rounds")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 9, --quick 3)")
    ap.add_argument("--sample-s", type=float, default=None, help="seconds per sample (default 0.2, --quick 0.02)")
    ap.add_argument("--wait-idle", type=float, default=0.0, metavar="S", help="before each block of rounds, wait up to S "
                    "seconds for other work to drop below 0.3 cores (a shared machine)")
    ap.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                    help="the example blocks' weights, inputs and cache (the HF models stay float32)")
    ap.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "models.json")
    args = ap.parse_args(argv)
    blocks = [b.strip() for b in args.blocks.split(",") if b.strip() and b.strip() != "none"]
    hf = [b.strip() for b in args.hf.split(",") if b.strip() and b.strip() != "none"]
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if unknown := sorted(set(blocks) - set(BLOCKS)) + sorted(set(hf) - set(HF_MODELS)) + sorted(set(backends) - set(BACKENDS)):
        ap.error(f"unknown block(s), model(s) or backend(s) {', '.join(unknown)}")
    backends = [b for b in BACKENDS if b in backends]  # eager first: the speed-ups are against it
    if args.dtype != "float32" and hf:
        ap.error(f"--dtype {args.dtype} runs the example blocks only (the HF models are built in float32): add --hf none")
    threads = [int(t) for t in args.threads.split(",")]
    if min(threads) < 1 or args.prompt < 1 or (args.rounds is not None and args.rounds < 1):
        ap.error("--threads, --prompt and --rounds take positive numbers")
    rounds = args.rounds or (3 if args.quick else 9)
    sample_s = args.sample_s or (0.02 if args.quick else 0.2)
    import tilelang  # noqa: F401  (imported now so that its logger's level below sticks)
    import torch

    # Dynamo guards on torch's thread count: each block of rounds at another count compiles its graphs again
    # (before it is timed). The HF models' prefill and decode take different keyword arguments: more graphs still.
    torch._dynamo.config.recompile_limit = 64
    logging.basicConfig(level=logging.ERROR)
    for name in ("tilelang", "TileLang", "septran"):
        logging.getLogger(name).setLevel(logging.ERROR)
    info = machine()
    if hf:
        import transformers

        info["transformers"] = transformers.__version__
    print(f"cpu: {info['cpu_model']} ({info['usable_cores']} of {info['cores']} cores), torch {info['torch']}, "
          f"{rounds} rounds, prefill {args.prompt} tokens, decode at position {args.prompt}", flush=True)
    start, rows = time.perf_counter(), []
    runs = [(run_block, name) for name in blocks] + [(run_hf, name) for name in hf]
    for run, name in runs:
        extra = {"dtype": getattr(torch, args.dtype)} if run is run_block else {}
        new = run(name, backends, threads, args.sizes == "small", args.prompt, rounds, sample_s, args.wait_idle,
                  not args.no_memory, **extra)
        rows += new
        print(f"  {new[0]['block']} ({new[0]['sizes']}): compile s " + ", ".join(
            f"{b} {s:.1f}" for b, s in new[0]["compile_s"].items()), flush=True)
        print_rows(new, backends)  # as it goes: a long run on a shared machine may be stopped
        sys.stdout.flush()
    elapsed = time.perf_counter() - start
    torch.set_num_threads(max(threads))
    print(f"\n{args.dtype}, batch 1; ms per call: median of {rounds} interleaved rounds (min-max); x backend = eager's median / "
          "the backend's; tok/s: the phase's tokens / the median; MiB: the most the allocator held above its start "
          "during one call; other: cores other processes used meanwhile (!: memory stalls)\n")
    print_rows(rows, backends)
    print(f"the whole run {elapsed:.1f} s")
    info["loadavg_end"] = os.getloadavg()
    report = {"machine": info, "settings": {"rounds": rounds, "sample_s": sample_s, "threads": threads, "prompt": args.prompt,
                                            "dtype": args.dtype,
                                            "sizes": args.sizes, "quick": args.quick, "blocks": blocks, "hf": hf,
                                            "backends": backends, "memory": not args.no_memory},
              "rows": rows, "seconds": elapsed}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 1 if any("error" in n for r in rows for n in r["notes"]) else 0


if __name__ == "__main__":
    sys.exit(main())
