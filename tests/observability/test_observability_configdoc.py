"""The generated configuration reference covers every flag and every config field."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import re
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvspread.cli import build_parser
from kvspread.settings import ConfigError, dump, load
from observability import configdoc

DOC = configdoc.render_config_doc()


def test_every_flag_of_every_subcommand_is_listed() -> None:
    for path, sub in configdoc._subparsers(build_parser({})):
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction) or not action.option_strings:
                continue
            assert f"`{action.option_strings[0]}`" in DOC, (path, action.option_strings)


ROOT = Path(__file__).resolve().parents[2]
COMMITTED = (ROOT / "docs" / "config.md").read_text()


def _doc_keys(text: str) -> dict[str, list[tuple[str, str]]]:
    """Root class name -> (key, meaning) of every row of its table in docs/config.md."""
    out: dict[str, list[tuple[str, str]]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = re.match(r"Keys of `(\w+)`", line)
        if m:
            current = m.group(1)
            out[current] = []
        elif line.startswith("### "):
            current = None
        elif current and (row := re.match(r"\| `([^`]+)` \| .* \| ([^|]*) \|$", line)):
            out[current].append((row.group(1), row.group(2).strip()))
    return out


def _loaders() -> dict[str, tuple[type, Callable[[dict[str, Any]], Any]]]:
    from bpf.config import CollectorConfig
    from bpf.config import from_mapping as collector
    from extender.config import ExtenderConfig
    from metrics_adapter.config import AdapterConfig
    from router.config import RouterConfig
    from simulator.replay.config import ReplayConfig
    from simulator.serving.config import SimConfig, config_from_mapping

    return {
        "ExtenderConfig": (ExtenderConfig, ExtenderConfig.from_mapping),
        "AdapterConfig": (AdapterConfig, AdapterConfig.from_mapping),
        "CollectorConfig": (CollectorConfig, collector),
        "ReplayConfig": (ReplayConfig, lambda m: load(ReplayConfig, m)),
        "SimConfig": (SimConfig, config_from_mapping),
        "RouterConfig": (RouterConfig, _router_loader),
    }


def _router_loader(doc: dict[str, Any]) -> Any:
    """The picker needs exactly one endpoint source, which no default gives: add one the
    documented key does not touch (a pool for `endpoints` keys, else a static endpoint)."""
    from router.config import RouterConfig

    source = (
        {"pool": {"name": "p"}}
        if "endpoints" in doc
        else {"endpoints": {"static": ["127.0.0.1:8000"]}}
    )
    return RouterConfig.from_mapping({**source, **doc})


REQUIRED = {"url": "http://127.0.0.1:8000/metrics"}
"""Values of required item keys (an engine target needs its URL)."""


NAMED_SAMPLES: dict[tuple[str, str], Any] = {
    # a workload per service (the loader wants one for each), all the bundled Azure trace
    ("SimConfig", "workloads"): lambda d: {svc: {"path": "azure-conv"} for svc in d["services"]},
}
"""Entries for named mappings that are empty by default, so their keys can be loaded."""


def _sample(cls: Any, default: Any, parts: list[str]) -> Any:
    """A YAML mapping that sets the dotted doc key `parts` of config class `cls` to its
    default (`default`: `dump` of the class's default instance)."""
    if not parts:
        return default
    head, rest = parts[0], parts[1:]
    name = head.removesuffix("[]")
    tp = typing.get_type_hints(cls)[name]
    if head.endswith("[]"):
        elem = typing.get_args(tp)[0]
        names = {f.name for f in dataclasses.fields(elem)}
        items = default[name] or [dump(elem(**{k: v for k, v in REQUIRED.items() if k in names}))]
        return {name: [{**items[0], **_sample(elem, items[0], rest)}]}
    if rest and rest[0] == "<name>":
        elem = typing.get_args(tp)[1]
        if not default[name] and (cls.__name__, name) in NAMED_SAMPLES:
            return {name: NAMED_SAMPLES[cls.__name__, name](default)}
        entry = next(iter(default[name]))
        return {name: {entry: _sample(elem, default[name][entry], rest[1:])}}
    return {name: _sample(tp, default[name], rest)}


def test_committed_doc_lists_every_part() -> None:
    keys = _doc_keys(COMMITTED)
    assert set(keys) == set(_loaders())
    assert "explain.enabled" in {k for k, _ in keys["ExtenderConfig"]}
    assert not any(k in ("ledger_ttl_s", "explain_max_pods") for k, _ in keys["ExtenderConfig"])


@pytest.mark.parametrize(
    ("root", "key"),
    [(root, key) for root, rows in _doc_keys(COMMITTED).items() for key, _ in rows],
)
def test_every_documented_key_is_accepted_by_its_loader(root: str, key: str) -> None:
    """Each key of docs/config.md, set to its documented default, loads through its part's
    own loader and gives the default back."""
    cls, loader = _loaders()[root]
    parts = key.split(".")
    try:
        doc = _sample(cls, dump(cls()), parts)
    except KeyError:
        pytest.fail(f"{root} has no key {key}, which docs/config.md lists")
    if key == "rules":
        doc = {"rules": None}  # the empty default means "the default rules"
    try:
        cfg = loader(doc)
    except ConfigError as exc:
        pytest.fail(f"{root} rejects documented key {key}: {exc}")
    if "[]" not in key and "<name>" not in key and key != "rules":
        got: Any = cfg
        for part in parts:
            got = getattr(got, part)
        want: Any = cls()
        for part in parts:
            want = getattr(want, part)
        assert got == want, key


def test_every_documented_key_says_what_it_means() -> None:
    for root, rows in _doc_keys(COMMITTED).items():
        for key, meaning in rows:
            assert len(meaning) > 3, (root, key)


@pytest.mark.parametrize(("title", "modname", "root", "page"), configdoc.CONFIG_MODULES)
def test_every_config_key_is_listed(title: str, modname: str, root: str | None, page: str) -> None:
    assert f"### {title} (`{modname}`)" in DOC
    if root is None:
        return
    cls = getattr(importlib.import_module(modname), root)
    for key, *_ in configdoc.config_keys(cls):
        assert f"| `{key}` |" in DOC or "Same keys as" in DOC, (modname, key)


def test_field_docs_read_docstrings_then_trailing_comments() -> None:
    @dataclasses.dataclass
    class Demo:
        a: int = 1
        """What a means."""
        b: int = 2  # what b means
        c: int = 3

    assert configdoc.field_docs(Demo) == {"a": "What a means.", "b": "what b means"}


def test_docstring_blocks_become_fenced_code() -> None:
    doc = "Layout::\n\n    port: 9435\n    bpf: {enabled: true}\n\nAfter."
    md = configdoc._docstring_markdown(doc)
    assert md == [
        "Layout:",
        "",
        "```yaml",
        "port: 9435",
        "bpf: {enabled: true}",
        "```",
        "",
        "After.",
        "",
    ]


def test_union_types_are_escaped_for_markdown_tables() -> None:
    assert "`str \\| None`" in DOC
