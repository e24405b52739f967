"""Regenerate every observability artefact: `python -m observability.generate [--check]`.

Writes the Prometheus rules (plain file and PrometheusRule), the Grafana dashboards, and the
generated reference pages (docs/metrics.md, docs/config.md). `--check` writes nothing and
exits 1 listing the files that differ, which is what the tests and CI use.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from observability import dashboards, rules
from observability.render import to_json, to_yaml

__all__ = ["artefacts", "main", "ROOT"]

ROOT: Final = Path(__file__).resolve().parent.parent


def _config_doc() -> str:
    from observability.configdoc import render_config_doc

    return render_config_doc()


def _metrics_doc() -> str:
    from observability.metricsdoc import render_metrics_doc

    return render_metrics_doc()


def artefacts() -> dict[str, Callable[[], str]]:
    """Relative path -> function producing its exact text."""
    out: dict[str, Callable[[], str]] = {
        "manifests/prometheus/kvspread-rules.yaml": lambda: to_yaml(rules.rules_file()),
        "manifests/prometheus/prometheusrule.yaml": lambda: to_yaml(rules.prometheus_rule()),
        "docs/metrics.md": _metrics_doc,
        "docs/config.md": _config_doc,
    }
    built: dict[str, str] | None = None

    def dash(name: str) -> Callable[[], str]:
        def render() -> str:
            nonlocal built
            if built is None:
                built = {k: to_json(v) for k, v in dashboards.build_all().items()}
            return built[name]

        return render

    for name in dashboards.DASHBOARDS:
        out[f"manifests/dashboards/{name}"] = dash(name)
    return out


def main(argv: Sequence[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m observability.generate",
        description="Regenerate kvspread's dashboards, rules and reference docs.",
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file is out of date"
    )
    args = parser.parse_args(argv)
    stale = []
    for rel, render in artefacts().items():
        path = root / rel
        text = render()
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(rel)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {rel}")
    if stale:
        print("out of date (run `python -m observability.generate`):", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
