"""Every module's `__all__` names things that exist (an attribute or a submodule), in every
package of the project: one check instead of a list of modules per part."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil

import pytest

PACKAGES = (
    "kvspread",
    "extender",
    "metrics_adapter",
    "bpf",
    "simulator",
    "router",
    "observability",
)


def _modules() -> list[str]:
    out = []
    for pkg in PACKAGES:
        out.append(pkg)
        path = importlib.import_module(pkg).__path__
        out += [m.name for m in pkgutil.walk_packages(path, pkg + ".")]
    return [m for m in out if not m.endswith("__main__")]  # __main__ runs the CLI


@pytest.mark.parametrize("name", _modules())
def test_all_names_exist(name: str) -> None:
    mod = importlib.import_module(name)
    for attr in getattr(mod, "__all__", ()):
        found = hasattr(mod, attr) or importlib.util.find_spec(f"{name}.{attr}") is not None
        assert found, f"{name}.__all__ names missing {attr}"
