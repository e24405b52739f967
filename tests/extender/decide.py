"""Call the service directly and read its answer as the scheduler would (encoded by
wire.py, parsed back), for tests that skip HTTP."""

from __future__ import annotations

import json
from typing import Any

from extender.service import Extender
from extender.wire import encode_filter, encode_prioritize, parse_args


def filter_doc(ext: Extender, body: bytes | str) -> dict[str, Any]:
    """ExtenderFilterResult as a dict."""
    args = parse_args(body)
    doc: dict[str, Any] = json.loads(encode_filter(args, ext.filter(args)))
    return doc


def prioritize_scores(ext: Extender, body: bytes | str) -> dict[str, int]:
    """HostPriorityList as {host: score}."""
    args = parse_args(body)
    return {
        h["Host"]: h["Score"] for h in json.loads(encode_prioritize(args, ext.prioritize(args)))
    }
