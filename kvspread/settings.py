"""Layered configuration shared by every subcommand, and the one strict loader.

Precedence: command-line flag > environment variable (`KVSPREAD_<PART>_<KEY>`) >
YAML file (`--config FILE`) > the part's documented defaults. A part declares its
overridable keys as `Setting`s; `add_settings` turns them into argparse flags (default
None, so "not given" is visible) and `layer` merges the sources into one `Layered`
mapping that remembers where each value came from; a `PartCommand` is a part's whole
`kvspread PART VERB` (texts, settings, what it runs). `load(ConfigClass, mapping)` then
builds the part's frozen config dataclass from it, driven by the type hints:

- a nested dataclass field is a nested YAML mapping (`server: {port: 8888}`);
- an empty value (`key:`, `key: null`, an empty section `server:`) keeps the default;
- an unknown key is an error that lists the known keys, and so is a key given twice in one
  mapping (PyYAML alone keeps the later value without a word);
- a YAML value must have the field's type (`port: "8888"` is not an integer); a value from
  a flag or a variable is text and is parsed by one rule per type: integers, numbers,
  comma-separated lists, and booleans as true/false, yes/no, on/off or 1/0;
- every error has one shape: `SOURCE: KEY: expected WHAT, got VALUE`, where SOURCE is the
  YAML file, the flag or the variable the value came from.

A config class may define `validate()` for ranges and cross-field rules; it raises
`invalid(key, expected, value)` with keys relative to itself, and the loader prefixes the
section's path. A class with a `shorthand` class attribute may also be written as one
string (`targets: [http://host/metrics]` for `{url: ...}`); fields with
`metadata=INTERNAL` are set by the program, not by the file. Parts never read sys.argv or os.environ themselves: cli.py hands them
`environ`.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import re
import reprlib
import sys
import types
import typing
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml

__all__ = [
    "Setting",
    "quoted",
    "ConfigError",
    "Layered",
    "Parse",
    "add_settings",
    "add_part",
    "PartCommand",
    "layer",
    "gather",
    "warn_unknown_env",
    "from_args",
    "KUBERNETES_SETTINGS",
    "KubeAccess",
    "http_urls",
    "load",
    "load_yaml",
    "env_name",
    "parse_bool",
    "invalid",
    "bounded",
    "ports",
    "expected_text",
    "dump",
    "validated",
    "INTERNAL",
]

T = TypeVar("T")

INTERNAL: Mapping[str, Any] = {"config": False}
"""`field(metadata=INTERNAL)`: a field the program sets, not a configuration key."""

BOOL_WORDS: dict[str, bool] = {
    "true": True,
    "yes": True,
    "on": True,
    "1": True,
    "false": False,
    "no": False,
    "off": False,
    "0": False,
}
"""The one text rule for booleans (flags and variables); YAML has its own booleans."""


class ConfigError(ValueError):
    """Invalid configuration: `SOURCE: KEY: what is wrong`.

    `key` is the dotted path (`server.port`, `rules[3].quantile`) when one is known, `origin`
    the YAML file, flag or variable the value came from. `ConfigError("text")` still works
    for messages that name no single key.
    """

    def __init__(self, message: str, *, key: str | None = None, origin: str | None = None):
        self.detail, self.key, self.origin = message, key, origin
        super().__init__(": ".join(p for p in (origin, key, message) if p))

    def within(self, prefix: str) -> ConfigError:
        """The same error for a key one section deeper (`port` within `server`)."""
        if not prefix:
            return self
        key = self.key or ""
        joined = prefix + key if key.startswith("[") or not key else f"{prefix}.{key}"
        return ConfigError(self.detail, key=joined, origin=self.origin)

    def at(self, origin: str) -> ConfigError:
        return ConfigError(self.detail, key=self.key, origin=origin)


def invalid(key: str, expected: str, value: Any) -> ConfigError:
    """The one error wording: `KEY: expected WHAT, got VALUE` (VALUE as `quoted`)."""
    return ConfigError(f"expected {expected}, got {quoted(value)}", key=key)


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 120
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = 8
_SHOWN.maxlevel = 3


def quoted(value: Any) -> str:
    """A value as an error message quotes it (`kvspread.httpbase.shown` is the same for a
    client's text, unquoted): its repr, cut to about 120 characters (the
    middle elided, and the length said) and 8 items a level, 3 levels deep, so a 200 KB
    annotation or a YAML alias bomb costs a line, not the 87 MB its whole repr would."""
    text = _SHOWN.repr(value)
    if isinstance(value, str | bytes) and len(value) > _SHOWN.maxstring:
        text += (
            f" ({len(value):,} characters)"
            if isinstance(value, str)
            else f" ({len(value):,} bytes)"
        )
    return text


def paired(obj: Any, first: str, second: str, what: str) -> None:
    """Fields of `obj` that go together (a certificate and its key): one without the other
    is `FIELD: given without OTHER (--other-flag); WHAT`, naming the one to add, where
    `invalid()` would say "got None" about the one never given."""
    a, b = getattr(obj, first), getattr(obj, second)
    if bool(a) != bool(b):
        given, missing = (first, second) if a else (second, first)
        raise ConfigError(
            f"given without {missing} (--{missing.replace('_', '-')}): {what} go together; "
            "give both or neither",
            key=given,
        )


def bounded(
    obj: Any,
    *keys: str,
    above: float | None = None,
    at_least: float | None = None,
    what: str = "a number",
    finite: bool = False,
) -> None:
    """The one range check of a config class's `validate()`: each field of `obj` (or item,
    where `obj` is a mapping) named in `keys`, dotted for a section below it (`cost.eta`),
    must be > `above` or >= `at_least` (NaN never is), and finite where `finite`; otherwise
    `invalid(key, "WHAT > N", value)`, so `what` ("an integer", "a finite number") is the
    wording the user reads."""
    if (above is None) == (at_least is None):
        raise TypeError("bounded() takes exactly one of above= and at_least=")
    for key in keys:
        value = obj
        for part in key.split("."):
            value = value[part] if isinstance(value, Mapping) else getattr(value, part)
        if above is not None:
            ok, rule = value > above, f"> {above:g}"
        else:
            ok, rule = value >= typing.cast(float, at_least), f">= {at_least:g}"
        if not ok or (finite and not math.isfinite(value)):
            raise invalid(key, f"{what} {rule}", value)


def ports(obj: Any, *keys: str, lowest: int = 0) -> None:
    """Each field of `obj` named in `keys` is a port number `lowest`..65535, or None (unset);
    0, where allowed, means any free port."""
    for key in keys:
        value = getattr(obj, key)
        if value is not None and not lowest <= value <= 65535:
            raise invalid(key, f"a port number {lowest}..65535", value)


def http_urls(obj: Any, *keys: str) -> None:
    """Each field of `obj` named in `keys` is None (unset) or an http:// or https:// URL with
    a host, so a typo fails at start instead of as a client retrying an unusable URL."""
    for key in keys:
        value = getattr(obj, key)
        if value is None:
            continue
        try:
            url = urllib.parse.urlsplit(value)
            url.port  # noqa: B018 (raises ValueError for a port out of range or not a number)
        except ValueError:
            url = None
        if url is None or url.scheme not in ("http", "https") or not url.hostname:
            raise invalid(key, "an http:// or https:// URL with a host (http://HOST:PORT)", value)


def parse_bool(text: str) -> bool:
    """true/false, yes/no, on/off, 1/0 (any case); ValueError otherwise."""
    t = str(text).strip().lower()
    if t in BOOL_WORDS:
        return BOOL_WORDS[t]
    raise ValueError(f"{text!r} is not a boolean (true/false)")


@dataclass(frozen=True)
class Parse:
    """`Annotated[T, Parse(fn, expected)]`: the field's value (YAML or text) goes through
    `fn`, which raises ValueError when it does not fit; `expected` says what fits and
    `name` is the type's name in docs/config.md."""

    fn: Callable[[Any], Any]
    expected: str
    name: str


@dataclass(frozen=True)
class Setting:
    """One key that may come from a flag, the environment or the YAML file.

    `key` is the dotted path in the YAML mapping (e.g. `server.port`); the flag is
    `--<last part with dashes>` unless `flag` is given; the variable is
    `KVSPREAD_<PART>_<KEY with dots and dashes as underscores>` unless `env` is given.
    The value stays text unless `type` converts it; the loader parses text by the config
    field's type, so `type` is only needed for keys no config class holds.
    """

    key: str
    help: str
    type: Callable[[str], Any] = str
    flag: str | None = None
    env: str | None = None
    is_flag: bool = False  # a boolean switch (--standalone) rather than --x VALUE
    metavar: str | None = None

    def flag_name(self) -> str:
        return self.flag or "--" + self.key.rsplit(".", 1)[-1].replace("_", "-")

    def dest(self) -> str:
        return "cfg__" + self.key.replace(".", "__").replace("-", "_")


def env_name(part: str, setting: Setting) -> str:
    if setting.env:
        return setting.env
    return "KVSPREAD_" + (part + "_" + setting.key).upper().replace(".", "_").replace("-", "_")


def add_settings(parser: argparse.ArgumentParser, part: str, settings: list[Setting]) -> None:
    """Add one flag per setting; the help text names its environment variable."""
    for s in settings:
        env = env_name(part, s)
        if s.is_flag:
            parser.add_argument(
                s.flag_name(),
                dest=s.dest(),
                action="store_const",
                const=True,
                default=None,
                help=f"{s.help} [env {env}]",
            )
        else:
            parser.add_argument(
                s.flag_name(),
                dest=s.dest(),
                default=None,
                metavar=s.metavar or s.key.rsplit(".", 1)[-1].upper().replace("-", "_"),
                help=f"{s.help} [env {env}]",
            )


def add_part(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    part: str,
    settings: list[Setting],
    *,
    help: str,
    description: str | None,
    verb: str,
    verb_help: str,
    verb_description: str,
    epilog: str,
    config_help: str = "YAML configuration file",
) -> argparse.ArgumentParser:
    """`kvspread PART VERB`: a part's parser with its one verb, which takes `--config FILE`
    and one flag per setting (variables KVSPREAD_PART_*); the bare part prints its help and
    exits 2. Returns the verb's parser, for extra flags and its `func`."""
    parser = sub.add_parser(part, help=help, description=description)
    verbs = parser.add_subparsers(dest=f"{part}_cmd", metavar="{" + verb + "}")
    cmd = verbs.add_parser(
        verb,
        help=verb_help,
        description=verb_description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmd.add_argument("--config", metavar="FILE", help=config_help)
    cmd.add_argument(
        "--log-format",
        choices=("json", "text"),
        default=None,
        help="log lines as JSON objects (default, for a log pipeline) or text (a terminal); "
        "env KVSPREAD_LOG_FORMAT",
    )
    add_settings(cmd, part, settings)

    def bare(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=bare)
    return cmd


@dataclass(frozen=True)
class PartCommand:
    """`kvspread PART VERB` of a part with one verb, as data: its texts, its settings, extra
    flags and what the verb runs. A part's cli module exports one as `register`, the
    `register(subparsers, environ)` that kvspread/cli.py calls, so the parser assembly, the
    bare part's help and the hand-over of `environ` are written once here."""

    part: str
    settings: Sequence[Setting]
    help: str
    description: str | None
    verb_help: str
    verb_description: str
    epilog: str
    run: Callable[[argparse.Namespace, Mapping[str, str]], int]
    """The verb: parsed flags and the environment in, exit status out."""
    verb: str = "serve"
    config_help: str = "YAML configuration file"
    flags: Callable[[argparse.ArgumentParser], None] | None = None
    """Adds the verb's flags that are no setting (repeatable lists, switches)."""

    def __call__(
        self, sub: argparse._SubParsersAction[argparse.ArgumentParser], environ: Mapping[str, str]
    ) -> argparse.ArgumentParser:
        cmd = add_part(
            sub,
            self.part,
            list(self.settings),
            help=self.help,
            description=self.description,
            verb=self.verb,
            verb_help=self.verb_help,
            verb_description=self.verb_description,
            epilog=self.epilog,
            config_help=self.config_help,
        )
        if self.flags is not None:
            self.flags(cmd)
        cmd.set_defaults(func=lambda args: self.run(args, environ))
        return cmd


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error: YAML
    forbids it, and PyYAML would silently keep the later value (`port: 8888` ... `port: 9999`
    is 9999), so a copy-paste slip changes the configuration without a word. So are the
    YAML 1.1 readings nobody means in a config file (found black-box): a number with a
    leading 0 read as octal (`port: 0777` listened on 511), one with colons as base 60
    (`1:30` is 90), and a bare `yes`, `no`, `on` or `off` as a key (`no: 7` named a class
    False)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` merge keys may repeat
                continue
            if (
                key_node.tag == "tag:yaml.org,2002:bool"
                and isinstance(key_node, yaml.ScalarNode)
                and key_node.value.lower() not in ("true", "false")
            ):
                raise _Yaml11(
                    f"the key {key_node.value} is read as a boolean (YAML 1.1); quote it: "
                    f"'{key_node.value}'",
                    key_node.start_mark,
                )
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark)
            except TypeError:  # an unhashable key: the base loader reports it
                continue
            if first is not key_node.start_mark:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found key {key!r} a second time (first on line {first.line + 1}); "
                    "keep one of them",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


class _Yaml11(yaml.YAMLError):
    """A YAML 1.1 reading `_StrictLoader` refuses, at `mark`."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem, self.mark = problem, mark


def _no_surprise(kind: str) -> Any:
    """A constructor of `kind` (int, float) that refuses YAML 1.1's octal and base-60 forms."""
    base = getattr(yaml.SafeLoader, f"construct_yaml_{kind}")

    def construct(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
        text = str(node.value).replace("_", "")
        digits = text.lstrip("+-")
        octal = kind == "int" and len(digits) > 1 and digits[0] == "0" and digits.isdigit()
        if octal or ":" in text:
            value = base(loader, node)
            reading = "octal" if octal else "base 60"
            plain = (
                (text[0] if text[0] in "+-" else "") + (digits.lstrip("0") or "0")
                if octal
                else f"{value}, or quote it ('{node.value}') for text"
            )
            raise _Yaml11(
                f"{node.value} is read as {value} ({reading}, YAML 1.1); write {plain}",
                node.start_mark,
            )
        return base(loader, node)

    return construct


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _no_surprise("int"))
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _no_surprise("float"))


def load_yaml(path: str | Path | None) -> dict[str, Any]:
    """Read a YAML mapping; a missing file, bytes that are not UTF-8 (YAML reads the bytes
    itself, whatever the locale) or a non-mapping is a ConfigError."""
    if path is None:
        return {}
    p = Path(path)
    try:
        data = yaml.load(p.read_bytes(), Loader=_StrictLoader)  # noqa: S506 - a SafeLoader
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {p} does not exist") from exc
    except IsADirectoryError as exc:
        raise ConfigError(f"config file {p} is a directory") from exc
    except _Yaml11 as exc:
        raise ConfigError(f"config file {p}: line {exc.mark.line + 1}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {p} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a mapping at the top level")
    return data


class Layered(dict[str, Any]):
    """A merged configuration mapping that remembers where values came from: `file` (the
    YAML path, or None) and `origins` (dotted key -> the flag or variable that set it).
    Values set from a flag or a variable are text; the loader parses them by type."""

    def __init__(
        self,
        data: Mapping[str, Any] | None = None,
        file: str | None = None,
        origins: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(copy.deepcopy(dict(data or {})))
        self.file = file
        self.origins: dict[str, str] = dict(origins or {})

    def put(self, key: str, value: Any, origin: str) -> None:
        """Set dotted `key` to a value from `origin` (a flag or variable name). A section on
        the way that the file holds as something other than a mapping (`server: 5` under
        `--port`) is the file's error, not replaced in silence."""
        try:
            _set_path(self, key, value)
        except ConfigError as exc:
            raise ConfigError(
                f"{exc.detail} ({origin} sets {key} inside it)", key=exc.key, origin=self.file
            ) from None
        self.origins[key] = origin

    def origin(self, key: str) -> str | None:
        """The flag or variable that set `key` (or a section above it), else the file."""
        k = key
        while k:
            if k in self.origins:
                return self.origins[k]
            k = re.sub(r"(\.[^.\[]*|\[\d*\])$", "", k) if re.search(r"[.\[]", k) else ""
        return self.file


def _set_path(target: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `dotted` in `target`, making the missing sections; a ConfigError where one on the
    way is there but not a mapping (null counts as missing, as an empty YAML section)."""
    parts = dotted.split(".")
    node = target
    for i, p in enumerate(parts[:-1]):
        child = node.get(p)
        if child is None:
            child = {}
            node[p] = child
        elif not isinstance(child, dict):
            raise invalid(".".join(parts[: i + 1]), "a mapping", child)
        node = child
    node[parts[-1]] = value


_TYPE_WORDS: dict[Any, str] = {int: "an integer", float: "a number"}


def layer(
    part: str,
    settings: list[Setting],
    args: argparse.Namespace,
    environ: Mapping[str, str],
    file_mapping: Mapping[str, Any],
    file: str | Path | None = None,
) -> Layered:
    """Merge file < env < flags for the declared settings; returns a new `Layered`.

    Values stay text (the loader parses them by the field's type) except for a setting with
    its own `type`, converted here; a bad value is a ConfigError naming the flag or variable.
    """
    merged = Layered(file_mapping, None if file is None else str(file))
    for s in settings:
        env = env_name(part, s)
        raw_flag = getattr(args, s.dest(), None)
        source: str | None = None
        raw: Any = None
        if raw_flag == "" and not s.is_flag and s.type is str:
            # a typed flag's converter refuses "" itself; a text one would take it (--host ""
            # listened on every interface): an empty flag is a slip, say so
            raise ConfigError(
                "empty; give a value, or leave the flag out for the default", key=s.key
            ).at(s.flag_name())
        if raw_flag is not None:
            source, raw = s.flag_name(), raw_flag
        elif env in environ and environ[env] != "":
            source, raw = env, environ[env]
        if source is None:
            continue
        value = raw
        if s.is_flag or s.type is not str:
            conv = parse_bool if s.is_flag else s.type
            try:
                value = raw if (s.is_flag and raw is True) else conv(raw)
            except (ValueError, TypeError) as exc:
                what = "true or false" if s.is_flag else _TYPE_WORDS.get(conv, str(exc))
                raise invalid(s.key, what, raw).at(source) from None
        merged.put(s.key, value, source)
    return merged


def gather(
    part: str,
    settings: list[Setting],
    args: argparse.Namespace,
    environ: Mapping[str, str],
    path: str | Path | None,
) -> Layered:
    """`layer` over the YAML file at `path` (None: no file); warns of unknown variables."""
    warn_unknown_env(part, settings, environ)
    return layer(part, settings, args, environ, load_yaml(path), path)


EXTRA_ENV: dict[str, frozenset[str]] = {
    "collector": frozenset({"KVSPREAD_COLLECTOR_OTLP_ENDPOINTS"}),
    "simulate": frozenset({"KVSPREAD_SIMULATE_JOBS"}),
}
"""Variables a part reads besides its settings' (the collector's repeatable endpoint list,
the simulators' shared worker count)."""


def warn_unknown_env(part: str, settings: Sequence[Setting], environ: Mapping[str, str]) -> None:
    """A `KVSPREAD_<PART>_*` variable that no setting reads is most likely a typo in a
    manifest: say so on stderr, once per variable, instead of ignoring it in silence. (A
    warning, not an error: other tooling may share the prefix.)"""
    prefix = f"KVSPREAD_{part.upper()}_"
    known = {env_name(part, s) for s in settings} | EXTRA_ENV.get(part, frozenset())
    for name in sorted(k for k in environ if k.startswith(prefix) and k not in known):
        print(
            f"kvspread: warning: {name} is not a variable of kvspread {part} (ignored): only "
            "the keys with a flag have one, and the command's --help lists them; set the "
            "others in the --config file",
            file=sys.stderr,
        )


def from_args(
    part: str,
    settings: list[Setting],
    args: argparse.Namespace,
    environ: Mapping[str, str],
    build: Callable[[Layered], T],
) -> T:
    """A part's config from flag > env > `--config` YAML > defaults, read strictly by
    `build` (its `Config.from_mapping`)."""
    return build(gather(part, settings, args, environ, getattr(args, "config", None)))


KUBERNETES_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "kubernetes.kubeconfig",
        "kubeconfig file (default: in-cluster, then ~/.kube/config)",
        metavar="FILE",
    ),
    Setting(
        "kubernetes.api_server",
        "plain API server URL without credentials (kubectl proxy, tests)",
        flag="--kube-api-server",
        metavar="URL",
    ),
)
"""How a part with a `kubernetes:` section (kubeconfig, api_server) reaches the API server."""


@dataclass(frozen=True)
class KubeAccess:
    """The `kubernetes:` keys every part that watches the API server has (the extender and
    the router); a part's own `KubernetesConfig` extends it."""

    kubeconfig: str | None = None
    """kubeconfig file; unset: in-cluster service account, then ~/.kube/config."""
    api_server: str | None = None
    """A plain API URL without credentials (kubectl proxy, tests' FakeKubeApi)."""
    node_signals: bool = True
    """Also list+watch NodeSignals resources (kvspread.io/v1alpha1; needs the CRD); a node's
    NodeSignals wins over its kvspread.io/signals annotation."""

    def validate(self) -> None:
        http_urls(self, "api_server")


# --- the loader -------------------------------------------------------------------------


def load(
    cls: type[T], data: Mapping[str, Any] | None, *, where: str = "", base: T | None = None
) -> T:
    """Build config dataclass `cls` from a YAML-shaped mapping, strictly.

    Missing keys keep `base`'s values (default: `cls()`). `where` is the dotted path of
    `data` inside a larger file (errors name `where.key`). When `data` is a `Layered`
    mapping, an error also names the file, flag or variable the bad value came from.
    """
    layered = data if isinstance(data, Layered) else None
    text = frozenset(layered.origins) if layered is not None else frozenset()
    start = base if base is not None else cls()
    try:
        return typing.cast(T, _build(cls, {} if data is None else data, where, start, text))
    except ConfigError as exc:
        if layered is not None and exc.key and exc.origin is None:
            origin = layered.origin(exc.key)
            if origin:
                raise exc.at(origin) from None
        raise


def validated(obj: T, where: str = "") -> T:
    """Run `obj.validate()` (if any); its errors name keys below `where`."""
    check = getattr(obj, "validate", None)
    if check is not None:
        try:
            check()
        except ConfigError as exc:
            raise exc.within(where) from None
    return obj


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _field_names(cls: type) -> list[str]:
    """The YAML keys of config class `cls`: its init fields, less the internal ones."""
    return [
        f.name
        for f in dataclasses.fields(cls)
        if f.init and not f.name.startswith("_") and f.metadata.get("config", True)
    ]


def _build(cls: type, data: Any, path: str, base: Any, text: frozenset[str]) -> Any:
    """Override the fields of dataclass instance `base` (None: all required) from `data`."""
    if not isinstance(data, Mapping):
        raise invalid(path or "(top level)", "a mapping", data)
    hints = typing.get_type_hints(cls, include_extras=True)
    names = _field_names(cls)
    changes: dict[str, Any] = {}
    for key, value in data.items():
        where = _join(path, str(key))
        if key not in names:
            raise ConfigError(f"unknown key (known: {', '.join(sorted(names))})", key=where)
        if value is None:
            continue  # `key:` or `key: null` keeps the default
        current = getattr(base, key) if base is not None else None
        changes[key] = _value(hints[key], value, where, current, text)
    if base is None:
        required = [
            f.name
            for f in dataclasses.fields(cls)
            if f.init
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        missing = [n for n in required if n not in changes]
        if missing:
            raise invalid(path, f"a mapping with {', '.join(missing)}", dict(data))
        obj = cls(**changes)
    else:
        obj = dataclasses.replace(base, **changes)
    return validated(obj, path)


def _strip(tp: Any) -> tuple[Any, Parse | None]:
    if typing.get_origin(tp) is Annotated:
        base, *meta = typing.get_args(tp)
        return base, next((m for m in meta if isinstance(m, Parse)), None)
    return tp, None


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _default_instance(tp: type) -> Any:
    try:
        return tp()
    except TypeError:  # required fields: the mapping must give them all
        return None


def expected_text(tp: Any) -> str:
    """What a value of type `tp` looks like, in words (for errors and docs)."""
    tp, parser = _strip(tp)
    if parser is not None:
        return parser.expected
    if _is_union(tp):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        words = " or ".join(expected_text(a) for a in args)
        return words + " or null" if len(args) < len(typing.get_args(tp)) else words
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(tp))
    if origin is tuple:
        return "a list"
    if origin in (Mapping, dict) or tp in (dict,) or dataclasses.is_dataclass(tp):
        return "a mapping"
    return {
        bool: "true or false",
        int: "an integer",
        float: "a number",
        str: "a string",
        Path: "a path",
    }.get(tp, getattr(tp, "__name__", str(tp)))


def _value(tp: Any, value: Any, path: str, current: Any, text: frozenset[str]) -> Any:
    tp, parser = _strip(tp)
    if parser is not None:
        if value is None and _is_union(tp) and type(None) in typing.get_args(tp):
            return None
        try:
            return parser.fn(value)
        except (ValueError, TypeError):
            raise invalid(path, parser.expected, value) from None
    if value is None:
        if tp is Any or (_is_union(tp) and type(None) in typing.get_args(tp)):
            return None
        raise invalid(path, expected_text(tp), value)
    if path in text and isinstance(value, str):
        return _from_text(tp, value, path)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp) and isinstance(value, str) and hasattr(tp, "shorthand"):
        value = {tp.shorthand: value}  # e.g. a target given as its URL alone
    if dataclasses.is_dataclass(tp):
        seed = current if dataclasses.is_dataclass(current) else _default_instance(tp)  # type: ignore[arg-type]
        return _build(tp, value, path, seed, text)  # type: ignore[arg-type]
    if _is_union(tp):
        for alt in typing.get_args(tp):
            if alt is type(None):
                continue
            try:
                return _value(alt, value, path, current, text)
            except ConfigError:
                continue
        raise invalid(path, expected_text(tp), value)
    origin = typing.get_origin(tp)
    if origin is Literal:
        if value in typing.get_args(tp) and not isinstance(value, bool):
            return value
        raise invalid(path, expected_text(tp), value)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            raise invalid(path, "a list", value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(
                _value(args[0], v, f"{path}[{i}]", None, text) for i, v in enumerate(value)
            )
        if len(value) != len(args):
            raise invalid(path, f"a list of {len(args)}", value)
        return tuple(
            _value(a, v, f"{path}[{i}]", None, text)
            for i, (a, v) in enumerate(zip(args, value, strict=True))
        )
    if origin in (Mapping, dict):
        return _mapping(tp, value, path, current, text)
    return _scalar(tp, value, path)


def _mapping(tp: Any, value: Any, path: str, current: Any, text: frozenset[str]) -> Any:
    """A mapping of names. Entries of dataclass type merge into the current entries
    (`name: null` removes one); other values are converted as they are."""
    if not isinstance(value, Mapping):
        raise invalid(path, "a mapping", value)
    _key_tp, value_tp = typing.get_args(tp) or (str, Any)
    if not dataclasses.is_dataclass(value_tp):
        return {str(k): _value(value_tp, v, f"{path}.{k}", None, text) for k, v in value.items()}
    out = dict(current or {})
    for name, entry in value.items():
        if entry is None:
            out.pop(name, None)
            continue
        seed = out.get(name) or _default_instance(value_tp)  # type: ignore[arg-type]
        out[str(name)] = _build(value_tp, entry, f"{path}.{name}", seed, text)  # type: ignore[arg-type]
    return out


def _scalar(tp: Any, value: Any, path: str) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is Path:
        if isinstance(value, str) and value:
            return Path(value)
    else:
        raise TypeError(f"config type {tp!r} at {path} is not supported by the loader")
    hint = _yaml11_number(value, tp) if tp in (int, float) and isinstance(value, str) else ""
    if hint:
        raise invalid(
            path, f"{expected_text(tp)} (YAML 1.1 reads {value} as text: write {hint})", value
        )
    raise invalid(path, expected_text(tp), value)


def _yaml11_number(text: str, tp: Any) -> str:
    """The number a YAML 1.1 loader left as text, written so that it reads as one ('' if
    none): PyYAML takes a float only with a dot and a signed exponent, so `1e9` and `1.0e9`
    stay strings (`1.0e+9` does not); an integer field gets the integer written out."""
    try:
        number = float(text)
    except ValueError:
        return ""
    if not math.isfinite(number) or "e" not in text.lower():
        return ""  # a number without an exponent that is text was quoted: that is on purpose
    if tp is int:
        return str(int(number)) if number.is_integer() and abs(number) < 2**63 else ""
    mantissa, _, exponent = text.strip().lower().partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    if exponent[:1] not in ("+", "-"):
        exponent = "+" + exponent
    return f"{mantissa}e{exponent}"


def _from_text(tp: Any, text: str, path: str) -> Any:
    """A flag's or variable's text as a value of `tp` (the one text rule per type)."""
    tp, parser = _strip(tp)
    try:
        if parser is not None:
            return parser.fn(text)
        if _is_union(tp):
            alts = [a for a in typing.get_args(tp) if a is not type(None)]
            for alt in alts:
                try:
                    return _from_text(alt, text, path)
                except ConfigError:
                    continue
            raise ValueError(text)
        origin = typing.get_origin(tp)
        if origin is tuple:
            inner = typing.get_args(tp)[0]
            items = [x.strip() for x in text.split(",") if x.strip()]
            return tuple(_from_text(inner, x, f"{path}[{i}]") for i, x in enumerate(items))
        if origin is Literal:
            if text in typing.get_args(tp):
                return text
            raise ValueError(text)
        if tp is bool:
            return parse_bool(text)
        if tp is int:
            return int(text.strip())
        if tp is float:
            number = float(text.strip())
            if not math.isfinite(number):
                raise ValueError(text)
            return number
        if tp is str or tp is Any:
            return text
        if tp is Path and text:
            return Path(text)
    except (ValueError, TypeError):
        pass
    if _is_union(tp):  # text is never null: say what the text should have been
        tp = typing.Union[tuple(a for a in typing.get_args(tp) if a is not type(None))]  # noqa: UP007
    raise invalid(path, expected_text(tp), text)


def dump(obj: Any) -> Any:
    """A config value as the YAML-shaped data `load` reads back (tuples as lists, paths
    as strings, dataclasses as mappings of their fields)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {n: dump(getattr(obj, n)) for n in _field_names(type(obj))}
    if isinstance(obj, tuple | list):
        return [dump(v) for v in obj]
    if isinstance(obj, Mapping):
        return {str(k): dump(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    return obj
