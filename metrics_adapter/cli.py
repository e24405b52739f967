"""`kvspread adapter`: placeholder registration; the part's issue replaces it."""

from __future__ import annotations

import argparse
from collections.abc import Mapping


def register(sub: argparse._SubParsersAction, environ: Mapping[str, str]) -> None:
    sub.add_parser("adapter", help="(being built)")
