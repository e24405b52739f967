"""Real workloads: both formats parse, sampling follows the data, bad files are refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kvspread.settings import ConfigError
from simulator.serving.config import config_from_mapping
from simulator.serving.presets import real_workload_mapping
from simulator.serving.workload import generate_requests
from simulator.serving.workloads import (
    BUNDLED,
    CsvWorkload,
    ServeGenWorkload,
    WorkloadError,
    describe,
    load_workload,
    parse_distribution,
    workload_requests,
)


def _client(folder: Path, n: int, rows: list[str], dataset: dict) -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"chunk-{n}-trace.csv").write_text("\n".join(rows) + "\n")
    (folder / f"chunk-{n}-dataset.json").write_text(json.dumps(dataset))


MM_FIELDS = {
    "text_tokens": "{100: 0.25, 300: 0.75}",
    "image_count": "{1: 0.6, 3: 0.4}",
    "image_tokens": "{256: 0.5, 1024: 0.5}",
    "audio_tokens": "{0: 1.0}",
    "output_tokens": "{20: 0.5, 60: 0.5}",
}


def test_bundled_workloads_parse() -> None:
    mm = load_workload("servegen-mm-image")
    assert isinstance(mm, ServeGenWorkload) and mm.multimodal
    assert len(mm.clients) == 25
    assert all(len(c.windows) == 144 and c.window_s == 600.0 for c in mm.clients)
    lang = load_workload("servegen-language")
    assert isinstance(lang, ServeGenWorkload) and not lang.multimodal
    assert len(lang.clients) == 8
    az = load_workload("azure-conv")
    assert isinstance(az, CsvWorkload)
    assert len(az.t_s) == 19_366 and az.t_s[0] == 0.0
    assert np.all(np.diff(az.t_s) >= 0)
    assert 3500 < az.span_s < 3700  # one hour
    assert az.context[0] == 374 and az.generated[0] == 44  # the file's first row
    assert all(p.exists() for p in BUNDLED.values())


def test_distribution_strings_are_parsed_not_evaluated() -> None:
    d = parse_distribution("{136: 0.25, 372: 0.75}", "x")
    assert d is not None
    assert list(d.values) == [136.0, 372.0] and d.mean == pytest.approx(0.25 * 136 + 0.75 * 372)
    assert parse_distribution("{}", "x") is None
    with pytest.raises(WorkloadError, match="value: probability"):
        parse_distribution("{__import__('os'): 1}", "x")


def test_servegen_sampling_matches_the_windows_distributions(tmp_path: Path) -> None:
    folder = tmp_path / "sg"
    # one busy window (Gamma shape 0.25: CV 2) then an idle one
    _client(folder, 0, ["0,5.0,2.0,Gamma,0.25,0.8", "600,0,0,,0,0"], {"0": MM_FIELDS})
    wl = load_workload(folder)
    reqs = []
    for seed in range(8):
        reqs += workload_requests(wl, "vision", "image", seed, 0, 0.0, 1200.0, 1.0)
    # 5 req/s over the 600 s window, none in the idle one
    assert len(reqs) == 8 * 3000
    assert max(r.arrival for r in reqs) < 600.0
    n_img = np.array([len(r.images) for r in reqs])
    assert np.mean(n_img == 1) == pytest.approx(0.6, abs=0.015)
    assert set(np.unique(n_img)) == {1, 3}
    tokens = np.array([t for r in reqs for t in r.images])
    assert np.mean(tokens == 1024) == pytest.approx(0.5, abs=0.01)
    out = np.array([r.out for r in reqs])
    assert out.mean() == pytest.approx(40.0, rel=0.01)
    text = np.array([r.prompt - sum(r.images) for r in reqs])
    assert np.mean(text == 300) == pytest.approx(0.75, abs=0.015)
    # inter-arrival CV of the fitted Gamma(0.25) is 2
    one = sorted(r.arrival for r in workload_requests(wl, "v", "image", 3, 0, 0.0, 600.0, 1.0))
    gaps = np.diff(one)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.15)


def test_servegen_rate_scale_and_day_offset(tmp_path: Path) -> None:
    folder = tmp_path / "sg"
    _client(
        folder, 0, ["0,1.0,1.0,Weibull,1.0,1.0", "600,4.0,1.0,Weibull,1.0,1.0"], {"0": MM_FIELDS}
    )
    wl = load_workload(folder)
    # start at trace second 600: the 4 req/s window comes first
    reqs = workload_requests(wl, "v", "image", 1, 0, 600.0, 600.0, 0.5)
    assert len(reqs) == 1200  # 4 req/s x 600 s x 0.5
    assert 0.0 <= min(r.arrival for r in reqs) and max(r.arrival for r in reqs) < 600.0


def test_bundled_servegen_rate_follows_the_rate_curve() -> None:
    wl = load_workload("servegen-mm-image")
    assert isinstance(wl, ServeGenWorkload)
    start, length, scale = 36_000.0, 1200.0, 0.1
    counts = [len(workload_requests(wl, "v", "image", s, 0, start, length, scale)) for s in (1, 2)]
    expected = wl.mean_rate(start, start + length) * length * scale
    assert np.mean(counts) == pytest.approx(expected, rel=0.03)


def test_csv_replay_keeps_times_and_tokens(tmp_path: Path) -> None:
    wl = load_workload("azure-conv")
    assert isinstance(wl, CsvWorkload)
    reqs = workload_requests(wl, "chat", "text", 1, 0, 0.0, 600.0, 1.0)
    want = wl.t_s[wl.t_s < 600.0]
    assert [r.arrival for r in reqs] == pytest.approx(list(want))
    assert [r.prompt for r in reqs[:3]] == list(wl.context[:3])
    assert [r.out for r in reqs[:3]] == list(wl.generated[:3])
    per_hour = len(wl.t_s) * 3600.0 / wl.span_s  # an hour wraps past the trace's end
    half = workload_requests(wl, "chat", "text", 1, 0, 0.0, 3600.0, 0.5)
    assert len(half) == pytest.approx(0.5 * per_hour, rel=0.03)
    double = workload_requests(wl, "chat", "text", 1, 0, 0.0, 3600.0, 2.0)
    assert len(double) == pytest.approx(2.0 * per_hour, rel=0.03)
    ctx = np.array([r.prompt for r in double])
    assert ctx.mean() == pytest.approx(wl.context.mean(), rel=0.03)


def test_csv_with_images(tmp_path: Path) -> None:
    p = tmp_path / "mm.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,NumImages\n0.0,3000,10,2\n1.5,200,5,0\n")
    reqs = workload_requests(load_workload(p), "v", "image", 1, 0, 0.0, 2.0, 1.0)
    assert [len(r.images) for r in reqs] == [2, 0]
    assert reqs[0].prompt == 3000 and reqs[1].arrival == 1.5


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        ("a,b,c\n1,2,3\n", "x.csv", "unknown workload format"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nsoon,1,2\n", "x.csv", "x.csv:2: cannot read"),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n0,1,2\n1,-5,2\n",
            "x.csv",
            "x.csv:3: token and image counts must be >= 0",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens,NumImages\n0,1,2,-1\n",
            "x.csv",
            "x.csv:2: token and image counts must be >= 0",
        ),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n0,inf,2\n", "x.csv", "x.csv:2: cannot read"),
        # past an int64 (was an OverflowError: "internal error", exit 1) or absurd
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n0,1e308,2\n", "x.csv", "x.csv:2: at most"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n0,1,99999999999999999999\n", "x.csv", "at most"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens,NumImages\n0,1,2,1e9\n", "x.csv", "1,000 images"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nnan,1,2\n", "x.csv", "TIMESTAMP must be finite"),
        ("whatever", "x.parquet", "unknown workload format"),
    ],
)
def test_bad_files_are_refused(tmp_path: Path, content: str, name: str, message: str) -> None:
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(WorkloadError, match=message):
        load_workload(p)


def test_bad_folders_are_refused(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="not a ServeGen client folder"):
        load_workload(tmp_path)
    (tmp_path / "chunk-0-trace.csv").write_text("0,1,1,Gamma,1,1\n")
    with pytest.raises(WorkloadError, match="dataset chunk-0-dataset.json is missing"):
        load_workload(tmp_path)
    (tmp_path / "chunk-0-dataset.json").write_text('{"0": {"output_tokens": "{1 2}"}}')
    with pytest.raises(WorkloadError, match="not 'value: probability'"):
        load_workload(tmp_path)
    with pytest.raises(WorkloadError, match="no such file or folder"):
        load_workload(tmp_path / "missing")


@pytest.mark.parametrize(
    ("trace", "dataset", "message"),
    [
        ("0,nan,1,Gamma,1,1\n", '{"0": {"output_tokens": "{1: 1}"}}', "finite and >= 0"),
        ("0,-1,1,Gamma,1,1\n", '{"0": {"output_tokens": "{1: 1}"}}', "finite and >= 0"),
        ("0,1,1,Gamma,1,1\n", '{"0": {"output_tokens": "{1e300: 1}"}}', "values must be in"),
        (
            "0,1,1,Gamma,1,1\n",
            '{"0": {"output_tokens": "{1: 1}", "image_count": "{5000: 1}"}}',
            r"image_count: values must be in 0\.\.1,000",
        ),
        ("0,1,1,Gamma,1,1\n", '{"0": {"output_tokens": "{1: nan}"}}', "not 'value: probability'"),
    ],
)
def test_bad_servegen_numbers_are_refused(
    tmp_path: Path, trace: str, dataset: str, message: str
) -> None:
    """Values a fitted ServeGen client cannot have: NaN or negative rates (numpy's floor of a
    NaN was an internal error), sizes past any context, image counts past MAX_IMAGES."""
    (tmp_path / "chunk-0-trace.csv").write_text(trace)
    (tmp_path / "chunk-0-dataset.json").write_text(dataset)
    with pytest.raises(WorkloadError, match=message):
        load_workload(tmp_path)


def test_cli_bad_workload_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "trace.txt"
    bad.write_text("nothing")
    proc = subprocess.run(
        [sys.executable, "-m", "kvspread", "simulate", "serving", "--workload", f"chat={bad}"]
        + ["--out", str(tmp_path / "o"), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown workload format" in lines[0]
    assert "Traceback" not in proc.stderr


def test_real_workload_config_drives_every_service() -> None:
    cfg = config_from_mapping(
        {**real_workload_mapping("small"), "duration_s": 300.0, "workload_start_s": 36_600.0}
    )
    reqs = generate_requests(cfg, 1)
    assert {r.service for r in reqs} == {"chat", "vision", "assistant"}
    assert [r.rid for r in reqs] == list(range(len(reqs)))
    assert all(a.arrival <= b.arrival for a, b in zip(reqs, reqs[1:], strict=False))
    assert any(len(r.images) > 1 for r in reqs if r.service == "vision")
    assert generate_requests(cfg, 1)[5].prompt == reqs[5].prompt  # deterministic
    text = describe(cfg)
    assert "10:10" in text and "x 0.15" in text and "azure-conv" in text


def test_config_refuses_a_workload_for_no_service() -> None:
    data = real_workload_mapping("small")
    data["workloads"]["nobody"] = {"path": "azure-conv"}
    with pytest.raises(ConfigError, match="workloads.nobody"):
        config_from_mapping(data)


def test_bad_workload_in_the_config_file_is_a_config_error(tmp_path: Path) -> None:
    import argparse

    from simulator.serving import cli

    conf = tmp_path / "c.yaml"
    conf.write_text("workloads:\n  chat: {path: /nonexistent/trace.csv}\n")
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    with pytest.raises(ConfigError, match="workloads.chat: .*no such file or folder"):
        cli.build_config(parser.parse_args(["--config", str(conf)]))
    with pytest.raises(ConfigError, match="--rate.*--synthetic"):
        cli.build_config(parser.parse_args(["--rate", "3"]))


def test_every_bundled_workload_file_is_package_data() -> None:
    import fnmatch
    import tomllib

    root = Path(__file__).resolve().parents[3]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["simulator"]
    base = root / "simulator"
    files = [p for p in (base / "data" / "workloads").rglob("*") if p.is_file()]
    assert len(files) > 60
    for f in files:
        rel = f.relative_to(base).as_posix()
        # setuptools globs: '*' does not cross '/'
        assert any(
            fnmatch.fnmatch(rel, pat) and rel.count("/") == pat.count("/") for pat in patterns
        ), rel
