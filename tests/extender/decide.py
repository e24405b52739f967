"""Call the service directly and read its answer as the scheduler would (encoded by
wire.py, parsed back), for tests that skip HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from extender.run import Running
from extender.service import Extender
from extender.wire import encode_filter, encode_prioritize, parse_args
from tests.fake_kube import FakeKubeApi


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


@contextmanager
def synced(api: FakeKubeApi, running: Running) -> Iterator[Running]:
    """Start `running` against `api`, wait until its caches synced, stop it on the way out."""
    running.start()
    try:
        assert api.wait_for(running.ready, 10), "caches did not sync"
        yield running
    finally:
        running.stop()
