"""pid -> cgroup -> pod: cgroup v1/v2, systemd/cgroupfs drivers, containerd/CRI-O/docker,
on a fake /proc tree (tests/bpf/fixtures/proc)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bpf.attribution import Attributor, PodMeta, parse_cgroup
from kvspread.clock import FakeClock

PROC = Path(__file__).parent / "fixtures" / "proc"


@pytest.mark.parametrize(
    "pid,uid,cid",
    [
        (101, "7c4e2f1a-9b3d-4e5f-8a6b-1c2d3e4f5a6b", "a" * 64),
        (102, "11111111-2222-3333-4444-555555555555", "b" * 64),
        (103, "22222222-3333-4444-5555-666666666666", "c" * 64),
        (104, "33333333-4444-5555-6666-777777777777", "d" * 64),
        (105, "44444444-5555-6666-7777-888888888888", "e" * 64),
        (106, "0123456789abcdef0123456789abcdef", "f" * 64),
    ],
    ids=[
        "v2 systemd containerd",
        "v2 systemd cri-o",
        "v2 cgroupfs",
        "v1 cgroupfs",
        "v1 systemd docker",
        "static pod uid",
    ],
)
def test_layouts(pid: int, uid: str, cid: str) -> None:
    assert parse_cgroup((PROC / str(pid) / "cgroup").read_text()) == (uid, cid)


def test_not_a_pod() -> None:
    assert parse_cgroup((PROC / "107" / "cgroup").read_text()) is None
    assert parse_cgroup("garbage without colons\n") is None


def test_attributor_resolves_names_and_retries_unknown_pods() -> None:
    table: dict[str, PodMeta] = {}
    calls: list[str] = []

    def lookup(uid: str) -> PodMeta | None:
        calls.append(uid)
        return table.get(uid)

    clock = FakeClock()
    a = Attributor(PROC, lookup, retry_s=5.0, clock=clock)
    ref = a.resolve(101)
    assert ref is not None and ref.uid.startswith("7c4e2f1a") and ref.name == ""
    assert a.resolve(101) == ref and len(calls) == 1  # cached within retry_s
    table[ref.uid] = PodMeta(ref.uid, "llm", "vllm-0")
    clock.advance(6)
    ref2 = a.resolve(101)
    assert ref2 is not None and (ref2.namespace, ref2.name) == ("llm", "vllm-0")
    clock.advance(100)
    assert a.resolve(101) == ref2 and len(calls) == 2  # complete entries are not re-read
    assert a.resolve(107) is None and a.resolve(999999) is None


def test_attributor_cache_is_bounded() -> None:
    a = Attributor(PROC, None, max_entries=3)
    for pid in (101, 102, 103, 104, 105):
        a.resolve(pid)
    assert len(a) == 3
