"""docs/architecture.md's module map lists every module of the package, and nothing gone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "kvspread",
    "extender",
    "metrics_adapter",
    "bpf",
    "router",
    "simulator",
    "observability",
)


def _modules() -> set[str]:
    """Every hand-written module: generated stubs, package markers and entry shims left out."""
    out = set()
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            name = path.name
            if name in ("__init__.py", "__main__.py") or "_pb2" in name:
                continue
            out.add(path.relative_to(ROOT).as_posix())
    return out


def _listed() -> set[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+\.py)` \|", section, re.M))


def test_every_module_is_in_the_map() -> None:
    missing = sorted(_modules() - _listed())
    assert not missing, f"add to docs/architecture.md's module map: {missing}"


def test_the_map_lists_no_module_that_is_gone() -> None:
    gone = sorted(_listed() - _modules())
    assert not gone, f"docs/architecture.md lists modules that do not exist: {gone}"


def test_each_row_says_what_the_module_owns() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+\.py)` \| (.*) \|$", section, re.M)
    assert rows and all(len(owns.strip()) > 10 for _, owns in rows)


PARTS = ("extender", "metrics_adapter", "bpf", "router")
"""The deployed parts: each imports the shared core (`kvspread`) and its own modules only."""


def _imports(path: Path) -> set[str]:
    import ast

    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_the_parts_import_the_core_never_each_other() -> None:
    crossings = []
    for part in PARTS:
        for path in sorted((ROOT / part).rglob("*.py")):
            for other in sorted(_imports(path) & (set(PARTS) | {"simulator"}) - {part}):
                crossings.append(f"{path.relative_to(ROOT)} imports {other}")
    assert not crossings, crossings


def test_the_core_imports_no_part() -> None:
    crossings = [
        f"{path.relative_to(ROOT)} imports {other}"
        for path in sorted((ROOT / "kvspread").rglob("*.py"))
        for other in sorted(_imports(path) & (set(PARTS) | {"simulator", "observability"}))
    ]
    assert not crossings, crossings
