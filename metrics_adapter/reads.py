"""The arguments of a metric read, checked once for both shells (REST and KEDA gRPC), so
that a bad namespace or selector gets the same message whichever way it came in."""

from __future__ import annotations

import re

from metrics_adapter.errors import BadRequest
from metrics_adapter.selectors import Selector, parse_selector

__all__ = ["parse_read"]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def parse_read(namespace: str, label_selector: str | None) -> Selector:
    """The selector of a read in `namespace`; BadRequest / SelectorError when invalid."""
    if not _DNS_LABEL.match(namespace):
        raise BadRequest(f"invalid namespace {namespace!r}: must be a DNS-1123 label")
    return parse_selector(label_selector)
