"""kvspread metrics adapter: the external.metrics.k8s.io/v1beta1 API server (docs/adapter.md).

The pure SLI math is `metrics_adapter.sli` (the serving simulator imports it); the server
is assembled in `metrics_adapter.server` and started by `kvspread adapter serve`.
"""

from metrics_adapter.errors import AdapterError, MetricNotFound
from metrics_adapter.fake import FakeProvider
from metrics_adapter.provider import ExternalMetricsProvider, RuleProvider
from metrics_adapter.selectors import Selector, parse_selector
from metrics_adapter.values import MetricValue

__all__ = [
    "AdapterError",
    "ExternalMetricsProvider",
    "FakeProvider",
    "MetricNotFound",
    "MetricValue",
    "RuleProvider",
    "Selector",
    "parse_selector",
]
