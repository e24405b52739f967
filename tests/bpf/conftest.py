"""Fixtures of the collector tests: real BPF programs compiled once per session.

The BPF tests need root, bcc and tracefs; without them they are skipped with the reason.
The programs trace only the ports reserved here (in-kernel port filter), so traffic of
other tests on this machine does not reach them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bpf import loader
from tests.ports import free_ports


def wait_for(cond: Any, timeout: float = 15.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return bool(cond())


def bpf_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "BPF tests need root"
    if not (loader.DEFAULT_TRACEFS / "events").is_dir():
        return "tracefs not mounted at /sys/kernel/tracing"
    if loader.BCC_DIST_PACKAGES not in sys.path:
        sys.path.append(loader.BCC_DIST_PACKAGES)
    try:
        import bcc  # noqa: F401
    except ImportError:
        return "bcc (python3-bpfcc) not installed"
    return None


@dataclass
class Probes:
    """A loaded ProbeSession polled by a background thread; tests subscribe callbacks."""

    session: loader.ProbeSession
    traced: tuple[int, ...]
    untraced: int
    header_cache: Path
    http_subs: list[Callable[[bytes], None]] = field(default_factory=list)
    accept_subs: list[Callable[[bytes], None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_http(self, raws: list[bytes]) -> None:
        with self.lock:
            subs = list(self.http_subs)
        for raw in raws:
            for cb in subs:
                cb(raw)

    def on_accept(self, raw: bytes) -> None:
        with self.lock:
            subs = list(self.accept_subs)
        for cb in subs:
            cb(raw)

    def subscribe(
        self, on_http: Callable[[bytes], None], on_accept: Callable[[bytes], None]
    ) -> None:
        with self.lock:
            self.http_subs.append(on_http)
            self.accept_subs.append(on_accept)

    def unsubscribe_all(self) -> None:
        with self.lock:
            self.http_subs.clear()
            self.accept_subs.clear()


@pytest.fixture(scope="session")
def probes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Probes]:
    why = bpf_skip_reason()
    if why:
        pytest.skip(why)
    *picked, untraced = free_ports(7)  # distinct: an untraced port equal to a traced one
    traced = tuple(picked)  # made test_untraced_port_is_filtered_in_kernel fail by chance
    cache = tmp_path_factory.mktemp("btf-headers")
    cfg = loader.ProbeConfig(ports=traced, header_cache=cache)
    session = loader.load(cfg)
    p = Probes(session, traced, untraced, cache)
    session.open_batches(p.on_http, p.on_accept)
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            session.poll(50)

    t = threading.Thread(target=poll, name="test-bpf-poll", daemon=True)
    t.start()
    yield p
    stop.set()
    t.join(timeout=5)
    session.close()


@pytest.fixture
def subscribed(probes: Probes) -> Iterator[Probes]:
    yield probes
    probes.unsubscribe_all()
