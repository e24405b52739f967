"""Structured logging: one JSON object per line, a fixed message plus key/value fields;
`--log-format text` (or KVSPREAD_LOG_FORMAT=text) writes the same fields as `key=value`
for a person at a terminal.

log = logging.getLogger("kvspread.extender")
log.debug("decision", extra={"kv": {"pod": "ns/name", "best": "node-a"}})
"""

from __future__ import annotations

import json
import logging
import sys
import time
import typing
from typing import Any, Literal

__all__ = [
    "configure",
    "set_format",
    "CHATTY_LIBRARIES",
    "FORMATS",
    "JsonFormatter",
    "TextFormatter",
    "LEVELS",
    "LogLevel",
]

LogLevel = Literal["debug", "info", "warning", "error"]
"""A log level as the configs, flags and variables spell it; the loader refuses others."""
LEVELS: tuple[str, ...] = typing.get_args(LogLevel)

LogFormat = Literal["json", "text"]
FORMATS: tuple[str, ...] = typing.get_args(LogFormat)
_format: list[str] = ["json"]
"""The format `configure` uses; `kvspread.cli` sets it from --log-format before the part
runs, so that no part's config needs a key for it."""


def _timestamp(record: logging.LogRecord) -> str:
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z"
    )


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        kv = getattr(record, "kv", None)
        if isinstance(kv, dict):
            doc.update(kv)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """`TS LEVEL LOGGER: MSG key=value ...`, one line per record (a traceback, when there is
    one, on the lines after it, as a terminal reader expects)."""

    def format(self, record: logging.LogRecord) -> str:
        kv = getattr(record, "kv", None)
        fields = ""
        if isinstance(kv, dict):
            fields = "".join(f" {k}={_text_value(v)}" for k, v in kv.items())
        line = (
            f"{_timestamp(record)} {record.levelname.lower():<7} {record.name}: "
            f"{record.getMessage()}{fields}"
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_value(value: Any) -> str:
    """A value as `key=value` shows it: quoted (JSON) where it has spaces, quotes or `=`."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if not text or any(c in text for c in ' "=\n'):
        return json.dumps(text)
    return text


def set_format(fmt: str) -> None:
    """Choose the format of the next `configure`: json (default) or text."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {', '.join(FORMATS)}")
    _format[0] = fmt


CHATTY_LIBRARIES = ("httpx", "httpcore", "urllib3")
"""HTTP clients that log every request at info (one line per engine scrape, per API call):
held at warning unless the level is debug."""


def configure(level: str = "info") -> None:
    """Route the kvspread loggers to stderr as JSON lines (or text, `set_format`) at
    `level`; the HTTP client libraries' per-request lines (`CHATTY_LIBRARIES`) only at
    debug."""
    lvl = level.lower()
    if lvl not in LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter() if _format[0] == "text" else JsonFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(lvl.upper())
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(logging.NOTSET if lvl == "debug" else logging.WARNING)
