"""The `Source` protocol: what a rule's backend must offer the provider and the API shells.

A source computes the value of one rule for one request. Everything the shells need to
know about it is declared here, not discovered with `getattr`:

- `evaluate(rule, namespace, selector)` returns the values (an empty list when no series
  match), or raises an `errors.AdapterError`: `NoFreshData` when series match but none
  can give a value now, `SourceUnavailable` when the backend is down, `HistogramTooCoarse`
  when a quantile cannot be bounded.
- `blocking` is True when `evaluate` may wait on I/O (a PromQL query): the asyncio shells
  then call it in a worker thread instead of on the event loop.
- `ready()` is False while the source cannot answer yet (the shells' /readyz).

Thread-safety: `evaluate` may be called from several threads at once.
"""

from __future__ import annotations

from typing import Protocol

from metrics_adapter.rules import Rule
from metrics_adapter.selectors import Selector
from metrics_adapter.values import MetricValue

__all__ = ["Source"]


class Source(Protocol):
    """A rule backend (see the module docstring)."""

    @property
    def blocking(self) -> bool: ...

    def ready(self) -> bool: ...

    def evaluate(self, rule: Rule, namespace: str, selector: Selector) -> list[MetricValue]: ...
