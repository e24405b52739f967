"""ScoringConfig / ExtenderConfig: defaults, strict parsing, errors that name the key."""

from __future__ import annotations

import pytest

from extender.config import (
    DEFAULT_LOAD_WEIGHTS,
    DEFAULT_RHO_THRESHOLD,
    DEFAULT_STALE_AFTER_S,
    MIB,
    ExtenderConfig,
    ScoringConfig,
)
from kvspread.settings import ConfigError


def test_empty_mapping_gives_the_documented_defaults() -> None:
    cfg = ScoringConfig.from_mapping({})
    assert cfg == ScoringConfig()
    assert cfg.rho_threshold == DEFAULT_RHO_THRESHOLD == 0.35
    assert cfg.stale_after_s == DEFAULT_STALE_AFTER_S == 60.0
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
            {"rho_threshold": 1.5}, "scoring.rho_threshold: must be between", id="rho above 1"
        ),
        pytest.param(
            {"rho_threshold": "high"}, "scoring.rho_threshold: must be a number", id="rho text"
        ),
        pytest.param(
            {"stale_after_s": 0}, "scoring.stale_after_s: must be a finite number > 0", id="stale 0"
        ),
        pytest.param(
            {"weights": {"load": -1}},
            "scoring.weights.load: must be a finite number >= 0",
            id="negative weight",
        ),
        pytest.param(
            {"weights": {"fragmentation": 0, "load": 0, "spread": 0, "modality": 0, "qos": 0}},
            "at least one weight must be > 0",
            id="all weights zero",
        ),
        pytest.param(
            {"normalisation": "zscore"}, "scoring.normalisation", id="unknown normalisation"
        ),
        pytest.param(
            {"shape_prior": [{"gpus": 1, "memory": "lots"}]},
            "scoring.shape_prior[0].memory: 'lots' is neither 'whole' nor a Kubernetes quantity",
            id="bad prior memory",
        ),
        pytest.param({"shape_prior": []}, "at least one shape", id="empty prior"),
        pytest.param(
            {"shape_prior": [{"gpus": 0}]}, "scoring.shape_prior[0].gpus", id="prior 0 GPUs"
        ),
        pytest.param(
            {"max_shapes": True}, "scoring.max_shapes: must be an integer", id="bool max_shapes"
        ),
        pytest.param([], "scoring: must be a mapping", id="not a mapping"),
    ],
)
def test_bad_values_name_the_key_and_value(mapping: object, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        ScoringConfig.from_mapping(mapping)  # type: ignore[arg-type]
    assert message in str(err.value)


def test_extender_config_sections() -> None:
    cfg = ExtenderConfig.from_mapping(
        {
            "server": {"host": "0.0.0.0", "port": 9000, "standalone": True, "filter_verb": "f"},
            "kubernetes": {"watch_timeout_s": 60},
            "ledger": {"ttl_s": 5},
            "scoring": {"max_streams": 128},
        }
    )
    assert (cfg.host, cfg.port, cfg.standalone, cfg.filter_verb) == ("0.0.0.0", 9000, True, "f")
    assert cfg.watch_timeout_s == 60 and cfg.ledger_ttl_s == 5.0
    assert cfg.scoring.max_streams == 128.0


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        pytest.param({"sever": {}}, "sever: unknown section", id="typo section"),
        pytest.param({"server": {"prot": 1}}, "server.prot: unknown key", id="typo key"),
        pytest.param({"server": {"port": 70000}}, "server.port: must be 0..65535", id="port range"),
        pytest.param(
            {"server": {"port": "http"}}, "server.port: must be an integer", id="port text"
        ),
        pytest.param(
            {"server": {"tls_cert": "a.pem"}}, "must be given together", id="cert without key"
        ),
        pytest.param({"server": {"log_level": "loud"}}, "server.log_level", id="log level"),
        pytest.param(
            {"server": {"standalone": "yes"}},
            "server.standalone: must be true or false",
            id="bool text",
        ),
        pytest.param(
            {"server": {"filter_verb": "a b"}}, "server.filter_verb", id="verb with space"
        ),
        pytest.param(
            {"server": {"filter_verb": "x", "prioritize_verb": "x"}}, "must differ", id="same verbs"
        ),
        pytest.param({"ledger": {"ttl_s": 0}}, "ledger.ttl_s", id="ttl zero"),
    ],
)
def test_extender_config_errors(mapping: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        ExtenderConfig.from_mapping(mapping)
    assert message in str(err.value)
