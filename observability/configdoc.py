"""docs/config.md, generated from the parts' own schemas.

Two sources, both introspected at generation time so the page cannot drift:
- the `kvspread` command line (`kvspread.cli.build_parser`): every subcommand's flags with
  their help, which names the `KVSPREAD_*` environment variable each one reads;
- each part's root config class (the one `kvspread.settings.load` reads): every YAML key,
  nested sections as dotted keys, with type, default and meaning. The meaning is the
  field's docstring (the string literal under it), else its trailing comment.

A test regenerates the page and compares it with the committed one, and another loads every
key the page lists through its part's loader.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib
import inspect
import io
import textwrap
import tokenize
import types
import typing
from collections.abc import Mapping
from typing import Any, Final

from kvspread.settings import Parse

__all__ = ["render_config_doc", "CONFIG_MODULES", "field_docs", "config_keys"]

CONFIG_MODULES: Final = (
    ("Scheduler extender", "extender.config", "ExtenderConfig", "extender.md"),
    ("Metrics adapter", "metrics_adapter.config", "AdapterConfig", "adapter.md"),
    ("Metrics adapter rules", "metrics_adapter.rules", None, "adapter.md"),
    ("Collector", "bpf.config", "CollectorConfig", "collector.md"),
    ("Trace replay", "simulator.replay.config", "ReplayConfig", "simulator.md"),
    ("Serving simulator", "simulator.serving.config", "SimConfig", "serving-simulation.md"),
    ("Endpoint picker", "router.config", "RouterConfig", "router.md"),
)
"""(title, module, root config class or None for a docstring-only section, page)."""


def _type_name(tp: Any) -> str:
    if isinstance(tp, str):
        return tp
    if tp is type(None):
        return "None"
    if tp is Ellipsis:
        return "..."
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        parser = next((m for m in typing.get_args(tp)[1:] if isinstance(m, Parse)), None)
        inner = typing.get_args(tp)[0]
        return parser.name if parser is not None else _type_name(inner)
    if origin is typing.Literal:
        return " | ".join(str(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(tp))
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{args}]" if args else name
    return getattr(tp, "__name__", str(tp))


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Field name -> its meaning: the docstring under the field, else its trailing comment;
    fields a config class inherits (`KubeAccess`) are read in the class that declares them."""
    out: dict[str, str] = {}
    for base in reversed(cls.__mro__[1:]):
        if dataclasses.is_dataclass(base):
            out.update(field_docs(base))
    out.update(_own_field_docs(cls))
    return out


def _own_field_docs(cls: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    body = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)).body
    out: dict[str, str] = {}
    for i, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        nxt = body[i + 1] if i + 1 < len(body) else None
        if (
            isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            out[node.target.id] = " ".join(nxt.value.value.split())
        elif (node.end_lineno or node.lineno) in comments:
            out[node.target.id] = comments[node.end_lineno or node.lineno]
    return out


def _cell(value: Any) -> str:
    text = f"`{value!r}`" if not isinstance(value, str) or value else "`''`"
    if len(text) > 90:
        text = text[:80] + "...`"
    return text.replace("|", "\\|")


def _default_text(value: Any) -> str:
    if dataclasses.is_dataclass(value):
        return "(section)"
    if (
        isinstance(value, Mapping)
        and value
        and all(dataclasses.is_dataclass(v) for v in value.values())
    ):
        return "entries " + ", ".join(f"`{k}`" for k in value)
    if isinstance(value, tuple) and value and all(dataclasses.is_dataclass(v) for v in value):
        return f"{len(value)} item{'s' if len(value) > 1 else ''} (see below)"
    return _cell(value)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _keys(cls: type) -> list[dataclasses.Field[Any]]:
    return [
        f
        for f in dataclasses.fields(cls)
        if f.init and not f.name.startswith("_") and f.metadata.get("config", True)
    ]


def _element(tp: Any) -> tuple[str, Any] | None:
    """('[]', C) for a list of dataclass C, ('.<name>', C) for a mapping of names to C."""
    tp = typing.get_args(tp)[0] if typing.get_origin(tp) is typing.Annotated else tp
    args = typing.get_args(tp)
    if typing.get_origin(tp) is tuple and args and dataclasses.is_dataclass(args[0]):
        return "[]", args[0]
    if typing.get_origin(tp) in (Mapping, dict) and len(args) == 2:
        if dataclasses.is_dataclass(args[1]):
            return ".<name>", args[1]
    return None


def _instance(cls: type) -> Any:
    try:
        return cls()
    except TypeError:
        return None


def config_keys(
    cls: type, prefix: str = "", instance: Any = None
) -> list[tuple[str, Any, Any, str]]:
    """(dotted key, type, default, meaning) for every YAML key of config class `cls`,
    sections first then their keys; `a[]` is an item of list `a`, `a.<name>` an entry of
    mapping `a`. Defaults come from `instance` (default: `cls()`, where it can be built)."""
    if instance is None:
        instance = _instance(cls)
    hints, docs = _hints(cls), field_docs(cls)
    rows: list[tuple[str, Any, Any, str]] = []
    for f in _keys(cls):
        tp = hints[f.name]
        key = prefix + f.name
        value = getattr(instance, f.name) if instance is not None else dataclasses.MISSING
        rows.append((key, tp, value, docs.get(f.name, "")))
        inner = typing.get_args(tp)[0] if typing.get_origin(tp) is typing.Annotated else tp
        if not f.metadata.get("doc_expand", True):
            continue  # its items have their own parser and section
        if dataclasses.is_dataclass(inner):
            rows += config_keys(inner, key + ".", value)  # type: ignore[arg-type]
        elif (elem := _element(tp)) is not None:
            rows += config_keys(elem[1], key + elem[0] + ".")
    return rows


def _key_table(cls: type, shown: dict[Any, str]) -> list[str]:
    """The key table of root class `cls`. A section whose class an earlier part already
    listed (`shown`: class -> where) points there instead of repeating its keys."""
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    skip: str | None = None
    for key, tp, value, meaning in config_keys(cls):
        if skip is not None and key.startswith(skip):
            continue
        skip = None
        inner = typing.get_args(tp)[0] if typing.get_origin(tp) is typing.Annotated else tp
        section = dataclasses.is_dataclass(inner)
        type_name = "section" if section else _type_name(tp).replace("|", "\\|")
        default = "(required)" if value is dataclasses.MISSING else _default_text(value)
        text = meaning.replace("|", "\\|")
        if section and inner in shown:
            text += f" Same keys as {shown[inner]}."
            skip = key + "."
        elif section:
            shown.setdefault(inner, f"`{key}` of the {cls.__name__} table")
        lines.append(f"| `{key}` | `{type_name}` | {default} | {text} |")
    return lines


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


def _part_section(
    title: str, modname: str, root: str | None, page: str, shown: dict[Any, str]
) -> list[str]:
    lines = [f"### {title} (`{modname}`)", ""]
    try:
        mod = importlib.import_module(modname)
    except ImportError:
        return lines + [f"No `{modname}` module in this build; see [{page}]({page}).", ""]
    doc = inspect.getdoc(mod)
    if doc:
        lines += _docstring_markdown(doc)
    if root is None:
        return lines + [f"More in [{page}]({page}).", ""]
    cls = getattr(mod, root)
    lines += [f"Keys of `{root}` ({_doc(cls)}); more in [{page}]({page}).", ""]
    return lines + _key_table(cls, shown) + [""]


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
            text = " ".join((a.help or "").split()).replace("%%", "%").replace("|", "\\|")
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
        "`--config`, which beats the documented default (only a key with a flag has a",
        "variable, named in the flag's help; the other keys are set in the file). One loader reads every part",
        "(`kvspread.settings.load`): an unknown key is an error that lists the known ones, and",
        "so is a key given twice in one mapping (YAML forbids it); a",
        "YAML value must have the key's type (the files are read as YAML 1.1, which takes a",
        "number with an exponent only with a dot and a sign: write `1.0e+9` or `1000000000`,",
        "not `1e9`, which is text; the error says so; and it refuses the readings nobody means:",
        "a leading 0 as octal, `1:30` as base 60, a bare `no` or `off` as a key); a flag's or",
        "variable's text is parsed by type",
        "(lists comma separated, booleans true/false, yes/no, on/off or 1/0); an empty variable",
        'or YAML value keeps the default, an empty flag is refused (`--host ""` would listen',
        "everywhere). Every error is one line, `SOURCE: KEY: expected WHAT, got VALUE`,",
        "and the command exits 2. This page is generated from the code: the flags from the",
        "`kvspread` parser, the keys and their meanings from each part's config classes.",
        "",
    ]
    lines += _cli_section()
    lines += [
        "## Configuration files by part",
        "",
        "For each part: its config module's own description (with the YAML layout where the",
        "module gives one), then every YAML key its loader accepts, with type, default and",
        "meaning. A section's keys are dotted (`server.port`); `a[].b` is key `b` of each item",
        "of list `a`; `a.<name>.b` is key `b` of each named entry of mapping `a`.",
        "",
    ]
    shown: dict[Any, str] = {}
    for title, modname, root, page in CONFIG_MODULES:
        lines += _part_section(title, modname, root, page, shown)
    return "\n".join(lines).rstrip() + "\n"
