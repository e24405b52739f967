"""The one `kvspread` command: every subcommand answers --help, and help matches the code."""

import subprocess
import sys

import pytest

from kvspread.cli import build_parser, main

COMMANDS = [
    [],
    ["extender"],
    ["extender", "serve"],
    ["adapter"],
    ["adapter", "serve"],
    ["collector"],
    ["collector", "run"],
    ["simulate"],
    ["simulate", "placement"],
    ["simulate", "serving"],
    ["router"],
    ["router", "serve"],
]


def _exit(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main(argv, environ={})
    return int(info.value.code or 0)


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "kvspread")
def test_every_subcommand_has_help_and_refuses_an_unknown_flag_with_it(cmd, capsys):
    name = " ".join(["kvspread", *cmd])
    assert _exit([*cmd, "--help"]) == 0
    assert capsys.readouterr().out.startswith(f"usage: {name}")
    # an unknown flag: the usage of the command it was given to, not the top level's
    assert _exit([*cmd, "--no-such-flag"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: {name} ")
    assert err.rstrip().endswith(f"{name}: error: unrecognized arguments: --no-such-flag")


def test_top_level_lists_every_part():
    text = build_parser({}).format_help()
    for part in ("extender", "adapter", "collector", "simulate"):
        assert part in text


def test_bare_command_prints_help_and_fails(capsys):
    assert main([], environ={}) == 2
    out, err = capsys.readouterr()
    assert "usage: kvspread" in out
    assert err.startswith("kvspread: error: name a part: extender, adapter"), err


def test_console_script_runs_as_a_module():
    out = subprocess.run(
        [sys.executable, "-m", "kvspread", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().startswith("kvspread ")


def test_bad_config_file_is_a_clear_error_not_a_traceback(tmp_path, capsys):
    bad = tmp_path / "x.yaml"
    bad.write_text("- not a mapping\n")
    code = main(["extender", "serve", "--standalone", "--config", str(bad)], environ={})
    assert code == 2
    assert "mapping" in capsys.readouterr().err
