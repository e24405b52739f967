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

__all__ = ["main", "build_parser"]

PARTS = ("extender.cli", "metrics_adapter.cli", "bpf.cli", "simulator.cli", "router.cli")

EPILOG = """examples:
  kvspread simulate                        quick evaluation, report in ./kvspread-report
  kvspread extender serve --standalone     scheduler extender on 127.0.0.1:8888
  kvspread adapter serve --secure-port 6443
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


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if environ is None else environ)
    parser = build_parser(env)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except ConfigError as exc:
        print(f"kvspread: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
