"""Which points to measure: all of a small space, a guided search of a large one.

The candidates come in the cost model's order. A space of at most
``EXHAUSTIVE`` survivors is measured whole. A larger one is searched with
Optuna's ask/tell interface (TPE by default, an evolutionary sampler as an
option) within a budget of measurements, seeded with the cost model's best
points, so that a good model makes the search short and a poor one only
makes it ordinary.
"""
from __future__ import annotations

import logging
from typing import Callable, Optional, Sequence

log = logging.getLogger(__name__)

EXHAUSTIVE = 48  # spaces larger than this are searched, measuring at most a third


def default_budget(survivors: int) -> int:
    """Measurements a search may make: all of a small space, a third of a large one (at least 16)."""
    if survivors <= EXHAUSTIVE:
        return survivors
    return max(16, survivors // 3)


def search(points: Sequence[dict], measure: Callable[[int], Optional[float]], budget: Optional[int] = None,
           seed: int = 0, sampler: str = "tpe", seeds: Optional[int] = None) -> dict[int, Optional[float]]:
    """``points``: the survivors, best estimate first; ``measure(i)`` -> median seconds (None: wrong or failed).

    Returns the measured points' results by index.
    """
    budget = default_budget(len(points)) if budget is None else min(budget, len(points))
    if budget >= len(points):  # every point (a small space, or a budget that allows it: the exhaustive reference)
        return {i: measure(i) for i in range(len(points))}
    return _guided(points, measure, budget, seed, sampler, seeds if seeds is not None else max(3, budget // 4))


def _guided(points, measure, budget: int, seed: int, sampler: str, seeds: int) -> dict[int, Optional[float]]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    index = {_key(p): i for i, p in enumerate(points)}
    dims = {path: sorted({p[path] for p in points}, key=repr) for path in points[0]}
    make = {"tpe": lambda: optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(seeds, 5)),
            "evolution": lambda: optuna.samplers.NSGAIISampler(seed=seed)}
    if sampler not in make:
        raise ValueError(f"sampler must be one of {', '.join(make)}, got {sampler!r}")
    study = optuna.create_study(direction="minimize", sampler=make[sampler]())
    for p in points[:seeds]:  # the cost model's best first
        study.enqueue_trial({path: p[path] for path in dims})
    results: dict[int, Optional[float]] = {}
    asks = 0
    while len(results) < budget and asks < 50 * budget:
        asks += 1
        trial = study.ask()
        point = {path: trial.suggest_categorical(path, choices) for path, choices in dims.items()}
        i = index.get(_key(point))
        if i is None:  # pruned statically: tell the sampler, spend no measurement
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            continue
        if i not in results:
            results[i] = measure(i)
        value = results[i]
        if value is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, value)
    return results


def _key(point: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in point.items()))
