"""The `kvspread` command: one subcommand per part.

Each part owns a `cli` module with `register(subparsers)`; this module only assembles
them, so that a part's flags live next to its config. Parts receive `environ` from here
and never read sys.argv or os.environ themselves.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Mapping, Sequence

from kvspread import __version__
from kvspread.settings import ConfigError

__all__ = ["main", "build_parser", "one_line"]

PARTS = ("extender.cli", "metrics_adapter.cli", "bpf.cli", "simulator.cli", "router.cli")

EPILOG = """examples:
  kvspread simulate                        quick evaluation, report in ./kvspread-report
  kvspread extender serve --standalone     scheduler extender on 127.0.0.1:8888
  kvspread adapter serve --requestheader-client-ca-file front-proxy-ca.crt
  kvspread collector run --standalone --port 9435
  kvspread router serve --endpoints 10.0.0.5:8000,10.0.0.6:8000
"""


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvspread",
        description="Schedule and autoscale multimodal LLM inference on Kubernetes by GPU "
        "memory, KV-cache fragmentation, modality mix and latency.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kvspread {__version__}")
    sub = parser.add_subparsers(dest="part", metavar="{extender,adapter,collector,simulate,router}")
    for modname in PARTS:
        importlib.import_module(modname).register(sub, environ)
    return parser


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
    parser = build_parser(env)
    words = list(sys.argv[1:] if argv is None else argv)
    args, extra = parser.parse_known_args(words)
    if extra:  # refused by the (sub)command they were given to, with its usage
        _command_parser(parser, words).error(f"unrecognized arguments: {' '.join(extra)}")
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except ConfigError as exc:
        print(f"kvspread: configuration error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
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
