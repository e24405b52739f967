"""A request's objective as llm-d's endpoint picker reads it from the request headers: the
objective's name (an InferenceObjective: its priority is the watched resource's in pool
mode, router/objectivewatch.py, else `objectives.classes`), its latency targets and its
fairness id.

Header names are llm-d's (llm-d-router pkg/epp/metadata/consts.go), each current name with
its deprecated alias, the current one read first when both are sent:

    x-llm-d-inference-objective    (x-gateway-inference-objective)  objective name
    x-llm-d-slo-ttft-ms            (x-slo-ttft-ms)                  time to first token, ms
    x-llm-d-slo-tpot-ms            (x-slo-tpot-ms)                  time per output token, ms
    x-llm-d-inference-fairness-id  (x-gateway-inference-fairness-id) tenant, for the metrics

As in GIE and llm-d, an absent or unknown objective gets the default priority (0), and a
priority below 0 is sheddable: refused with 429 when every eligible endpoint is saturated
or stale (GIE's saturation detector counts stale metrics as saturated); the refusal, and a
503 for no endpoint, carry llm-d's `x-llm-d-request-dropped-reason` response header
(pkg/common/error/error.go). A target of 0 means none, as llm-d reads it. Unlike llm-d,
which ignores a value it cannot parse, a malformed header is refused with 400 naming it:
the client learns its target was not read. The targets are validated and shown in
/debug/explain; the choice does not use them (the picker predicts no latency).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from kvspread.settings import bounded, invalid

__all__ = [
    "HEADER_OBJECTIVE",
    "HEADER_TTFT",
    "HEADER_TPOT",
    "HEADER_FAIRNESS",
    "ALIASES",
    "DROPPED_REASON_HEADER",
    "DROPPED_REASONS",
    "DEFAULT_FAIRNESS_ID",
    "MAX_NAME_CHARS",
    "RESOURCE_CHOICES",
    "Objective",
    "ObjectiveError",
    "ObjectivesConfig",
    "header",
    "priority_of",
    "read_objective",
]

HEADER_OBJECTIVE: Final = "x-llm-d-inference-objective"
HEADER_TTFT: Final = "x-llm-d-slo-ttft-ms"
HEADER_TPOT: Final = "x-llm-d-slo-tpot-ms"
HEADER_FAIRNESS: Final = "x-llm-d-inference-fairness-id"
ALIASES: Final[Mapping[str, tuple[str, ...]]] = {
    HEADER_OBJECTIVE: (HEADER_OBJECTIVE, "x-gateway-inference-objective"),
    HEADER_TTFT: (HEADER_TTFT, "x-slo-ttft-ms"),
    HEADER_TPOT: (HEADER_TPOT, "x-slo-tpot-ms"),
    HEADER_FAIRNESS: (HEADER_FAIRNESS, "x-gateway-inference-fairness-id"),
}
"""Each header's names, the current one first (llm-d's headerAliases)."""

DROPPED_REASON_HEADER: Final = "x-llm-d-request-dropped-reason"
DROPPED_REASONS: Final[Mapping[str, str]] = {
    "shed": "rejected-saturated",
    "no-endpoint": "rejected-no-endpoints",
}
"""Decision reason -> llm-d's RequestDroppedReason (the 429 and the 503 refusals)."""

RESOURCE_CHOICES: Final = ("auto", "llm-d.ai", "inference.networking.x-k8s.io", "off")
"""`objectives.resources`: which InferenceObjective API group is watched (objectivewatch)."""

DEFAULT_FAIRNESS_ID: Final = "default-flow"
"""llm-d's fairness id of a request that names none (metadata.DefaultFairnessID)."""

MAX_NAME_CHARS: Final = 253
"""Longest objective name or fairness id read: a Kubernetes object name's bound."""

_NUMBER = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
"""A plain decimal number (no sign, no `_`, no `inf`/`nan`, which float() would take)."""


class ObjectiveError(ValueError):
    """A header the picker cannot read: answered 400 with this message."""


@dataclass(frozen=True)
class Objective:
    """One request's objective."""

    name: str
    """The objective's name ("" when the request names none)."""
    priority: int
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    fairness_id: str = DEFAULT_FAIRNESS_ID

    @property
    def sheddable(self) -> bool:
        """Priority below 0, GIE's and llm-d's definition (requtil.IsSheddable)."""
        return self.priority < 0


@dataclass(frozen=True)
class ObjectivesConfig:
    """Priorities of the objectives requests name (YAML `objectives:`), as InferenceObjective
    resources give them to GIE's picker (`spec.priority`)."""

    classes: Mapping[str, int] = field(default_factory=dict)
    """Objective name -> priority, e.g. `{premium: 100, standard: 0, batch: -1}`. Below 0 is
    sheddable: 429 when every eligible endpoint is saturated or stale."""
    default_priority: int = 0
    """Priority of a request naming no objective, or one not in `classes` (GIE: 0)."""
    resources: str = "auto"
    """Pool mode: watch InferenceObjective resources for the pool (router/objectivewatch.py).
    `auto`: `llm-d.ai/v1alpha2`, else GIE's `inference.networking.x-k8s.io/v1alpha2`; one of
    those groups: that one only; `off`: none. A name a resource defines takes its
    `spec.priority`, over `classes`."""
    max_resources: int = 1000
    """InferenceObjective resources kept at most (the oldest); newer ones are ignored with a
    warning."""

    def validate(self) -> None:
        for name in self.classes:
            if not name or len(name) > MAX_NAME_CHARS or not name.isprintable():
                raise invalid(
                    f"classes.{name}", f"a printable name of 1..{MAX_NAME_CHARS} chars", name
                )
        if self.resources not in RESOURCE_CHOICES:
            raise invalid("resources", "one of " + ", ".join(RESOURCE_CHOICES), self.resources)
        bounded(self, "max_resources", at_least=1, what="an integer")


DEFAULT: Final = Objective("", 0)


def header(headers: Mapping[str, str], key: str) -> str | None:
    """The header `key` under its current name, else its deprecated alias (lower-case map)."""
    for name in ALIASES.get(key, (key,)):
        value = headers.get(name)
        if value is not None:
            return value
    return None


def _name(headers: Mapping[str, str], key: str) -> str | None:
    value = header(headers, key)
    if value is None:
        return None
    value = value.strip()
    if len(value) > MAX_NAME_CHARS or not value.isprintable():
        raise ObjectiveError(
            f"{key}: expected a printable name of at most {MAX_NAME_CHARS} characters"
        )
    return value or None


def _target(headers: Mapping[str, str], key: str) -> float | None:
    value = header(headers, key)
    if value is None:
        return None
    text = value.strip()
    number = float(text) if _NUMBER.fullmatch(text) else math.nan
    if not math.isfinite(number):
        shown = text if len(text) <= 32 else text[:32] + "..."
        raise ObjectiveError(
            f"{key}: expected milliseconds, a number >= 0 (0: no target), got {shown!r}"
        )
    return number or None


def priority_of(
    name: str, cfg: ObjectivesConfig, resources: Mapping[str, int] | None = None
) -> int:
    """An objective's priority: its InferenceObjective's, else `classes`, else the default."""
    if not name:
        return cfg.default_priority
    if resources:
        found = resources.get(name)
        if found is not None:
            return found
    return cfg.classes.get(name, cfg.default_priority)


def read_objective(
    headers: Mapping[str, str],
    cfg: ObjectivesConfig,
    resources: Mapping[str, int] | None = None,
) -> Objective:
    """The request's objective; ObjectiveError (400) for a header it cannot read.
    `resources`: the watched InferenceObjectives' priorities, which win over `classes`."""
    if not any(n in headers for names in ALIASES.values() for n in names):
        if cfg.default_priority == 0:
            return DEFAULT
        return Objective("", cfg.default_priority)
    name = _name(headers, HEADER_OBJECTIVE) or ""
    priority = priority_of(name, cfg, resources)
    return Objective(
        name=name,
        priority=priority,
        ttft_ms=_target(headers, HEADER_TTFT),
        tpot_ms=_target(headers, HEADER_TPOT),
        fairness_id=_name(headers, HEADER_FAIRNESS) or DEFAULT_FAIRNESS_ID,
    )
