"""The test-only hooks of the Gateway API Inference Extension's conformance suite, served
only with `server.conformance_hooks` (`--conformance-hooks`; off by default, because a
client that can steer the picker bypasses its scoring).

The suite steers each request with the header `test-epp-endpoint-selection`: a comma list
of `ip` or `ip:port` (IPv6 in brackets). As GIE's reference test filter
(`HeaderBasedTestingFilter`, pkg/epp/framework/plugins/scheduling/test/filter/) reads it:
an `ip:port` item matches that endpoint exactly, a bare IP matches an endpoint on that IP;
the header's order is kept, duplicates dropped; no match leaves no endpoint (503). The
suite then reads the response header `x-conformance-test-served-endpoint`, which the
picker sets in the response-headers phase to the endpoint that served (router/served.py).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["SELECTION_HEADER", "SERVED_HEADER", "MAX_ITEMS", "steered"]

SELECTION_HEADER = "test-epp-endpoint-selection"
SERVED_HEADER = "x-conformance-test-served-endpoint"
MAX_ITEMS = 64
"""Items of the header read; the rest are ignored (a pool's endpoints are far fewer)."""


def _split(item: str) -> tuple[str, str]:
    """(host without brackets, port or "") of `ip`, `ip:port`, `[v6]` or `[v6]:port`."""
    if item.startswith("["):
        host, _, rest = item[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else ""
    if item.count(":") == 1:  # IPv4 with a port; more colons is a bare IPv6 address
        host, _, port = item.partition(":")
        return host, port
    return item, ""


def steered(header: str, addresses: Iterable[str]) -> list[str]:
    """The endpoints (`ip:port` as the picker writes them) the header selects, in its
    order, each once."""
    by_exact: dict[tuple[str, str], str] = {}
    by_host: dict[str, str] = {}
    for address in addresses:
        host, port = _split(address)
        by_exact[(host, port)] = address
        by_host.setdefault(host, address)
    out: list[str] = []
    for raw in header.split(",")[:MAX_ITEMS]:
        item = raw.strip()
        if not item:
            continue
        host, port = _split(item)
        found = by_exact.get((host, port)) if port else by_host.get(host)
        if found is not None and found not in out:
            out.append(found)
    return out
