"""Request-header authentication and authorisation over real TLS with a test CA."""

from __future__ import annotations

import json
import ssl

import httpx
import pytest

from kvspread.kube import api_client as kube_client
from metrics_adapter.server import AdapterThread
from tests.fake_kube import FakeKubeApi, make_configmap
from tests.metrics_adapter.adapter_testing import (
    FRONT_PROXY_CN,
    Pki,
    api_client,
    base_config,
    hpa_headers,
)

DISCOVERY = "/apis/external.metrics.k8s.io/v1beta1"
READ = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/kvspread_queue_depth"


def test_valid_front_proxy_certificate_gets_200(pki: Pki, adapter: AdapterThread) -> None:
    with api_client(pki, adapter) as c:
        r = c.get(DISCOVERY, headers=hpa_headers())
        assert r.status_code == 200
        assert r.json()["kind"] == "APIResourceList"
        r = c.get(READ, headers=hpa_headers())
        assert r.status_code == 200 and r.json()["items"] == []


@pytest.mark.parametrize(
    "case",
    ["no client certificate", "certificate CN not allowed", "valid certificate but no user header"],
)
def test_unauthenticated_requests_get_401(pki: Pki, adapter: AdapterThread, case: str) -> None:
    pem = {"no client certificate": "", "certificate CN not allowed": pki.wrong_cn_client_pem}.get(
        case, pki.client_pem
    )
    headers = (
        hpa_headers() if case != "valid certificate but no user header" else [("Accept", "*/*")]
    )
    with api_client(pki, adapter, client_pem=pem) as c:
        for path in (DISCOVERY, READ, "/openapi/v2", "/apis"):
            r = c.get(path, headers=headers)
            assert r.status_code == 401, (case, path, r.text)
            doc = r.json()
            assert (
                doc["kind"] == "Status" and doc["reason"] == "Unauthorized" and doc["code"] == 401
            )


def test_spoofed_remote_user_without_certificate_gets_401(pki: Pki, adapter: AdapterThread) -> None:
    spoof = [
        ("X-Remote-User", "system:admin"),
        ("X-Remote-Group", "system:masters"),
        ("X-Remote-Group", "system:authenticated"),
    ]
    with api_client(pki, adapter, client_pem="") as c:
        r = c.get(READ, headers=spoof)
    assert r.status_code == 401
    assert "no client certificate" in r.json()["message"]


def test_certificate_from_another_ca_is_refused(pki: Pki, adapter: AdapterThread) -> None:
    """A client certificate the request-header CA did not sign never reaches HTTP: the TLS
    handshake fails (alert unknown CA), which is stricter than a 401."""
    with api_client(pki, adapter, client_pem=pki.wrong_ca_client_pem) as c:
        with pytest.raises(
            (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, ssl.SSLError)
        ):
            c.get(READ, headers=hpa_headers())


def test_health_needs_no_certificate(pki: Pki, adapter: AdapterThread) -> None:
    with api_client(pki, adapter, client_pem="") as c:
        for p in ("/healthz", "/livez", "/readyz", "/healthz/ping"):
            assert c.get(p).status_code == 200


def test_allow_list_denies_other_users_with_403(pki: Pki) -> None:
    cfg = base_config(pki, authorization_allow_groups=[], authorization_allow_users=["hpa"])
    with AdapterThread(cfg) as a, api_client(pki, a) as c:
        assert c.get(READ, headers={"X-Remote-User": "hpa"}).status_code == 200
        r = c.get(
            READ, headers={"X-Remote-User": "mallory", "X-Remote-Group": "system:authenticated"}
        )
        assert r.status_code == 403
        doc = r.json()
        assert doc["reason"] == "Forbidden" and "mallory" in doc["message"]


def test_custom_header_names(pki: Pki) -> None:
    cfg = base_config(
        pki,
        requestheader_username_headers=["X-Proxy-User"],
        requestheader_group_headers=["X-Proxy-Group"],
        authorization_allow_groups=["ops"],
    )
    with AdapterThread(cfg) as a, api_client(pki, a) as c:
        assert (
            c.get(READ, headers=[("X-Proxy-User", "u"), ("X-Proxy-Group", "ops")]).status_code
            == 200
        )
        # the default names are not honoured once others are configured
        assert (
            c.get(READ, headers=[("X-Remote-User", "u"), ("X-Remote-Group", "ops")]).status_code
            == 401
        )


def test_subject_access_review_and_configmap_ca(pki: Pki) -> None:
    """CA, allowed names and header names from kube-system/extension-apiserver-authentication;
    authorisation by SubjectAccessReview through the (fake) Kubernetes API, cached."""
    with FakeKubeApi() as kube:
        kube.put(
            make_configmap(
                "extension-apiserver-authentication",
                "kube-system",
                {
                    "requestheader-client-ca-file": open(pki.front_proxy_ca_file).read(),
                    "requestheader-allowed-names": json.dumps([FRONT_PROXY_CN]),
                    "requestheader-username-headers": json.dumps(["X-Remote-User"]),
                    "requestheader-group-headers": json.dumps(["X-Remote-Group"]),
                    "requestheader-extra-headers-prefix": json.dumps(["X-Remote-Extra-"]),
                },
            )
        )
        kube.sar_decider = lambda spec: (
            spec.get("user") == "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
            "RBAC: allowed by ClusterRoleBinding"
            if spec.get("user", "").endswith("autoscaler")
            else "no RBAC rule",
        )
        cfg = base_config(
            pki,
            requestheader_client_ca_file=None,
            requestheader_allowed_names=None,
            authorization_mode="SubjectAccessReview",
            authorization_allow_groups=None,
            kube_server=kube.url,
        )
        with (
            AdapterThread(cfg, api_client=kube_client(server=kube.url)) as a,
            api_client(pki, a) as c,
        ):
            for _ in range(3):
                assert c.get(READ, headers=hpa_headers()).status_code == 200
            r = c.get(
                READ, headers={"X-Remote-User": "eve", "X-Remote-Group": "system:authenticated"}
            )
            assert r.status_code == 403 and "no RBAC rule" in r.json()["message"]
            with api_client(pki, a, client_pem=pki.wrong_cn_client_pem) as c2:
                assert c2.get(READ, headers=hpa_headers()).status_code == 401
        specs = kube.sar_requests
        hpa = [s for s in specs if s.get("spec", s).get("user", "").endswith("autoscaler")]
        assert len(hpa) == 1, "the allowed answer is cached"
        ra = hpa[0].get("spec", hpa[0])["resourceAttributes"]
        assert ra == {
            "namespace": "default",
            "verb": "list",
            "group": "external.metrics.k8s.io",
            "version": "v1beta1",
            "resource": "kvspread_queue_depth",
        }


def test_rotated_client_ca_file_is_picked_up(pki: Pki, tmp_path) -> None:  # noqa: ANN001
    """A new request-header CA in the file applies to new connections, without a restart."""
    import time

    import trustme

    ca_file = tmp_path / "front-proxy-ca.crt"
    ca_file.write_text(open(pki.front_proxy_ca_file).read())
    new_ca = trustme.CA(organization_name="rotated-front-proxy-ca")
    new_client = tmp_path / "new-client.pem"
    new_ca.issue_cert(
        FRONT_PROXY_CN, common_name=FRONT_PROXY_CN
    ).private_key_and_cert_chain_pem.write_to_path(str(new_client))
    cfg = base_config(pki, requestheader_client_ca_file=str(ca_file), ca_refresh_interval="1s")
    with AdapterThread(cfg) as a:
        with api_client(pki, a) as c:
            assert c.get(READ, headers=hpa_headers()).status_code == 200
        time.sleep(0.05)
        new_ca.cert_pem.write_to_path(str(ca_file))
        deadline = time.monotonic() + 15
        while True:
            try:
                with api_client(pki, a, client_pem=str(new_client)) as c:
                    if c.get(READ, headers=hpa_headers()).status_code == 200:
                        break
            except (httpx.HTTPError, ssl.SSLError):
                pass
            assert time.monotonic() < deadline, "the rotated CA was not picked up"
            time.sleep(0.3)
        with api_client(pki, a) as c:  # the old CA no longer signs valid front-proxy certs
            with pytest.raises((httpx.HTTPError, ssl.SSLError)):
                c.get(READ, headers=hpa_headers())


def test_head_requests_get_an_answer_without_a_body(pki: Pki, adapter: AdapterThread) -> None:
    """HEAD (curl -I, some probes) gets the answer's status and headers and no body (405 on
    the API's GET-only resources); h11 refuses a body on a HEAD answer, and the server used
    to drop the connection without a word."""
    with api_client(pki, adapter) as c:
        for path, status in ((DISCOVERY, 405), (READ, 405), ("/healthz", 200)):
            r = c.head(path, headers=hpa_headers())
            assert (r.status_code, r.content) == (status, b""), path
            assert int(r.headers["content-length"]) > 0, path
    otlp = f"http://127.0.0.1:{adapter.adapter.otlp_port}"
    r = httpx.head(otlp + "/healthz", timeout=10)
    assert (r.status_code, r.content) == (200, b"")
