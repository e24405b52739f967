"""FakeKubeApi itself: the wire shapes the other parts' tests rely on."""

from __future__ import annotations

import json
import threading
import time

import httpx

from tests.fake_kube import FakeKubeApi, make_configmap, make_node, make_pod


def watch_lines(url: str, params: dict[str, str]) -> list[dict]:
    out = []
    with httpx.stream("GET", url, params=params, timeout=10) as r:
        assert r.status_code == 200
        assert r.headers["transfer-encoding"] == "chunked"
        for line in r.iter_lines():
            if line:
                out.append(json.loads(line))
    return out


def test_list_get_and_watch_from_a_resource_version() -> None:
    with FakeKubeApi() as api:
        api.put(make_node("a"))
        listing = httpx.get(api.url + "/api/v1/nodes").json()
        assert listing["kind"] == "NodeList" and listing["apiVersion"] == "v1"
        rv = listing["metadata"]["resourceVersion"]
        assert [n["metadata"]["name"] for n in listing["items"]] == ["a"]

        def later() -> None:
            time.sleep(0.2)
            api.put(make_node("b"))
            api.delete("Node", "a")

        threading.Thread(target=later).start()
        events = watch_lines(
            api.url + "/api/v1/nodes", {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "1"}
        )
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("ADDED", "b"),
            ("DELETED", "a"),
        ]
        assert int(events[1]["object"]["metadata"]["resourceVersion"]) > int(rv)
        assert httpx.get(api.url + "/api/v1/nodes/b").json()["metadata"]["name"] == "b"
        r = httpx.get(api.url + "/api/v1/nodes/a")
        assert r.status_code == 404 and r.json()["reason"] == "NotFound"


def test_watch_from_a_compacted_version_gets_an_error_event_410() -> None:
    with FakeKubeApi() as api:
        api.put(make_node("a"))
        old = str(api.resource_version)
        api.put(make_node("b"))
        api.compact()
        events = watch_lines(api.url + "/api/v1/nodes", {"watch": "true", "resourceVersion": old})
        assert events == [
            {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": f"too old resource version: {old} ({api.resource_version})",
                    "reason": "Expired",
                    "code": 410,
                },
            }
        ]


def test_selectors_patch_configmap_and_injected_failures() -> None:
    with FakeKubeApi() as api:
        api.put(make_pod("p1", "ns", node_name="n1", labels={"app": "x"}))
        api.put(make_pod("p2", "ns", labels={"app": "y"}))
        api.put(make_node("n1"))
        api.put(make_configmap("cfg", "kvspread", {"config.yaml": "a: 1"}))
        pods = httpx.get(
            api.url + "/api/v1/pods", params={"fieldSelector": "spec.nodeName!="}
        ).json()
        assert [p["metadata"]["name"] for p in pods["items"]] == ["p1"]
        pods = httpx.get(
            api.url + "/api/v1/namespaces/ns/pods", params={"labelSelector": "app=y"}
        ).json()
        assert [p["metadata"]["name"] for p in pods["items"]] == ["p2"]
        for ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            r = httpx.patch(
                api.url + "/api/v1/nodes/n1",
                content=json.dumps({"metadata": {"annotations": {"kvspread.io/signals": ctype}}}),
                headers={"Content-Type": ctype},
            )
            assert r.status_code == 200
            assert r.json()["metadata"]["annotations"]["kvspread.io/signals"] == ctype
        r = httpx.patch(
            api.url + "/api/v1/nodes/n1",
            content="[]",
            headers={"Content-Type": "application/json-patch+json"},
        )
        assert r.status_code == 415
        cm = httpx.get(api.url + "/api/v1/namespaces/kvspread/configmaps/cfg").json()
        assert cm["data"] == {"config.yaml": "a: 1"}
        api.fail_next(410, path_prefix="/api/v1/nodes")
        r = httpx.get(api.url + "/api/v1/nodes")
        assert r.status_code == 410 and r.json()["code"] == 410
        assert httpx.get(api.url + "/api/v1/nodes").status_code == 200


def test_subject_access_review_uses_the_decider() -> None:
    with FakeKubeApi() as api:
        api.sar_decider = lambda spec: (spec.get("user") == "alice", "decided by test")
        for user, allowed in (("alice", True), ("bob", False)):
            r = httpx.post(
                api.url + "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                json={
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {"user": user, "resourceAttributes": {"verb": "get"}},
                },
            )
            assert r.status_code == 201
            assert r.json()["status"]["allowed"] is allowed
            assert r.json()["status"]["reason"] == "decided by test"
        assert [b["spec"]["user"] for b in api.sar_requests] == ["alice", "bob"]


NS_URL = "/apis/kvspread.io/v1alpha1/nodesignals"


def _node_signals(name: str, document: str, **meta: str) -> dict:
    return {
        "apiVersion": "kvspread.io/v1alpha1",
        "kind": "NodeSignals",
        "metadata": {"name": name, **meta},
        "spec": {"document": document},
    }


def test_serves_the_nodesignals_custom_resource_like_the_api_server() -> None:
    with FakeKubeApi() as api:
        created = httpx.post(api.url + NS_URL, json=_node_signals("a", '{"v":1,"ts":1}'))
        assert created.status_code == 201
        obj = created.json()
        assert (obj["apiVersion"], obj["kind"]) == ("kvspread.io/v1alpha1", "NodeSignals")
        assert obj["metadata"]["resourceVersion"] and "namespace" not in obj["metadata"]
        again = httpx.post(api.url + NS_URL, json=_node_signals("a", '{"v":1,"ts":1}'))
        assert again.status_code == 409 and again.json()["reason"] == "AlreadyExists"
        listing = httpx.get(api.url + NS_URL).json()
        assert (listing["kind"], listing["apiVersion"]) == (
            "NodeSignalsList",
            "kvspread.io/v1alpha1",
        )
        assert [i["metadata"]["name"] for i in listing["items"]] == ["a"]
        rv = listing["metadata"]["resourceVersion"]
        # cluster-scoped: no namespaced path
        assert (
            httpx.get(api.url + "/apis/kvspread.io/v1alpha1/namespaces/x/nodesignals").status_code
            == 404
        )

        def later() -> None:
            time.sleep(0.2)
            httpx.patch(
                api.url + NS_URL + "/a",
                json={"spec": {"document": '{"v":1,"ts":2}'}},
                headers={"Content-Type": "application/merge-patch+json"},
            )
            api.delete("NodeSignals", "a", api_version="kvspread.io/v1alpha1")

        threading.Thread(target=later).start()
        events = watch_lines(
            api.url + NS_URL, {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "1"}
        )
        assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]
        assert events[0]["object"]["spec"]["document"] == '{"v":1,"ts":2}'
        assert events[0]["object"]["kind"] == "NodeSignals"
        assert int(events[1]["object"]["metadata"]["resourceVersion"]) > int(
            events[0]["object"]["metadata"]["resourceVersion"]
        )


def test_resource_version_preconditions_on_update_and_patch() -> None:
    with FakeKubeApi() as api:
        stored = api.put(_node_signals("a", "{}"))
        rv = stored["metadata"]["resourceVersion"]
        url = api.url + NS_URL + "/a"
        merge = {"Content-Type": "application/merge-patch+json"}
        stale = {"metadata": {"resourceVersion": str(int(rv) - 1)}, "spec": {"document": "[]"}}
        r = httpx.patch(url, json=stale, headers=merge)
        assert r.status_code == 409 and r.json()["reason"] == "Conflict"
        assert "the object has been modified" in r.json()["message"]
        r = httpx.put(url, json=_node_signals("a", "[]", resourceVersion=str(int(rv) - 1)))
        assert r.status_code == 409
        r = httpx.put(url, json=_node_signals("a", "[1]", resourceVersion=rv))
        assert r.status_code == 200 and int(r.json()["metadata"]["resourceVersion"]) > int(rv)
        fresh = {"metadata": {"resourceVersion": r.json()["metadata"]["resourceVersion"]}}
        r = httpx.patch(url, json=fresh | {"spec": {"document": "[2]"}}, headers=merge)
        assert r.status_code == 200 and r.json()["spec"]["document"] == "[2]"
        # no resourceVersion: unconditional, as for the collector's merge patches
        r = httpx.patch(url, json={"spec": {"document": "[3]"}}, headers=merge)
        assert r.status_code == 200
        assert httpx.patch(api.url + NS_URL + "/b", json={}, headers=merge).status_code == 404
