"""FlashAttention forward: SepTran vs TileLang's own example (hand-written) vs torch, on one target.

On a GPU the hand-written kernel is TileLang's examples/flash_attention/example_mha_fwd_bhsd.py
(tests/reference/handwritten_attention.py) with the mapping's blocks, stages and threads; on
the CPU there is no hand-written TileLang kernel to compare with (the example is GPU-only),
so SepTran is compared with torch alone. Prints a table and writes
bench/results/attention_<target>.json.

    python bench/attention.py                                   # cpu, float32, small shapes
    python bench/attention.py --target sm90 --causal            # on an H100/H200, float16
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "examples"))
sys.path.insert(0, str(REPO / "examples" / "attention"))

import septran  # noqa: E402
from septran.build import tilelang_api as build  # noqa: E402
from attention import attention  # noqa: E402
from reference.handwritten_attention import tilelang_example  # noqa: E402
from runner import median_seconds  # noqa: E402


def handwritten(kernel, shape, causal: bool):
    """TileLang's example with the mapping's block sizes, stages and threads, built like SepTran's kernels."""
    tgt = kernel.target
    consts = {c.sym.name: c.value for c in kernel._last.program.consts}
    block = next(i for i in kernel.mapping.instances.values() if i.proc.value != "HOST")
    b, h, sq, sk, d = shape
    func = tilelang_example(b, h, sq, sk, d, causal, consts["BM"], consts["BN"],
                            block.pipeline.value if block.pipeline else 1, block.threads.value)
    return build.compile_kernel(func, tgt, "TileLang's example_mha_fwd_bhsd")


def main(target: str, dtype: str, shapes, causal: bool, repeats: int) -> list[dict]:
    kernel = septran.compile(attention(causal), mapping_file=REPO / f"mappings/{target}/attention.yaml")
    device = kernel.target.torch_device
    tdtype = getattr(torch, dtype)
    rows = []
    for shape in shapes:
        b, h, sq, sk, d = shape
        q, k, v = (torch.randn(b, h, s, d, device=device).to(tdtype) for s in (sq, sk, sk))
        o = kernel(q, k, v)
        mask = torch.ones(sq, sk, dtype=torch.bool, device=device).tril(sk - sq) if causal else None
        sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # noqa: E731
        assert torch.allclose(o.float(), sdpa().float(), rtol=2e-2, atol=2e-2), "SepTran and torch disagree"
        t_sep = median_seconds(lambda: kernel(q, k, v), repeats, device) * 1e3
        t_hand = None
        if kernel.target.has_threads:
            hand = handwritten(kernel, shape, causal)
            o_hand = torch.empty_like(q)
            hand(q, k, v, o_hand)
            assert torch.allclose(o.float(), o_hand.float(), rtol=2e-2, atol=2e-2), "SepTran and TileLang's example disagree"
            t_hand = median_seconds(lambda: hand(q, k, v, o_hand), repeats, device) * 1e3
        t_torch = median_seconds(sdpa, repeats, device) * 1e3
        tflop = 4.0 * b * h * sq * sk * d * (0.5 if causal else 1.0) / 1e12
        rows.append({"shape": list(shape), "causal": causal, "dtype": dtype, "septran_ms": t_sep, "handwritten_ms": t_hand,
                     "torch_ms": t_torch, "septran_tflops": tflop / t_sep * 1e3,
                     "handwritten_tflops": tflop / t_hand * 1e3 if t_hand else None, "torch_tflops": tflop / t_torch * 1e3})
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--dtype", default=None, help="float32 on the cpu, float16 elsewhere")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    on_cpu = args.target == "cpu"
    dtype = args.dtype or ("float32" if on_cpu else "float16")
    shapes = [(1, 4, 256, 256, 64), (1, 4, 203, 331, 64)] if on_cpu else \
        [(4, 16, 2048, 2048, 64), (4, 16, 4096, 4096, 64), (2, 16, 8192, 8192, 128)]
    rows = main(args.target, dtype, shapes, args.causal, args.repeats)
    print(f"attention{' (causal)' if args.causal else ''} on {args.target}, {dtype} (ms: median of {args.repeats}; TFLOP/s)")
    print(f"{'B x H x Sq x Sk x D':>24} {'septran ms':>11} {'hand ms':>9} {'torch ms':>9} {'septran':>9} {'hand':>9} {'torch':>9}")
    for r in rows:
        hand_ms = f"{r['handwritten_ms']:>9.3f}" if r["handwritten_ms"] else f"{'-':>9}"
        hand_tf = f"{r['handwritten_tflops']:>9.4f}" if r["handwritten_tflops"] else f"{'-':>9}"
        print(f"{'x'.join(map(str, r['shape'])):>24} {r['septran_ms']:>11.3f} {hand_ms} {r['torch_ms']:>9.3f} "
              f"{r['septran_tflops']:>9.4f} {hand_tf} {r['torch_tflops']:>9.4f}")
    out = REPO / "bench" / "results" / f"attention_{args.target}{'_causal' if args.causal else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"target": args.target, "torch_threads": torch.get_num_threads(), "rows": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(REPO)}")
