"""The GPU benchmarks of `make gpu`, at this machine's NVIDIA GPU's target: bench/gemm.py (float16) and
bench/attention.py (plain and causal), each printing its table and writing bench/results/<bench>_<target>.json,
then bench/models_gpu.py (the Llama block in float16: eager, inductor, SepTran's CUDA launcher).

Their kernels are built first, all three benchmarks at once with one timed call each (TileLang and nvcc
are most of a device lease, and they run on the host's cores); then each runs alone on the GPU with its
kernels cached, so the timed rounds share the device with nothing. Without an NVIDIA GPU it says so and exits 0.

    python bench/gpu.py                # build, then time
    python bench/gpu.py --build-only   # the builds alone (a device lease overlaps them with the GPU tests)
"""
from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHES = (["bench/gemm.py", "--dtype", "float16"], ["bench/attention.py"], ["bench/attention.py", "--causal"])
log = logging.getLogger("bench.gpu")


def gpu_target() -> str:
    out = subprocess.run([sys.executable, str(REPO / "tests/support/gpu_target.py")], capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def main(build_only: bool = False) -> int:
    target = gpu_target()
    if not target:
        print("bench/gpu.py: no NVIDIA GPU, the GPU benchmarks are skipped")
        return 0
    commands = [[sys.executable, str(REPO / b[0]), "--target", target, *b[1:]] for b in BENCHES]
    builds = [subprocess.Popen(c + ["--repeats", "1"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True) for c in commands]
    failed = 0
    for command, build in zip(commands, builds):
        _, err = build.communicate()
        if build.returncode:  # its timed run below fails the same way, with the error shown
            log.warning("building for %s failed:\n%s", " ".join(command[1:]), err[-2000:])
    if build_only:
        return 0
    for command in commands + [[sys.executable, str(REPO / "bench/models_gpu.py")]]:
        print("$", " ".join(command[1:]), flush=True)
        failed += subprocess.run(command, cwd=REPO).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-only", action="store_true", help="build the benchmarks' kernels, time nothing")
    logging.basicConfig(level=logging.INFO)
    sys.exit(main(build_only=parser.parse_args().build_only))
