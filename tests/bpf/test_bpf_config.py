"""Configuration layering, strict validation, the CLI and feature detection."""

from __future__ import annotations

from pathlib import Path

import pytest

from bpf import loader
from bpf.agent import Agent
from bpf.cli import build_config
from bpf.config import CollectorConfig, from_mapping
from kvspread.cli import build_parser, main
from kvspread.settings import ConfigError


def parse(argv: list[str], environ: dict[str, str] | None = None) -> CollectorConfig:
    env = environ or {}
    args = build_parser(env).parse_args(["collector", "run", *argv])
    return build_config(args, env)


def test_defaults_and_downward_api_node_name() -> None:
    cfg = parse([], {"NODE_NAME": "gpu-7"})
    assert cfg.port == 9435 and cfg.http_ports is None and cfg.node_name == "gpu-7"
    assert not cfg.standalone and cfg.otlp_endpoints == ()


def test_layering_flag_over_env_over_file(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(
        "port: 1000\nhttp_ports: [8000]\nsignals: {window_s: 30}\n"
        "engines: {targets: [{url: 'http://e:1/metrics', engine: vllm}]}\n"
    )
    cfg = parse(
        [
            "--config",
            str(f),
            "--port",
            "3000",
            "--otlp-endpoint",
            "http://a:4318",
            "--otlp-endpoint",
            "http://b:4318,dns:///svc.ns:4318",
            "--standalone",
        ],
        {"KVSPREAD_COLLECTOR_PORT": "2000", "KVSPREAD_COLLECTOR_HTTP_PORTS": "80,8080"},
    )
    assert cfg.port == 3000
    assert cfg.http_ports == (80, 8080)
    assert cfg.signals.window_s == 30 and cfg.standalone
    assert cfg.otlp_endpoints == ("http://a:4318", "http://b:4318", "dns:///svc.ns:4318")
    assert cfg.engines.targets[0].engine == "vllm"
    env_eps = parse([], {"KVSPREAD_COLLECTOR_OTLP_ENDPOINTS": "http://a:1,http://b:2"})
    assert env_eps.otlp_endpoints == ("http://a:1", "http://b:2")
    off = parse(["--no-bpf", "--no-nvml", "--engine-target", "http://e:1/metrics"])
    assert not off.bpf.enabled and not off.nvml.enabled
    assert off.engines.targets[0].url == "http://e:1/metrics"
    assert parse([], {"KVSPREAD_COLLECTOR_STANDALONE": "yes"}).standalone
    assert parse([], {"KVSPREAD_COLLECTOR_HTTP_PORTS": "all"}).http_ports is None


@pytest.mark.parametrize(
    "mapping,match",
    [
        ({"prot": 1}, "^prot: unknown key \\(known: bpf, engines, http_ports,"),
        ({"port": "x"}, "^port: expected an integer, got 'x'$"),
        ({"port": 70000}, "^port: expected a port number 0..65535, got 70000$"),
        ({"http_ports": "80,abc"}, "^http_ports: expected a list of ports 1..65535, or all"),
        ({"http_ports": [80, 70000]}, "^http_ports: expected a list of ports"),
        ({"bpf": {"capture_bytes": 500}}, "^bpf.capture_bytes: expected a power of two"),
        ({"bpf": {"nope": 1}}, "^bpf.nope: unknown key"),
        ({"bpf": {"enabled": "yes"}}, "^bpf.enabled: expected true or false, got 'yes'$"),
        ({"engines": {"targets": [{"url": "ftp://x"}]}}, "^engines.targets\\[0\\].url"),
        ({"engines": {"targets": [{"url": "http://x", "pod_uid": "u"}]}}, "pod_uid: unknown"),
        ({"engines": {"targets": [{"engine": "vllm"}]}}, "^engines.targets\\[0\\]: expected"),
        ({"routes": ["v1/x"]}, "^routes\\[0\\]: expected a route starting with '/'"),
        ({"publish": {"min_interval_s": -1}}, "^publish.min_interval_s: expected a number >= 0"),
        ({"otlp_endpoints": ["ftp://x:1"]}, "^otlp_endpoints: expected OTLP endpoint URLs"),
        ({"log_level": "loud"}, "^log_level: expected one of debug, info, warning, error"),
    ],
    ids=[
        "unknown key",
        "bad port",
        "port range",
        "bad port list",
        "port out of range",
        "capture size",
        "unknown nested key",
        "bool text",
        "bad engine url",
        "internal field",
        "target without url",
        "bad route",
        "negative interval",
        "bad otlp endpoint",
        "bad log level",
    ],
)
def test_bad_config_is_rejected_with_the_key(mapping: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        from_mapping(mapping)


def test_cli_reports_config_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collector", "run", "--port", "nope"], {}) == 2
    assert "--port: port: expected an integer, got 'nope'" in capsys.readouterr().err


def test_no_node_name_outside_standalone_is_a_config_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["collector", "run", "--no-bpf", "--no-nvml", "--port", "0"]
    assert main(argv, {}) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("kvspread: configuration error: node_name: unknown: set NODE_NAME")
    assert "--standalone" in err
    agent = Agent(from_mapping({"port": 0, "listen": "127.0.0.1", "bpf": {"enabled": False}}))
    try:
        with pytest.raises(ConfigError, match="node_name: unknown"):
            agent.start()
        assert agent._threads == []  # refused before any source started
    finally:
        agent.stop()


def test_print_bpf(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collector", "run", "--print-bpf", "--http-ports", "8000,9000"], {}) == 0
    out = capsys.readouterr().out
    assert "-DTRACE_ALL_PORTS=0" in out and "traced_ports map: 8000, 9000" in out
    # the flags the agent compiles with: its request budget, not the loader's default
    assert f"-DMAX_REQUESTS_PER_S={CollectorConfig().bpf.max_requests_per_s}" in out
    assert "TRACEPOINT_PROBE(syscalls, sys_exit_accept4)" in out
    assert '#include "events.h"' not in out and "struct http_event {" in out


def test_feature_detection_on_a_fake_tracefs(tmp_path: Path) -> None:
    for tp in loader.PROGRAMS["conn_track.c"] + loader.PROGRAMS["http_latency.c"]:
        (tmp_path / "events" / tp).mkdir(parents=True)
    f = loader.detect_features(tmp_path)
    assert f.programs == ("conn_track.c", "http_latency.c")
    assert f.missing == {"tcp_rtt.c": ("tcp/tcp_probe", "tcp/tcp_retransmit_skb")}
    assert f.optional == ()
    (tmp_path / "events/syscalls/sys_enter_sendmsg").mkdir()
    assert loader.detect_features(tmp_path).optional == ()  # enter without exit
    (tmp_path / "events/syscalls/sys_exit_sendmsg").mkdir()
    f = loader.detect_features(tmp_path)
    assert f.optional == ("sendmsg",)
    assert "-DHAVE_SYS_SENDMSG" in loader.build_cflags(loader.ProbeConfig(), f)
    assert loader.detect_features(tmp_path / "nothing").programs == ()
    assert loader.ensure_tracefs(tmp_path / "nothing") is not None


def test_capture_size_checked_before_compiling() -> None:
    f = loader.Features(frozenset(), ("conn_track.c",), {})
    with pytest.raises(ValueError, match="power of two"):
        loader.build_cflags(loader.ProbeConfig(capture_bytes=100), f)


def test_only_loader_imports_bcc() -> None:
    root = Path(__file__).parents[2] / "bpf"
    for p in root.glob("*.py"):
        text = p.read_text()
        if p.name != "loader.py":
            assert "import bcc" not in text, p.name


def test_shipped_configmap_is_valid() -> None:
    import yaml

    root = Path(__file__).parents[2]
    cm = yaml.safe_load((root / "manifests/collector/base/configmap.yaml").read_text())
    cfg = from_mapping(yaml.safe_load(cm["data"]["collector.yaml"]), {"NODE_NAME": "gpu-1"})
    assert cfg.node_name == "gpu-1" and cfg.http_ports is None
    assert cfg.proc_root == Path("/host/proc") and cfg.nice == 10
    assert cfg.otlp_endpoints == ("dns:///kvspread-adapter-otlp.kvspread.svc:4318",)


def test_nice_and_budget_keys() -> None:
    cfg = from_mapping({"nice": 0, "bpf": {"max_requests_per_s": 0}})
    assert cfg.nice == 0 and cfg.bpf.max_requests_per_s == 0
    plain = from_mapping({"engines": {"targets": ["http://127.0.0.1:8000/metrics"]}})
    assert plain.engines.targets[0].url == "http://127.0.0.1:8000/metrics"
    assert from_mapping({"http_ports": []}).http_ports is None
    assert from_mapping({"http_ports": [8080, 80, 80]}).http_ports == (80, 8080)
    with pytest.raises(ConfigError, match="nice"):
        from_mapping({"nice": 25})
