"""Run many replays (policies x seeds) on worker processes, with an optional progress bar.

Each replay is independent and deterministic for its (trace, policy, seed), so results do
not depend on `jobs` or on the order in which workers finish; they are returned sorted by
(policy order, seed).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import partial
from typing import TextIO

from extender.config import ScoringConfig
from simulator.progress import WorkProgress, interleaved
from simulator.replay.placement import ReplayResult, load_trace, run_replay
from simulator.replay.policies import Policy, Replay
from simulator.replay.policies.kvspread import (
    DEFAULT_EXTENDER_WEIGHT,
    KvspreadK8sPolicy,
    KvspreadPolicy,
    KvspreadUnroundedPolicy,
)

__all__ = ["ReplayJob", "Progress", "run_jobs"]

KVSPREAD_POLICIES: dict[str, type[KvspreadPolicy]] = {
    "kvspread": KvspreadPolicy,
    "kvspread-unrounded": KvspreadUnroundedPolicy,
    "kvspread-k8s": KvspreadK8sPolicy,
}


@dataclass(frozen=True)
class ReplayJob:
    """One replay to run; picklable, so it can go to a worker process."""

    trace: str
    policy: str
    seed: int
    stop_at_percent: float | None = None
    tie_break: str | None = None
    scoring: ScoringConfig | None = None  # None: the extender's defaults
    extender_weight: float = DEFAULT_EXTENDER_WEIGHT


def _run(job: ReplayJob) -> ReplayResult:
    trace = load_trace(job.trace)
    factory: Callable[[Replay], Policy] | None = None
    if job.policy in KVSPREAD_POLICIES:
        cfg = job.scoring if job.scoring is not None else ScoringConfig()
        if job.policy == "kvspread-k8s":
            factory = partial(KvspreadK8sPolicy, cfg=cfg, weight=job.extender_weight)
        else:
            factory = partial(KVSPREAD_POLICIES[job.policy], cfg=cfg)
    return run_replay(
        trace,
        job.policy,
        job.seed,
        stop_at_percent=job.stop_at_percent,
        tie_break=job.tie_break,
        policy_factory=factory,
    )


class Progress(WorkProgress):
    """Placement progress (`simulator.progress`): a run's kind is its policy, so the slow
    scoring policies weigh what they cost; silent unless `enabled`."""

    def __init__(
        self, jobs: Sequence[ReplayJob], enabled: bool, stream: TextIO | None = None
    ) -> None:
        out = (stream if stream is not None else sys.stderr) if enabled else None
        super().__init__([j.policy for j in jobs], out, "placement")


def _timed(job: ReplayJob) -> tuple[ReplayResult, float]:
    """The run and its own wall time, measured in the worker (the progress's weights)."""
    t0 = time.perf_counter()
    return _run(job), time.perf_counter() - t0


def _abandon(pool: ProcessPoolExecutor) -> None:
    """Stop at once: drop the queued runs and end the workers, so that leaving the `with`
    block neither waits for every queued run nor leaves the pool's semaphores behind."""
    workers = list(getattr(pool, "_processes", {}).values())  # no public handle on them
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in workers:
        proc.terminate()
    for proc in workers:
        proc.join(5)


def run_jobs(
    jobs: Sequence[ReplayJob], workers: int = 1, progress: Progress | None = None
) -> list[ReplayResult]:
    """Run `jobs` on `workers` processes (1: in this process); results in job order."""
    results: dict[int, ReplayResult] = {}
    workers = max(1, min(workers, len(jobs), os.cpu_count() or 1))
    if workers == 1:
        for i in interleaved([j.seed for j in jobs]):
            results[i], seconds = _timed(jobs[i])
            if progress:
                progress.finished(jobs[i].policy, seconds, f"{jobs[i].policy} seed {jobs[i].seed}")
    else:
        # forkserver, not fork: a process that already runs threads (an embedding program, a
        # test run, gRPC's poller) can leave a forked child holding a lock no thread will
        # release; the jobs carry everything a worker needs, so nothing is lost
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["simulator.replay.runner"])
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            order = interleaved([j.seed for j in jobs])
            futures = {pool.submit(_timed, jobs[i]): i for i in order}
            try:
                for fut in as_completed(futures):
                    i = futures[fut]
                    results[i], seconds = fut.result()
                    if progress:
                        note = f"{jobs[i].policy} seed {jobs[i].seed}"
                        progress.finished(jobs[i].policy, seconds, note)
            except BaseException:  # Ctrl-C, SIGTERM (kvspread.cli) or a failed run
                _abandon(pool)
                raise
    return [results[i] for i in range(len(jobs))]
