"""A warm compile of an example block in a fresh process: how long from the compile call to the results of its
first prefill and first decode step, with every cache warm (issue 19's measure; its baseline was 5.3 s).

    python bench/warm_compile.py                       # the Llama block, 5 interleaved rounds
    python bench/warm_compile.py --block gpt2 --rounds 3 --modes septran,precompiled

Modes, each a fresh Python process per sample (imports not counted; torch on 1 thread):
- ``septran``: ``torch.compile(block, backend="septran", fullgraph=True)``: Dynamo and AOTAutograd trace both
  graphs, SepTran rewrites them and loads its kernels from the build cache.
- ``inductor``: the same with torch's default backend (its FX graph and AOTAutograd caches warm).
- ``eager_backend``: torch.compile's ``"eager"`` backend: Dynamo's trace alone, the floor of any backend that
  runs under torch.compile in a new process.
- ``precompiled``: ``septran.load_precompiled`` of the file ``septran.precompile`` wrote (made once, before the
  rounds): no Dynamo or AOTAutograd trace, no TileLang, and the graphs' rewrites read from the build cache
  (``septran.model.rewritten``). What is left: torch's load of its own part (its guards, AOTAutograd's wrappers,
  the imports they need), reading the rewritten graphs' fake values, the lowering to the direct runner, and at the
  first calls each library kernel's trace and SepTran lowering (to find its build key) and the launchers' recording.

Children keep Python's bytecode (PYTHONDONTWRITEBYTECODE dropped from their environment): the untimed first
sample writes it, as any user's first run does.

Column "CPU s": the child's own CPU time over the same span (less sensitive to other work on a shared machine;
torch's compile threads count). Column "load + prefill + decode": the span's wall seconds in three parts, each a
median (the compile call or ``load_precompiled``, the first prefill, the first decode step). Before the rounds
each mode runs once untimed, so every cache is warm. The samples are interleaved (septran, inductor, ...,
septran, ...) on a possibly shared machine; the table shows medians and min-max, and the JSON every sample.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ("septran", "inductor", "eager_backend", "precompiled")
BASELINE_S = 5.3  # issue 19: a Llama block's warm compile on main 19a6a2b

CHILD = r"""
import json, sys, time
mode, block, prompt, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
t0 = time.perf_counter()
import torch
sys.path.insert(0, sys.argv[5])
import models as bm
import septran, septran.model
torch.set_num_threads(1)
model, _ = bm.block(block, False, prompt)
gen = torch.Generator().manual_seed(0)
xp = torch.randn(1, prompt, model.cfg.hidden, generator=gen)
xd = torch.randn(1, 1, model.cfg.hidden, generator=gen)
kc, vc = model.new_cache()
imports = time.perf_counter() - t0
if mode == "save":
    septran.precompile(model, [(xp, 0, kc, vc), (xd, prompt, kc, vc)], path, dynamic=[False, True])
    print(json.dumps({"saved": path})); sys.exit()
start, cpu = time.perf_counter(), time.process_time()
if mode == "precompiled":
    fn = septran.load_precompiled(model, path)
else:
    fn = torch.compile(model, backend={"eager_backend": "eager"}.get(mode, mode), fullgraph=True)
loaded = time.perf_counter()
with torch.no_grad():
    fn(xp, 0, kc, vc)
    prefilled = time.perf_counter()
    fn(xd, prompt, kc, vc)
end = time.perf_counter()
print(json.dumps({"seconds": end - start, "cpu_s": time.process_time() - cpu, "imports_s": imports,
                  "phases_s": [loaded - start, prefilled - loaded, end - prefilled],
                  "tilelang": "tilelang" in sys.modules}))
"""


def child(mode: str, block: str, prompt: int, path: Path) -> dict:
    # As a user's Python does: it keeps the bytecode of the modules it compiles (PYTHONDONTWRITEBYTECODE, set on
    # some machines, made every sample compile SepTran's 58 model-level modules from source: about 0.1 s)
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    run = subprocess.run([sys.executable, "-c", CHILD, mode, block, str(prompt), str(path), str(REPO / "bench")],
                         capture_output=True, text=True, cwd=REPO, timeout=600, env=environ)
    if run.returncode != 0:
        raise RuntimeError(f"{mode}: {run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--block", choices=("llama", "gpt2"), default="llama")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of: {','.join(MODES)}")
    ap.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "warm_compile.json")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if unknown := sorted(set(modes) - set(MODES)):
        ap.error(f"unknown mode(s) {', '.join(unknown)}")
    sys.path.insert(0, str(REPO / "bench"))
    from cpu import machine

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{args.block}.pt2"
        if "precompiled" in modes:
            child("save", args.block, args.prompt, path)
        for m in modes:  # warm every cache
            child(m, args.block, args.prompt, path)
        samples = {m: [] for m in modes}
        extra = {m: [] for m in modes}
        for _ in range(args.rounds):
            for m in modes:
                out = child(m, args.block, args.prompt, path)
                samples[m].append(out["seconds"])
                extra[m].append(out)
    info = machine()
    print(f"cpu: {info['cpu_model']} (family {info['cpu_family']}, model {info['cpu_model_number']}), torch "
          f"{info['torch']}, {args.block} block, 1 thread, {args.rounds} interleaved rounds, each a fresh process")
    print(f"{'mode':16} {'s median (min-max)':>24} {'x 5.3 s':>8} {'x septran':>9} {'CPU s':>6} "
          f"{'load + prefill + decode s':>26}  tilelang imported")
    med = {m: statistics.median(s) for m, s in samples.items()}
    for m in modes:
        s = samples[m]
        vs = f"{med['septran'] / med[m]:9.2f}" if "septran" in med else f"{'-':>9}"
        cpu = statistics.median(e["cpu_s"] for e in extra[m])
        phases = " + ".join(f"{statistics.median(e['phases_s'][k] for e in extra[m]):.2f}" for k in range(3))
        print(f"{m:16} {med[m]:9.2f} ({min(s):.2f}-{max(s):.2f}){'':5} {BASELINE_S / med[m]:8.2f} {vs} {cpu:6.2f} "
              f"{phases:>26}  {any(e['tilelang'] for e in extra[m])}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"machine": info, "block": args.block, "prompt": args.prompt, "rounds": args.rounds,
                                     "baseline_s": BASELINE_S, "samples": samples, "children": extra,
                                     "loadavg_end": os.getloadavg(), "when": time.time()}, indent=1))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
