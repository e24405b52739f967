"""The generated configuration reference covers every flag and every config field."""

from __future__ import annotations

import argparse
import dataclasses
import importlib

import pytest

from kvspread.cli import build_parser
from observability import configdoc

DOC = configdoc.render_config_doc()


def test_every_flag_of_every_subcommand_is_listed() -> None:
    for path, sub in configdoc._subparsers(build_parser({})):
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction) or not action.option_strings:
                continue
            assert f"`{action.option_strings[0]}`" in DOC, (path, action.option_strings)


@pytest.mark.parametrize("title,modname,page", configdoc.CONFIG_MODULES)
def test_every_config_field_is_listed(title: str, modname: str, page: str) -> None:
    try:
        mod = importlib.import_module(modname)
    except ImportError:
        assert f"No `{modname}` module" in DOC
        return
    assert f"### {title} (`{modname}`)" in DOC
    for obj in vars(mod).values():
        if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == modname:
            for f in dataclasses.fields(obj):
                if not f.name.startswith("_"):
                    assert f"{f.name}` |" in DOC, (modname, obj.__name__, f.name)


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
