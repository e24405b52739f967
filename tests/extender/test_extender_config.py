"""ScoringConfig / ExtenderConfig: defaults, strict parsing, errors that name the key."""

from __future__ import annotations

import pytest

from extender.config import (
    DEFAULT_LOAD_WEIGHTS,
    DEFAULT_RHO_THRESHOLD,
    DEFAULT_STALE_AFTER_S,
    MIB,
    ExplainConfig,
    ExtenderConfig,
    ScoringConfig,
)
from kvspread.settings import ConfigError


def test_empty_mapping_gives_the_documented_defaults() -> None:
    cfg = ScoringConfig.from_mapping({})
    assert cfg == ScoringConfig()
    assert cfg.rho_threshold == DEFAULT_RHO_THRESHOLD == 0.35
    assert cfg.stale_after_s == DEFAULT_STALE_AFTER_S == 300.0
    assert (cfg.load_weights.memory, cfg.load_weights.streams, cfg.load_weights.image) == (
        0.4,
        0.3,
        0.3,
    )
    assert cfg.load_weights == DEFAULT_LOAD_WEIGHTS
    assert cfg.normalisation == "candidates"


def test_full_mapping_is_read() -> None:
    cfg = ScoringConfig.from_mapping(
        {
            "weights": {"fragmentation": 1, "load": 0},
            "load_weights": {"memory": 1.0},
            "rho_threshold": 0.5,
            "stale_after_s": 30,
            "max_streams": 64,
            "normalisation": "absolute",
            "shape_prior": [
                {"gpus": 1, "memory": "24Gi", "weight": 2},
                {"gpus": 2, "memory": "whole", "weight": 1, "cpu": "8"},
            ],
        }
    )
    assert cfg.weights.fragmentation == 1.0 and cfg.weights.load == 0.0
    assert cfg.weights.spread == 0.15  # untouched keys keep defaults
    assert cfg.load_weights.memory == 1.0 and cfg.load_weights.streams == 0.3
    assert cfg.rho_threshold == 0.5 and cfg.max_streams == 64.0
    assert cfg.shape_prior[0].mem_per_gpu_mib == 24 * 1024
    assert cfg.shape_prior[1].mem_per_gpu_mib is None
    assert cfg.shape_prior[1].cpu_milli == 8000.0
    assert MIB == 2**20


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        pytest.param({"weigths": {}}, "scoring.weigths: unknown key", id="typo at top level"),
        pytest.param(
            {"weights": {"frag": 1}}, "scoring.weights.frag: unknown key", id="typo in weights"
        ),
        pytest.param(
            {"rho_threshold": 1.5},
            "scoring.rho_threshold: expected a number between 0.0 and 1.0, got 1.5",
            id="rho above 1",
        ),
        pytest.param(
            {"rho_threshold": "high"},
            "scoring.rho_threshold: expected a number, got 'high'",
            id="rho text",
        ),
        pytest.param(
            {"stale_after_s": 0},
            "scoring.stale_after_s: expected a finite number > 0, got 0.0",
            id="stale 0",
        ),
        pytest.param(
            {"weights": {"load": -1}},
            "scoring.weights.load: expected a finite number >= 0, got -1.0",
            id="negative weight",
        ),
        pytest.param(
            {"weights": {"fragmentation": 0, "load": 0, "spread": 0, "modality": 0, "qos": 0}},
            "at least one weight other than contention > 0",
            id="all weights zero",
        ),
        pytest.param(
            {
                "weights": {
                    "fragmentation": 0,
                    "load": 0,
                    "spread": 0,
                    "modality": 0,
                    "qos": 0,
                    "contention": 1,
                }
            },
            "at least one weight other than contention > 0",
            id="only contention",
        ),
        pytest.param(
            {"contention_qos": ["gold"]},
            "scoring.contention_qos[0]: expected one of realtime, batch, best-effort, got 'gold'",
            id="unknown QoS class",
        ),
        pytest.param(
            {"contention_qos": "realtime"},
            "scoring.contention_qos",
            id="QoS classes not a list",
        ),
        pytest.param(
            {"weights": {"contention": -0.5}},
            "scoring.weights.contention: expected a finite number >= 0, got -0.5",
            id="negative contention weight",
        ),
        pytest.param(
            {"normalisation": "zscore"},
            "scoring.normalisation: expected one of candidates, absolute, got 'zscore'",
            id="unknown normalisation",
        ),
        pytest.param(
            {"shape_prior": [{"gpus": 1, "memory": "lots"}]},
            "scoring.shape_prior[0].memory: expected 'whole' or a Kubernetes quantity",
            id="bad prior memory",
        ),
        pytest.param({"shape_prior": []}, "at least one shape", id="empty prior"),
        pytest.param(
            {"shape_prior": [{"gpus": 0}]},
            "scoring.shape_prior[0].gpus: expected an integer >= 1, got 0",
            id="prior 0 GPUs",
        ),
        pytest.param(
            {"shape_prior": [{"gpus": 1, "weigth": 2}]},
            "scoring.shape_prior[0].weigth: unknown key (known: cpu, gpus, memory, weight)",
            id="prior typo",
        ),
        pytest.param(
            {"max_shapes": True},
            "scoring.max_shapes: expected an integer, got True",
            id="bool max_shapes",
        ),
        pytest.param([], "scoring: expected a mapping, got []", id="not a mapping"),
    ],
)
def test_bad_values_name_the_key_and_value(mapping: object, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        ScoringConfig.from_mapping(mapping)  # type: ignore[arg-type]
    assert message in str(err.value)


def test_with_validates_and_names_the_scoring_key() -> None:
    with pytest.raises(ConfigError, match=r"^scoring\.max_streams: expected a finite number > 0"):
        ScoringConfig().with_(max_streams=0.0)


def test_extender_config_sections() -> None:
    cfg = ExtenderConfig.from_mapping(
        {
            "server": {"host": "0.0.0.0", "port": 9000, "standalone": True, "filter_verb": "f"},
            "kubernetes": {"watch_timeout_s": 60},
            "ledger": {"ttl_s": 5},
            "explain": {"enabled": False, "max_pods": 3},
            "scoring": {"max_streams": 128},
        }
    )
    s = cfg.server
    assert (s.host, s.port, s.standalone, s.filter_verb) == ("0.0.0.0", 9000, True, "f")
    assert cfg.kubernetes.watch_timeout_s == 60 and cfg.ledger.ttl_s == 5.0
    assert cfg.explain == ExplainConfig(enabled=False, max_pods=3)
    assert cfg.scoring.max_streams == 128.0
    assert ExtenderConfig.from_mapping({}) == ExtenderConfig()
    assert ExtenderConfig.from_mapping({"server": None, "explain": None}) == ExtenderConfig()
    assert ExtenderConfig().explain.enabled is True


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        pytest.param(
            {"sever": {}},
            "sever: unknown key (known: explain, kubernetes, ledger, scoring, server, signals)",
            id="typo section",
        ),
        pytest.param({"server": {"prot": 1}}, "server.prot: unknown key", id="typo key"),
        pytest.param(
            {"server": {"port": 70000}},
            "server.port: expected a port number 0..65535, got 70000",
            id="port range",
        ),
        pytest.param(
            {"server": {"port": "http"}},
            "server.port: expected an integer, got 'http'",
            id="port text",
        ),
        pytest.param(
            {"server": {"tls_cert": "a.pem"}},
            "server.tls_cert: given without tls_key (--tls-key): a PEM certificate and its",
            id="cert without key",
        ),
        pytest.param({"server": {"log_level": "loud"}}, "server.log_level", id="log level"),
        pytest.param(
            {"server": {"standalone": "yes"}},
            "server.standalone: expected true or false, got 'yes'",
            id="bool text",
        ),
        pytest.param(
            {"server": {"filter_verb": "a b"}}, "server.filter_verb", id="verb with space"
        ),
        pytest.param(
            {"server": {"filter_verb": "x", "prioritize_verb": "x"}},
            "server.prioritize_verb: expected a verb other than filter_verb",
            id="same verbs",
        ),
        pytest.param(
            {"server": {"filter_verb": "healthz"}},
            "server.filter_verb: expected a verb other than the server's own debug, healthz",
            id="verb is the probe",
        ),
        pytest.param(
            {"server": {"prioritize_verb": "debug/explain"}},
            "server.prioritize_verb: expected a verb other than the server's own",
            id="verb under debug",
        ),
        pytest.param({"ledger": {"ttl_s": 0}}, "ledger.ttl_s", id="ttl zero"),
        pytest.param(
            {"explain": {"enabled": 1}},
            "explain.enabled: expected true or false, got 1",
            id="explain enabled int",
        ),
        pytest.param(
            {"explain": {"max_pods": 0}},
            "explain.max_pods: expected an integer >= 1, got 0",
            id="explain max pods",
        ),
        pytest.param({"server": 8888}, "server: expected a mapping, got 8888", id="not a section"),
    ],
)
def test_extender_config_errors(mapping: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        ExtenderConfig.from_mapping(mapping)
    assert message in str(err.value)


def test_contention_classes_and_weight_parse() -> None:
    cfg = ScoringConfig.from_mapping(
        {"contention_qos": ["batch", "realtime"], "weights": {"contention": 0.2}}
    )
    assert cfg.contention_qos == ("batch", "realtime") and cfg.weights.contention == 0.2
    assert ScoringConfig.from_mapping({"contention_qos": []}).contention_qos == ()
    assert ScoringConfig().contention_qos == ("realtime",)
    assert ScoringConfig().weights.total() == pytest.approx(1.0)  # the five terms
    assert ScoringConfig().weights.total(contention=True) == pytest.approx(1.5)
