"""`kvspread simulate placement` end to end on a small run, and its input errors."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from kvspread.cli import main
from kvspread.settings import ConfigError
from simulator.cli import parse_policies
from simulator.replay.report import PUBLISHED_ALLOCATION
from simulator.seeds import parse_seeds


def test_small_run_writes_the_published_layout(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "report"
    argv = ["simulate", "placement", "--policies", "bestfit,fgd", "--seeds", "42,43"]
    argv += ["--stop-at", "12", "--out", str(out), "--jobs", "2"]
    assert main(argv, environ={}) == 0
    with (out / "allocation.csv").open() as fh:
        rows = list(csv.reader(fh))
    with PUBLISHED_ALLOCATION.open() as fh:
        published_header = next(csv.reader(fh))
    assert rows[0] == published_header
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows[1:]] == [
        ("openb_pod_list_default", "05-BestFit", "1.3", "42", "6212"),
        ("openb_pod_list_default", "05-BestFit", "1.3", "43", "6212"),
        ("openb_pod_list_default", "06-FGD", "1.3", "42", "6212"),
        ("openb_pod_list_default", "06-FGD", "1.3", "43", "6212"),
    ]
    assert float(rows[1][header_index(rows[0], "10")]) == pytest.approx(10, abs=0.6)
    assert rows[1][header_index(rows[0], "130")] == ""  # stopped at 12 %
    for name in ("frag_ratio.csv", "placement.md", "unallocated.png", "frag_ratio.png"):
        assert (out / name).stat().st_size > 0
    assert "| FGD |" in capsys.readouterr().out


def header_index(header: list[str], col: str) -> int:
    return header.index(col)


def test_environment_sets_defaults(tmp_path: Path) -> None:
    env = {
        "KVSPREAD_SIMULATE_PLACEMENT_POLICIES": "random",
        "KVSPREAD_SIMULATE_PLACEMENT_SEEDS": "7",
        "KVSPREAD_SIMULATE_PLACEMENT_OUT": str(tmp_path),
    }
    assert main(["simulate", "placement", "--stop-at", "3"], environ=env) == 0
    text = (tmp_path / "allocation.csv").read_text()
    assert ",01-Random,1.3,7," in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policies", "fgd,nope"], "unknown policy nope"),
        (["--seeds", "5..1"], "--seeds: '5..1' is a reversed range (write 1..5)"),
        (["--seeds", "-3"], "--seeds: '-3' is not a seed (a whole number >= 0)"),
        (["--seeds", "x"], "--seeds: 'x' is not a seed or a range a..b"),
        (["--seeds", ""], "--seeds: placement.seeds: empty; give a value"),
        (["--policies", ""], "--policies: placement.policies: empty; give a value"),
        (["--trace", "nosuch"], "not a bundled trace name"),
        (
            ["--extender-weight", "-1"],
            "--extender-weight: placement.extender_weight: expected a number > 0, got -1.0",
        ),
        (
            ["--stop-at", "-5"],
            "--stop-at: placement.stop_at: expected a percentage in (0, 130], got -5.0",
        ),
        (
            ["--stop-at", "lots"],
            "--stop-at: placement.stop_at: expected a number, got 'lots'",
        ),
        (["--jobs", "0"], "--jobs: placement.jobs: expected an integer >= 1, got 0"),
    ],
)
def test_bad_input_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    code = main(["simulate", "placement", "--out", str(tmp_path), *argv], environ={})
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "allocation.csv").exists()


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--stop-at", "-5"], "--stop-at: placement.stop_at: expected a percentage in (0, 130]"),
        (["--stop-at", "200"], "--stop-at: placement.stop_at: expected a percentage in (0, 130]"),
        (["--jobs", "x"], "--jobs: placement.jobs: expected an integer, got 'x'"),
    ],
)
def test_bad_flag_is_one_line_without_a_traceback(
    tmp_path: Path, argv: list[str], line: str
) -> None:
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "kvspread", "simulate", "placement", "--out", str(tmp_path)]
    proc = subprocess.run(cmd + argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert "\n" not in err and "Traceback" not in err and "_percent" not in err
    assert err.startswith(f"kvspread: configuration error: {line}"), err


def test_placement_yaml_section_and_env(tmp_path: Path) -> None:
    conf = tmp_path / "replay.yaml"
    conf.write_text("placement:\n  stop_at: 3\n  seeds: [7]\n  policies: [random]\n")
    env = {"KVSPREAD_SIMULATE_PLACEMENT_OUT": str(tmp_path)}
    assert main(["simulate", "placement", "--config", str(conf)], environ=env) == 0
    assert ",01-Random,1.3,7," in (tmp_path / "allocation.csv").read_text()
    conf.write_text("placement:\n  stop_at: 300\n")
    assert main(["simulate", "placement", "--config", str(conf)], environ=env) == 2
    conf.write_text("placement:\n  stopat: 3\n")
    with pytest.raises(ConfigError, match=r"placement\.stopat: unknown key \(known: "):
        from kvspread.cli import build_parser
        from simulator.cli import _placement_settings

        args = build_parser({}).parse_args(["simulate", "placement", "--config", str(conf)])
        _placement_settings(args, {})


def test_parsers() -> None:
    assert parse_seeds("42..44,50") == [42, 43, 44, 50]
    assert parse_policies("FGD, kvspread") == ["fgd", "kvspread"]
    with pytest.raises(ConfigError):
        parse_seeds("")


def test_help_has_examples(capsys: pytest.CaptureFixture) -> None:
    for argv in (["simulate", "--help"], ["simulate", "placement", "--help"]):
        with pytest.raises(SystemExit):
            main(argv, environ={})
        assert "examples:" in capsys.readouterr().out


def test_unwritable_out_fails_before_the_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the folder should go: mkdir fails
    argv = ["simulate", "placement", "--policies", "fgd", "--seeds", "42"]
    code = main([*argv, "--out", str(blocker / "report"), "--no-progress"], environ={})
    assert code == 2
    err = capsys.readouterr().err
    assert "--out" in err and "cannot write" in err
    assert len(err.strip().splitlines()) == 1


def test_out_jobs_progress_before_the_subcommand_are_kept() -> None:
    import argparse

    from simulator.cli import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="cmd"), {})
    for mode in ("serving", "placement"):
        args = parser.parse_args(
            ["simulate", "--out", "/tmp/x", "--jobs", "3", "--no-progress", mode]
        )
        assert (args.out, args.jobs, args.progress) == ("/tmp/x", 3, False)
        args = parser.parse_args(["simulate", mode, "--out", "/tmp/y", "--progress"])
        assert (
            "/tmp/y"
            in (
                getattr(args, "out", None),
                args.cfg__placement__out if mode == "placement" else None,
            )
            and args.progress is True
        )
    bare = parser.parse_args(["simulate"])
    assert bare.out is None and bare.jobs is None and bare.progress is None


def test_placement_progress_lines_off_a_terminal() -> None:
    import io

    from simulator.replay.runner import Progress, ReplayJob

    stream = io.StringIO()
    p = Progress([ReplayJob("default", "fgd", 42)] * 20, True, stream)
    for _ in range(20):
        p.finished("fgd", 1.0, "fgd seed 42")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10 and lines[-1].startswith("placement: 100% of the work (20/20 runs")
