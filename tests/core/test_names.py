import pytest

from kvspread import names
from kvspread.names import prometheus_name


@pytest.mark.parametrize(
    ("otel", "unit", "kind", "prom"),
    [
        ("http.server.request.duration", "s", "histogram", "http_server_request_duration_seconds"),
        ("kvspread.gpu.memory.used", "By", "gauge", "kvspread_gpu_memory_used_bytes"),
        ("kvspread.kv_cache.usage", "1", "gauge", "kvspread_kv_cache_usage_ratio"),
        ("kvspread.node.fragmentation", "1", "gauge", "kvspread_node_fragmentation_ratio"),
        ("kvspread.tcp.retransmits", "{segment}", "counter", "kvspread_tcp_retransmits_total"),
        ("kvspread.collector.source.up", "", "gauge", "kvspread_collector_source_up"),
        (
            "kvspread.engine.requests.waiting",
            "{request}",
            "gauge",
            "kvspread_engine_requests_waiting",
        ),
        ("kvspread.accept_queue.delay", "s", "histogram", "kvspread_accept_queue_delay_seconds"),
        ("already_seconds", "s", "gauge", "already_seconds"),
        ("x.count", "1", "counter", "x_count_total"),
    ],
)
def test_otel_to_prometheus_translation(otel, unit, kind, prom):
    assert prometheus_name(otel, unit, kind) == prom


def test_sli_names_are_prometheus_safe_and_unique():
    assert len(set(names.SLI_NAMES)) == len(names.SLI_NAMES)
    for n in names.SLI_NAMES:
        assert prometheus_name(n, "", "gauge") == n


def test_kubernetes_names_share_the_domain():
    for value in (
        names.LABEL_MODEL,
        names.LABEL_MODALITY,
        names.LABEL_QOS,
        names.ANNOTATION_GPU_MEMORY,
        names.LABEL_POOL,
        names.ANNOTATION_SIGNALS,
    ):
        assert value.startswith(names.DOMAIN + "/")
