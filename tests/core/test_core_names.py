import dataclasses

import pytest

from kvspread import names


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
    assert names.prometheus_name(otel, unit, kind) == prom


def test_sli_names_are_prometheus_safe_and_unique():
    assert len(set(names.SLI_NAMES)) == len(names.SLI_NAMES)
    for n in names.SLI_NAMES:
        assert names.prometheus_name(n, "", "gauge") == n


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


DESCRIPTORS = {k: v for k, v in vars(names).items() if isinstance(v, names.MetricDescriptor)}

PROMETHEUS = {
    "HTTP_SERVER_REQUEST_DURATION": "http_server_request_duration_seconds",
    "HTTP_SERVER_TIME_TO_FIRST_BYTE": "kvspread_http_server_time_to_first_byte_seconds",
    "HTTP_SERVER_UNSAMPLED_DURATION": "kvspread_http_server_unsampled_request_duration_seconds",
    "GEN_AI_SERVER_TIME_TO_FIRST_TOKEN": "gen_ai_server_time_to_first_token_seconds",
    "GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN": "gen_ai_server_time_per_output_token_seconds",
    "GEN_AI_SERVER_NORMALIZED_LATENCY": "kvspread_gen_ai_server_normalized_latency_seconds",
    "GPU_MEMORY_USED": "kvspread_gpu_memory_used_bytes",
    "DCGM_FB_USED": "DCGM_FI_DEV_FB_USED",
    "GPU_MEMORY_TOTAL": "kvspread_gpu_memory_total_bytes",
    "GPU_UTILIZATION": "kvspread_gpu_utilization_ratio",
    "KV_CACHE_USAGE": "kvspread_kv_cache_usage_ratio",
    "ENGINE_REQUESTS_RUNNING": "kvspread_engine_requests_running",
    "ENGINE_REQUESTS_WAITING": "kvspread_engine_requests_waiting",
    "NODE_FRAGMENTATION": "kvspread_node_fragmentation_ratio",
    "NODE_LARGEST_FREE_EXTENT": "kvspread_node_largest_free_extent_bytes",
    "NODE_ACTIVE_STREAMS": "kvspread_node_active_streams",
    "NODE_IMAGE_TOKEN_SHARE": "kvspread_node_image_token_share_ratio",
    "TCP_RTT": "kvspread_tcp_rtt_seconds",
    "TCP_RETRANSMITS": "kvspread_tcp_retransmits_total",
    "ACCEPT_QUEUE_DELAY": "kvspread_accept_queue_delay_seconds",
    "ACCEPT_QUEUE_BACKLOG": "kvspread_accept_queue_backlog",
    "CONNECTION_EDGES": "kvspread_connections_total",
    "COLLECTOR_SOURCE_UP": "kvspread_collector_source_up",
    "COLLECTOR_EVENTS": "kvspread_collector_bpf_events_total",
    "COLLECTOR_DROPPED": "kvspread_collector_dropped_total",
    "COLLECTOR_REQUEST_MODELS": "kvspread_collector_request_models_total",
    "EXTENDER_REQUESTS": "kvspread_extender_requests_total",
    "EXTENDER_REQUEST_DURATION": "kvspread_extender_request_duration_seconds",
    "EXTENDER_FILTER_FAILURES": "kvspread_extender_filter_failures_total",
    "EXTENDER_SCORE_TERM": "kvspread_extender_score_term",
    "EXTENDER_SIGNALS": "kvspread_extender_node_signals_total",
    "EXTENDER_CACHE_SYNCED": "kvspread_extender_cache_synced",
    "EXTENDER_FILTER_DECISIONS": "kvspread_extender_filter_decisions_total",
    "EXTENDER_PRIORITIZE_DECISIONS": "kvspread_extender_prioritize_decisions_total",
    "EXTENDER_LEDGER_BINDINGS": "kvspread_extender_ledger_bindings_total",
    "EXTENDER_CONNECTIONS_REFUSED": "kvspread_extender_connections_refused_total",
    "ADAPTER_REQUESTS": "kvspread_adapter_requests_total",
    "ADAPTER_REQUEST_DURATION": "kvspread_adapter_request_duration_seconds",
    "ADAPTER_SERIES": "kvspread_adapter_series",
    "ADAPTER_SERIES_DROPPED": "kvspread_adapter_series_dropped_total",
    "ADAPTER_OTLP_POINTS": "kvspread_adapter_otlp_points_total",
    "ADAPTER_STALE_READS": "kvspread_adapter_stale_reads_total",
    "ADAPTER_REFUSED_READS": "kvspread_adapter_refused_reads_total",
    "ADAPTER_GUARD_HOLDS": "kvspread_adapter_guard_holds_total",
    "ADAPTER_GUARD_VIOLATIONS": "kvspread_adapter_guard_violations_total",
    "ADAPTER_CONNECTIONS": "kvspread_adapter_connections",
    "ADAPTER_CONNECTIONS_REFUSED": "kvspread_adapter_connections_refused_total",
    "ADAPTER_CONNECTIONS_EVICTED": "kvspread_adapter_connections_evicted_total",
    "ROUTER_PICKS": "kvspread_router_picks_total",
    "ROUTER_PICK_DURATION": "kvspread_router_pick_duration_seconds",
    "ROUTER_STALE_ENDPOINTS": "kvspread_router_stale_endpoints",
    "ROUTER_ENDPOINTS": "kvspread_router_endpoints",
    "ROUTER_SHEDS": "kvspread_router_sheds_total",
    "ROUTER_BAD_REQUESTS": "kvspread_router_bad_requests_total",
    "ROUTER_PREFIX_ENTRIES": "kvspread_router_prefix_index_entries",
    "ROUTER_PREFIX_BYTES": "kvspread_router_prefix_index_bytes",
    "ROUTER_CACHE_EVICTIONS": "kvspread_router_cache_evictions_total",
    "ROUTER_KV_EVENTS": "kvspread_router_kv_events_total",
    "ROUTER_BODY_HELD": "kvspread_router_body_held_bytes",
    "ROUTER_BODY_REFUSALS": "kvspread_router_body_refusals_total",
    "LLMD_REQUESTS": "llm_d_epp_request_total",
    "LLMD_REQUEST_ERRORS": "llm_d_epp_request_error_total",
    "LLMD_SCHEDULER_DURATION": "llm_d_epp_scheduler_e2e_duration_seconds",
    "LLMD_SCHEDULER_ATTEMPTS": "llm_d_epp_scheduler_attempts_total",
    "LLMD_READY_ENDPOINTS": "llm_d_epp_ready_endpoints",
    "LLMD_AVG_KV_CACHE": "llm_d_epp_average_kv_cache_utilization",
    "LLMD_AVG_QUEUE": "llm_d_epp_average_queue_size",
    "LLMD_AVG_RUNNING": "llm_d_epp_average_running_requests",
    "LLMD_SD_KV_CACHE": "llm_d_epp_std_dev_kv_cache_utilization",
    "LLMD_SD_QUEUE": "llm_d_epp_std_dev_queue_size",
    "LLMD_SD_RUNNING": "llm_d_epp_std_dev_running_requests",
    "ROUTER_GRPC_CONNECTIONS": "kvspread_router_grpc_connections",
    "ROUTER_GRPC_BUFFERED": "kvspread_router_grpc_buffered_bytes",
    "ROUTER_GRPC_LIMITS": "kvspread_router_grpc_limits_total",
    "ROUTER_SERVED_ELSEWHERE": "kvspread_router_served_elsewhere_total",
}
"""The Prometheus names dashboards, rules and users query: renaming one is a breaking change."""


def test_every_descriptor_keeps_its_prometheus_name():
    assert {k: d.prometheus for k, d in DESCRIPTORS.items()} == PROMETHEUS


def test_descriptor_names_are_unique_and_described():
    assert len({d.name for d in DESCRIPTORS.values()}) == len(DESCRIPTORS)
    assert len({d.prometheus for d in DESCRIPTORS.values()}) == len(DESCRIPTORS)
    for key, d in DESCRIPTORS.items():
        assert d.help.strip() == d.help and d.help, key
        assert d.kind in ("counter", "gauge", "histogram"), key


def test_self_metrics_are_declared_by_their_prometheus_name():
    for key, d in DESCRIPTORS.items():
        if key.startswith(("EXTENDER_", "ADAPTER_", "ROUTER_")) or d.foreign:
            assert d.prometheus == d.name, key
        else:
            assert "." in d.name, f"{key}: collector metrics carry their OTel name"


def test_boolean_gauges_keep_unit_1_without_ratio_suffix():
    up = names.COLLECTOR_SOURCE_UP
    assert (up.unit, up.kind, up.boolean) == ("1", "gauge", True)
    assert up.prometheus == "kvspread_collector_source_up"
    plain = dataclasses.replace(up, boolean=False)
    assert plain.prometheus == "kvspread_collector_source_up_ratio"


def test_foreign_names_are_served_as_their_tool_spells_them():
    d = names.DCGM_FB_USED
    assert (d.prometheus, d.unit, d.kind) == ("DCGM_FI_DEV_FB_USED", "MiBy", "gauge")
    assert dataclasses.replace(d, foreign=False).prometheus == "DCGM_FI_DEV_FB_USED_mebibytes"
    # the other foreign names are llm-d's picker families (router/llmdmetrics.py)
    others = [x for x in DESCRIPTORS.values() if x.foreign and x is not d]
    assert others and all(x.name.startswith("llm_d_epp_") for x in others)


def test_descriptors_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        names.TCP_RTT.name = "other"  # type: ignore[misc]
