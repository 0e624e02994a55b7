"""``septran tune-model examples/llama_block [--prompt 512]``: tune, offline, every kernel a model's prefill
and decode step call, at their shapes, into the tuning database.

The folder's ``model.py`` defines ``build()``: a module with ``cfg.hidden``, ``new_cache()`` and
``forward(x, pos, k_cache, v_cache)``, as the example blocks (``examples/llama_block``,
``examples/gpt2_block``) do. The block is compiled with ``torch.compile(backend="septran")``; one prefill of
``--prompt`` tokens and one decode step run, while the runtime tells which kernels it specialises and for which
shapes. Each kernel with a search space (``!tune``) is then tuned once per tuning key: a dynamic kernel's key
holds its shape bucket (``shape_points``), so the prefill and the decode step each get their own point. Later
runs read the points from the database (``SEPTRAN_TUNING_DB``, or ``--db``) by their shapes.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from septran.commands.inputs import at_least
from septran.errors import CallError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="a folder whose model.py defines build() (examples/llama_block)")
    parser.add_argument("--prompt", type=at_least(1), default=512, help="prefill tokens (default 512)")
    parser.add_argument("--budget", type=at_least(1), help="points to measure per kernel at most")
    parser.add_argument("--jobs", type=at_least(1), help="parallel builds (default: the cores)")
    parser.add_argument("--force", action="store_true", help="measure again where the database has an answer")
    parser.add_argument("--db", metavar="PATH", help="the tuning database (default: SEPTRAN_TUNING_DB)")
    parser.add_argument("--json", action="store_true", help="end with one JSON object")


def model_module(folder: Path):
    """The folder's ``model.py`` as a module (registered under a name of its own: dataclasses look it up)."""
    path = folder / "model.py" if folder.is_dir() else folder
    if not path.is_file():
        raise CallError(f"{folder}: no model.py here", hint="name a folder whose model.py defines build(), "
                                                            "e.g. examples/llama_block")
    name = f"septran_tune_model_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def load_model(folder: Path):
    """The folder's ``build()``, called with its defaults."""
    module = model_module(folder)
    if not callable(getattr(module, "build", None)):
        raise CallError(f"{folder} defines no build()", hint="build() returns the model (see examples/llama_block)")
    return module.build()


@contextmanager
def tunable_specialisations() -> Iterator[list]:
    """While open, lists (kernel, described, scalars) of each specialisation the runtime makes of a kernel with a
    search space (``!tune``), one per tuning key, in the order first made. A call signature a kernel planned
    before the context opened is not specialised again, so not listed: ``tune-model`` runs in a fresh process."""
    from septran.runtime import observers

    seen: dict = {}

    def observe(kernel, spec, described):
        if kernel.mapping.space is None:
            return
        key = (id(kernel), kernel.tuning_key(spec).digest())
        seen.setdefault(key, (kernel, dict(described), dict(spec.scalars)))

    found: list = []
    with observers.specialisations(observe):
        try:
            yield found
        finally:
            found.extend(seen.values())


def calls_of(model, prompt: int) -> list[tuple]:
    """(kernel, described, scalars) of each specialisation a prefill and a decode step make, one per tuning key."""
    import torch

    import septran.model  # noqa: F401 - registers the backend

    max_len = getattr(model.cfg, "max_len", None)
    if max_len is not None and prompt + 1 > max_len:
        raise CallError(f"--prompt {prompt} and one decode step need a cache of {prompt + 1} positions; the model's "
                        f"max_len is {max_len}", hint=f"--prompt {max_len - 1} or less")
    gen = torch.Generator().manual_seed(0)
    xp = torch.randn(1, prompt, model.cfg.hidden, generator=gen)
    xd = torch.randn(1, 1, model.cfg.hidden, generator=gen)
    fn = torch.compile(model, backend="septran", fullgraph=True)
    k, v = model.new_cache()
    with torch.no_grad(), tunable_specialisations() as found:
        fn(xp, 0, k, v)
        fn(xd, prompt, k, v)
    return found


def run(args) -> int:
    import septran
    from septran.records.db import TuningDB
    from septran.records.shown import shown

    model = load_model(Path(args.model))
    calls = calls_of(model, args.prompt)
    db = TuningDB(args.db) if args.db else None
    rows = []
    for kernel, described, scalars in calls:
        result = septran.tune(kernel, described, scalars=scalars, budget=args.budget, jobs=args.jobs, db=db,
                              force=args.force, progress=not args.json)
        shapes = ", ".join(f"{n} {'x'.join(map(str, s))}" for n, (s, _) in sorted(described.items()))
        rows.append({"kernel": kernel.graph.entry, "shapes": shapes, "best": result.best, "best_s": result.best_s,
                     "first_s": result.first_s, "measured": result.measured, "cached": result.cached})
        if not args.json:
            gain = f"{result.first_s / result.best_s:.2f}x" if result.best_s and result.first_s else "-"
            print(f"{shown(kernel.graph.entry)} ({shapes}): {result.measured} measured"
                  f"{' (from the database)' if result.cached else ''}, "
                  f"best {result.best_s * 1e3:.3f} ms, first point / best {gain}" if result.best_s is not None else
                  f"{shown(kernel.graph.entry)} ({shapes}): no point measured")
    if args.json:
        print(json.dumps({"kernels": rows}, sort_keys=True, default=str))
    elif not rows:
        print("no kernel of this model has a search space (!tune): nothing to tune")
    return 0
