"""Settings of the trace replay (`kvspread simulate placement`).

The YAML given with `--config` holds a `placement:` section (every key also a flag and a
`KVSPREAD_SIMULATE_PLACEMENT_<KEY>` variable) and may hold the extender's `scoring:`
section, which the kvspread policies then use:

    placement:
      trace: default
      seeds: 42..51
      policies: fgd,kvspread
      jobs: 2
      stop_at: 101
    scoring:
      weights: {fragmentation: 0.5}
"""

from __future__ import annotations

from dataclasses import dataclass, field

from extender.config import ScoringConfig
from kvspread.settings import invalid

__all__ = ["PlacementConfig", "ReplayConfig", "DEFAULT_SEEDS", "DEFAULT_OUT", "MAX_STOP_AT"]

DEFAULT_SEEDS = "42..51"
DEFAULT_OUT = "kvspread-report"
MAX_STOP_AT = 130.0
"""The FGD paper's replay: pods arrive until their GPU demand is 130 % of capacity."""


@dataclass(frozen=True)
class PlacementConfig:
    """One replay run over policies x seeds (YAML `placement:`)."""

    trace: str = "default"
    """Pod list: a bundled trace name (default, gpushare20..100, multigpu20..50) or a CSV path."""
    seeds: str | tuple[int, ...] = DEFAULT_SEEDS
    """Seeds: a list, or text such as 42..51 or 42,43,50..51."""
    policies: str | tuple[str, ...] | None = None
    """Policies to run: a list or comma-separated names; unset: all of them."""
    jobs: int | None = None
    """Worker processes (unset: the CPU count)."""
    out: str = DEFAULT_OUT
    """Report folder."""
    extender_weight: float | None = None
    """Extender weight of the kvspread-k8s policy against kube-scheduler's plugins (unset: 5)."""
    stop_at: float | None = None
    """Stop once arrived GPU demand passes this percentage of capacity (unset: 130)."""

    def validate(self) -> None:
        if self.jobs is not None and self.jobs < 1:
            raise invalid("jobs", "an integer >= 1", self.jobs)
        if self.extender_weight is not None and not self.extender_weight > 0:
            raise invalid("extender_weight", "a number > 0", self.extender_weight)
        if self.stop_at is not None and not 0 < self.stop_at <= MAX_STOP_AT:
            raise invalid("stop_at", f"a percentage in (0, {MAX_STOP_AT:g}]", self.stop_at)


@dataclass(frozen=True)
class ReplayConfig:
    """The whole `--config` file of `kvspread simulate placement`."""

    placement: PlacementConfig = PlacementConfig()
    """The replay's own settings."""
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    """The kvspread policies' scoring: the extender's `scoring:` section."""
