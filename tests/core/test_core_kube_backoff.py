"""The Reflector's one backoff for list and watch (issue 26, point 1) against FakeKubeApi:
a server that lists fine and refuses every watch, or closes every watch at once, gets a
bounded number of requests per minute; the backoff is reset only by a healthy watch; each
state change is counted and logged once. Time is virtual (the loop's `monotonic` and
`wait` are injected), so the bound is checked as a property, not against a clock."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterator

import pytest
from kubernetes import client

from kvspread.kube import HEALTHY_AFTER_S, Backoff, Reflector, api_client
from tests.fake_kube import FakeKubeApi, make_node

ALWAYS = 10**9


class VirtualTime:
    """A monotonic clock that moves only when the loop waits (or a test says so)."""

    def __init__(self) -> None:
        self.t = 0.0
        self.lock = threading.Lock()
        self.requests: list[float] = []

    def monotonic(self) -> float:
        with self.lock:
            return self.t

    def wait(self, seconds: float) -> None:
        with self.lock:
            self.t += seconds


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as fake:
        fake.put(make_node("n1"))
        yield fake


def nodes_reflector(fake: FakeKubeApi, vt: VirtualTime, seed: int = 0, **kw: object) -> Reflector:
    core = client.CoreV1Api(api_client(server=fake.url))

    def list_node(**call: object) -> object:
        vt.requests.append(vt.monotonic())  # one API request, at this virtual time
        return core.list_node(**call)

    return Reflector(
        "nodes",
        list_node,
        lambda items: None,
        lambda etype, obj: None,
        watch_timeout_s=2,
        rng=random.Random(seed),
        monotonic=vt.monotonic,
        wait=vt.wait,
        **kw,  # type: ignore[arg-type]
    )


def run_until(r: Reflector, vt: VirtualTime, fake: FakeKubeApi, horizon_s: float) -> list[float]:
    """Run the loop until virtual time passes `horizon_s`; the virtual time of each request."""
    thread = threading.Thread(target=r.run, daemon=True)
    thread.start()
    try:
        assert fake.wait_for(lambda: vt.monotonic() > horizon_s, 60)
    finally:
        r.stop()
    assert len(node_requests(fake)) >= len(vt.requests) - 1  # each call reached the server
    return [t for t in vt.requests if t <= horizon_s]


def node_requests(fake: FakeKubeApi) -> list[tuple[str, str, dict[str, str]]]:
    return [q for q in fake.requests if q[1] == "/api/v1/nodes"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_refused_watch_costs_a_bounded_number_of_requests(api: FakeKubeApi, seed: int) -> None:
    api.fail_next(403, path_prefix="/api/v1/nodes", watch=True, count=ALWAYS)
    vt = VirtualTime()
    r = nodes_reflector(api, vt, seed)
    times = run_until(r, vt, api, 180.0)
    backoff = Backoff()
    # the first 30 s: at most 12 requests (issue 26 measured 840 from one extender)
    assert len([t for t in times if t <= 30]) <= backoff.max_requests(30) == 12
    # every later minute while it keeps failing: at most 10
    for start in range(30, 120, 10):
        assert len([t for t in times if start < t <= start + 60]) <= 10
    # lists and watches alternate, and the list's success never reset the backoff
    kinds = ["watch" if q.get("watch") else "list" for _, _, q in node_requests(api)]
    assert kinds[:6] == ["list", "watch"] * 3
    assert r.stats.lists >= 3 and r.stats.errors >= 3
    assert r.state == "failing" and r.stats.state_changes == 1


def test_a_watch_closed_at_once_is_a_failure(api: FakeKubeApi) -> None:
    """A server that answers 200 and ends the stream with no event (a dropped connection,
    a proxy) is a "very short watch": retried with the backoff, not in a tight loop."""
    api.fail_next(200, path_prefix="/api/v1/nodes", watch=True, count=ALWAYS)
    vt = VirtualTime()
    r = nodes_reflector(api, vt)
    times = run_until(r, vt, api, 30.0)
    assert 2 <= len(times) <= Backoff().max_requests(30)
    assert "very short watch" in r.stats.last_error


def test_gone_goes_through_the_backoff_too(api: FakeKubeApi) -> None:
    api.fail_next(410, path_prefix="/api/v1/nodes", watch=True, count=ALWAYS)
    vt = VirtualTime()
    r = nodes_reflector(api, vt)
    times = run_until(r, vt, api, 30.0)
    assert len(times) <= Backoff().max_requests(30)
    assert r.stats.gone >= 2 and r.stats.errors == 0


def test_only_a_healthy_watch_resets_the_backoff(
    api: FakeKubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    """Failures, then a watch that stays open: the backoff is still grown while the watch
    is young, reset once it has run `healthy_after_s`, and each change is logged once."""
    api.fail_next(500, path_prefix="/api/v1/nodes", watch=True, count=4)
    vt = VirtualTime()
    backoff = Backoff()
    r = nodes_reflector(api, vt, backoff=backoff, healthy_after_s=HEALTHY_AFTER_S)
    caplog.set_level(logging.INFO, logger="kvspread.kube")
    thread = threading.Thread(target=r.run, daemon=True)
    thread.start()
    try:
        assert api.wait_for(lambda: r.stats.errors == 4 and api.open_watches() == 1)
        assert backoff.failures == 4 and r.state == "failing"
        vt.wait(HEALTHY_AFTER_S - 1)
        api.put(make_node("n2"))  # an event on a watch not yet healthy: no reset
        assert api.wait_for(lambda: r.stats.events >= 1)
        assert backoff.failures == 4
        vt.wait(2)
        api.put(make_node("n3"))
        assert api.wait_for(lambda: r.state == "healthy")
        assert backoff.failures == 0
    finally:
        r.stop()
    changes = [rec for rec in caplog.records if rec.getMessage().startswith("list/watch ")]
    assert [rec.getMessage() for rec in changes] == [
        "list/watch failing, backing off",
        "list/watch healthy",
    ]
    assert r.stats.state_changes == 2


def test_max_requests_is_the_schedule_bound() -> None:
    b = Backoff(base_s=1.0, cap_s=30.0)
    assert b.max_requests(0) == 2
    assert b.max_requests(30) == 12
    assert b.max_requests(60) == 16  # waits from 0.5 s up to 15.5 s, then 15 s: 30.5, 45.5
    assert Backoff(base_s=0.2).max_requests(30) > 12  # the old 0.2 s start: more


def test_backoff_grows_and_caps() -> None:
    b = Backoff(base_s=0.1, cap_s=1.0)
    rng = random.Random(0)
    delays = [b.next_delay(rng) for _ in range(8)]
    assert 0.05 <= delays[0] <= 0.1
    assert all(0.5 <= d <= 1.0 for d in delays[4:])
    b.reset()
    assert b.next_delay(rng) <= 0.1
