"""Prints the SepTran target of this machine's NVIDIA GPU (sm80, sm90, ...), or nothing: what `make gpu` runs
the GPU benchmarks at. Detection is septran.target.detect_target's; the cpu fallback prints nothing."""
from __future__ import annotations

import torch

if __name__ == "__main__":
    if torch.cuda.is_available() and torch.version.hip is None:
        from septran.target import detect_target

        target = detect_target()
        print("" if target == "cpu" else target)
