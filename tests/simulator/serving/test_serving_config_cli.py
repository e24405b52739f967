"""Configuration loading and the `kvspread simulate serving` command interface."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from kvspread.settings import ConfigError
from simulator.seeds import parse_seeds
from simulator.serving import cli
from simulator.serving.config import SimConfig, config_from_mapping, default_config
from simulator.serving.experiment import parse_policies


def test_defaults_are_the_documented_set() -> None:
    cfg = default_config()
    assert cfg.cost.block_tokens == 16
    assert cfg.cost.max_num_seqs == 256
    assert cfg.hpa.sync_period_s == 15.0 and cfg.hpa.tolerance == 0.1
    assert cfg.hpa.scale_down_window_s == 300.0
    assert cfg.startup.load_s == 45.0 and cfg.startup.multimodal_extra_s == 20.0
    shares = {k: v.share for k, v in cfg.kinds.items()}
    assert shares == {"text": 0.5, "image": 0.33, "multi-image": 0.17}
    assert cfg.models["qwen2-vl-7b"].kv_bytes_per_token == 57_344
    assert cfg.models["llama-3-8b"].kv_bytes_per_token == 131_072


def test_yaml_mapping_overrides_by_path() -> None:
    cfg = config_from_mapping(
        {
            "cost": {"prefill_tok_s": 20000},
            "services": {
                "chat": {
                    "max_replicas": 3,
                    "metrics": [
                        {"metric": "kvspread_queue_depth", "type": "AverageValue", "value": 4}
                    ],
                }
            },
            "kinds": {"image": {"image_tokens": [576], "image_weights": [1.0]}},
        }
    )
    assert cfg.cost.prefill_tok_s == 20000.0
    assert cfg.cost.decode_d0_ms == SimConfig().cost.decode_d0_ms  # others untouched
    assert cfg.services["chat"].max_replicas == 3
    assert cfg.services["chat"].min_replicas == 1
    assert cfg.services["chat"].metrics[0].metric == "kvspread_queue_depth"
    assert cfg.services["vision"] == SimConfig().services["vision"]
    assert cfg.kinds["image"].image_tokens == (576,)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"cost": {"prefil_tok_s": 1}}, "cost.prefil_tok_s: unknown key"),
        ({"cost": {"prefill_tok_s": "fast"}}, "cost.prefill_tok_s: expected a number, got 'fast'"),
        ({"cost": {"block_tokens": 16.5}}, "cost.block_tokens: expected an integer, got 16.5"),
        (
            {"services": {"chat": {"model": "gpt-5"}}},
            "services.chat.model: expected a model of models "
            "(llama-3-8b, qwen2-vl-7b, qwen2-vl-7b-32k, llama-3-70b, llama-3.1-8b), got 'gpt-5'",
        ),
        (
            {"services": {"chat": {"qos": "gold"}}},
            "services.chat.qos: expected realtime, batch or best-effort, got 'gold'",
        ),
        ({"services": {"chat": {"min_replicas": 9}}}, "services.chat.min_replicas"),
        (
            {"services": {"chat": {"metrics": [{"type": "Utilization"}]}}},
            "services.chat.metrics[0].type",
        ),
        (
            {"services": {"chat": {"metrics": [{"metric": "cpu"}]}}},
            "services.chat.metrics[0].metric",
        ),
        ({"services": {"chat": {"gpu_memory_gib": 100}}}, "services.chat.gpu_memory_gib"),
        ({"services": {"chat": None}}, "kinds.text"),  # text share but no service
        ({"arrivals": {"rate_rps": 0}}, "arrivals.rate_rps: expected a number > 0, got 0.0"),
        ({"duration_s": -5}, "duration_s: expected a number > 0, got -5.0"),
        ({"cluster": {"pools": "vision"}}, "cluster.pools: expected a list, got 'vision'"),
        ({"cluster": {"nodes": 0}}, "cluster.nodes: expected an integer >= 1, got 0"),
        ({"gpu": {"hbm_gib": 0}}, "gpu.hbm_gib: expected a number > 0, got 0.0"),
        ({"cost": {"chunk_tokens": 0}}, "cost.chunk_tokens: expected an integer >= 1, got 0"),
        (
            {"slo_hpa": {"sync_period_s": 0}},
            "slo_hpa.sync_period_s: expected a number > 0, got 0.0",
        ),
        ({"hpa": {"scale_up_pods": 0}}, "hpa.scale_up_pods: expected an integer >= 1, got 0"),
        ({"hpa": {"scale_down_window_s": -1}}, "hpa.scale_down_window_s: expected a number >= 0"),
        ([1, 2], "expected a mapping"),
    ],
)
def test_bad_configuration_names_the_key(data: object, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        config_from_mapping(data)  # type: ignore[arg-type]
    assert message in str(err.value)


def test_seeds_and_policies_parsing() -> None:
    assert parse_seeds("1,5..7") == [1, 5, 6, 7]
    assert parse_seeds([3, 4]) == [3, 4]
    with pytest.raises(ValueError, match="--seeds"):
        parse_seeds("a")
    with pytest.raises(ValueError, match="--seeds"):
        parse_seeds("5..1")
    assert parse_seeds("7,3..4,3") == [3, 4, 7]


@pytest.mark.parametrize("bad", ["-3", "1..-2", "-2..4", "1.5", "x..3", ""])
def test_seeds_refuse_what_numpy_would_reject(bad: str) -> None:
    with pytest.raises(ConfigError, match="--seeds"):
        parse_seeds(bad)
    with pytest.raises(ConfigError, match="--seeds"):
        parse_seeds([True] if bad == "" else [-1])


def test_negative_seed_is_a_configuration_error_on_the_command_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvspread",
            "simulate",
            "serving",
            "--seeds",
            "-3",
            "--out",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "configuration error: --seeds: '-3' is not a seed" in proc.stderr
    assert "internal error" not in proc.stderr
    assert parse_policies("kvspread, round-robin") == ["kvspread", "round-robin"]
    with pytest.raises(ValueError, match="unknown policy 'fgd'"):
        parse_policies("fgd")


def parser_with(*pre: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    for flag in pre:
        p.add_argument(flag, default="caller")
    cli.add_arguments(p)
    return p


def test_add_arguments_keeps_flags_the_caller_defined() -> None:
    p = parser_with("--out", "--jobs")
    args = p.parse_args(["--duration", "60"])
    assert args.out == "caller" and args.jobs == "caller"
    assert args.duration == 60.0 and args.seeds == "1..10"


def test_run_writes_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "serving.yaml"
    conf.write_text("warmup_s: 30\narrivals:\n  rate_rps: 1.5\n")
    p = parser_with()
    out = tmp_path / "report"
    args = p.parse_args(
        [
            "--duration",
            "150",
            "--seeds",
            "2",
            "--policies",
            "kvspread",
            "--out",
            str(out),
            "--config",
            str(conf),
            "--no-progress",
        ]
    )
    assert cli.run(args) == 0
    printed = capsys.readouterr().out
    assert "| kvspread |" in printed
    assert (out / "serving_summary.csv").read_text().startswith("policy,autoscaler,routing,seeds,")
    assert "--config" in (out / "serving_report.md").read_text()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "x"], "--seeds"),
        (["--policies", "spread"], "unknown policy"),
        (["--duration", "-1"], "--duration"),
        (["--rate", "0"], "--rate"),
        (["--jobs", "0"], "--jobs"),
        (["--config", "/nonexistent/serving.yaml"], "does not exist"),
        (["--seeds", ""], "--seeds: no seed given"),
        (["--policies", ""], "--policies: no policy given"),
        (["--autoscalers", ""], "--autoscalers: no autoscaler given"),
        (["--hours", "10-30"], "need 0 <= A < B <= 24 (the ServeGen day)"),
        (["--offset", "99999999"], "must be 0 <= SECONDS < 86400"),
        (["--hours", "10-11", "--offset", "100"], "--hours and --offset: both set the start"),
        (["--hours", "10-11", "--duration", "60"], "both set the length; give one of them"),
        # a mistyped scale: refused before any request is made (MAX_RUN_REQUESTS)
        (["--rate-scale", "1e6"], "a run sends at most 5,000,000 per service"),
        (["--synthetic", "--rate", "1e7"], "requests in 3,720 s (warm-up included)"),
        (["--workload", "mc=mooncake-conv", "--rate-scale", "1e5"], "requests in 3,720 s"),
    ],
)
def test_run_rejects_bad_flags(argv: list[str], message: str, tmp_path: Path) -> None:
    args = parser_with().parse_args([*argv, "--out", str(tmp_path), "--no-progress"])
    with pytest.raises(ConfigError, match=None) as err:
        cli.run(args)
    assert message in str(err.value)


def test_scoring_section_goes_to_the_extenders_parser() -> None:
    cfg = config_from_mapping({"scoring": {"weights": {"fragmentation": 0.1}}})
    sc = cfg.scoring_config()
    assert sc.weights.fragmentation == 0.1
    with pytest.raises(ConfigError, match=r"scoring\.wieghts: unknown key"):
        config_from_mapping({"scoring": {"wieghts": {}}})


def test_public_names_exist() -> None:
    import importlib

    for mod in (
        "config",
        "costmodel",
        "engine",
        "cluster",
        "placement",
        "slis",
        "sim",
        "report",
        "experiment",
        "hpa",
        "workload",
        "cli",
    ):
        m = importlib.import_module(f"simulator.serving.{mod}")
        for name in m.__all__:
            assert hasattr(m, name), f"{mod}.{name}"
    import simulator.serving as pkg

    for name in pkg.__all__:
        assert hasattr(pkg, name)


@pytest.mark.parametrize(
    ("yaml_text", "line"),
    [
        ("cluster:\n  nodes: 0\n", "cluster.nodes: expected an integer >= 1, got 0"),
        ("gpu:\n  hbm_gib: -1\n", "gpu.hbm_gib: expected a number > 0, got -1.0"),
        ("cost:\n  block_tokens: 0\n", "cost.block_tokens: expected an integer >= 1, got 0"),
        ("arrivals:\n  cv: 0\n", "arrivals.cv: expected a number > 0, got 0.0"),
        ("cluster:\n  pools: []\n", "cluster.pools: expected a non-empty list, got []"),
        ("clutser: {}\n", "clutser: unknown key (known: arrivals, background, cache, cluster,"),
    ],
)
def test_bad_serving_config_is_one_line_without_a_repr(
    tmp_path: Path, yaml_text: str, line: str
) -> None:
    """`kvspread simulate serving --config BAD` prints one line naming the file and key."""
    import subprocess
    import sys

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml_text)
    proc = subprocess.run(
        [sys.executable, "-m", "kvspread", "simulate", "serving", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    err = proc.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert "Spec(" not in err and "Model(" not in err  # no dataclass repr
    assert err.startswith(f"kvspread: configuration error: {bad}: {line}"), err
