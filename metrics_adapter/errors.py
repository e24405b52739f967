"""Errors a provider or the shell raises, each mapped to a Kubernetes `Status` answer.

Sources and providers raise these and never write HTTP status codes themselves; the API
shell turns any `AdapterError` into a `Status` object with its `code` and `reason`::

    AdapterError                      (500 InternalError)
    +-- NotFound                      (404 NotFound: no such path)
    |   +-- MetricNotFound            (404 NotFound: no such external metric)
    +-- BadRequest                    (400 BadRequest)
    |   +-- SelectorError             (400: an unparsable label selector)
    +-- Unauthorized                  (401: no valid front-proxy client certificate / user)
    +-- Forbidden                     (403: the authoriser said no)
    +-- MethodNotAllowed              (405)
    +-- SourceUnavailable             (503 ServiceUnavailable: e.g. Prometheus is down)
    |   +-- NoFreshData               (series match, none can give a value now; the REST
    |                                  read answers 200 with no items, KEDA UNAVAILABLE)
    +-- HistogramTooCoarse            (422: the quantile's bucket is too wide to serve)
    +-- ValueOutOfRange               (422: the value is not a finite quantity)
    +-- WrongKind                     (422: the rule's aggregation cannot read the series)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from metrics_adapter.values import MetricValue

__all__ = [
    "AdapterError",
    "NotFound",
    "MetricNotFound",
    "BadRequest",
    "SelectorError",
    "Unauthorized",
    "Forbidden",
    "MethodNotAllowed",
    "SourceUnavailable",
    "NoFreshData",
    "HistogramTooCoarse",
    "ValueOutOfRange",
    "WrongKind",
    "status_object",
]

GROUP = "external.metrics.k8s.io"


class AdapterError(Exception):
    """Base: an error with an HTTP code and a Kubernetes `reason`, which a subclass sets
    in its header: `class NotFound(AdapterError, code=404, reason="NotFound")`."""

    code: ClassVar[int] = 500
    reason: ClassVar[str] = "InternalError"

    def __init_subclass__(
        cls, code: int | None = None, reason: str | None = None, **kw: Any
    ) -> None:
        super().__init_subclass__(**kw)
        if code is not None:
            cls.code = code
        if reason is not None:
            cls.reason = reason

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        return status_object(self.code, self.reason, self.message, self.details)


class NotFound(AdapterError, code=404, reason="NotFound"):
    """A path the server does not serve."""


class MetricNotFound(NotFound):
    """An external metric no rule defines."""

    def __init__(self, metric: str, why: str = "") -> None:
        msg = f'the server could not find the metric "{metric}"'
        super().__init__(
            msg + (f": {why}" if why else ""),
            {"name": metric, "group": GROUP, "kind": metric},
        )
        self.metric = metric


class BadRequest(AdapterError, code=400, reason="BadRequest"):
    """A request that cannot be served as asked: a bad namespace, selector or KEDA trigger."""


class SelectorError(BadRequest):
    """A label selector that does not parse; the message says where and why."""


class Unauthorized(AdapterError, code=401, reason="Unauthorized"):
    """No valid front-proxy client certificate, or no user."""


class Forbidden(AdapterError, code=403, reason="Forbidden"):
    """The authoriser said no."""


class MethodNotAllowed(AdapterError, code=405, reason="MethodNotAllowed"):
    """A verb the path does not take."""


class SourceUnavailable(AdapterError, code=503, reason="ServiceUnavailable"):
    """The metrics source cannot answer now (e.g. Prometheus is down)."""


class NoFreshData(SourceUnavailable):
    """Series match the request but none gives a value now (docs/adapter.md, "No fresh
    data"). The REST read serves it as an empty list (the HPA sees a missing metric and
    holds), KEDA gets UNAVAILABLE with this message; either way it is counted once, in
    kvspread_adapter_stale_reads_total."""


class HistogramTooCoarse(AdapterError, code=422, reason="Invalid"):
    """A quantile falls in a bucket too wide to bound it: served values would mislead an
    HPA, so the read fails with the series, its bounds and the fix (docs/adapter.md)."""

    def __init__(
        self,
        message: str,
        refusal: str,
        floor: MetricValue | None = None,
        ceiling: float = math.inf,
    ) -> None:
        super().__init__(message)
        self.refusal = refusal
        """The `reason` label of kvspread_adapter_refused_reads_total."""
        self.floor = floor
        """The least the refused quantile can be (the containing bucket's lower bound), with
        the merged series' labels and newest timestamp; None where it is unknown."""
        self.ceiling = ceiling
        """The most it can be (the bucket's upper bound; +Inf for the overflow bucket). The
        SLO pressure uses the floor when it is at or over a term's target and the ceiling
        when that is at or under it (docs/adapter.md, "SLO pressure")."""


def status_object(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A metav1.Status failure object, as kube-apiserver writes it."""
    doc: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        doc["details"] = details
    return doc


class ValueOutOfRange(AdapterError, code=422, reason="Invalid"):
    """A value that is not a finite quantity (a pressure term over a target so small that
    the ratio overflows): an HPA cannot act on it, so the read fails naming the metric."""


class WrongKind(AdapterError, code=422, reason="Invalid"):
    """The matching series are of a kind the rule's aggregation does not read (a quantile
    rule over a gauge): a mistake in the rules, named, not reported as no fresh data."""
