"""``septran.tune``: a search space, pruned, ranked, searched, measured and recorded.

Order of work (design.md section 8): static pruning of every point (the
mapping's rules and the lowering's passes, then nvcc for CUDA) -> the cost
model's ranking -> measurement of the best candidates (all of a small space,
a guided search of a large one), each checked against the space's first
point on random inputs -> the best three measured again, interleaved. Every
trial lands in the tuning database; a second run with the same key measures
nothing.
"""
from __future__ import annotations

import dataclasses
import logging
import statistics
import uuid
from dataclasses import dataclass, field
from typing import Optional

from septran.errors import DeviceError, InternalError, MappingError, SepTranError
from septran.records.db import TuningDB, default_db
from septran.records.record import Timing, TuningRecord, point_id
from septran.runtime.points import Tuned, best_in_space, device_present
from septran.tuning import measure as ms
from septran.tuning.measurer import Measurer
from septran.tuning.prune import Candidate, most_common_rule, prune_resources, prune_static
from septran.tuning.search import check_sampler, default_budget, search

log = logging.getLogger(__name__)
TOP = 3  # the best few are measured again, interleaved, before one is chosen


@dataclass(frozen=True)
class TuneResult:
    best: dict  # each !tune key's chosen value, by its path in the mapping
    best_s: Optional[float]
    first_s: Optional[float]  # the space's first point (the hand-written mapping)
    space: int
    pruned: int
    measured: int  # points timed in this run
    cached: bool  # the answer came from the database without measuring
    rules: dict = field(default_factory=dict)  # pruning rule -> points it pruned
    correlation: Optional[float] = None  # the cost model's rank correlation with the measured medians
    wrong: int = 0

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def tune(kernel, inputs: dict, scalars: Optional[dict] = None, budget: Optional[int] = None, jobs: Optional[int] = None,
         db: Optional[TuningDB] = None, force: bool = False, progress: bool = True, sampler: str = "tpe",
         seed: int = 0, ray: bool = False, ray_address: Optional[str] = None) -> TuneResult:
    """Tunes ``kernel`` (a ``septran.Kernel`` whose mapping has ``!tune``) for ``inputs``: name -> tensor or (shape, dtype).

    ``budget``: points to measure at most (default: every survivor of a space of <= 64, else a third);
    ``jobs``: parallel builds; ``ray``: builds as Ray tasks and measurement in a Ray actor (``ray_address``:
    an existing cluster). Every trial is recorded in ``db`` (default: SEPTRAN_TUNING_DB); with ``force``
    the database's answer is measured again.
    """
    tuner = _Tuner(kernel, inputs, scalars or {}, db or default_db(), jobs, progress, seed)
    if ray:
        from septran.tuning import distributed

        distributed.attach(tuner, ray_address)
    return tuner.run(budget, force, sampler)


def autotuner(kernel, described: dict, scalars: dict) -> Tuned:
    """The tuner ``septran.compile(..., autotune=True)`` hands a kernel: a search now, for a shape the tuning
    database holds no point for (the runtime calls it; it never imports this module)."""
    result = tune(kernel, described, scalars=scalars)
    return Tuned(result.best, f"tuned now: {result.measured} points measured, {result.best_s * 1e3:.4g} ms")


class _Tuner:
    def __init__(self, kernel, inputs, scalars, db: TuningDB, jobs, progress, seed):
        import os

        if kernel.mapping.space is None:
            raise MappingError("this mapping has no !tune: there is nothing to tune", kernel.mapping.target.loc,
                               hint="write !tune [..] where a value should be searched")
        if not device_present(kernel.target):
            raise DeviceError(f"target {kernel.target.name} runs on a CUDA device and torch sees none here: a search "
                              f"measures every point it keeps", kernel.mapping.target.loc,
                              hint="tune on a machine with the GPU; `septran compile` builds without running, "
                                   "`septran explain` shows the lowering")
        self.kernel, self.db, self.progress, self.seed = kernel, db, progress, seed
        self.jobs = jobs or os.cpu_count() or 1
        self.described = {n: _describe(v) for n, v in inputs.items()}
        self.scalars = kernel.scalar_values(scalars)
        self.spec = kernel.specialization(self.described, self.scalars)
        self.key = kernel.tuning_key(self.spec)
        self.measurer = Measurer(kernel, self.described, self.scalars, seed)
        self.build_all = ms.build_all
        self.estimates: dict[str, object] = {}  # point id -> the cost model's Estimate

    def run(self, budget, force: bool, sampler: str) -> TuneResult:
        check_sampler(sampler)
        space = self.kernel.mapping.space
        first_id = point_id(space.first)
        best = None if force else best_in_space(self.db, self.key, space)
        if best is not None:
            first = [r.median_s for r in self.db.records_by_point(self.key).get(first_id, []) if r.status == "ok"]
            return TuneResult(dict(best.point), best.median_s, min(first) if first else None, space.size, 0, 0, True)
        cands = prune_static(self.kernel.graph, self.kernel.shapes, self.kernel.mapping, self.kernel.target, self.spec)
        survivors = self._ranked([c for c in cands if c.ok])
        survivors = self._resources(survivors, budget)
        pruned = [c for c in cands if not c.ok] + [c for c in survivors if not c.ok]
        survivors = [c for c in survivors if c.ok]
        self.db.extend(TuningRecord(self.key, c.point, "pruned", rule=c.rule, op=self._op) for c in pruned)
        if not survivors:
            rule, n, c = most_common_rule(cands + pruned)
            raise MappingError(f"every one of the {space.size} points of the search space is pruned; {n} by '{rule}' "
                               f"(e.g. {c.message})", space.dimensions[0].loc,
                               hint="widen the !tune choices, or fix the mapping for this shape")
        reference = next((c for c in survivors if c.point == space.first), survivors[0])
        self.measurer.reference(reference.point)
        known = self.db.records_by_point(self.key)
        results: dict[int, Optional[float]] = {}
        measured = wrong = 0
        budget = default_budget(len(survivors)) if budget is None else budget
        self._prebuild(survivors[: min(len(survivors), budget)])
        bar = _bar(self.progress, min(budget, len(survivors)), f"tuning {self._op}")

        def measure(i: int) -> Optional[float]:
            nonlocal measured, wrong
            c = survivors[i]
            old = [r for r in known.get(point_id(c.point), []) if r.status in ("ok", "wrong")]
            if old:
                return None if any(r.status == "wrong" for r in old) else min(r.median_s for r in old)
            measured += 1
            status, timing, rule = self.measurer.measure(c.point)
            wrong += status == "wrong"
            self.db.append(self._record(c, status, timing, rule))
            bar.update(1)
            return timing.median if status == "ok" else None

        results = search([c.point for c in survivors], measure, budget, self.seed, sampler)
        bar.close()
        ok = sorted((t, i) for i, t in results.items() if t is not None)
        if not ok:
            raise SepTranError(f"no point of the search space gave the first point's answer ({wrong} wrong)",
                               space.dimensions[0].loc)
        # The best three again, and any other within 10 % of the best (first-pass timings on a shared machine are noisy).
        finalists = [i for k, (t, i) in enumerate(ok) if k < TOP or (t <= 1.10 * ok[0][0] and k < 2 * TOP)]
        best_i, best_samples = self._final(survivors, finalists)
        first_s = next((results[i] for i, c in enumerate(survivors) if c.point == space.first and i in results), None)
        if first_s is None and reference.point == space.first:  # the search skipped it: timed (and kept) for first_s
            status, samples, rule = self.measurer.measure(reference.point)
            self.db.append(self._record(reference, status, samples, rule))
            first_s = samples.median
        return TuneResult(dict(survivors[best_i].point), statistics.median(best_samples), first_s,
                          space.size, len(pruned), measured, False, _rules(pruned), self._correlation(survivors, results),
                          wrong)

    # stages -------------------------------------------------------------------------------------
    @property
    def _op(self) -> str:
        return self.kernel.graph.entry.removesuffix("_logic")

    def _ranked(self, survivors: list[Candidate]) -> list[Candidate]:
        """The cost model's order: best estimate first (a target without speeds keeps the file's order)."""
        from septran.tuning.cost import CostModelError, estimate, program_value

        try:
            for c in survivors:
                self.estimates[point_id(c.point)] = estimate(c.program, self.kernel.target, program_value(c.program))
        except CostModelError as err:
            log.warning("%s: candidates are measured in the file's order", err.message)
            self.estimates.clear()
            return survivors
        return sorted(survivors, key=lambda c: self.estimates[point_id(c.point)].seconds)

    def _resources(self, survivors: list[Candidate], budget) -> list[Candidate]:
        def cuda(c: Candidate) -> str:
            return self._kernel_for(c).specialize(**self.described, **self.scalars).device_source

        limit = default_budget(len(survivors)) if budget is None else budget
        return prune_resources(survivors, self.kernel.target, cuda, limit=limit)

    def _kernel_for(self, c: Candidate):
        return self.kernel.at(c.point)

    def _prebuild(self, cands: list[Candidate]) -> None:
        from septran.build import registry
        from septran.version import __version__
        from septran.emit_tilelang import emit

        if registry.builds_in_threads(self.kernel.target):  # the runtime's own builds, which the measurement loads
            self._prebuild_variants(cands)
            return
        jobs = [(emit(c.program, __version__), c.program.name, self.kernel.target.name) for c in cands]
        for c, err in zip(cands, self.build_all(jobs, self.jobs)):
            if err:
                log.info("point %s did not build: %s", c.point, err)

    def _prebuild_variants(self, cands: list[Candidate]) -> None:
        from septran.build.parallel import build_many

        variants = []
        for c in cands:
            try:
                variants.append(self.kernel.at(c.point).variant(self.described, self.scalars))
            except (SepTranError, InternalError) as err:  # measured later, and recorded as the compile error it is
                log.info("point %s does not lower: %s", c.point, err)
        try:
            build_many(variants, self.jobs)
        except (SepTranError, InternalError) as err:
            log.info("a point did not build: %s", err)

    def _final(self, survivors: list[Candidate], indices: list[int]) -> tuple[int, tuple]:
        """The best few again, in interleaved rounds: the winner (lowest median) and its samples; all recorded."""
        samples = self.measurer.interleaved([survivors[i].point for i in indices])
        round_id = uuid.uuid4().hex[:12]  # the database's best() compares this round's records only
        self.db.extend(self._record(survivors[i], "ok", s, None, round_id) for i, s in zip(indices, samples))
        best = min(range(len(indices)), key=lambda k: samples[k].median)
        return indices[best], samples[best].samples

    def _record(self, c: Candidate, status: str, samples: Optional[ms.Samples], rule, final_round: Optional[str] = None):
        """A trial as the database keeps it (a final round's samples were taken interleaved)."""
        features = self._features(c)
        if final_round is not None:
            features["final_round"] = final_round
        timing = Timing(samples.method, samples.warmup, len(samples.samples), final_round is not None) if samples else None
        return TuningRecord(self.key, c.point, status, timings=samples.samples if samples else (), timing=timing,
                            rule=rule, features=features, op=self._op)

    def _features(self, c: Candidate) -> dict:
        est = self.estimates.get(point_id(c.point))
        return dataclasses.asdict(est) if est is not None else {}

    def _correlation(self, survivors, results) -> Optional[float]:
        from septran.tuning.cost import rank_correlation

        pairs = [(self.estimates[point_id(survivors[i].point)].seconds, t) for i, t in results.items()
                 if t is not None and point_id(survivors[i].point) in self.estimates]
        return rank_correlation(*zip(*pairs)) if len(pairs) >= 3 else None


def _rules(pruned: list[Candidate]) -> dict:
    out: dict[str, int] = {}
    for c in pruned:
        out[c.rule] = out.get(c.rule, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _describe(value) -> tuple[tuple[int, ...], str]:
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return tuple(value.shape), str(value.dtype).removeprefix("torch.")
    shape, dtype = value
    return tuple(int(s) for s in shape), str(dtype).removeprefix("torch.")


def _bar(enabled: bool, total: int, desc: str):
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        enabled = False
    if not enabled:
        class _Null:
            def update(self, n): pass
            def close(self): pass
        return _Null()
    return tqdm(total=total, desc=desc, unit="point", leave=False)
