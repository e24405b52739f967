"""Structured logging: one JSON object per line, a fixed message plus key/value fields.

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

__all__ = ["configure", "CHATTY_LIBRARIES", "JsonFormatter", "LEVELS", "LogLevel"]

LogLevel = Literal["debug", "info", "warning", "error"]
"""A log level as the configs, flags and variables spell it; the loader refuses others."""
LEVELS: tuple[str, ...] = typing.get_args(LogLevel)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
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


CHATTY_LIBRARIES = ("httpx", "httpcore", "urllib3")
"""HTTP clients that log every request at info (one line per engine scrape, per API call):
held at warning unless the level is debug."""


def configure(level: str = "info") -> None:
    """Route the kvspread loggers to stderr as JSON lines at `level`; the HTTP client
    libraries' per-request lines (`CHATTY_LIBRARIES`) only at debug."""
    lvl = level.lower()
    if lvl not in LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(lvl.upper())
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(logging.NOTSET if lvl == "debug" else logging.WARNING)
