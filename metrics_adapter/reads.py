"""The arguments of a metric read, checked once for both shells (REST and KEDA gRPC), so
that a bad namespace or selector gets the same message whichever way it came in."""

from __future__ import annotations

from kvspread.names import DNS_LABEL
from metrics_adapter.errors import BadRequest
from metrics_adapter.selectors import Selector, parse_selector

__all__ = ["parse_read"]


def parse_read(namespace: str, label_selector: str | None) -> Selector:
    """The selector of a read in `namespace`; BadRequest / SelectorError when invalid."""
    if not DNS_LABEL.fullmatch(namespace):
        raise BadRequest(f"invalid namespace {namespace!r}: must be a DNS-1123 label")
    return parse_selector(label_selector)
