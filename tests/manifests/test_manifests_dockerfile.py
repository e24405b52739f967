"""The Dockerfile's promises, checked statically (no container engine runs on CI machines):
Debian base with bcc from apt, the package installed with pip, a non-root default user,
and a build context that carries every package the wheel needs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _final_stage() -> list[tuple[str, str]]:
    ins = _instructions()
    last_from = max(i for i, (word, _) in enumerate(ins) if word == "FROM")
    return ins[last_from:]


def test_debian_base_with_bcc_from_apt() -> None:
    froms = [args for word, args in _instructions() if word == "FROM"]
    assert froms and all(a.startswith("debian:") for a in froms)
    runs = " ".join(args for word, args in _final_stage() if word == "RUN")
    for pkg in ("python3-bpfcc", "libbpfcc", "bpftool"):
        assert re.search(rf"\b{pkg}\b", runs), f"{pkg} is not installed in the final image"
    assert "--system-site-packages" in runs, "the venv must see the apt-installed bcc module"
    assert "pip install" in runs


def test_default_user_is_not_root() -> None:
    users = [args for word, args in _final_stage() if word == "USER"]
    assert users, "the final stage sets no USER"
    uid = users[-1].split(":")[0]
    assert uid not in ("0", "root")


def test_entrypoint_is_the_cli() -> None:
    entry = [args for word, args in _final_stage() if word == "ENTRYPOINT"]
    assert entry == ['["kvspread"]']


def test_build_context_carries_every_package() -> None:
    """Each package pyproject.toml installs is copied into the build stage."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    includes = project["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = {args.split()[0] for word, args in _instructions() if word == "COPY"}
    for pattern in includes:
        package = pattern.rstrip("*")
        assert package in copied, f"package {package} is not copied into the image"
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert not {p.rstrip("*") for p in includes} & set(ignored)
