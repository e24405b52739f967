"""Config and rules: strict parsing with errors naming the key; flags; the default rules."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from kvspread import __version__, names
from kvspread.cli import build_parser, main
from kvspread.settings import ConfigError, layer
from metrics_adapter.config import SETTINGS, AdapterConfig
from metrics_adapter.rules import default_rules, parse_duration, parse_rules


def test_default_rules_serve_every_design_sli() -> None:
    rules = default_rules()
    assert tuple(r.name for r in rules) == names.SLI_NAMES
    by = {r.name: r for r in rules}
    assert by[names.SLI_LATENCY_P95].quantile == 0.95
    assert by[names.SLI_GOOD_REQUESTS_PER_SECOND].threshold == 0.2
    assert by[names.SLI_QUEUE_DEPTH].metric == names.ENGINE_REQUESTS_WAITING.name
    assert by[names.SLI_KV_CACHE_USAGE].metric == names.KV_CACHE_USAGE.name
    long = names.SLI_REQUESTS_PER_SECOND_LONG  # the trend term's baseline: 5 windows
    # the over-budget shares: 2 min, twice the requests of the other windows per read
    over = (names.SLI_OVER_50MS_PER_TOKEN, names.SLI_OVER_120MS_PER_TOKEN)
    assert all(r.window == 60 for r in rules if r.name not in (long, *over))
    assert by[long].window == 300 and all(by[o].window == 120 for o in over)
    assert ("llm.modality", "modality") in by[names.SLI_ERROR_RATIO].labels


@pytest.mark.parametrize(
    ("doc", "key"),
    [
        (
            {"name": "x", "metric": "m", "aggregation": "quantile", "quantil": 0.5},
            "rules[0].quantil",
        ),
        (
            {"name": "x", "metric": "m", "aggregation": "quantile", "quantile": 1.5},
            "rules[0].quantile",
        ),
        ({"name": "x", "metric": "m", "aggregation": "median"}, "rules[0].aggregation"),
        ({"name": "x", "aggregation": "rate"}, "rules[0].metric"),
        ({"name": "x y", "metric": "m", "aggregation": "rate"}, "rules[0].name"),
        ({"name": "x", "metric": "m", "aggregation": "rate", "window": "soon"}, "rules[0].window"),
        (
            {"name": "x", "metric": "m", "aggregation": "good-rate", "threshold": -1},
            "rules[0].threshold",
        ),
        ({"name": "x", "metric": "m", "aggregation": "ratio"}, "rules[0].numerator"),
        (
            {
                "name": "x",
                "metric": "m",
                "aggregation": "ratio",
                "numerator": {"match": {"a": "("}},
            },
            "rules[0].numerator.match.a",
        ),
        (
            {"name": "x", "metric": "m", "aggregation": "last", "combine": "median"},
            "rules[0].combine",
        ),
        (
            {
                "name": "x",
                "metric": "m",
                "aggregation": "last",
                "labels": {"service.name": "service"},
            },
            "rules[0].labels",
        ),
        ({"name": "x", "source": "promql", "aggregation": "last"}, "rules[0].query"),
        (
            {"name": "x", "metric": "m", "aggregation": "rate", "clusterWide": "yes"},
            "rules[0].clusterWide",
        ),
    ],
)
def test_invalid_rules_name_the_bad_key(doc: dict, key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_rules([doc])
    assert str(exc.value).startswith(key), str(exc.value)


@pytest.mark.parametrize(
    ("doc", "key"),
    [
        ({"secure_prot": 1}, "secure_prot"),
        ({"secure_port": 70000}, "secure_port"),
        ({"authorization_mode": "RBAC"}, "authorization_mode"),
        ({"authorization_mode": "AllowList"}, "authorization_allow_users"),
        ({"tls_cert_file": "a.crt"}, "tls_cert_file"),
        ({"staleness": "0s"}, "staleness"),
        ({"rules": []}, "rules"),
        ({"rules": [{"name": "q", "source": "promql", "query": "up"}]}, "rules[0].source"),
        ({"log_level": "loud"}, "log_level"),
        ({"max_connections": 0}, "max_connections"),
        ({"otlp_max_connections": -1}, "otlp_max_connections"),
        ({"request_timeout": "0s"}, "request_timeout"),
    ],
)
def test_invalid_config_names_the_bad_key(doc: dict, key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        AdapterConfig.from_mapping(doc)
    assert str(exc.value).startswith(key), str(exc.value)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"secure_port": "6443"}, "secure_port: expected an integer, got '6443'"),
        ({"window": "soon"}, "window: expected a duration > 0 (seconds, or 30s, 1m30s"),
        ({"authorization_mode": "RBAC"}, "authorization_mode: expected one of SubjectAccess"),
        ({"authorization_allow_users": "alice"}, "authorization_allow_users: expected a list"),
        ({"rules": []}, "rules: expected at least one rule (remove the key for the defaults)"),
    ],
)
def test_invalid_config_wording(doc: dict, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        AdapterConfig.from_mapping(doc)
    assert str(exc.value).startswith(message), str(exc.value)


def test_durations_and_lists_from_yaml_and_text() -> None:
    cfg = AdapterConfig.from_mapping({"idle_expiry": "10m", "window": 30, "max_series": 5})
    assert (cfg.idle_expiry, cfg.window, cfg.max_series) == (600.0, 30.0, 5)
    args = build_parser({}).parse_args(["adapter", "serve"])
    env = {
        "KVSPREAD_ADAPTER_REQUESTHEADER_USERNAME_HEADERS": "X-User, X-Remote-User",
        "KVSPREAD_ADAPTER_AUTHORIZATION_MODE": "AllowList",
        "KVSPREAD_ADAPTER_AUTHORIZATION_ALLOW_GROUPS": "system:masters",
    }
    cfg = AdapterConfig.from_mapping(layer("adapter", SETTINGS, args, env, {}))
    assert cfg.username_headers == ("X-User", "X-Remote-User")
    assert cfg.authorization_allow_groups == ("system:masters",)
    with pytest.raises(ConfigError, match="^KVSPREAD_ADAPTER_OTLP_PORT: otlp_port: expected"):
        AdapterConfig.from_mapping(
            layer("adapter", SETTINGS, args, {"KVSPREAD_ADAPTER_OTLP_PORT": "x"}, {})
        )


def test_durations() -> None:
    assert parse_duration("1m30s", "k") == 90
    assert parse_duration("500ms", "k") == 0.5
    assert parse_duration(45, "k") == 45
    assert parse_duration("2h", "k") == 7200


def test_flags_env_and_file_layering() -> None:
    parser = build_parser({})
    args = parser.parse_args(
        [
            "adapter",
            "serve",
            "--secure-port",
            "7443",
            "--requestheader-allowed-names",
            "front-proxy-client,aggregator",
        ]
    )
    merged = layer(
        "adapter",
        SETTINGS,
        args,
        {"KVSPREAD_ADAPTER_OTLP_PORT": "14318", "KVSPREAD_ADAPTER_SECURE_PORT": "1"},
        {"secure_port": 2, "window": "30s", "authorization_mode": "AlwaysAllow"},
    )
    cfg = AdapterConfig.from_mapping(merged)
    assert cfg.secure_port == 7443 and cfg.otlp_port == 14318
    assert cfg.requestheader_allowed_names == ("front-proxy-client", "aggregator")
    assert cfg.authorization_mode == "AlwaysAllow"
    long = names.SLI_REQUESTS_PER_SECOND_LONG
    over = (names.SLI_OVER_50MS_PER_TOKEN, names.SLI_OVER_120MS_PER_TOKEN)
    want = {long: 150, **dict.fromkeys(over, 60)}  # 5 and 2 windows
    assert all(r.window == want.get(r.name, 30) for r in cfg.rules)


def test_cli_reports_config_errors(tmp_path, capsys) -> None:
    bad = tmp_path / "adapter.yaml"
    bad.write_text("rules:\n  - name: x\n    metric: m\n    aggregation: quantile\n")
    assert main(["adapter", "serve", "--config", str(bad)], environ={}) == 2
    assert "rules[0].quantile" in capsys.readouterr().err


def test_help_names_kubernetes_flags(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["adapter", "serve", "--help"], environ={})
    out = capsys.readouterr().out
    for flag in ("--secure-port", "--tls-cert-file", "--tls-private-key-file", "--requestheader-client-ca-file",
                 "--requestheader-allowed-names", "--requestheader-username-headers",
                 "--requestheader-group-headers", "--config", "--otlp-port", "--kubeconfig", "examples:"):  # fmt: skip
        assert flag in out


@pytest.mark.parametrize(
    "module",
    [
        "",
        "sli",
        "selectors",
        "errors",
        "rules",
        "provider",
        "auth",
        "apiserver",
        "config",
        "httpserver",
        "server",
        "certs",
        "sources.base",
        "sources.otlp",
        "sources.otlp_decode",
        "receiver",
        "values",
        "sources.promql",
        "sources.store",
        "fake",
        "cli",
    ],
)
def test_public_surface(module: str) -> None:
    mod = importlib.import_module(f"metrics_adapter.{module}" if module else "metrics_adapter")
    assert mod.__all__, module
    for name in mod.__all__:
        assert hasattr(mod, name) or module == "sources", f"{module}.{name}"
    public = {n for n in vars(mod) if not n.startswith("_") and callable(vars(mod)[n])}
    own = {n for n in public if getattr(vars(mod)[n], "__module__", None) == mod.__name__}
    assert own <= set(mod.__all__), f"{module}: public but not in __all__: {own - set(mod.__all__)}"
    fan = importlib.import_module("bpf.fanout")
    assert all(hasattr(fan, n) for n in fan.__all__)


def test_shipped_manifest_config_and_args_are_valid() -> None:
    """The ConfigMap's adapter.yaml and the Deployment's args parse as the CLI would."""
    from pathlib import Path

    import yaml

    root = Path(__file__).parents[2] / "manifests" / "metrics-adapter"
    cm = yaml.safe_load((root / "configmap.yaml").read_text())
    file_doc = yaml.safe_load(cm["data"]["adapter.yaml"])
    dep = yaml.safe_load((root / "deployment.yaml").read_text())
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"ghcr.io/kvspread/kvspread:{__version__}"
    args = build_parser({}).parse_args(container["args"])
    cfg = AdapterConfig.from_mapping(layer("adapter", SETTINGS, args, {}, file_doc))
    assert cfg.secure_port == 6443 and cfg.otlp_port == 4318
    assert cfg.authorization_mode == "SubjectAccessReview"
    assert tuple(r.name for r in cfg.rules) == names.SLI_NAMES


@pytest.mark.parametrize("name", ["a" * 254, "..", ".x"])
def test_a_bad_rule_name_is_told_the_length_and_the_first_character(name: str) -> None:
    """Every character of 254 'a's is in the set: the message names the 253 limit and the
    first-character rule, and shortens a long name."""
    with pytest.raises(ConfigError) as exc:
        parse_rules([{"name": name, "metric": "m", "aggregation": "last"}])
    msg = str(exc.value)
    assert "1 to 253 characters of [A-Za-z0-9_.:-], the first a letter or digit" in msg
    assert len(msg) < 200
    parse_rules([{"name": "a" * 253, "metric": "m", "aggregation": "last"}])


@pytest.mark.parametrize(
    ("doc", "key", "why"),
    [
        ({"serviceLabel": "bad label!"}, "rules[1].serviceLabel", "invalid label key 'bad label!'"),
        ({"classLabel": "-qos"}, "rules[1].classLabel", "invalid label key '-qos'"),
    ],
)
def test_a_pressure_label_no_selector_can_hold_is_refused(doc: dict, key: str, why: str) -> None:
    q = {"name": "q", "metric": "m", "aggregation": "last"}
    with pytest.raises(ConfigError) as exc:
        parse_rules([q, {"name": "p", "aggregation": "slo-pressure", "terms": {"q": 1}, **doc}])
    assert str(exc.value).startswith(f"{key}: {why}"), str(exc.value)


def test_a_promql_rule_with_an_otel_metric_is_refused() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_rules([{"name": "x", "source": "promql", "query": "up", "metric": "m"}])
    assert str(exc.value).startswith("rules[0].metric: a promql rule reads its query"), exc.value


def test_a_target_yaml_reads_as_a_string_says_why(tmp_path: Path) -> None:
    """YAML 1.1 (PyYAML) reads `1e-3` as text: the refusal says so and how to write it."""
    from kvspread.settings import load_yaml

    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n- {name: q, metric: m, aggregation: last}\n"
                    "- {name: p, aggregation: slo-pressure, terms: {q: 1e-3}}\n")  # fmt: skip
    doc = load_yaml(path)
    with pytest.raises(ConfigError) as exc:
        parse_rules(doc["rules"])
    assert str(exc.value) == (
        "rules[1].terms.q: want a target > 0 or off, got '1e-3' (a string: YAML 1.1 reads an"
        " exponent without a dot, 1e-3, as text; write 1.0e-3)"
    )
