"""`MetricValue`: one served value, the unit every source returns and the shells encode.

Its own module so that sources, providers and both API shells (REST and KEDA gRPC) share
it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["MetricValue"]


@dataclass(frozen=True)
class MetricValue:
    """One served value: what becomes an ExternalMetricValue item (or a KEDA MetricValue)."""

    name: str
    value: float
    timestamp: float
    window: float | None = None
    labels: dict[str, str] = field(default_factory=dict)
