"""Compile gqa_kv_cache.py for this machine, run a prompt and some decoding steps, check them against torch.

    python examples/gqa_kv_cache/run_gqa_kv_cache.py [--size BATCH HQ HKV PROMPT STEPS SMAX D] [--dtype float16] [--quiet]

Two kernels: ``append`` writes the new keys and values into the caches (the caller's tensors, in place) at
``pos``; ``attend`` is grouped-query attention of the new tokens over the caches' first pos + S rows, causal.
Each step checks the caches (bit for bit) and the output (against torch's scaled_dot_product_attention in
float64). See examples/runner.py for how the target and mapping are chosen; where the target's device is absent
only the generated code is shown.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import septran  # noqa: E402
from gqa_kv_cache import gqa_kv_cache_append_logic, gqa_kv_cache_logic  # noqa: E402
from runner import device_present  # noqa: E402


def reference(q, k, v, pos: int):
    """Attention of the new tokens (positions pos ..) over keys 0 .. pos + S - 1, K and V repeated per group."""
    g = q.shape[1] // k.shape[1]
    s = q.shape[2]
    keep = torch.ones(s, pos + s, dtype=torch.bool, device=q.device).tril(pos)
    return F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), attn_mask=keep)


def main(batch: int = 2, hq: int = 8, hkv: int = 2, prompt: int = 37, steps: int = 3, smax: int = 128, d: int = 64,
         dtype: str | None = None, show_source: bool = True) -> float:
    attend = septran.compile(gqa_kv_cache_logic)
    # the second kernel's mapping sits beside the first's (the logic file's name names only one)
    append = septran.compile(gqa_kv_cache_append_logic, Path(attend.mapping.file).with_name("gqa_kv_cache_append.yaml"))
    target = attend.target
    dtype = dtype or ("float32" if target.torch_device == "cpu" else "float16")
    dt = getattr(torch, dtype)
    print(f"target {target.name} ({target.description}); mappings {attend.mapping.file}, {append.mapping.file}")
    gen = torch.Generator().manual_seed(0)
    rand = lambda *shape: torch.randn(*shape, generator=gen).to(dt)  # noqa: E731
    lengths = [prompt] + [1] * steps
    if not device_present(target.torch_device):
        kv = ((batch, hkv, smax, d), dtype)
        new = ((batch, hkv, prompt, d), dtype)
        shown = [append.specialize(Kc=kv, Vc=kv, Knew=new, Vnew=new, pos=0),
                 attend.specialize(Q=((batch, hq, prompt, d), dtype), Kc=kv, Vc=kv, pos=0)]
        print(f"no {target.torch_device} device here: showing the generated code only\n")
        for variant in shown:
            print(variant.tilelang_source)
            print(variant.device_source if show_source else "")
        return float("nan")
    device = target.torch_device
    # the caller's caches; rows not written yet must hold finite numbers (see gqa_kv_cache.py)
    kc = torch.zeros(batch, hkv, smax, d, dtype=dt, device=device)
    vc = torch.zeros(batch, hkv, smax, d, dtype=dt, device=device)
    keys, values = kc[:, :, :0].clone(), vc[:, :, :0].clone()
    pos, err, start = 0, 0.0, time.perf_counter()
    for s in lengths:
        q, kn, vn = (rand(batch, h, s, d).to(device) for h in (hq, hkv, hkv))
        append(kc, vc, kn, vn, pos=pos)
        out = attend(q, kc, vc, pos=pos)
        keys, values = torch.cat([keys, kn], 2), torch.cat([values, vn], 2)
        assert torch.equal(kc[:, :, :pos + s], keys) and torch.equal(vc[:, :, :pos + s], values), "the caches"
        ref = reference(q.double(), keys.double(), values.double(), pos)
        torch_err = (reference(q, keys, values, pos).double() - ref).abs().max().item()
        step_err = (out.double() - ref).abs().max().item()
        print(f"  pos {pos:4d}, {s} new: max |out - ref| septran {step_err:.3e}   torch {torch_err:.3e}   (ref in float64)")
        err = max(err, step_err)
        pos += s
    if show_source:
        print(append.tilelang_source)
        print(attend.tilelang_source)
    print(f"GQA with a KV cache, {batch}x{hq} query heads over {hkv} KV heads, prompt {prompt} + {steps} steps, "
          f"Smax {smax}, D {d}, {dtype}: {time.perf_counter() - start:.2f} s with compiles (one variant per pos)")
    return err


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", nargs=7, type=int, metavar=("BATCH", "HQ", "HKV", "PROMPT", "STEPS", "SMAX", "D"),
                        default=(2, 8, 2, 37, 3, 128, 64))
    parser.add_argument("--dtype", default=None, choices=("float32", "float16"))
    parser.add_argument("--quiet", action="store_true", help="do not print the generated source")
    args = parser.parse_args()
    main(*args.size, dtype=args.dtype, show_source=not args.quiet)
