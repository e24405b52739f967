"""The shipped dashboards (manifests/dashboards/*.json, what users import) resolve: every
template variable a dashboard uses is defined in it, before any variable that uses it, and
each file is a Grafana dashboard model.

No Grafana server can be installed here (not in Debian, not on PyPI or npm as a server), so
the model check decodes each file with the Grafana Foundation SDK's dashboard model (types
generated from Grafana's schema) and requires the round trip to lose nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "manifests" / "dashboards").glob("*.json"))

# $name, ${name}, ${name:format}, [[name]]; names starting with __ are Grafana's built-ins
# ($__rate_interval, $__all, ...). PromQL's $1 in label_replace is not a variable.
USE = re.compile(r"\$\{([A-Za-z_]\w*)(?::[^}]*)?\}|\$([A-Za-z_]\w*)|\[\[([A-Za-z_]\w*)\]\]")


def _strings(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, f"{path}[{i}]")


def _used(node: Any) -> set[tuple[str, str]]:
    out = set()
    for path, text in _strings(node):
        for m in USE.finditer(text):
            name = next(g for g in m.groups() if g)
            if not name.startswith("__"):
                out.add((name, path))
    return out


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_there_are_dashboards() -> None:
    assert len(FILES) >= 6


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_variable_used_is_defined(path: Path) -> None:
    d = _load(path)
    variables = d.get("templating", {}).get("list", [])
    defined = {v["name"] for v in variables}
    body = {k: v for k, v in d.items() if k != "templating"}
    missing = sorted({(n, p) for n, p in _used(body) if n not in defined})
    assert not missing, f"{path.name}: undefined variables (name, where): {missing[:5]}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_variables_use_only_earlier_variables(path: Path) -> None:
    """Grafana resolves chained variables in list order: a query variable may use only
    variables defined above it (the data source first)."""
    seen: set[str] = set()
    for v in _load(path).get("templating", {}).get("list", []):
        used = {n for n, _ in _used(v) if n != v["name"]}
        assert used <= seen, f"{path.name}: variable {v['name']} uses {used - seen} before them"
        seen.add(v["name"])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_datasource_variable_selects_prometheus(path: Path) -> None:
    d = _load(path)
    variables = d["templating"]["list"]
    assert variables and variables[0]["name"] == "datasource"
    assert variables[0]["type"] == "datasource" and variables[0]["query"] == "prometheus"
    refs = [v for p, v in _strings(d) if p.endswith("/datasource/uid")]
    assert refs and set(refs) == {"${datasource}"}, f"{path.name}: {set(refs)}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_file_is_a_grafana_dashboard_model(path: Path) -> None:
    dashboard = pytest.importorskip("grafana_foundation_sdk.models.dashboard")
    encoder = pytest.importorskip("grafana_foundation_sdk.cog.encoder")
    d = _load(path)
    model = dashboard.Dashboard.from_json(d)
    back = json.loads(json.dumps(model, cls=encoder.JSONEncoder))
    lost = _lost(d, back)
    assert not lost, f"{path.name}: not in Grafana's dashboard model: {lost[:5]}"
    assert d["schemaVersion"] >= 36, "dashboards need the datasource-ref form (schema 36+)"


def _lost(a: Any, b: Any, path: str = "") -> list[str]:
    """Paths present in `a` that the model dropped or changed."""
    if isinstance(a, dict):
        if not isinstance(b, dict):
            return [path]
        out = []
        for k, v in a.items():
            out += [f"{path}/{k}"] if k not in b else _lost(v, b[k], f"{path}/{k}")
        return out
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return [path]
        return [
            p
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for p in _lost(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [path]
