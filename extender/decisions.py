"""What the service decides for one request, as plain values; `wire.py` encodes them.

Keeping the decision apart from its encoding lets the server answer an internal error
with the same encoder (never hand-written Go field names) and lets tests read decisions
without parsing JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["FilterDecision", "PrioritizeDecision", "INTERNAL_ERROR"]

INTERNAL_ERROR = "kvspread extender internal error; see its log"


@dataclass(frozen=True)
class FilterDecision:
    """`passed` is aligned with the request's node names; `failed` (FailedNodes: preemption
    may help) and `unresolvable` (FailedAndUnresolvableNodes) map names to messages.
    A non-empty `error` makes kube-scheduler treat the extender as failed (or skip it when
    registered `ignorable: true`)."""

    passed: Sequence[bool]
    failed: Mapping[str, str] = field(default_factory=dict)
    unresolvable: Mapping[str, str] = field(default_factory=dict)
    error: str = ""

    @classmethod
    def failure(cls, nodes: int, error: str = INTERNAL_ERROR) -> FilterDecision:
        return cls(passed=[False] * nodes, error=error)


@dataclass(frozen=True)
class PrioritizeDecision:
    """One 0..10 score per requested node, in request order."""

    scores: Sequence[int]

    @classmethod
    def neutral(cls, nodes: int, score: int) -> PrioritizeDecision:
        return cls(scores=[score] * nodes)
