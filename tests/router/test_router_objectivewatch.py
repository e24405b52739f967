"""InferenceObjective resources watched for the picker's pool (router/objectivewatch.py):
which objects count, malformed ones, the bound, the group `auto` finds, and a router in
pool mode whose priorities follow the resources over `objectives.classes`, on
FakeKubeApi (tests/cluster/test_cluster_objectives.py has the real v1.26 API server)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from router.objectives import RESOURCE_CHOICES, ObjectivesConfig, read_objective
from router.objectivewatch import (
    GROUPS,
    LEGACY_GROUP,
    NEW_GROUP,
    VERSION,
    ObjectiveWatch,
    _Malformed,
    objective_priority,
)
from tests.fake_kube import FakeKubeApi
from tests.router.conftest import GROUP_VERSION, pool, router_config, wait


def objective(
    name: str,
    priority: Any = None,
    pool_name: str = "qwen-vl",
    group: str = NEW_GROUP,
    created: str = "2026-01-01T00:00:00Z",
    **ref: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"poolRef": {"name": pool_name, **ref}}
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": f"{group}/{VERSION}",
        "kind": "InferenceObjective",
        "metadata": {"name": name, "namespace": "llm", "creationTimestamp": created},
        "spec": spec,
    }


def test_the_choices_name_the_groups() -> None:
    assert RESOURCE_CHOICES == ("auto", *GROUPS, "off")


@pytest.mark.parametrize(
    "obj,want",
    [
        (objective("premium", 100), ("premium", 100)),
        (objective("batch", -1), ("batch", -1)),
        (objective("plain"), ("plain", 0)),  # unset: 0, as GIE says
        (objective("g", 5, group="inference.networking.k8s.io"), ("g", 5)),
        (objective("k", 5, kind="InferencePool"), ("k", 5)),
        (objective("other", 5, pool_name="other-pool"), None),
        (objective("x", 5, group="inference.networking.x-k8s.io"), ("x", 5)),  # legacy object
    ],
)
def test_which_objects_count(obj: dict[str, Any], want: tuple[str, int] | None) -> None:
    assert objective_priority(obj, "qwen-vl") == want


def test_a_pool_ref_of_another_group_or_kind_is_not_this_pool() -> None:
    obj = objective("a", 1)
    obj["spec"]["poolRef"]["group"] = "inference.networking.x-k8s.io"
    assert objective_priority(obj, "qwen-vl") is None
    obj["spec"]["poolRef"] = {"name": "qwen-vl", "kind": "Service"}
    assert objective_priority(obj, "qwen-vl") is None


@pytest.mark.parametrize(
    "spec,field",
    [
        ({"poolRef": {"name": "qwen-vl"}, "priority": "high"}, "spec.priority"),
        ({"poolRef": {"name": "qwen-vl"}, "priority": 1.5}, "spec.priority"),
        ({"poolRef": {"name": "qwen-vl"}, "priority": True}, "spec.priority"),
        ({"poolRef": {"name": "qwen-vl"}, "priority": 2**31}, "spec.priority"),
        ({"poolRef": {}}, "spec.poolRef.name"),
        ({"poolRef": "qwen-vl"}, "spec.poolRef.name"),
        ({}, "spec.poolRef.name"),
    ],
)
def test_a_malformed_object_names_its_field(spec: dict[str, Any], field: str) -> None:
    obj = objective("bad")
    obj["spec"] = spec
    with pytest.raises(_Malformed, match=field):
        objective_priority(obj, "qwen-vl")


def test_a_resource_wins_over_classes_and_classes_over_the_default() -> None:
    cfg = ObjectivesConfig(classes={"batch": 5, "gold": 50}, default_priority=1)
    watched = {"batch": -1}
    header = "x-llm-d-inference-objective"
    assert read_objective({header: "batch"}, cfg, watched).priority == -1
    assert read_objective({header: "gold"}, cfg, watched).priority == 50
    assert read_objective({header: "unknown"}, cfg, watched).priority == 1
    assert read_objective({header: "batch"}, cfg).priority == 5


class Published:
    """What the watch hands the picker, latest last."""

    def __init__(self) -> None:
        self.seen: list[Mapping[str, int]] = []

    def __call__(self, priorities: Mapping[str, int]) -> None:
        self.seen.append(priorities)

    @property
    def last(self) -> Mapping[str, int] | None:
        return self.seen[-1] if self.seen else None


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as fake:
        yield fake


def watching(api: FakeKubeApi, **kw: Any) -> tuple[ObjectiveWatch, Published]:
    from kvspread.kube import api_client

    got = Published()
    w = ObjectiveWatch(api_client(server=api.url), "llm", "qwen-vl", got, **kw)
    w.reflector.start()
    return w, got


def test_the_watch_follows_the_pools_objectives(
    api: FakeKubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    api.register_kind(f"{NEW_GROUP}/{VERSION}", "InferenceObjective", "inferenceobjectives", True)
    api.put(objective("premium", 100))
    api.put(objective("other", 7, pool_name="other-pool"))
    w, got = watching(api)
    try:
        wait(lambda: got.last == {"premium": 100})
        assert w.group == NEW_GROUP
        api.put(objective("batch", -1))
        wait(lambda: got.last == {"premium": 100, "batch": -1})
        before = got.last
        api.put(objective("premium", 10))
        wait(lambda: got.last == {"premium": 10, "batch": -1})
        assert before == {"premium": 100, "batch": -1}  # a published mapping never changes
        with caplog.at_level(logging.WARNING, "kvspread.router.objectivewatch"):
            api.put(objective("batch", "low"))  # now malformed: skipped, the rest kept
            wait(lambda: got.last == {"premium": 10})
        warning = next(r for r in caplog.records if r.getMessage() == "InferenceObjective skipped")
        assert warning.kv["object"] == "llm/batch"  # type: ignore[attr-defined]
        assert "spec.priority" in warning.kv["why"]  # type: ignore[attr-defined]
        api.put(objective("premium", 10, pool_name="other-pool"))  # moved to another pool
        wait(lambda: got.last == {})
        api.put(objective("batch", -2))
        wait(lambda: got.last == {"batch": -2})
        api.delete("InferenceObjective", "batch", "llm", f"{NEW_GROUP}/{VERSION}")
        wait(lambda: got.last == {})
    finally:
        w.reflector.stop()


def test_the_bound_keeps_the_oldest(api: FakeKubeApi, caplog: pytest.LogCaptureFixture) -> None:
    api.register_kind(f"{NEW_GROUP}/{VERSION}", "InferenceObjective", "inferenceobjectives", True)
    api.put(objective("c", 3, created="2026-01-03T00:00:00Z"))
    api.put(objective("a", 1, created="2026-01-01T00:00:00Z"))
    api.put(objective("b", 2, created="2026-01-02T00:00:00Z"))
    with caplog.at_level(logging.WARNING, "kvspread.router.objectivewatch"):
        w, got = watching(api, max_resources=2)
        try:
            wait(lambda: got.last == {"a": 1, "b": 2})
            assert w.ignored == 1
            api.put(objective("d", 4))  # still full: ignored
            wait(lambda: w.ignored == 2)
            api.put(objective("a", 10))  # a kept one changes
            wait(lambda: got.last == {"a": 10, "b": 2})
            api.delete("InferenceObjective", "b", "llm", f"{NEW_GROUP}/{VERSION}")
            wait(lambda: got.last == {"a": 10})
            api.put(objective("e", 5))  # room again
            wait(lambda: got.last == {"a": 10, "e": 5})
        finally:
            w.reflector.stop()
    full = [r for r in caplog.records if "past the bound" in r.getMessage()]
    assert full and full[0].kv["max_resources"] == 2  # type: ignore[attr-defined]


def test_auto_falls_back_to_gies_group_then_says_none_is_served(api: FakeKubeApi) -> None:
    legacy = f"{LEGACY_GROUP}/{VERSION}"
    api.register_kind(legacy, "InferenceObjective", "inferenceobjectives", True)
    api.put(objective("batch", -1, group=LEGACY_GROUP))
    w, got = watching(api)
    try:
        wait(lambda: got.last == {"batch": -1})
        assert w.group == LEGACY_GROUP
        wait(lambda: w.reflector.stats.watches >= 1)
    finally:
        w.reflector.stop()
    w, got = watching(api, resources=NEW_GROUP)  # that group only: not served here
    try:
        wait(lambda: w.reflector.stats.errors >= 1)
        assert "not served" in w.reflector.stats.last_error
        assert f"{NEW_GROUP}/{VERSION}" in w.reflector.stats.last_error
        assert w.reflector.state == "failing" and got.last is None
    finally:
        w.reflector.stop()


def test_a_router_in_pool_mode_takes_the_resources_priorities(
    api: FakeKubeApi, start_router: Any
) -> None:
    api.register_kind(GROUP_VERSION, "InferencePool", "inferencepools", True)
    api.register_kind(f"{NEW_GROUP}/{VERSION}", "InferenceObjective", "inferenceobjectives", True)
    api.put(pool(8000, {"app": "vllm"}))
    api.put(objective("batch", -1))
    cfg = router_config(
        None,
        pool={"name": "qwen-vl", "namespace": "llm"},
        kubernetes={"api_server": api.url},
        objectives={"classes": {"batch": 5, "gold": 50}},
    )
    router = start_router(cfg)
    wait(lambda: router.picker.objective_priorities == {"batch": -1})
    header = {"x-llm-d-inference-objective": "batch", "x-request-id": "r1"}
    out = router.picker.pick(b'{"model": "m", "prompt": "hi"}', header, None)
    assert out.objective.priority == -1 and out.objective.sheddable
    explained = router.picker.explain("r1")["objective"]
    assert (explained["priority"], explained["priority_from"]) == (-1, "resource")
    gold = {"x-llm-d-inference-objective": "gold", "x-request-id": "r2"}
    assert router.picker.pick(b"", gold, None).objective.priority == 50  # from classes
    assert router.picker.explain("r2")["objective"]["priority_from"] == "config"
    api.delete("InferenceObjective", "batch", "llm", f"{NEW_GROUP}/{VERSION}")
    wait(lambda: router.picker.objective_priorities == {})
    assert router.picker.pick(b"", header, None).objective.priority == 5


def test_off_and_static_mode_watch_no_objectives(api: FakeKubeApi) -> None:
    from router.endpoints import EndpointSet
    from router.kubewatch import PoolWatch

    kube = {"api_server": api.url}
    off = router_config(None, pool={"name": "p", "namespace": "llm"}, kubernetes=kube,
                        objectives={"resources": "off"})  # fmt: skip
    assert PoolWatch(off, EndpointSet()).objectives is None
    sel = router_config(None, endpoints={"selector": "app=x", "target_port": 1}, kubernetes=kube)
    assert PoolWatch(sel, EndpointSet()).objectives is None


@pytest.mark.parametrize(
    "section,message",
    [
        ({"resources": "llm-d"}, "objectives.resources: expected one of auto, llm-d.ai"),
        ({"max_resources": 0}, "objectives.max_resources: expected an integer >= 1"),
    ],
)
def test_bad_objectives_config_names_the_key(section: dict[str, Any], message: str) -> None:
    from kvspread.settings import ConfigError

    with pytest.raises(ConfigError, match=message):
        router_config(["10.0.0.1:1"], objectives=section)


def test_a_crd_installed_later_is_found_at_the_next_list(api: FakeKubeApi) -> None:
    w, got = watching(api)
    try:
        wait(lambda: w.reflector.stats.errors >= 1)  # neither group served: 404, backing off
        assert w.group is None and got.last is None
        api.register_kind(f"{LEGACY_GROUP}/{VERSION}", "InferenceObjective",
                          "inferenceobjectives", True)  # fmt: skip
        api.put(objective("batch", -3, group=LEGACY_GROUP))
        wait(lambda: got.last == {"batch": -3})  # the retry after the first backoff (<= 1 s)
        assert w.group == LEGACY_GROUP
    finally:
        w.reflector.stop()
