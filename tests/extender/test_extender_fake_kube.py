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
