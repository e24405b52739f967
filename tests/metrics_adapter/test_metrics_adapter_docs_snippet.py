"""The OTel SDK snippet of docs/adapter.md ("Pushing from your own service") works as
printed: it runs against a real adapter and its values are served."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kvspread import names
from kvspread.quantity import parse_quantity
from metrics_adapter.server import AdapterThread
from tests.metrics_adapter.adapter_testing import Pki, api_client, hpa_headers

DOC = Path(__file__).parents[2] / "docs" / "adapter.md"
ENDPOINT = "http://kvspread-adapter-otlp.kvspread.svc:4318/v1/metrics"


def snippet() -> str:
    text = DOC.read_text()
    section = text[text.index("### Pushing from your own service") :]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m, "the section has a python block"
    return m.group(1)


def test_snippet_pushes_what_the_default_rules_serve(pki: Pki, adapter: AdapterThread) -> None:
    code = snippet()
    assert ENDPOINT in code
    code = code.replace(ENDPOINT, f"http://127.0.0.1:{adapter.adapter.otlp_port}/v1/metrics")
    env: dict[str, Any] = {}
    exec(compile(code, str(DOC), "exec"), env)  # noqa: S102 - the documented code itself
    for v in (0.12, 0.18, 0.31, 0.4):
        env["duration"].record(v, {"http.response.status_code": 200, "llm.modality": "text"})
    env["provider"].force_flush()
    env["provider"].shutdown()
    base = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default"
    with api_client(pki, adapter) as c:
        for metric in (names.SLI_LATENCY_P95, names.SLI_QUEUE_DEPTH, names.SLI_REQUESTS_PER_SECOND):
            r = c.get(f"{base}/{metric}", params={"labelSelector": "service=chat"},
                      headers=hpa_headers())  # fmt: skip
            assert r.status_code == 200, r.text
            items = r.json()["items"]
            assert len(items) == 1, metric
            if metric == names.SLI_QUEUE_DEPTH:
                assert items[0]["value"] == "4"
            if metric == names.SLI_LATENCY_P95:
                assert 0.25 < float(parse_quantity(items[0]["value"])) <= 0.5
