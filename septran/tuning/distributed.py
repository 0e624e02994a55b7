"""Distributed tuning on Ray: builds as plain Ray tasks on CPUs, measurement in one actor per device.

Ray is an optional extra (``pip install 'septran[distributed]'``). Plain tasks,
not Ray Tune: a trial here is a compile and a few milliseconds of timing, and
Ray Tune's per-trial overhead would be as long as the compile. The driver
writes the records, so they are the local path's, field for field. The
actor rebuilds the kernel from the logic and mapping files (a kernel holds
Python functions that do not travel), so the logic must come from a file.
"""
from __future__ import annotations

import logging
from typing import Optional

from septran.errors import SepTranError

log = logging.getLogger(__name__)


class RayMissing(SepTranError):
    stage = "tuning"


def _ray():
    try:
        import ray
    except ImportError:
        raise RayMissing("--ray needs Ray, which is not installed",
                         hint="pip install 'septran[distributed]' (or pip install ray)") from None
    return ray


def attach(tuner, address: Optional[str]) -> None:
    """Makes ``tuner`` build with Ray tasks and measure in a Ray actor, on a local Ray or the cluster at ``address``."""
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    kernel = tuner.kernel
    logic = kernel.graph.entry_task.loc.file
    from septran.tuning.measure import _build_one

    build = ray.remote(num_cpus=1)(_build_one)

    def build_all(jobs, workers):
        return ray.get([build.remote(job) for job in jobs])

    gpus = 1 if kernel.target.torch_device == "cuda" else 0
    actor = ray.remote(num_gpus=gpus)(_RemoteMeasurer).remote(
        logic, kernel.mapping.file, kernel.target.name, tuner.described, tuner.scalars, tuner.seed)
    tuner.build_all = build_all
    tuner.measurer = _Proxy(ray, actor)
    log.info("tuning on Ray (%s): builds as tasks, measurement in one actor", address or "local")


class _RemoteMeasurer:
    """The actor: the kernel rebuilt from its files, then septran.tuning.measurer.Measurer's work."""

    def __init__(self, logic_file, mapping_file, target, described, scalars, seed):
        import septran
        from septran.tuning.measurer import Measurer

        kernel = septran.compile(logic_file=logic_file, mapping_file=mapping_file, target=target)
        self.inner = Measurer(kernel, described, scalars, seed)

    def reference(self, point):
        self.inner.reference(point)

    def measure(self, point):
        return self.inner.measure(point)

    def interleaved(self, points):
        return self.inner.interleaved(points)


class _Proxy:
    def __init__(self, ray, actor):
        self.ray, self.actor = ray, actor

    def reference(self, point):
        return self.ray.get(self.actor.reference.remote(point))

    def measure(self, point):
        return self.ray.get(self.actor.measure.remote(point))

    def interleaved(self, points):
        return self.ray.get(self.actor.interleaved.remote(points))
