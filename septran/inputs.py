"""The options the commands share: ``--input NAME=SHAPE:DTYPE`` and ``--scalar NAME=VALUE``, parsed and checked
against a kernel before anything is allocated (``septran tune``, ``explain``, ``compile``, ``run``)."""
from __future__ import annotations

import argparse
import difflib
import math
import os
import re

from septran.errors import CallError

INPUT_HELP = "an input's shape and dtype, e.g. A=1024x1024:float32 (a scalar input: x=:float32)"

_INPUT = re.compile(r"\A([A-Za-z_][A-Za-z0-9_]*)=([0-9]+(?:x[0-9]+)*)?:([a-z0-9]+)\Z")


def at_least(low: int):
    """An argparse type: an integer >= ``low`` (argparse reports anything else and exits with status 2)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is less than {low}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def parse_inputs(items) -> dict:
    out = {}
    for item in items:
        m = _INPUT.match(item)
        if not m:
            raise CallError(f"--input {item!r} is not NAME=SHAPE:DTYPE", hint="e.g. --input A=1024x512:float16")
        out[m.group(1)] = (tuple(int(x) for x in m.group(2).split("x")) if m.group(2) else (), m.group(3))
    return out


def _memory_bytes(device: str):
    """What tensors on ``device`` may take at most: the host's memory for the CPU, the GPU's for a GPU (None: not
    known here)."""
    if device != "cuda":  # the host's tensors (a target's torch device is "cpu" or "cuda")
        try:
            return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    try:
        import torch

        return torch.cuda.mem_get_info()[1] if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 -- no GPU to ask: the tuner's own call reports it
        return None


def _itemsize(dtype: str):
    import torch

    value = getattr(torch, dtype, None)
    return value.itemsize if isinstance(value, torch.dtype) else None


def check_inputs(kernel, inputs: dict) -> None:
    """Refuses, before anything is allocated, an --input the kernel does not have, an unknown dtype, and sizes
    no tensor can have (their bytes beyond the device's memory, or beyond 64 bits)."""
    names = [a.name for a in kernel.args] + [n for n in kernel.optional if n not in {a.name for a in kernel.args}]
    for name, (shape, dtype) in inputs.items():
        given = f"--input {name}={'x'.join(map(str, shape))}:{dtype}"
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            raise CallError(f"{given}: the kernel has no parameter {name!r}",
                            hint=(f"did you mean {close[0]!r}? " if close else "") + f"its parameters: {', '.join(names)}")
        size = _itemsize(dtype)
        if size is None:
            raise CallError(f"{given}: {dtype!r} is not a torch dtype", hint="e.g. float32, float16, bfloat16, int32")
        elements = math.prod(shape)
        limit = _memory_bytes(kernel.target.torch_device)
        if elements * size >= 2 ** 63 or (limit is not None and elements * size > limit):
            room = f"this {kernel.target.torch_device} device's {limit / 2 ** 30:.1f} GiB" if limit else "64 bits"
            raise CallError(f"{given}: {elements:.3g} elements of {size} bytes do not fit in {room}",
                            hint="tune for the shapes the kernel will be called with")
    total = sum(math.prod(s) * (_itemsize(d) or 0) for s, d in inputs.values())
    limit = _memory_bytes(kernel.target.torch_device)
    if limit is not None and total > limit:
        raise CallError(f"the inputs together take {total / 2 ** 30:.1f} GiB, more than this "
                        f"{kernel.target.torch_device} device's {limit / 2 ** 30:.1f} GiB",
                        hint="tune for the shapes the kernel will be called with")


def parse_scalars(items) -> dict:
    out = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            out[name] = float(value)
        except ValueError:
            raise CallError(f"--scalar {item!r} is not NAME=NUMBER") from None
    return out


def add_input_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", action="append", default=[], metavar="NAME=SHAPE:DTYPE", help=INPUT_HELP)
    parser.add_argument("--scalar", action="append", default=[], metavar="NAME=VALUE", help="a scalar parameter, e.g. eps=1e-6")


def described(kernel, inputs: dict) -> dict:
    """``{name: (shape, dtype)}`` of every input the kernel needs, refused where one is missing (no traceback)."""
    missing = [a.name for a in kernel.inputs if a.name not in inputs]
    if missing:
        example = " ".join(f"--input {n}=64x64:float32" for n in missing)
        raise CallError(f"missing --input for {', '.join(missing)}",
                        hint=f"the kernel {kernel.signature()} takes them; e.g. {example}")
    return dict(inputs)
