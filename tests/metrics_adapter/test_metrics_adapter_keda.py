"""KEDA external scaler: a real grpcio client against the running adapter, in both TLS
modes, giving exactly the REST API's values and messages."""

from __future__ import annotations

import math
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from kvspread import names
from kvspread.clock import FakeClock
from kvspread.quantity import format_quantity
from metrics_adapter.errors import ValueOutOfRange
from metrics_adapter.keda import externalscaler_pb2 as pb
from metrics_adapter.keda.scaler import SERVICE, _int64, status_code
from metrics_adapter.server import AdapterThread
from tests.metrics_adapter.adapter_otlp_payloads import counter, gauge, histogram, post, request
from tests.metrics_adapter.adapter_testing import Pki, api_client, base_config, hpa_headers
from tests.ports import free_port

T0 = 1_800_000_000.0
NS = "llm"
BOUNDS = (0.1, 0.2, 0.5, 1.0)
RES = {names.ATTR_K8S_NAMESPACE: NS, names.ATTR_SERVICE_NAME: "vision"}
KEDA = Path(__file__).parents[2] / "metrics_adapter" / "keda"


def _push(a: AdapterThread, t: float, queue: float) -> None:
    body = request(
        RES,
        [
            histogram(names.HTTP_SERVER_REQUEST_DURATION.name,
                      [(T0, t, [10, 20, 30, 30, 0], {names.ATTR_HTTP_STATUS: 200}),
                       (T0, t, [0, 0, 0, 5, 0], {names.ATTR_HTTP_STATUS: 503})], BOUNDS),
            gauge(names.ENGINE_REQUESTS_WAITING.name, [(t, queue, {})]),
            counter("tokens", [(T0, t, 100.0, {})]),
        ],
    )  # fmt: skip
    post(a.adapter.otlp_port, body)


@pytest.fixture(scope="module")
def client_cert(pki: Pki) -> tuple[bytes, bytes]:
    leaf = pki.front_proxy_ca.issue_cert("keda-operator", common_name="keda-operator")
    return leaf.private_key_pem.bytes(), leaf.cert_chain_pems[0].bytes()


@pytest.fixture(params=["tls", "mtls"])
def keda(
    request: pytest.FixtureRequest, pki: Pki
) -> Iterator[tuple[AdapterThread, FakeClock, str]]:
    mode = str(request.param)
    clock = FakeClock(t=T0 + 45)
    cfg = base_config(
        pki,
        keda_port=free_port(),
        keda_bind_address="127.0.0.1",
        keda_tls_cert_file=pki.serving_cert,
        keda_tls_private_key_file=pki.serving_key,
        keda_client_ca_file=pki.front_proxy_ca_file if mode == "mtls" else None,
    )
    with AdapterThread(cfg, clock=clock) as a:
        assert a.adapter.keda is not None
        a.adapter.keda.scaler.stream_interval = 0.05
        yield a, clock, mode


@contextmanager
def _stub(
    pki: Pki, a: AdapterThread, cert: tuple[bytes, bytes] | None, queue: float
) -> Iterator[Any]:
    """Push one batch with `queue` waiting requests, then a scaler stub over (m)TLS."""
    assert a.adapter.keda is not None
    _push(a, T0 + 30, queue)
    creds = grpc.ssl_channel_credentials(
        root_certificates=pki.serving_ca.cert_pem.bytes(),
        private_key=cert[0] if cert else None,
        certificate_chain=cert[1] if cert else None,
    )
    with grpc.secure_channel(
        f"127.0.0.1:{a.adapter.keda.port}",
        creds,
        options=[("grpc.ssl_target_name_override", "localhost")],
    ) as ch:
        yield SERVICE.stub(ch)


def _ref(metric: str, selector: str = "service=vision", **extra: str) -> pb.ScaledObjectRef:
    meta = {"metricName": metric, "labelSelector": selector, "targetValue": "2", **extra}
    return pb.ScaledObjectRef(name="vision", namespace=NS, scalerMetadata=meta)


def _rest(pki: Pki, a: AdapterThread, metric: str, selector: str) -> httpx.Response:
    with api_client(pki, a) as c:
        return c.get(f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NS}/{metric}",
                     params={"labelSelector": selector}, headers=hpa_headers())  # fmt: skip


def test_keda_and_rest_give_identical_values(
    pki: Pki, keda: tuple[AdapterThread, FakeClock, str], client_cert: tuple[bytes, bytes]
) -> None:
    a, _, mode = keda
    with _stub(pki, a, client_cert, 3) as stub:
        for metric in (names.SLI_LATENCY_P95, names.SLI_GOOD_REQUESTS_PER_SECOND,
                       names.SLI_ERROR_RATIO, names.SLI_QUEUE_DEPTH):  # fmt: skip
            got = stub.GetMetrics(
                pb.GetMetricsRequest(scaledObjectRef=_ref(metric), metricName=metric)
            )
            items = _rest(pki, a, metric, "service=vision").json()["items"]
            assert len(got.metricValues) == len(items) == 1, metric
            mv = got.metricValues[0]
            assert mv.metricName == metric
            assert format_quantity(mv.metricValueFloat) == items[0]["value"], metric
            assert mv.metricValue == round(mv.metricValueFloat)
        spec = stub.GetMetricSpec(_ref(names.SLI_QUEUE_DEPTH, targetValue="2.5")).metricSpecs
        assert [(s.metricName, s.targetSizeFloat, s.targetSize) for s in spec] == [
            (names.SLI_QUEUE_DEPTH, 2.5, 2)
        ]
        assert stub.IsActive(_ref(names.SLI_QUEUE_DEPTH, activationThreshold="2.9")).result
        assert not stub.IsActive(_ref(names.SLI_QUEUE_DEPTH, activationThreshold="3")).result
        assert stub.IsActive(_ref(names.SLI_QUEUE_DEPTH)).result is not False  # default 0: active
    assert a.adapter.keda is not None
    assert a.adapter.keda.scaler.calls[("GetMetrics", "OK")] == 4


def test_slo_pressure_through_keda_is_the_rest_value(
    pki: Pki, keda: tuple[AdapterThread, FakeClock, str], client_cert: tuple[bytes, bytes]
) -> None:
    """A ScaledObject trigger on kvspread_slo_pressure (targetValue 1): the queue term alone
    (no TTFT/TPOT pushed), 3 waiting on one series over the default 4 per replica."""
    a, _, _ = keda
    metric = names.SLI_SLO_PRESSURE
    with _stub(pki, a, client_cert, 3) as stub:
        got = stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=_ref(metric, targetValue="1"), metricName=metric)
        )
        (item,) = _rest(pki, a, metric, "service=vision").json()["items"]
        (mv,) = got.metricValues
        assert mv.metricValueFloat == pytest.approx(0.75)
        assert format_quantity(mv.metricValueFloat) == item["value"]
        assert item["metricLabels"]["term"] == names.SLI_QUEUE_DEPTH_PER_REPLICA


def test_errors_have_the_rest_messages_and_grpc_codes(
    pki: Pki, keda: tuple[AdapterThread, FakeClock, str], client_cert: tuple[bytes, bytes]
) -> None:
    a, clock, _ = keda
    with _stub(pki, a, client_cert, 3) as stub:

        def fail(ref: pb.ScaledObjectRef) -> grpc.RpcError:
            with pytest.raises(grpc.RpcError) as info:
                stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref))
            return info.value

        for metric, selector, code in (
            ("no_such_metric", "service=vision", grpc.StatusCode.NOT_FOUND),
            (names.SLI_QUEUE_DEPTH, "service in (vision", grpc.StatusCode.INVALID_ARGUMENT),
        ):
            err = fail(_ref(metric, selector))
            rest = _rest(pki, a, metric, selector)
            assert err.code() == code
            assert err.details() == rest.json()["message"], (err.details(), rest.text)
        err = fail(pb.ScaledObjectRef(namespace=NS, scalerMetadata={"metricName": "x"}))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "targetValue is required" in (err.details() or "")
        err = fail(_ref(names.SLI_QUEUE_DEPTH, targetValue="fast"))
        assert "targetValue: 'fast' is not a number" in (err.details() or "")
        clock.advance(95)  # outside the window, inside the staleness: no fresh data for a rate
        err = fail(_ref(names.SLI_REQUESTS_PER_SECOND))
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        assert "too few points inside the 60 s window" in (err.details() or "")
        rest = _rest(pki, a, names.SLI_REQUESTS_PER_SECOND, "service=vision")
        assert rest.status_code == 200 and rest.json()["items"] == []
        assert a.adapter.provider.stale_reads[names.SLI_REQUESTS_PER_SECOND] == 2


def test_stream_is_active_pushes_changes(
    pki: Pki, keda: tuple[AdapterThread, FakeClock, str], client_cert: tuple[bytes, bytes]
) -> None:
    a, clock, _ = keda
    with _stub(pki, a, client_cert, 0) as stub:
        stream = stub.StreamIsActive(_ref(names.SLI_QUEUE_DEPTH, activationThreshold="1"))
        assert next(stream).result is False
        clock.advance(10)
        _push(a, T0 + 50, 5)
        assert next(stream).result is True  # pushed on the change, not polled by KEDA
        stream.cancel()


def test_mutual_tls_refuses_a_client_without_certificate(
    pki: Pki, keda: tuple[AdapterThread, FakeClock, str]
) -> None:
    a, _, mode = keda
    with _stub(pki, a, None, 3) as stub:
        if mode == "tls":  # server TLS only: KEDA's caCert alone is enough
            assert stub.IsActive(_ref(names.SLI_QUEUE_DEPTH), timeout=10).result
        else:  # tlsClientCert/tlsClientKey required
            with pytest.raises(grpc.RpcError) as info:
                stub.IsActive(_ref(names.SLI_QUEUE_DEPTH), timeout=10)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_keda_port_zero_disables_and_a_taken_port_fails(pki: Pki) -> None:
    with AdapterThread(base_config(pki)) as a:
        assert a.adapter.keda is None
    from kvspread.settings import ConfigError

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ConfigError, match=r"--keda-port .*already in use.*--keda-port"):
            AdapterThread(base_config(pki, keda_port=port, keda_bind_address="127.0.0.1")).start()


def test_plaintext_when_no_certificate(pki: Pki) -> None:
    """Without --keda-tls-cert-file the scaler is plaintext (a trigger without caCert)."""
    with AdapterThread(base_config(pki, keda_port=free_port(), keda_bind_address="127.0.0.1")) as a:
        assert a.adapter.keda is not None
        with grpc.insecure_channel(f"127.0.0.1:{a.adapter.keda.port}") as ch:
            stub = SERVICE.stub(ch)
            spec = stub.GetMetricSpec(_ref(names.SLI_QUEUE_DEPTH), timeout=10).metricSpecs
            assert [s.targetSizeFloat for s in spec] == [2.0]
            with pytest.raises(grpc.RpcError) as info:
                stub.IsActive(_ref("unknown"), timeout=10)
            assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_unreadable_request_bytes_are_invalid_argument(pki: Pki) -> None:
    """Bytes that are no message get INVALID_ARGUMENT naming the message (grpcio alone
    answers UNKNOWN and logs a traceback), and the scaler keeps serving."""
    with AdapterThread(base_config(pki, keda_port=free_port(), keda_bind_address="127.0.0.1")) as a:
        assert a.adapter.keda is not None
        with grpc.insecure_channel(f"127.0.0.1:{a.adapter.keda.port}") as ch:
            for method, call in (
                ("GetMetrics", ch.unary_unary),
                ("StreamIsActive", ch.unary_stream),
            ):
                raw = call(f"/externalscaler.ExternalScaler/{method}")
                with pytest.raises(grpc.RpcError) as info:
                    got = raw(b"\xff\xff\xff garbage", timeout=10)
                    list(got) if method == "StreamIsActive" else got
                assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
                assert (info.value.details() or "").startswith("unreadable "), method
            spec = SERVICE.stub(ch).GetMetricSpec(_ref(names.SLI_QUEUE_DEPTH), timeout=10)
            assert [s.targetSizeFloat for s in spec.metricSpecs] == [2.0]


def test_an_ipv6_bind_address(pki: Pki) -> None:
    """`--keda-bind-address ::1`: grpcio needs the host in brackets, else it failed with
    'address lookup failed' reported as a port in use."""
    import socket

    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("this machine has no IPv6 loopback")
    with AdapterThread(base_config(pki, keda_port=free_port(), keda_bind_address="::1")) as a:
        assert a.adapter.keda is not None
        with grpc.insecure_channel(f"[::1]:{a.adapter.keda.port}") as ch:
            spec = SERVICE.stub(ch).GetMetricSpec(_ref(names.SLI_QUEUE_DEPTH), timeout=10)
            assert [s.targetSizeFloat for s in spec.metricSpecs] == [2.0]


def test_committed_stubs_match_the_proto(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    out = tmp_path / "gen"
    (out / "metrics_adapter" / "keda").mkdir(parents=True)
    root = KEDA.parents[1]
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{root}", f"--python_out={out}",
         f"--pyi_out={out}", "metrics_adapter/keda/externalscaler.proto"],
        check=True, cwd=root,
    )  # fmt: skip
    for name in ("externalscaler_pb2.py", "externalscaler_pb2.pyi"):
        assert (out / "metrics_adapter" / "keda" / name).read_text() == (KEDA / name).read_text(), (
            name
        )


def test_service_name_is_kedas() -> None:
    svc = pb.DESCRIPTOR.services_by_name["ExternalScaler"]
    assert svc.full_name == "externalscaler.ExternalScaler"
    assert [m.name for m in svc.methods] == [
        "IsActive",
        "StreamIsActive",
        "GetMetricSpec",
        "GetMetrics",
    ]
    assert {f.name: f.number for f in pb.MetricValue.DESCRIPTOR.fields} == {
        "metricName": 1, "metricValue": 2, "metricValueFloat": 3}  # fmt: skip
    assert {f.name: f.number for f in pb.MetricSpec.DESCRIPTOR.fields} == {
        "metricName": 1, "targetSize": 2, "targetSizeFloat": 3}  # fmt: skip


def test_a_stepped_pressure_through_keda_is_the_rest_value(
    pki: Pki, client_cert: tuple[bytes, bytes]
) -> None:
    """A pressure whose queue term steps (metrics_adapter.step): 3 waiting on one engine
    against a target of 1 is ratio 3, served as 2 (one replica more), by KEDA as by REST."""
    waiting = names.ENGINE_REQUESTS_WAITING.name
    rules = [
        {"name": names.SLI_QUEUE_DEPTH_PER_REPLICA, "metric": waiting, "aggregation": "last",
         "combine": "mean"},
        {"name": names.SLI_ENGINE_REPLICAS, "metric": waiting, "aggregation": "last",
         "combine": "count"},
        {"name": names.SLI_SLO_PRESSURE, "aggregation": "slo-pressure",
         "terms": {names.SLI_QUEUE_DEPTH_PER_REPLICA: 1},
         "step": {"terms": [names.SLI_QUEUE_DEPTH_PER_REPLICA],
                  "replicas": names.SLI_ENGINE_REPLICAS}},
    ]  # fmt: skip
    cfg = base_config(
        pki,
        rules=rules,
        keda_port=free_port(),
        keda_bind_address="127.0.0.1",
        keda_tls_cert_file=pki.serving_cert,
        keda_tls_private_key_file=pki.serving_key,
    )
    metric = names.SLI_SLO_PRESSURE
    with AdapterThread(cfg, clock=FakeClock(t=T0 + 45)) as a, _stub(pki, a, None, 3) as stub:
        got = stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=_ref(metric, targetValue="1"), metricName=metric)
        )
        (item,) = _rest(pki, a, metric, "service=vision").json()["items"]
    (mv,) = got.metricValues
    assert mv.metricValueFloat == pytest.approx(2.0)
    assert format_quantity(mv.metricValueFloat) == item["value"] == "2"


def test_numbers_past_the_int64_and_float_ranges_and_an_unknown_metrics_spec(
    pki: Pki, keda: tuple[AdapterThread, FakeClock, str], client_cert: tuple[bytes, bytes]
) -> None:
    """A targetValue past 2**53 is INVALID_ARGUMENT (it was a ValueError, UNKNOWN, from
    the int64 targetSize); metricValue is clamped to int64 (`_int64`); GetMetricSpec of a
    metric no rule defines is NOT_FOUND, as GetMetrics is."""
    a, _, _ = keda
    with _stub(pki, a, client_cert, 3) as stub:
        for target in ("9.3e18", "1e19", "9223372036854775807"):
            with pytest.raises(grpc.RpcError) as info:
                stub.GetMetricSpec(_ref(names.SLI_QUEUE_DEPTH, targetValue=target))
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert f"targetValue: {target!r} is past 2**53" in (info.value.details() or "")
        spec = stub.GetMetricSpec(_ref(names.SLI_QUEUE_DEPTH, targetValue=str(2**53)))
        assert spec.metricSpecs[0].targetSize == 2**53
        with pytest.raises(grpc.RpcError) as info:  # it was OK, though GetMetrics is NOT_FOUND
            stub.GetMetricSpec(_ref("nope"))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert info.value.details() == _rest(pki, a, "nope", "service=vision").json()["message"]
    assert (_int64(1e19), _int64(-1e19), _int64(2.5), _int64(math.inf)) == (
        2**63 - 1, -(2**63), 2, 2**63 - 1
    )  # fmt: skip
    assert status_code(ValueOutOfRange("x")) == grpc.StatusCode.OUT_OF_RANGE
