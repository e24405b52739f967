"""FakeProvider: fixed values behind the real API shell (tests, demos, end-to-end HPA runs).

Like custom-metrics-apiserver's test-adapter: set values, serve them with the real
discovery, auth and JSON shapes. It has no sources; the clock that stamps values set
without a timestamp is injected (the system clock by default).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kvspread.clock import SYSTEM_CLOCK
from metrics_adapter.errors import MetricNotFound
from metrics_adapter.selectors import Selector
from metrics_adapter.values import MetricValue

__all__ = ["FakeProvider"]


class FakeProvider:
    """Serve values set with `set(namespace, name, value, labels)`. Thread-safe."""

    def __init__(
        self, metrics: list[str] | None = None, clock: Callable[[], float] = SYSTEM_CLOCK.now
    ) -> None:
        self.clock = clock
        self._names = set(metrics or ())
        self._values: dict[tuple[str, str], list[MetricValue]] = {}
        self._lock = threading.Lock()

    def set(self, namespace: str, name: str, value: float, labels: dict[str, str] | None = None,
            window: float | None = 60.0, timestamp: float | None = None) -> None:  # fmt: skip
        with self._lock:
            self._names.add(name)
            vals = self._values.setdefault((namespace, name), [])
            vals.append(
                MetricValue(
                    name,
                    value,
                    self.clock() if timestamp is None else timestamp,
                    window,
                    dict(labels or {}),
                )
            )

    def list_metrics(self) -> list[str]:
        with self._lock:
            return sorted(self._names)

    def is_blocking(self, name: str) -> bool:
        return False

    def get_external_metric(
        self, namespace: str, name: str, selector: Selector
    ) -> list[MetricValue]:
        return self.read(namespace, name, selector)

    def read(self, namespace: str, name: str, selector: Selector) -> list[MetricValue]:
        with self._lock:
            if name not in self._names:
                raise MetricNotFound(name)
            return [
                v for v in self._values.get((namespace, name), []) if selector.matches(v.labels)
            ]
