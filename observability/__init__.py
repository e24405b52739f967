"""Observability as code: the metric catalogue, Prometheus rules, Grafana dashboards and the
generated reference docs, all built from `kvspread.names` so that they cannot drift from what
the parts emit. Regenerate everything with `python -m observability.generate`.
"""

from observability.catalog import CATALOG, Metric, label

__all__ = ["CATALOG", "Metric", "label"]
