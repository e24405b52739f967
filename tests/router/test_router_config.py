"""`kvspread router serve` configuration: flag > KVSPREAD_ROUTER_* > YAML > defaults, and a
one-line error with a non-zero exit for anything wrong."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvspread.cli import build_parser
from kvspread.settings import ConfigError
from router.cli import config_from_args
from router.config import RouterConfig
from tests.ports import free_port, wait_http_ok

SERVE = [sys.executable, "-m", "kvspread", "router", "serve", "--endpoints", "127.0.0.1:9"]
"""`kvspread router serve` with one static endpoint, as a subprocess."""


def cfg_of(argv: list[str], env: dict[str, str] | None = None) -> RouterConfig:
    env = env or {}
    args = build_parser(env).parse_args(["router", "serve", *argv])
    return config_from_args(args, env)


def test_layering(tmp_path: Path) -> None:
    yml = tmp_path / "r.yaml"
    yml.write_text(
        "endpoints: {static: '10.0.0.1:8000'}\n"
        "scoring: {w_queue: 2.5, fallbacks: 1}\n"
        "server: {grpc_port: 7000, http_port: 7001}\n"
    )
    c = cfg_of(["--config", str(yml)])
    assert c.endpoints.static == ("10.0.0.1:8000",) and c.server.grpc_port == 7000
    assert c.scoring.w_queue == 2.5 and c.scoring.fallbacks == 1
    c = cfg_of(["--config", str(yml)], {"KVSPREAD_ROUTER_SERVER_GRPC_PORT": "7100"})
    assert c.server.grpc_port == 7100
    c = cfg_of(
        ["--config", str(yml), "--grpc-port", "7200", "--endpoints", "10.0.0.2:80,10.0.0.3:80"],
        {"KVSPREAD_ROUTER_SERVER_GRPC_PORT": "7100"},
    )
    assert c.server.grpc_port == 7200 and c.endpoints.static == ("10.0.0.2:80", "10.0.0.3:80")
    assert c.mode == "static"
    c = cfg_of(["--pool-name", "qwen", "--pool-namespace", "llm", "--scrape-interval", "0.25"])
    assert c.mode == "pool" and c.pool.namespace == "llm" and c.metrics.interval_s == 0.25


@pytest.mark.parametrize(
    "argv,message",
    [
        ([], "endpoints: expected exactly one of --endpoints"),
        (["--endpoints", "10.0.0.1"], "--endpoints: endpoints.static[0]: expected ip:port, got '10.0.0.1'"),
        (["--endpoints", "10.0.0.1:1", "--pool-name", "p"], "got ['endpoints.static', 'pool.name']"),
        (["--endpoint-selector", "app=x"], "endpoints.target_port: expected a port with selector (--target-port)"),
        (["--endpoints", "10.0.0.1:1", "--tls-cert", "c.pem"], "--tls-cert: server.tls_cert: given without tls_key (--tls-key)"),
        (["--endpoints", "10.0.0.1:1", "--grpc-port", "x"], "--grpc-port: server.grpc_port: expected an integer, got 'x'"),
        (["--endpoints", "10.0.0.1:1", "--grpc-port", "70000"], "--grpc-port: server.grpc_port: expected a port number 0..65535"),
        (["--endpoints", "10.0.0.1:1", "--stale-after", "0.1"], "--stale-after: metrics.stale_after_s: expected a number >= metrics.interval_s (0.5), got 0.1"),
        (["--pool-name", "p", "--pool-namespace", "kube-system/../x"], "pool.namespace: expected a Kubernetes namespace"),
        (["--pool-name", "P/.."], "pool.name: expected a Kubernetes object name"),
        (["--endpoint-selector", "a=b", "--target-port", "80", "--endpoint-namespace", "A"], "endpoints.namespace: expected a Kubernetes namespace"),
        (["--endpoints", "10.0.0.1:1", "--max-message-bytes", "1000"], "server.max_message_bytes: expected an integer from 4194304"),
        (["--endpoints", "10.0.0.1:1", "--fallbacks", "-1"], "--fallbacks: scoring.fallbacks: expected a number >= 0, got -1"),
        (["--endpoints", "10.0.0.1:1", "--log-level", "loud"], "server.log_level: expected one of debug"),
        (["--endpoints", "10.0.0.1:1", "--grpc-server", "netty"], "server.grpc_server: expected one of grpcio, h2"),
        (["--endpoints", "10.0.0.1:1", "--grpc-port", "9100", "--http-port", "9100"], "--http-port: server.http_port: expected a port other than grpc_port, got 9100"),
    ],
)  # fmt: skip
def test_bad_configuration_is_named(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        cfg_of(argv)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "value,message",
    [
        ("127.0.0.1:28001,999.1.1.1:8000", "endpoints.static[1]: expected ip:port with an IPv4 address (four numbers 0..255), got '999.1.1.1:8000'"),
        ("host.example:8000", "endpoints.static[0]: expected ip:port with an IP address, not a host name"),
        ("localhost:8000", "not a host name (Envoy's ORIGINAL_DST cluster"),
        ("10.0.0.1:0", "endpoints.static[0]: expected ip:port with a port 1..65535, got '10.0.0.1:0'"),
        ("10.0.0.1:65536", "with a port 1..65535"),
        ("10.0.0.1:８０", "with a port 1..65535"),
        ("::1:8000", "not a host name"),
        ("[::g]:8000", "expected ip:port with an IPv6 address inside the brackets, got '[::g]:8000'"),
        ("1.2.3:8000", "with an IPv4 address"),
    ],
)  # fmt: skip
def test_endpoints_must_be_ip_port(value: str, message: str) -> None:
    """Envoy's ORIGINAL_DST cluster takes the destination header as an address: a host
    name or an impossible IPv4 must fail at start-up, naming the entry."""
    with pytest.raises(ConfigError) as info:
        cfg_of(["--endpoints", value])
    assert message in str(info.value), str(info.value)


def test_ipv4_and_bracketed_ipv6_endpoints_are_accepted() -> None:
    c = cfg_of(["--endpoints", "10.0.0.5:8000,255.255.255.255:1,[::1]:8000,[fd00::5]:65535"])
    assert c.endpoints.static == (
        "10.0.0.5:8000",
        "255.255.255.255:1",
        "[::1]:8000",
        "[fd00::5]:65535",
    )


@pytest.mark.parametrize(
    "text,message",
    [
        ("scoring: {w_nope: 1}", "scoring.w_nope: unknown key (known: absorb_picks, context_bonus, fallbacks"),
        ("pool_name: p", "pool_name: unknown key (known: affinity, cache, endpoints, kubernetes"),
        ("server: {grpc_port: '7000'}", "server.grpc_port: expected an integer, got '7000'"),
        ("metrics: 0.5", "metrics: expected a mapping, got 0.5"),
        ("endpoints: {static: [1, 2]}", "endpoints.static: expected a list of ip:port"),
        ("metrics: {stale_after_s: 0.1}", "metrics.stale_after_s: expected a number >= metrics.interval_s"),
    ],
)  # fmt: skip
def test_bad_yaml_names_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    yml = tmp_path / "r.yaml"
    source = "" if text.startswith("endpoints") else "endpoints: {static: '10.0.0.1:1'}\n"
    yml.write_text(source + text + "\n")
    with pytest.raises(ConfigError) as info:
        cfg_of(["--config", str(yml)])
    assert str(info.value).startswith(f"{yml}: {message}"), str(info.value)


def test_static_endpoints_as_a_yaml_list(tmp_path: Path) -> None:
    yml = tmp_path / "r.yaml"
    yml.write_text("endpoints: {static: [10.0.0.1:8000, '10.0.0.2:8000']}\n")
    assert cfg_of(["--config", str(yml)]).endpoints.static == ("10.0.0.1:8000", "10.0.0.2:8000")


def test_empty_sections_keep_the_defaults(tmp_path: Path) -> None:
    yml = tmp_path / "r.yaml"
    yml.write_text("endpoints: {static: '10.0.0.1:1'}\nserver:\nscoring: {fallbacks: null}\n")
    c = cfg_of(["--config", str(yml)])
    assert c.server == RouterConfig().server and c.scoring.fallbacks == 2


@pytest.mark.parametrize(
    "endpoints,message",
    [("nope", "expected ip:port"), ("127.0.0.1:28001,999.1.1.1:8000", "'999.1.1.1:8000'")],
)
def test_cli_prints_one_line_and_exits_non_zero(endpoints: str, message: str) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "kvspread", "router", "serve", "--endpoints", endpoints],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0
    assert message in res.stderr and "Traceback" not in res.stderr


def test_the_manifests_configuration_loads_and_names_the_example_pool() -> None:
    import yaml

    root = Path(__file__).resolve().parents[2] / "manifests" / "router"
    cm = yaml.safe_load((root / "configmap.yaml").read_text())
    cfg = RouterConfig.from_mapping(yaml.safe_load(cm["data"]["router.yaml"]))
    pool = yaml.safe_load((root / "examples" / "inferencepool.yaml").read_text())
    assert cfg.mode == "pool" and cfg.server.host == "0.0.0.0"
    assert (cfg.pool.name, cfg.pool.namespace) == (
        pool["metadata"]["name"],
        pool["metadata"]["namespace"],
    )
    assert pool["spec"]["endpointPickerRef"]["port"]["number"] == cfg.server.grpc_port


@pytest.mark.parametrize("cmd", [["router"], ["router", "serve"]])
def test_help(cmd: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from kvspread.cli import main

    with pytest.raises(SystemExit) as info:
        main([*cmd, "--help"], environ={})
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: kvspread router")
    assert "router" in build_parser({}).format_help()
    if cmd[-1] == "serve":
        assert "KVSPREAD_ROUTER_SERVER_GRPC_PORT" in out and "--pool-name" in out


def _serve_answers_health_and_stops(argv: list[str], host: str) -> None:
    """Run `kvspread router serve ARGV` on free ports of `host` (a URL's host part): /readyz
    answers 200, gRPC health says SERVING for readiness, SIGTERM exits 0."""
    import signal

    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    ports = [free_port(), free_port()]
    proc = subprocess.Popen(
        [*argv, "--grpc-port", str(ports[0]), "--http-port", str(ports[1])],
        env={**os.environ, "KVSPREAD_ROUTER_SERVER_LOG_LEVEL": "warning"},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_http_ok(f"http://{host}:{ports[1]}/readyz", 60, proc)
        with grpc.insecure_channel(f"{host}:{ports[0]}") as ch:
            got = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service="readiness"), timeout=5
            )
        assert got.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
    assert rc == 0


def test_serve_runs_answers_health_and_stops_on_sigterm() -> None:
    _serve_answers_health_and_stops(SERVE, "127.0.0.1")


@pytest.mark.parametrize("which", ["--grpc-port", "--http-port"])
def test_a_port_in_use_is_one_line_naming_it(which: str) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        other = "--http-port" if which == "--grpc-port" else "--grpc-port"
        res = subprocess.run(
            [*SERVE, which, str(port), other, "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1, res.stderr
    # the one wording of every part (kvspread.preflight), naming the flag
    assert f"{which} {port}: 127.0.0.1:{port} is already in use" in res.stderr


def _no_cluster_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a laptop without a cluster: no kubeconfig, no service account."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "KVSPREAD_"))}
    env["HOME"] = str(tmp_path)
    return env


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--pool-name", "x"], "no in-cluster service account and no kubeconfig ($KUBECONFIG, ~/.kube/config)"),
        (["--endpoint-selector", "a=b", "--target-port", "8000"], "no in-cluster service account"),
        (["--pool-name", "x", "--kubeconfig", "/nope"], "--kubeconfig /nope: no such file"),
    ],
)  # fmt: skip
def test_no_cluster_credentials_is_a_configuration_error(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    """Not "internal error: ConfigException": one line saying what to give, exit 2."""
    res = subprocess.run(
        [sys.executable, "-m", "kvspread", "router", "serve", "--grpc-port", "0", "--http-port", "0", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=_no_cluster_env(tmp_path),
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and "internal error" not in res.stderr, res.stderr
    assert "configuration error" in res.stderr and message in res.stderr, res.stderr
    assert "--kubeconfig" in res.stderr and "--endpoints" in res.stderr


@pytest.mark.parametrize("server", ["grpcio", "h2"])
def test_a_junk_certificate_is_named_not_a_port_in_use(tmp_path: Path, server: str) -> None:
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    (tmp_path / "key.pem").write_text("not a key\n")
    res = subprocess.run(
        [*SERVE, "--grpc-port", "0", "--http-port", "0", "--grpc-server", server,
         "--tls-cert", str(tmp_path / "junk.pem"), "--tls-key", str(tmp_path / "key.pem")],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1, res.stderr
    assert f"--tls-cert {tmp_path / 'junk.pem'}" in res.stderr and "cannot listen" not in res.stderr


def test_in_process_grpcio_checks_the_pair_before_binding(tmp_path: Path) -> None:
    from router.run import Router

    (tmp_path / "junk.pem").write_text("not a certificate\n")
    (tmp_path / "key.pem").write_text("not a key\n")
    cfg = RouterConfig.from_mapping(
        {
            "endpoints": {"static": ["127.0.0.1:9"]},
            "server": {"grpc_port": 0, "http_port": 0, "grpc_server": "grpcio",
                       "tls_cert": str(tmp_path / "junk.pem"), "tls_key": str(tmp_path / "key.pem")},
        }
    )  # fmt: skip
    with pytest.raises(ConfigError) as info:
        Router(cfg).start()
    assert "server.tls_cert" in str(info.value) and "not a PEM certificate" in str(info.value)


def _ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_serve_listens_on_an_ipv6_host() -> None:
    """`--host ::1` (an IPv6 pod network): both servers bind it."""
    for server in ("h2", "grpcio"):
        argv = [*SERVE[:-1], "[::1]:9", "--host", "::1", "--grpc-server", server]
        _serve_answers_health_and_stops(argv, "[::1]")
