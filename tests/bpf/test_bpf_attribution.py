"""pid -> cgroup -> pod table through `Attributor`, on the fixture /proc tree
(tests/fixtures/proc; the cgroup layouts themselves are tested in test_bpf_cgroup.py)."""

from __future__ import annotations

from pathlib import Path

from bpf.attribution import Attributor, PodMeta
from kvspread.clock import FakeClock

PROC = Path(__file__).parents[1] / "fixtures" / "proc"


def test_attributor_resolves_names_and_retries_unknown_pods() -> None:
    table: dict[str, PodMeta] = {}
    calls: list[str] = []

    def lookup(uid: str) -> PodMeta | None:
        calls.append(uid)
        return table.get(uid)

    clock = FakeClock()
    a = Attributor(PROC, lookup, retry_s=5.0, clock=clock)
    ref = a.resolve(2101)
    assert ref is not None and ref.uid.startswith("3fcb4b70") and ref.name == ""
    assert a.resolve(2101) == ref and len(calls) == 1  # cached within retry_s
    table[ref.uid] = PodMeta(ref.uid, "llm", "vllm-0")
    clock.advance(6)
    ref2 = a.resolve(2101)
    assert ref2 is not None and (ref2.namespace, ref2.name) == ("llm", "vllm-0")
    clock.advance(100)
    assert a.resolve(2101) == ref2 and len(calls) == 2  # complete entries are not re-read
    assert a.resolve(2190) is None and a.resolve(999999) is None


def test_attributor_cache_is_bounded() -> None:
    a = Attributor(PROC, None, max_entries=3)
    for pid in (2101, 2102, 2103, 2105, 2106):
        a.resolve(pid)
    assert len(a) == 3
