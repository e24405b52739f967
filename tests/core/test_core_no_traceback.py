"""Every subcommand, fed bad input, prints one line saying what is wrong and exits non-zero.

Each case runs the real command in a subprocess (`python -m kvspread ...`) with no cluster
credentials ($HOME and $KUBECONFIG point at nothing), so what a user sees is what is tested:
no Python traceback, a non-zero exit, and the message that names the problem.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from kvspread.preflight import check_output_dir, check_port, check_tls_pair
from kvspread.settings import ConfigError

TIMEOUT_S = 60


@pytest.fixture(scope="module")
def taken_port() -> Iterator[int]:
    """A port some other process listens on, on every address (as a stray server would)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", 0))
        s.listen()
        yield s.getsockname()[1]


FILES: dict[str, tuple[str, str]] = {
    "notpem": ("not.pem", "this is not a certificate\n"),
    "garbage": ("kubeconfig", "{{{ not yaml"),
    "badyaml": ("bad.yaml", "server: [unclosed\n"),
    "scalarserver": ("scalar.yaml", "server: 5\n"),
    "badrule": (
        "rules.yaml",
        "rules:\n  - {name: x, metric: m, aggregation: quantile, quantile: 2}\n",
    ),
    "empty": ("empty.pem", ""),
    "dupkeys": ("dup.yaml", "server:\n  port: 8888\n  port: 9999\n"),
}
"""{placeholder: (file name, text)}: the bad files the cases name."""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("bad")
    paths = {}
    for key, (name, text) in FILES.items():
        (d / name).write_text(text)
        paths[key] = str(d / name)
    home = d / "home"
    home.mkdir()
    ca = d / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(ca))
    return {**paths, "ca": str(ca), "missing": str(d / "missing.yaml"), "home": str(home)}


# (argv, a piece of the message); {notpem}, {port}, ... are filled in per run.
CASES: list[tuple[list[str], str]] = [
    (["--no-such-flag"], "unrecognized arguments"),
    (
        ["router", "serve", "--endpoints", "127.0.0.1:8000", "--grpc-server", "grpcio"]
        + ["--max-message-bytes", "2147483648"],
        "to 2147483647 (a gRPC message length is at most 2 GiB - 1)",
    ),
    (["nope"], "invalid choice"),
    ([], "name a part: extender, adapter, collector, simulate, router"),
    # extender
    (["extender", "serve"], "--standalone"),
    (["extender", "serve", "--kubeconfig", "{missing}"], "--kubeconfig"),
    (["extender", "serve", "--kubeconfig", "{missing}", "--port", "{port}"], "--kubeconfig"),
    (["extender", "serve", "--kubeconfig", "{garbage}"], "--kubeconfig"),
    (
        ["extender", "serve", "--standalone", "--tls-cert", "{notpem}", "--tls-key", "{notpem}"],
        "not a PEM certificate",
    ),
    (
        ["extender", "serve", "--standalone", "--tls-cert", "{notpem}"],
        "--tls-cert: server.tls_cert: given without tls_key (--tls-key)",
    ),
    (
        ["extender", "serve", "--standalone", "--tls-cert", "{home}", "--tls-key", "{notpem}"],
        "--tls-cert {home}: a folder, not a file",
    ),
    (["extender", "serve", "--standalone", "--port", "{port}"], "already in use"),
    (["extender", "serve", "--standalone", "--port", "{port}", "--host", "0.0.0.0"], "in use"),
    (["extender", "serve", "--standalone", "--port", "x"], "--port"),
    (
        ["extender", "serve", "--standalone", "--host", "256.1.1.1"],
        "--host 256.1.1.1: not an address of this machine",
    ),
    (["extender", "serve", "--standalone", "--host", "192.0.2.77"], "not an address"),
    (["extender", "serve", "--standalone", "--config", "{missing}"], "missing.yaml"),
    (["extender", "serve", "--standalone", "--config", "{badyaml}"], "bad.yaml"),
    (
        ["extender", "serve", "--standalone", "--config", "{dupkeys}"],
        "found key 'port' a second time (first on line 2); keep one of them",
    ),
    (["extender", "serve", "--standalone", "--ledger-ttl", "soon"], "ledger"),
    # port 0 (any free port) with an address not on this machine: checked too
    (
        ["extender", "serve", "--standalone", "--port", "0", "--host", "192.0.2.1"],
        "--host 192.0.2.1: not an address of this machine",
    ),
    (["extender", "serve", "--standalone", "--filter-verb", "a/../b"], "filter_verb"),
    (["extender", "serve", "--standalone", "--filter-verb", "a//b"], "filter_verb"),
    (
        ["extender", "serve", "--standalone", "--config", "{scalarserver}", "--port", "0"],
        "server: expected a mapping, got 5 (--port sets server.port inside it)",
    ),
    # adapter
    (
        ["adapter", "serve", "--authorization-mode", "AlwaysAllow", "--secure-port", "{port}"],
        "--secure-port {port}: 127.0.0.1:{port} is already in use",
    ),
    (
        ["adapter", "serve", "--authorization-mode", "AlwaysAllow", "--otlp-port", "{port}"]
        + ["--secure-port", "0"],
        "--otlp-port {port}",
    ),
    (
        [
            "adapter",
            "serve",
            "--tls-cert-file",
            "{notpem}",
            "--tls-private-key-file",
            "{notpem}",
            "--requestheader-client-ca-file",
            "{missing}",
        ],
        "--tls-cert-file {notpem} / --tls-private-key-file {notpem}: not a PEM",
    ),
    (["adapter", "serve", "--secure-port", "0", "--otlp-port", "0"], "request-header CA"),
    (["adapter", "serve", "--kubeconfig", "{missing}"], "--kubeconfig"),
    # a taken port must not hide a wrong file (the default 6443 was taken on a test machine)
    (["adapter", "serve", "--kubeconfig", "{missing}", "--secure-port", "{port}"], "--kubeconfig"),
    (
        ["adapter", "serve", "--requestheader-client-ca-file", "{ca}"]
        + ["--secure-port", "0", "--otlp-port", "0"],
        "--authorization-mode SubjectAccessReview (the default) asks the API server: cannot "
        "reach a Kubernetes cluster",
    ),
    (
        ["adapter", "serve", "--authorization-mode", "AlwaysAllow", "--secure-port", "7443"]
        + ["--otlp-port", "7443", "--requestheader-client-ca-file", "{ca}"],
        "--otlp-port 7443: the same port as --secure-port",
    ),
    (
        ["adapter", "serve", "--authorization-mode", "AlwaysAllow", "--keda-port", "{port}"]
        + ["--secure-port", "0", "--otlp-port", "0", "--requestheader-client-ca-file", "{ca}"],
        "--keda-port {port}: 127.0.0.1:{port} is already in use",
    ),
    (
        ["adapter", "serve", "--keda-port", "9443", "--keda-tls-cert-file", "{notpem}"],
        "keda_tls_cert_file: given without keda_tls_private_key_file",
    ),
    (["adapter", "serve", "--authorization-mode", "Sometimes"], "authorization_mode"),
    (["adapter", "serve", "--config", "{badyaml}"], "bad.yaml"),
    (
        ["adapter", "serve", "--requestheader-client-ca-file", "{empty}"]
        + ["--authorization-mode", "AlwaysAllow", "--secure-port", "0", "--otlp-port", "0"],
        "cannot load the request-header CA from {empty}: it holds no PEM certificate",
    ),
    (["adapter", "serve", "--config", "{badrule}"], "{badrule}: rules[0].quantile: "),
    # collector
    (
        ["collector", "run", "--standalone", "--no-bpf", "--no-nvml", "--port", "{port}"],
        "--port {port}: 127.0.0.1:{port} is already in use",
    ),
    (["collector", "run", "--kubeconfig", "{missing}", "--no-bpf", "--no-nvml"], "--kubeconfig"),
    (
        ["collector", "run", "--kubeconfig", "{missing}", "--no-bpf", "--no-nvml"]
        + ["--port", "{port}"],
        "--kubeconfig",
    ),
    (["collector", "run", "--port", "many"], "port"),
    (["collector", "run", "--no-bpf", "--no-nvml", "--port", "0"], "node_name: unknown"),
    (
        ["collector", "run", "--no-bpf", "--no-nvml", "--port", "0", "--node-name", "n1"],
        "cannot reach a Kubernetes cluster: no in-cluster service account and no kubeconfig",
    ),
    (["collector", "run", "--config", "{missing}"], "missing.yaml"),
    (
        ["collector", "run", "--standalone", "--no-bpf", "--no-nvml", "--port", "0"]
        + ["--listen", "192.0.2.1"],
        "--listen 192.0.2.1: not an address of this machine",
    ),
    # router
    (
        ["router", "serve", "--endpoints", "127.0.0.1:8000", "--grpc-port", "{port}"],
        "--grpc-port {port}: 127.0.0.1:{port} is already in use",
    ),
    (
        ["router", "serve", "--endpoints", "127.0.0.1:8000", "--http-port", "{port}"],
        "--http-port {port}: 127.0.0.1:{port} is already in use",
    ),
    (
        ["router", "serve", "--endpoints", "127.0.0.1:8000", "--tls-cert", "{notpem}"],
        "--tls-cert: server.tls_cert: given without tls_key (--tls-key)",
    ),
    # simulate
    (["simulate", "placement", "--seeds", "-3..-1"], "--seeds: '-3..-1' is not a seed"),
    (["simulate", "serving", "--seeds", "-3..-1"], "--seeds: '-3..-1' is not a seed"),
    (["simulate", "placement", "--seeds", "1..100000"], "100000 seeds, at most 1000"),
    (["simulate", "serving", "--seeds", "0..1000000000000000000"], "seeds, at most 1000"),
    (["simulate", "--out", "/etc/hostname/x"], "a parent of it is a file"),
    (["simulate", "placement", "--out", "/etc/hostname/x"], "a parent of it is a file"),
    (["simulate", "placement", "--out", "/sys/kvspread-test/report"], "cannot write"),
    (["simulate", "placement", "--out", "/etc/hostname"], "it is a file, not a folder"),
    (["simulate", "placement", "--trace", "{missing}"], "--trace"),
    (["simulate", "placement", "--seeds", "many"], "--seeds"),
    (["simulate", "placement", "--policies", "best"], "--policies"),
    (["simulate", "placement", "--stop-at", "-5"], "--stop-at"),
    (["simulate", "placement", "--jobs", "0"], "--jobs"),
    (["simulate", "serving", "--out", "/etc/hostname/x"], "a parent of it is a file"),
    (["simulate", "serving", "--config", "{missing}"], "missing.yaml"),
    (["simulate", "serving", "--config", "{badyaml}"], "bad.yaml"),
]


def _fill(text: str, values: dict[str, str]) -> str:
    return text.format(**values)


@pytest.mark.parametrize("argv,expect", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_is_one_line_not_a_traceback(
    argv: list[str], expect: str, files: dict[str, str], taken_port: int, tmp_path: Path
) -> None:
    values = {**files, "port": str(taken_port)}
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("KVSPREAD_")
        and k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "NODE_NAME")
    }
    env.update(HOME=files["home"], KUBECONFIG=os.path.join(files["home"], "none"))
    proc = subprocess.run(
        [sys.executable, "-m", "kvspread", *(_fill(a, values) for a in argv)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output
    assert "Failed to add port" not in output, "grpcio's own bind error line came first"
    assert proc.returncode != 0, output
    # the message is the last line on stderr (JSON log lines may precede it), and only one
    last = proc.stderr.strip().splitlines()[-1]
    assert _fill(expect, values) in last, proc.stderr
    assert not last.startswith("{"), proc.stderr
    for started in ("extender serving", "adapter serving", "collector listening"):
        assert started not in output, f"it started serving before failing: {output}"
    assert not list(tmp_path.iterdir()), "a failed run left files behind"


def test_port_check_passes_ephemeral_and_a_free_port_and_checks_the_address_of_port_0() -> None:
    check_port("127.0.0.1", 0, "--port")
    with pytest.raises(ConfigError, match="--host 192.0.2.1: not an address of this machine"):
        check_port("192.0.2.1", 0, "--port")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    check_port("127.0.0.1", free, "--port")


def test_tls_pair_accepts_a_real_pair_and_rejects_a_mismatched_key(tmp_path: Path) -> None:
    ca = trustme.CA()
    one, two = ca.issue_cert("one.test"), ca.issue_cert("two.test")
    cert, key, other_key = tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "k2.pem"
    one.cert_chain_pems[0].write_to_path(str(cert))
    one.private_key_pem.write_to_path(str(key))
    two.private_key_pem.write_to_path(str(other_key))
    check_tls_pair(str(cert), str(key), "--tls-cert", "--tls-key")
    check_tls_pair(None, None, "--tls-cert", "--tls-key")
    with pytest.raises(ConfigError, match="matching private key"):
        check_tls_pair(str(cert), str(other_key), "--tls-cert", "--tls-key")
    with pytest.raises(ConfigError, match="--tls-key .*: no such file"):
        check_tls_pair(str(cert), str(tmp_path / "none"), "--tls-cert", "--tls-key")
    # an encrypted key: OpenSSL would ask for its passphrase on the terminal and wait there
    from cryptography.hazmat.primitives import serialization

    plain = serialization.load_pem_private_key(one.private_key_pem.bytes(), password=None)
    encrypted = tmp_path / "enc.pem"
    encrypted.write_bytes(
        plain.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    with pytest.raises(ConfigError, match="--tls-key .*: the private key is encrypted"):
        check_tls_pair(str(cert), str(encrypted), "--tls-cert", "--tls-key")


@pytest.mark.parametrize("host", ["\udcff", "bad\x00host"])
def test_a_host_the_resolver_cannot_encode_is_a_config_error(host: str) -> None:
    with pytest.raises(ConfigError, match="not an address or host name"):
        check_port(host, 0, "--port")


def test_output_dir_is_created_and_left_empty(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b"
    check_output_dir(out, "--out")
    assert out.is_dir() and not list(out.iterdir())


HELP_COMMANDS = [
    [],
    ["extender", "serve"],
    ["adapter", "serve"],
    ["collector", "run"],
    ["simulate"],
    ["simulate", "placement"],
    ["simulate", "serving"],
]


@pytest.mark.parametrize("cmd", HELP_COMMANDS, ids=lambda c: " ".join(c) or "kvspread")
def test_help_shows_percent_signs_once(cmd: list[str], capsys: pytest.CaptureFixture) -> None:
    """argparse %-formats help= strings but not descriptions: a '%%' there is printed as is."""
    from kvspread.cli import main

    with pytest.raises(SystemExit):
        main([*cmd, "--help"], environ={})
    out = capsys.readouterr().out
    assert "%%" not in out
    if cmd == ["simulate", "placement"]:
        assert "130 % of capacity" in out


def test_adapter_names_the_serving_certificate_not_the_client_ca(tmp_path: Path) -> None:
    """Started without the CLI (tests, embedders), a bad serving pair is still named as such."""
    import asyncio

    from metrics_adapter.config import AdapterConfig
    from metrics_adapter.server import Adapter

    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    config = AdapterConfig.from_mapping(
        {
            "tls_cert_file": str(bad),
            "tls_private_key_file": str(bad),
            "requestheader_client_ca_file": str(ca_file),
            "authorization_mode": "AlwaysAllow",
            "secure_port": 0,
            "otlp_port": 0,
        }
    )
    adapter = Adapter(config)
    with pytest.raises(ConfigError) as info:
        asyncio.run(adapter.start())
    assert "tls_cert_file" in str(info.value)
    assert "request-header" not in str(info.value)


def test_version_imports_no_part() -> None:
    """`kvspread --version` answers without importing a part (the simulator alone pulls
    numpy and httpx, seconds of start-up): only the part named is imported."""
    code = (
        "import sys\n"
        "from kvspread.cli import main\n"
        "try:\n"
        "    main(['--version'], environ={})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(m.split('.')[0] for m in sys.modules)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert proc.stdout.startswith("kvspread "), proc.stdout
    loaded = set(proc.stdout.splitlines()[-1].split())
    for heavy in ("numpy", "httpx", "simulator", "extender", "router", "metrics_adapter", "bpf"):
        assert heavy not in loaded, f"--version imported {heavy}"


def test_a_part_is_parsed_with_only_its_own_module() -> None:
    from kvspread.cli import _parts_needed, build_parser

    assert _parts_needed(["extender", "serve", "--standalone"]) == ["extender"]
    assert _parts_needed(["--version"]) == []
    assert _parts_needed(["--help"]) is None
    assert _parts_needed(["nope"]) is None
    parser = build_parser({}, ["router"])
    args = parser.parse_args(["router", "serve", "--endpoints", "10.0.0.1:80"])
    assert args.part == "router"
