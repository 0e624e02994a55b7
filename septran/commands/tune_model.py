"""``septran tune-model examples/llama_block [--prompt 512]``: tune, offline, every kernel a model's prefill
and decode step call, at their shapes, into the tuning database.

The folder's ``model.py`` defines ``build()``: a module with ``cfg.hidden``, ``new_cache()`` and
``forward(x, pos, k_cache, v_cache)``, as the example blocks (``examples/llama_block``,
``examples/gpt2_block``) do. The block is compiled with ``torch.compile(backend="septran")``; one prefill of
``--prompt`` tokens and one decode step run, while the runtime tells which kernels it specialises and for which
shapes. Each kernel with a search space (``!tune``) is then tuned once per tuning key: a dynamic kernel's key
holds its shape bucket (``shape_points``), so the prefill and the decode step each get their own point. Later
runs read the points from the database (``SEPTRAN_TUNING_DB``, or ``--db``) by their shapes.

Each tuned point is then timed again beside the point the mapping itself gives those shapes (interleaved), and the
faster of the two is the key's answer: a small budget's search may never have met the mapping's point.
``--ship`` writes each key's winner into the database that ships with SepTran (``septran/tuned/<target>.jsonl``,
read after the user's on the same CPU model; see septran/records/shipped.py), keeping other CPUs' records.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from septran.inputs import at_least
from septran.errors import CallError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="a folder whose model.py defines build() (examples/llama_block)")
    parser.add_argument("--prompt", type=at_least(1), default=512, help="prefill tokens (default 512)")
    parser.add_argument("--budget", type=at_least(1), help="points to measure per kernel at most")
    parser.add_argument("--jobs", type=at_least(1), help="parallel builds (default: the cores)")
    parser.add_argument("--force", action="store_true", help="measure again where the database has an answer")
    parser.add_argument("--db", metavar="PATH", help="the tuning database (default: SEPTRAN_TUNING_DB)")
    parser.add_argument("--threads", type=at_least(1), help="torch.set_num_threads (the cpu kernels' OpenMP threads) "
                                                           "while tuning; on a busy machine 1 keeps the threads from "
                                                           "waiting for each other (default: torch's)")
    parser.add_argument("--max-len", type=at_least(2), help="the KV cache's positions (default: the model's; "
                                                              "bench/models.py uses --prompt + 8)")
    parser.add_argument("--ship", nargs="?", const="", metavar="PATH",
                        help="then write each key's winner, where it beats the mapping's own point by 3 %%, into the tuning "
                             "database that ships with SepTran (default septran/tuned/<target>.jsonl), keeping other "
                             "CPUs' and other models' records")
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


def load_model(folder: Path, max_len: Optional[int] = None):
    """The folder's ``build()``, called with its defaults; ``max_len``: built again with ``build(cfg)``, the
    model's config with that cache length (the example blocks' convention)."""
    module = model_module(folder)
    if not callable(getattr(module, "build", None)):
        raise CallError(f"{folder} defines no build()", hint="build() returns the model (see examples/llama_block)")
    model = module.build()
    if max_len is None:
        return model
    cfg = getattr(model, "cfg", None)
    if not dataclasses.is_dataclass(cfg) or "max_len" not in {f.name for f in dataclasses.fields(cfg)}:
        raise CallError(f"{folder}: the model has no cfg.max_len to set", hint="leave --max-len out")
    return module.build(dataclasses.replace(cfg, max_len=max_len))


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
    from septran.records.db import TuningDB, default_db
    from septran.records.shown import shown

    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)  # records note it (features.threads): a shipped one serves only this count
    model = load_model(Path(args.model), args.max_len)
    calls = calls_of(model, args.prompt)
    db = TuningDB(args.db) if args.db else default_db()
    rows, tuned = [], []
    for kernel, described, scalars in calls:
        result = septran.tune(kernel, described, scalars=scalars, budget=args.budget, jobs=args.jobs, db=db,
                              force=args.force, progress=not args.json)
        shapes = ", ".join(f"{n} {'x'.join(map(str, s))}" for n, (s, _) in sorted(described.items()))
        versus = against_mapping(kernel, described, scalars, db, result) if result.best_s is not None else None
        tuned.append((kernel, described, scalars))
        rows.append({"kernel": kernel.graph.entry, "shapes": shapes, "best": result.best, "best_s": result.best_s,
                     "first_s": result.first_s, "measured": result.measured, "cached": result.cached,
                     "versus_mapping": versus})
        if not args.json:
            gain = f"{result.first_s / result.best_s:.2f}x" if result.best_s and result.first_s else "-"
            vs = f", the mapping's point / best {versus['gain']:.2f}x (interleaved, spread {versus['spread']:.0%})" \
                if versus else ""
            print(f"{shown(kernel.graph.entry)} ({shapes}): {result.measured} measured"
                  f"{' (from the database)' if result.cached else ''}, "
                  f"best {result.best_s * 1e3:.3f} ms, first point / best {gain}{vs}" if result.best_s is not None else
                  f"{shown(kernel.graph.entry)} ({shapes}): no point measured")
    shipped = ship(tuned, db, args.ship) if args.ship is not None else None
    if args.json:
        print(json.dumps({"kernels": rows, "shipped": shipped}, sort_keys=True, default=str))
    elif not rows:
        print("no kernel of this model has a search space (!tune): nothing to tune")
    elif shipped:
        print(f"shipped: {shipped['path']}: {shipped['written']} winners written ({shipped['same']} keys keep the "
              f"mapping's own point: no record), {shipped['kept']} records of other CPUs or models kept, "
              f"{shipped['dropped_stale']} of other versions dropped; {shipped['records']} records, "
              f"{shipped['devices']} device(s)")
    return 0


VERSUS_ROUNDS = 11  # interleaved rounds of the tuned point against the mapping's own


def mapping_point(kernel, spec) -> dict:
    """The point the kernel runs with no tuning database: its shape bucket's (an entry names some dimensions; the
    others keep their first values), else the space's first: a whole point, as records hold them."""
    from septran.runtime import points

    from septran.mapping import shape_points

    met = points.bucket(kernel, spec)
    first = dict(kernel.mapping.space.first)
    return {**first, **shape_points.point_of(kernel.mapping.shape_points, met)} if met is not None else first


def against_mapping(kernel, described: dict, scalars: dict, db, result) -> Optional[dict]:
    """The tuned point and the mapping's own for these shapes, timed again side by side (interleaved rounds) and
    recorded as the key's latest final round, so that the database's best is the faster of the two. A round's
    sample is the fastest call of a 10 ms window: on a shared machine a kernel that splits over the threads
    waits whole scheduler ticks (4 ms) for a busy core, and those waits say nothing about the point. None where
    they are the same point. The tuner's search may never have measured the mapping's point (its budget, its cost
    model's order). The records note the thread count they were timed at."""
    import statistics
    import uuid

    import torch

    from septran.records.record import Timing, TuningRecord
    from septran.tuning import measure as ms
    from septran.tuning.measurer import Measurer

    spec = kernel.specialization(described, kernel.scalar_values(scalars))
    own = mapping_point(kernel, spec)
    if own == dict(result.best):
        return None
    measurer = Measurer(kernel, described, kernel.scalar_values(scalars), 0)
    fns = []
    for point in (dict(result.best), own):
        k = kernel.at(point)
        fns.append(lambda k=k: measurer._call(k))
    device = kernel.target.torch_device
    for fn in fns:
        ms.time_call(fn, device, warmup=2, min_reps=2, min_seconds=0.0)
    samples: list[list[float]] = [[], []]
    for _ in range(VERSUS_ROUNDS):
        for i, fn in enumerate(fns):
            samples[i].append(min(ms.time_call(fn, device, warmup=1, min_reps=5, min_seconds=0.01,
                                               max_reps=500).samples))
    key, round_id, op = kernel.tuning_key(spec), uuid.uuid4().hex[:12], kernel.graph.entry.removesuffix("_logic")
    db.extend(TuningRecord(key, point, "ok", timings=tuple(s), timing=Timing("wall", 1, len(s), True),
                           features={"final_round": round_id, "versus": "the mapping's point",
                                     "threads": torch.get_num_threads()}, op=op)
              for point, s in zip((dict(result.best), own), samples))
    tuned_s, own_s = statistics.median(samples[0]), statistics.median(samples[1])
    spread = [(max(s) - min(s)) / statistics.median(s) for s in samples]
    return {"tuned_s": tuned_s, "mapping_s": own_s, "gain": own_s / tuned_s, "spread": max(spread)}


MARGIN = 1.03  # a shipped point beats the mapping's own by 3 % at least: less is the shared machine's noise


def clear_win(db, key, best, own: dict) -> bool:
    """Whether ``best`` beat the mapping's point ``own`` by ``MARGIN`` in the round that timed them side by side
    (``against_mapping``'s); a best with no such round (another program's records) is taken as it is."""
    from septran.records.record import point_id

    round_id = best.features.get("final_round")
    rivals = [r for r in db.records(key) if r.point_id == point_id(own) and r.status == "ok"
              and round_id is not None and r.features.get("final_round") == round_id]
    return not rivals or min(r.median_s for r in rivals) >= MARGIN * best.median_s


def ship(calls: list[tuple], db, where: str) -> dict:
    """Each tuned key's winner (the database's best, from this device) into the shipped database; a key whose
    winner is the mapping's own point, or beat it by less than ``MARGIN``, gets no record (the mapping already
    runs its point), and loses any older one."""
    from septran.records import shipped
    from septran.runtime.points import best_in_space

    winners, replaced, same, target = [], set(), 0, None
    for kernel, described, scalars in calls:
        spec = kernel.specialization(described, kernel.scalar_values(scalars))
        key = kernel.tuning_key(spec)
        target = kernel.target.name
        replaced.add(key.digest())
        best = best_in_space(db, key, kernel.mapping.space)
        if best is None:
            continue
        own = mapping_point(kernel, spec)
        if dict(best.point) == own or not clear_win(db, key, best, own):
            same += 1
            continue
        winners.append(best)
    if target is None:
        return {}
    path = Path(where) if where else shipped.path(target)
    return {**shipped.merge(path, winners, replaced), "same": same}
