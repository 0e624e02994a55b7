"""Which points to measure: all of a small space, a guided search of a large one.

The candidates come in the cost model's order. A space of at most
``EXHAUSTIVE`` survivors is measured whole. A larger one is searched within a
budget of measurements: Optuna's ask/tell interface (TPE by default, an
evolutionary sampler as an option) seeded with the cost model's best points,
so that a good model makes the search short and a poor one only makes it
ordinary; then the last third of the budget walks the neighbourhood of the
best point found (one dimension at a time, nearest values first), where a
sampler's last few guesses are least likely to land.
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
    return _guided(points, measure, budget, seed, sampler, seeds if seeds is not None else max(3, budget // 3))


SAMPLERS = ("tpe", "evolution")


def check_sampler(sampler: str) -> None:
    """Before any build: the guided search's sampler exists and optuna imports (a tuning run on a device found
    optuna missing only after 110 s of builds)."""
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
    import optuna  # noqa: F401  (a dependency of septran: an error here means a broken install)


def _guided(points, measure, budget: int, seed: int, sampler: str, seeds: int) -> dict[int, Optional[float]]:
    import optuna

    check_sampler(sampler)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    index = {_key(p): i for i, p in enumerate(points)}
    dims = {path: _ordered({p[path] for p in points}) for path in points[0]}
    make = {"tpe": lambda: optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(seeds, 5)),
            "evolution": lambda: optuna.samplers.NSGAIISampler(seed=seed)}
    study = optuna.create_study(direction="minimize", sampler=make[sampler]())
    for p in points[:seeds]:  # the cost model's best first
        study.enqueue_trial({path: p[path] for path in dims})
    results: dict[int, Optional[float]] = {}
    asks = 0
    sampled = budget - budget // 3
    while len(results) < sampled and asks < 50 * budget:
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
    _neighbourhood(points, dims, index, measure, results, budget)
    return results


def _neighbourhood(points, dims, index, measure, results: dict, budget: int) -> None:
    """Coordinate search around the best measured points (the best first; when its neighbours are all measured,
    the next best's) until the budget is spent or nothing near is left."""
    while len(results) < budget:
        ranked = sorted((t, i) for i, t in results.items() if t is not None)
        step = None
        for _, i in ranked:
            near = []
            for path, choices in dims.items():
                at = choices.index(points[i][path])
                for value in choices:
                    j = index.get(_key({**points[i], path: value}))
                    if j is not None and j not in results:
                        near.append((abs(choices.index(value) - at), j))
            if near:
                step = min(near)[1]
                break
        if step is None:
            return
        results[step] = measure(step)


def _ordered(values: set) -> list:
    """A dimension's values in their natural order (numbers by size), so that neighbours are near values."""
    return sorted(values, key=lambda v: (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, repr(v)))


def _key(point: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in point.items()))
