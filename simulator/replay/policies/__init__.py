"""Placement policies for the trace replay, by lower-case name."""

from __future__ import annotations

from collections.abc import Callable

from simulator.replay.policies.base import Policy, Replay
from simulator.replay.policies.baselines import (
    BestFitPolicy,
    DotProductPolicy,
    GpuClusteringPolicy,
    GpuPackingPolicy,
    RandomPolicy,
)
from simulator.replay.policies.fgd import FgdPolicy
from simulator.replay.policies.kvspread import (
    KvspreadK8sPolicy,
    KvspreadPolicy,
    KvspreadUnroundedPolicy,
)

__all__ = [
    "POLICIES",
    "PUBLISHED_LABELS",
    "BASELINES",
    "DEFAULT_POLICIES",
    "Policy",
    "Replay",
    "make_policy",
]

POLICIES: dict[str, Callable[[Replay], Policy]] = {
    "random": RandomPolicy,
    "dotproduct": DotProductPolicy,
    "gpuclustering": GpuClusteringPolicy,
    "gpupacking": GpuPackingPolicy,
    "bestfit": BestFitPolicy,
    "fgd": FgdPolicy,
}

BASELINES: tuple[str, ...] = tuple(POLICIES)

POLICIES.update(
    {
        "kvspread": KvspreadPolicy,
        "kvspread-k8s": KvspreadK8sPolicy,
        "kvspread-unrounded": KvspreadUnroundedPolicy,
    }
)

DEFAULT_POLICIES: tuple[str, ...] = (*BASELINES, "kvspread", "kvspread-k8s")

# The `sc_policy` labels of the published results, for side-by-side tables.
PUBLISHED_LABELS: dict[str, str] = {
    "random": "01-Random",
    "dotproduct": "02-DotProd",
    "gpuclustering": "03-GpuClustering",
    "gpupacking": "04-GpuPacking",
    "bestfit": "05-BestFit",
    "fgd": "06-FGD",
}


def make_policy(name: str, replay: Replay) -> Policy:
    """A fresh policy instance for one replay; KeyError names the known policies."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None
    return factory(replay)
