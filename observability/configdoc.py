"""docs/config.md, generated from the parts' own schemas.

Two sources, both introspected at generation time so the page cannot drift:
- the `kvspread` command line (`kvspread.cli.build_parser`): every subcommand's flags with
  their help, which names the `KVSPREAD_*` environment variable each one reads;
- each part's config module (`extender.config`, `metrics_adapter.config`, `bpf.config`,
  `simulator.config`, where present): every dataclass it defines, field by field with
  type and default, as the YAML keys of `--config FILE`.

A test regenerates the page and compares it with the committed one.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import types
import typing
from typing import Any, Final

__all__ = ["render_config_doc", "CONFIG_MODULES"]

CONFIG_MODULES: Final = (
    ("Scheduler extender", "extender.config", "extender.md"),
    ("Metrics adapter", "metrics_adapter.config", "adapter.md"),
    ("Metrics adapter rules", "metrics_adapter.rules", "adapter.md"),
    ("Collector", "bpf.config", "collector.md"),
    ("Serving simulator", "simulator.serving.config", "serving-simulation.md"),
    ("Endpoint picker", "router.config", "router.md"),
)


def _type_name(tp: Any) -> str:
    if isinstance(tp, str):
        return tp
    if tp is type(None):
        return "None"
    if tp is Ellipsis:
        return "..."
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(tp))
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{args}]" if args else name
    return getattr(tp, "__name__", str(tp))


def _default(f: dataclasses.Field[Any], instance: Any = None) -> str:
    if instance is not None and hasattr(instance, f.name):
        value = getattr(instance, f.name)
        if dataclasses.is_dataclass(value):
            return "(see below)"
        return f"`{value!r}`".replace("|", "\\|")
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        try:
            value = f.default_factory()
        except Exception:  # a factory needing context: say so rather than guess
            return "(computed)"
    else:
        return "(required)"
    if dataclasses.is_dataclass(value):
        return "(see below)"
    return f"`{value!r}`".replace("|", "\\|")


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def _field_default_instance(f: dataclasses.Field[Any], instance: Any) -> Any:
    """The value a nested config field takes by default, to show its fields' defaults."""
    if instance is not None:
        return getattr(instance, f.name, None)
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        try:
            return f.default_factory()
        except Exception:
            return None
    return None


def _dataclass_rows(cls: type, prefix: str, seen: set[type], instance: Any = None) -> list[str]:
    try:
        hints = typing.get_type_hints(cls)
    except Exception:
        hints = {}
    rows: list[str] = []
    nested: list[tuple[type, str, Any]] = []
    for f in dataclasses.fields(cls):
        if f.name.startswith("_"):
            continue
        tp = hints.get(f.name, f.type)
        key = f"{prefix}{f.name}"
        type_name = _type_name(tp).replace("|", "\\|")
        rows.append(f"| `{key}` | `{type_name}` | {_default(f, instance)} |")
        inner = tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else None
        if inner is not None and inner not in seen:
            nested.append((inner, key + ".", _field_default_instance(f, instance)))
    for inner, p, value in nested:
        seen.add(inner)
        rows += _dataclass_rows(inner, p, seen, value)
    return rows


def _docstring_markdown(doc: str) -> list[str]:
    """A module docstring as Markdown: indented blocks become fenced code."""
    out: list[str] = []
    code: list[str] = []

    def flush() -> None:
        while code and not code[-1].strip():
            code.pop()
        if code:
            out.extend(["```yaml", *code, "```", ""])
        code.clear()

    for line in doc.splitlines():
        if line.startswith("    ") or (code and not line.strip()):
            code.append(line[4:])
            continue
        flush()
        out.append(line[:-1] if line.endswith("::") else line)
    flush()
    while out and not out[-1].strip():
        out.pop()
    return out + [""]


def _part_section(title: str, modname: str, page: str) -> list[str]:
    lines = [f"### {title} (`{modname}`)", ""]
    try:
        mod = importlib.import_module(modname)
    except ImportError:
        return lines + [f"No `{modname}` module in this build; see [{page}]({page}).", ""]
    doc = inspect.getdoc(mod)
    if doc:
        lines += _docstring_markdown(doc)
    classes = [
        obj
        for _, obj in inspect.getmembers(mod, inspect.isclass)
        if dataclasses.is_dataclass(obj) and obj.__module__ == mod.__name__
    ]
    # Nested config classes are documented under the class that holds them.
    contained: set[type] = set()
    for cls in classes:
        for f in dataclasses.fields(cls):
            try:
                tp = typing.get_type_hints(cls).get(f.name)
            except Exception:
                tp = None
            if isinstance(tp, type) and dataclasses.is_dataclass(tp):
                contained.add(tp)
    for cls in sorted(classes, key=lambda c: c.__name__):
        if cls in contained:
            continue
        lines += [f"#### `{cls.__name__}`", ""]
        d = _doc(cls)
        if d and not d.startswith(cls.__name__ + "("):
            lines += [d, ""]
        lines += ["| field | type | default |", "|---|---|---|"]
        lines += _dataclass_rows(cls, "", {cls})
        lines.append("")
    return lines


def _subparsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[str, argparse.ArgumentParser]]:
    """(command path, parser) for every subcommand, depth first."""
    out: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:  # argparse keeps no public accessor for subparsers
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append((" ".join((*path, name)), sub))
                out += _subparsers(sub, (*path, name))
    return out


def _cli_section() -> list[str]:
    from kvspread.cli import build_parser

    parser = build_parser({})
    lines = [
        "## Command line and environment",
        "",
        "Precedence: flag > environment variable > YAML file (`--config FILE`) > default.",
        "Each flag's help names the environment variable that sets the same key.",
        "",
    ]
    seen: set[str] = set()
    for path, sub in _subparsers(parser):
        flags = [
            a for a in sub._actions if a.option_strings and not isinstance(a, argparse._HelpAction)
        ]
        if not flags or path in seen:
            continue
        seen.add(path)
        lines += [f"### `kvspread {path}`", ""]
        desc = " ".join((sub.description or "").split())
        if desc:
            lines += [desc, ""]
        lines += ["| flag | meaning |", "|---|---|"]
        for a in flags:
            names = ", ".join(f"`{o}`" for o in a.option_strings)
            if a.metavar and a.nargs != 0:
                names += f" `{a.metavar}`"
            text = " ".join((a.help or "").split()).replace("|", "\\|")
            if a.default not in (None, argparse.SUPPRESS, False) and "default" not in text:
                text += f" (default `{a.default}`)"
            lines.append(f"| {names} | {text} |")
        lines.append("")
    return lines


def render_config_doc() -> str:
    lines = [
        "<!-- Generated by `python -m observability.generate` (observability/configdoc.py) from",
        "     the parts' CLI flags and config dataclasses; edit those instead. -->",
        "# Configuration reference",
        "",
        "Every part takes its configuration in layers: a command-line flag beats the",
        "`KVSPREAD_<PART>_<KEY>` environment variable, which beats the YAML file given with",
        "`--config`, which beats the documented default. Unknown YAML keys are an error that",
        "names the key. This page is generated from the code: the flags from the `kvspread`",
        "parser, the file layout and fields from each part's config module.",
        "",
    ]
    lines += _cli_section()
    lines += [
        "## Configuration files by part",
        "",
        "For each part: its config module's own description (with the YAML layout where the",
        "module gives one), then every field of its config classes as the code names them,",
        "with type and default. Nested classes appear as dotted fields.",
        "",
    ]
    for title, modname, page in CONFIG_MODULES:
        lines += _part_section(title, modname, page)
    return "\n".join(lines).rstrip() + "\n"
