"""Layered configuration shared by every subcommand.

Precedence: command-line flag > environment variable (`KVSPREAD_<PART>_<KEY>`) >
YAML file (`--config FILE`) > the part's documented defaults. A part declares its
overridable keys as `Setting`s; `add_settings` turns them into argparse flags (default
None, so "not given" is visible) and `layer` merges the sources into one mapping that
the part's strict `Config.from_mapping` then validates. Parts never read sys.argv or
os.environ themselves: cli.py hands them `environ`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["Setting", "ConfigError", "add_settings", "layer", "load_yaml", "env_name", "parse_bool"]


class ConfigError(ValueError):
    """Invalid configuration; the message names the key (dotted path) and the bad value."""


def parse_bool(text: str) -> bool:
    t = str(text).strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean (true/false)")


@dataclass(frozen=True)
class Setting:
    """One key that may come from a flag, the environment or the YAML file.

    `key` is the dotted path in the YAML mapping (e.g. `server.port`); the flag is
    `--<last part with dashes>` unless `flag` is given; the variable is
    `KVSPREAD_<PART>_<KEY with dots and dashes as underscores>` unless `env` is given.
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


def load_yaml(path: str | Path | None) -> dict[str, Any]:
    """Read a YAML mapping; a missing file or a non-mapping is a ConfigError."""
    if path is None:
        return {}
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {p} does not exist") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {p} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a mapping at the top level")
    return data


def _set_path(target: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = target
    for p in parts[:-1]:
        child = node.get(p)
        if not isinstance(child, dict):
            child = {}
            node[p] = child
        node = child
    node[parts[-1]] = value


def layer(
    part: str,
    settings: list[Setting],
    args: argparse.Namespace,
    environ: Mapping[str, str],
    file_mapping: Mapping[str, Any],
) -> dict[str, Any]:
    """Merge file < env < flags for the declared settings; returns a new mapping.

    Values from env and flags are converted with the setting's `type`; a bad value is a
    ConfigError naming the flag or variable.
    """
    import copy

    merged: dict[str, Any] = copy.deepcopy(dict(file_mapping))
    for s in settings:
        env = env_name(part, s)
        raw_flag = getattr(args, s.dest(), None)
        source: str | None = None
        raw: Any = None
        if raw_flag is not None:
            source, raw = s.flag_name(), raw_flag
        elif env in environ and environ[env] != "":
            source, raw = env, environ[env]
        if source is None:
            continue
        conv = parse_bool if s.is_flag else s.type
        try:
            value = raw if (s.is_flag and raw is True) else conv(raw)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{source}: invalid value {raw!r}: {exc}") from exc
        _set_path(merged, s.key, value)
    return merged
