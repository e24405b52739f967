"""Test helpers for the adapter tests: a test PKI (trustme), configs, TLS clients."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from metrics_adapter.config import AdapterConfig
from metrics_adapter.server import AdapterThread

FRONT_PROXY_CN = "front-proxy-client"


@dataclass
class Pki:
    serving_ca: trustme.CA
    front_proxy_ca: trustme.CA
    other_ca: trustme.CA
    dir: Path
    serving_cert: str
    serving_key: str
    front_proxy_ca_file: str
    client_pem: str  # front-proxy-client, signed by the front-proxy CA
    wrong_ca_client_pem: str  # CN front-proxy-client, signed by another CA
    wrong_cn_client_pem: str  # CN not allowed, signed by the front-proxy CA


def make_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    serving_ca = trustme.CA()
    fp_ca = trustme.CA(organization_name="front-proxy-ca")
    other = trustme.CA(organization_name="other-ca")
    serving = serving_ca.issue_cert("localhost", "127.0.0.1")
    serving.cert_chain_pems[0].write_to_path(str(d / "serving.crt"))
    for pem in serving.cert_chain_pems[1:]:
        pem.write_to_path(str(d / "serving.crt"), append=True)
    serving.private_key_pem.write_to_path(str(d / "serving.key"))
    fp_ca.cert_pem.write_to_path(str(d / "front-proxy-ca.crt"))

    def client(ca: trustme.CA, cn: str, name: str) -> str:
        leaf = ca.issue_cert(cn, common_name=cn)
        path = d / f"{name}.pem"
        leaf.private_key_and_cert_chain_pem.write_to_path(str(path))
        return str(path)

    return Pki(
        serving_ca=serving_ca,
        front_proxy_ca=fp_ca,
        other_ca=other,
        dir=d,
        serving_cert=str(d / "serving.crt"),
        serving_key=str(d / "serving.key"),
        front_proxy_ca_file=str(d / "front-proxy-ca.crt"),
        client_pem=client(fp_ca, FRONT_PROXY_CN, "client"),
        wrong_ca_client_pem=client(other, FRONT_PROXY_CN, "wrong-ca"),
        wrong_cn_client_pem=client(fp_ca, "intruder", "wrong-cn"),
    )


def client_context(pki: Pki, client_pem: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    pki.serving_ca.configure_trust(ctx)
    if client_pem:
        ctx.load_cert_chain(client_pem)
    return ctx


def base_config(pki: Pki, **over: Any) -> AdapterConfig:
    doc: dict[str, Any] = {
        "secure_port": 0,
        "bind_address": "127.0.0.1",
        "otlp_port": 0,
        "otlp_bind_address": "127.0.0.1",
        "tls_cert_file": pki.serving_cert,
        "tls_private_key_file": pki.serving_key,
        "requestheader_client_ca_file": pki.front_proxy_ca_file,
        "requestheader_allowed_names": [FRONT_PROXY_CN],
        "authorization_mode": "AllowList",
        "authorization_allow_groups": ["system:authenticated"],
    }
    doc.update(over)
    return AdapterConfig.from_mapping(doc)


def api_client(
    pki: Pki, a: AdapterThread, client_pem: str | None = None, **kw: Any
) -> httpx.Client:
    pem = pki.client_pem if client_pem is None else client_pem
    return httpx.Client(
        base_url=f"https://127.0.0.1:{a.adapter.api_port}",
        verify=client_context(pki, pem or None),
        timeout=10,
        **kw,
    )


HPA_HEADERS = {
    "X-Remote-User": "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
    "Accept": "application/vnd.kubernetes.protobuf, */*",
}
HPA_GROUPS = [
    ("X-Remote-Group", "system:serviceaccounts"),
    ("X-Remote-Group", "system:authenticated"),
]


def hpa_headers() -> list[tuple[str, str]]:
    return list(HPA_HEADERS.items()) + HPA_GROUPS


def two_pods_and_pressure(
    pki: Pki, a: AdapterThread, waiting: list[Any], histogram: Any, metric: str
) -> httpx.Response:
    """Post OTLP for two engine pods of service chat in namespace llm (each with the
    `waiting` gauge metrics, chat-0 also with `histogram`) to the running adapter, then read
    `metric` for service=chat through the external metrics REST API as the HPA does."""
    from kvspread import names
    from tests.metrics_adapter.adapter_otlp_payloads import post, request

    res = {names.ATTR_K8S_NAMESPACE: "llm", names.ATTR_SERVICE_NAME: "chat"}
    for pod in ("chat-0", "chat-1"):
        post(a.adapter.otlp_port, request(
            {**res, names.ATTR_K8S_POD: pod}, waiting + ([histogram] if pod == "chat-0" else [])
        ))  # fmt: skip
    with api_client(pki, a) as c:
        return c.get(f"/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/{metric}",
                     params={"labelSelector": "service=chat"}, headers=hpa_headers())  # fmt: skip
