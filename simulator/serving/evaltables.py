"""docs/evaluation.md's serving tables, printed from one run folder's CSV files.

`kvspread simulate serving --out DIR` writes `serving_summary.csv` (means over the seeds),
`serving_comparison.csv` (paired differences against kube-default + request-rate) and
`serving_kvspread_comparison.csv` (kvspread + slo against each baseline) and, with several
routing policies, `serving_routing_comparison.csv` (each against the first). The evaluation
page shows those files in the report's own table formats, printed by this module, so no
number on that page is typed by hand:

    python -m simulator.serving.evaltables DIR

Exit status 2 with one line on stderr when DIR lacks a file or a file is not such a CSV.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from simulator.serving import routing_report
from simulator.serving.report import comparison_table, markdown_table, users_table

MAX_ROWS: Final = 10_000
"""Rows read per CSV file at most (a 16-pair, 10-seed run's comparison has about 200)."""
SUMMARY: Final = "serving_summary.csv"
COMPARISON: Final = "serving_comparison.csv"
AGAINST: Final = "serving_kvspread_comparison.csv"
ROUTING: Final = "serving_routing_comparison.csv"


class TablesError(Exception):
    """A run folder that cannot give the tables (the message is one line)."""


def _value(text: str) -> Any:
    """A CSV cell back as the report wrote it: int, float, or the text ("" stays "")."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_rows(path: Path, needed: Sequence[str]) -> list[dict[str, Any]]:
    """The rows of one of the report's CSV files, with the columns `needed` checked."""
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            missing = [k for k in needed if k not in (reader.fieldnames or ())]
            if missing:
                raise TablesError(f"{path}: no column {', '.join(missing)}")
            rows: list[dict[str, Any]] = []
            for row in reader:
                if len(rows) == MAX_ROWS:
                    raise TablesError(f"{path}: more than {MAX_ROWS} rows")
                rows.append({k: _value(v or "") for k, v in row.items() if k is not None})
    except OSError as e:
        raise TablesError(f"{path}: {e.strerror or e}") from None
    except (csv.Error, UnicodeDecodeError) as e:
        raise TablesError(f"{path}: not a CSV file ({e})") from None
    return rows


def tables(folder: Path) -> str:
    """The tables of a run folder, as docs/evaluation.md shows them: means over seeds, what
    users compare, paired against the baseline (only when the run has the baseline), kvspread
    + slo against each baseline (only when it has kvspread + slo) and each routing against
    the first (only with several routings)."""
    pair = ("policy", "autoscaler")
    agg = read_rows(folder / SUMMARY, pair)
    cmp_keys = (*pair, "metric", "mean_diff", "ci_low", "ci_high", "verdict")
    cmp = read_rows(folder / COMPARISON, cmp_keys)
    parts = ["Means over the seeds:", markdown_table(agg), "What users compare:", users_table(agg)]
    if any(r["verdict"] != "no data" for r in cmp):
        parts += [
            "Paired differences against kube-default + request-rate (mean [95 % CI] verdict):",
            comparison_table(cmp),
        ]
    against_path = folder / AGAINST
    if against_path.is_file():
        against = read_rows(against_path, (*cmp_keys, "baseline_policy"))
        if against:
            parts += [
                "kvspread + slo against each baseline (paired by seed):",
                comparison_table(against, against=True),
            ]
    routing_path = folder / ROUTING
    if routing_path.is_file():
        routed = read_rows(routing_path, (*cmp_keys, "routing", "baseline"))
        if routed:
            parts += [
                f"Each routing against {routed[0]['baseline']} under the same placement and"
                " autoscaler (paired by seed, mean [95 % CI] verdict):",
                routing_report.comparison_table(routed),
            ]
    return "\n\n".join(p for p in parts if p) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the tables of the folder given; 2 with one line on a bad folder."""
    ap = argparse.ArgumentParser(
        prog="python -m simulator.serving.evaltables",
        description="Print docs/evaluation.md's serving tables from a run folder's CSVs.",
    )
    ap.add_argument("folder", type=Path, help="a `kvspread simulate serving --out` folder")
    args = ap.parse_args(argv)
    try:
        sys.stdout.write(tables(args.folder))
    except TablesError as e:
        print(f"evaltables: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
