"""Build a Llama-style decoder layer (model.py), compile it, run a prefill and decode steps, check them against
eager torch, print SepTran's report of the graph and the timings.

    python examples/llama_block/run_llama_block.py [--backend septran|inductor|aot_eager|eager] [--dtype bfloat16]
        [--size HIDDEN HEADS KV_HEADS HEAD_DIM INTERMEDIATE] [--prompt 64] [--steps 4] [--gqa repeat|sdpa] [--quiet]

Every output and both KV caches are checked at every step against the same layer in float64 under the
FlashAttention rule (examples/model_runner.py). With ``--backend septran`` the report lists every node of the
captured graphs (the prefill's and a decode step's): the SepTran kernel that runs it, or why it stayed with torch,
and the share of the FLOPs in SepTran kernels.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import model_runner  # noqa: E402

model = model_runner.load(HERE / "model.py", "septran_example_llama_block_model")


def main(hidden: int = 256, heads: int = 8, kv_heads: int = 2, head_dim: int = 32, intermediate: int = 688,
         prompt: int = 64, steps: int = 4, backend: str = "septran", dtype: str = "float32", gqa: str = "repeat",
         max_len: int | None = None, repeats: int = 5, quiet: bool = False) -> dict:
    cfg = model.LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                            intermediate=intermediate, max_len=max_len or prompt + steps + 1, gqa=gqa)
    title = (f"Llama block: hidden {hidden}, {heads} query heads over {kv_heads} KV heads of {head_dim}, "
             f"SwiGLU {intermediate}, GQA by {gqa}")
    return model_runner.main(title, lambda dt: model.build(cfg, dtype=dt), backend, prompt, steps, dtype, repeats, quiet)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="septran", choices=model_runner.BACKENDS)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--size", nargs=5, type=int, default=(256, 8, 2, 32, 688),
                        metavar=("HIDDEN", "HEADS", "KV_HEADS", "HEAD_DIM", "INTERMEDIATE"))
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--gqa", default="repeat", choices=("repeat", "sdpa"))
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per median (0: no timing)")
    parser.add_argument("--quiet", action="store_true", help="do not print the report's table")
    args = parser.parse_args()
    if why := model_runner.unavailable(args.backend):
        sys.exit(why)
    result = main(*args.size, prompt=args.prompt, steps=args.steps, backend=args.backend, dtype=args.dtype,
                  gqa=args.gqa, repeats=args.repeats, quiet=args.quiet)
    sys.exit(0 if result["ok"] else 1)
