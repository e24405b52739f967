"""The `kvspread` command: one subcommand per part.

Each part owns a `cli` module with `register(subparsers)`; this module only assembles
them, so that a part's flags live next to its config. Parts receive `environ` from here
and never read sys.argv or os.environ themselves. Only the part named on the command line
is imported (`kvspread --version` imports none): the simulator alone pulls numpy and httpx,
seconds of start-up a server or a version query should not pay.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import signal
import sys
from collections.abc import Mapping, Sequence

from kvspread import __version__, logs
from kvspread.settings import ConfigError

__all__ = ["main", "build_parser", "one_line"]

PARTS: dict[str, str] = {
    "extender": "extender.cli",
    "adapter": "metrics_adapter.cli",
    "collector": "bpf.cli",
    "simulate": "simulator.cli",
    "router": "router.cli",
}
"""{subcommand: the part's cli module, which registers it}."""

_NEGATIVE = re.compile(r"-\d")
"""A value that begins like a negative number (`-3..-1`): argparse would read it as a flag."""

EPILOG = """examples:
  kvspread simulate                        quick evaluation, report in ./kvspread-report
  kvspread extender serve --standalone     scheduler extender on 127.0.0.1:8888
  kvspread adapter serve --requestheader-client-ca-file front-proxy-ca.crt
  kvspread collector run --standalone --port 9435
  kvspread router serve --endpoints 10.0.0.5:8000,10.0.0.6:8000
"""


def build_parser(
    environ: Mapping[str, str], parts: Sequence[str] | None = None
) -> argparse.ArgumentParser:
    """The whole command, or only the subcommands in `parts` (their modules alone imported)."""
    parser = argparse.ArgumentParser(
        prog="kvspread",
        description="Schedule and autoscale multimodal LLM inference on Kubernetes by GPU "
        "memory, KV-cache fragmentation, modality mix and latency.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kvspread {__version__}")
    sub = parser.add_subparsers(dest="part", metavar="{" + ",".join(PARTS) + "}")
    for name in PARTS if parts is None else parts:
        importlib.import_module(PARTS[name]).register(sub, environ)
    return parser


def _parts_needed(words: Sequence[str]) -> list[str] | None:
    """The subcommands `words` can reach: the part it names, none for a bare `--version`,
    or all (None) for help, a bare `kvspread` or a mistake, whose message lists them."""
    for word in words:
        if not word.startswith("-"):
            return [word] if word in PARTS else None
    if "--version" in words and not {"-h", "--help"} & set(words):
        return []
    return None


def _join_negative_values(words: Sequence[str]) -> list[str]:
    """`--seeds -3..-1` as `--seeds=-3..-1`, so that the value reaches its check (which
    says what a seed is) instead of argparse's "expected one argument"."""
    out: list[str] = []
    for word in words:
        if out and out[-1].startswith("--") and "=" not in out[-1] and _NEGATIVE.match(word):
            out[-1] = f"{out[-1]}={word}"
        else:
            out.append(word)
    return out


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, so that it unwinds as Ctrl-C does."""


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C: worker pools and servers shut down in their `with`
    blocks (no leaked semaphores), instead of the process dying where it stands."""
    raise Terminated


def _command_parser(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    """The parser of the deepest subcommand named in `words` (`kvspread extender serve`)."""
    for word in words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and word in subs[0].choices:
            parser = subs[0].choices[word]
    return parser


def one_line(message: str) -> str:
    """A message on one line: YAML parser errors span several (a source excerpt and a caret
    under the column); keep their words, drop the caret lines."""
    parts = [line.strip() for line in message.splitlines()]
    return " ".join(p for p in parts if p and set(p) != {"^"})


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if environ is None else environ)
    words = _join_negative_values(sys.argv[1:] if argv is None else argv)
    parser = build_parser(env, _parts_needed(words))
    args, extra = parser.parse_known_args(words)
    if extra:  # refused by the (sub)command they were given to, with its usage
        _command_parser(parser, words).error(f"unrecognized arguments: {' '.join(extra)}")
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        print(
            f"kvspread: error: name a part: {', '.join(PARTS)} (kvspread --help says what "
            "each does; kvspread simulate is the quick evaluation)",
            file=sys.stderr,
        )
        return 2
    log_format = getattr(args, "log_format", None) or env.get("KVSPREAD_LOG_FORMAT") or "json"
    try:
        logs.set_format(log_format)
    except ValueError:
        print(
            f"kvspread: configuration error: KVSPREAD_LOG_FORMAT {log_format!r}: expected json "
            "or text",
            file=sys.stderr,
        )
        return 2
    if argv is None and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)
    try:
        return int(func(args) or 0)
    except ConfigError as exc:
        print(f"kvspread: configuration error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # the shell's 128 + the signal's number
        sig = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
        if words[:1] == ["simulate"]:  # else a run's output just stops, and looks finished
            print(
                f"kvspread: interrupted ({sig.name}): the run did not finish, and its report "
                "was not written (the --out folder holds only what finished before)",
                file=sys.stderr,
            )
        return 128 + sig
    except OSError as exc:
        # a file, folder or port the checks before the run could not foresee
        where = f" {exc.filename}" if exc.filename else ""
        print(f"kvspread: error:{where} {exc.strerror or exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if env.get("KVSPREAD_TRACEBACK"):
            raise
        print(
            f"kvspread: internal error: {type(exc).__name__}: {str(exc)[:300]} (rerun with "
            "KVSPREAD_TRACEBACK=1 for the traceback and report it)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
