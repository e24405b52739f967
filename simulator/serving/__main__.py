"""`python3 -m simulator.serving ...`: the same as `kvspread simulate serving ...`."""

from __future__ import annotations

import argparse
import sys

from kvspread.settings import ConfigError
from simulator.serving import cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m simulator.serving",
        description="Multimodal serving simulation: placement policies x seeds.",
    )
    cli.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return cli.run(args)
    except ConfigError as exc:
        print(f"serving: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
