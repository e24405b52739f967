"""The model a request names: `gen_ai.request.model` from the captured bytes of a request.

The kernel hands user space the first bytes of a request (512 per read, at most three
reads: bpf/programs/events.h), so a JSON body is usually cut off. `scan_model` reads the
string value of the top-level key `"model"` from such a prefix and says when it cannot:
a value, key or object cut off by the capture is `PAST_CAPTURE`, never a guess. Routes
that carry the model in the path (`/v2/models/{model}/...`) name it there.

Only token streams are read (bpf/agent.py), so other requests cost nothing here.
`ModelLabels` bounds what becomes a label value: at most `MAX_MODELS_PER_PROCESS` distinct
names per serving process (the rest are `other`), each at most `MAX_MODEL_BYTES` long.
"""

from __future__ import annotations

import enum
import json
import re
from collections import OrderedDict
from typing import Final

from bpf.http import target_path

__all__ = [
    "Unseen",
    "ModelLabels",
    "scan_model",
    "model_from_path",
    "request_model",
    "MAX_MODEL_BYTES",
    "MAX_SCAN_BYTES",
    "MAX_MODELS_PER_PROCESS",
    "OTHER_MODEL",
]

MAX_SCAN_BYTES: Final = 4096
"""Bytes of a body the scanner reads at most (the tracker keeps 4096 of a request)."""
MAX_MODEL_BYTES: Final = 256
"""Longest model name (as sent, escapes included) taken as a label value; a longer one is
counted `capped` and labelled `other`. Hugging Face ids are at most 96 characters."""
MAX_MODELS_PER_PROCESS: Final = 32
"""Distinct gen_ai.request.model values per serving process; further names are `other`
(a vLLM process serving LoRA adapters answers to one name per adapter)."""
MAX_PROCESSES: Final = 4096
"""Processes whose model names are remembered (least recently used forgotten first)."""
OTHER_MODEL: Final = "other"


class Unseen(enum.Enum):
    """Why a request has no model: its value is past what the kernel captured, or the
    request does not name one (no top-level "model" string, not a JSON object)."""

    PAST_CAPTURE = "past_capture"
    NOT_NAMED = "not_named"


# One JSON token after optional whitespace: a complete string (group 1: its raw content),
# a structural character, or a bare scalar (number, true, false, null). Possessive
# quantifiers: a string the capture cut off fails at once instead of backtracking.
# Raw control characters are in no token (JSON strings escape them), so bytes that are
# not JSON end the scan.
_TOKEN: Final = re.compile(
    rb'[ \t\r\n]*+(?:"([^"\\\x00-\x1f]*+(?:\\.[^"\\\x00-\x1f]*+)*+)"|([{}\[\],:])'
    rb'|[^ \t\r\n{}\[\],:"\\\x00-\x1f]++)',
    re.DOTALL,
)
_WS: Final = re.compile(rb"[ \t\r\n]*+")


def scan_model(body: bytes, complete: bool = False) -> str | Unseen:
    """The string value of the top-level key "model" of a JSON object prefix.

    `complete`: the body is known to be whole, so a key not found is not named rather
    than past the capture (without it, an object seen to end is not named). Bounded: reads at most
    `MAX_SCAN_BYTES`, one regex match per token; never raises. The first "model" key
    wins (a later duplicate may be past the capture); a key spelled with escapes
    (`"mod\\u0065l"`) is not recognised.
    """
    pos = _WS.match(body).end()  # type: ignore[union-attr]  # matches the empty string
    if pos == len(body):
        return Unseen.NOT_NAMED if complete else Unseen.PAST_CAPTURE
    if body[pos] != 0x7B:  # "{": not a JSON object (a form, plain text, ...)
        return Unseen.NOT_NAMED
    cut = Unseen.NOT_NAMED if complete and len(body) <= MAX_SCAN_BYTES else Unseen.PAST_CAPTURE
    if b'"model"' not in body and cut is Unseen.NOT_NAMED:
        return cut  # the key is in no byte of a whole body
    data = body[:MAX_SCAN_BYTES]
    match = _TOKEN.match
    pos += 1
    depth = 1
    expect_key = True  # at depth 1, after "{" or ","
    want = False  # the last key at depth 1 was "model": the next value decides
    while True:
        m = match(data, pos)
        if m is None:
            # the capture ends here (pos at the end, or a string cut off) or bytes that
            # are not JSON (raw control characters, a stray backslash) follow
            rest = data[pos:].lstrip(b" \t\r\n")
            return cut if not rest or rest[:1] == b'"' else Unseen.NOT_NAMED
        pos = m.end()
        raw, punct = m.group(1), m.group(2)
        if punct is not None:
            if punct == b":":
                continue
            if want:
                return Unseen.NOT_NAMED  # "model": {...} or [...]: not a string
            if punct in b"{[":
                depth += 1
            elif punct in b"}]":
                depth -= 1
                if depth == 0:
                    return Unseen.NOT_NAMED  # the object ended without "model"
            elif depth == 1:  # ","
                expect_key = True
            continue
        if want:
            return Unseen.NOT_NAMED if raw is None else _decode(raw)  # null, 3: not a name
        if raw is not None and depth == 1 and expect_key:
            expect_key = False
            want = raw == b"model"


def _decode(raw: bytes) -> str | Unseen:
    """A JSON string's content (escapes decoded); invalid escapes or UTF-8, or an empty
    string: not named."""
    if len(raw) > MAX_MODEL_BYTES:
        return OTHER_MODEL
    try:
        value = json.loads(b'"' + raw + b'"')
        value.encode()  # a lone surrogate (\\ud800) is no label value
    except ValueError:  # UnicodeDecodeError and UnicodeEncodeError included
        return Unseen.NOT_NAMED
    return value if isinstance(value, str) and value else Unseen.NOT_NAMED


def request_model(route: str, request: bytes) -> str | Unseen:
    """The model a captured request (head and body start, bpf.tracker's
    `RequestRecord.request`) names: its path's `{model}` segment where its route has one,
    else its body's top-level "model"."""
    if "{model}" in route:
        line = request[: request.find(b"\r\n")]
        parts = line.split(b" ")
        if len(parts) >= 2:
            model = model_from_path(route, target_path(parts[1]))
            if model is not None:
                return model
        return Unseen.NOT_NAMED
    end = request.find(b"\r\n\r\n")
    return Unseen.PAST_CAPTURE if end < 0 else scan_model(request[end + 4 :])


def model_from_path(route: str, path: str) -> str | None:
    """The `{model}` segment of `path` where its route template has one (Triton / KServe
    v2 `/v2/models/{model}/generate_stream`); None otherwise."""
    if "{model}" not in route:
        return None
    at = route.strip("/").split("/").index("{model}")
    segs = path.strip("/").split("/")
    if at >= len(segs) or not segs[at]:
        return None
    seg = segs[at]
    return seg if len(seg) <= MAX_MODEL_BYTES else OTHER_MODEL


class ModelLabels:
    """The label value of each process's model names, bounded per process.

    Only the event thread calls `label`. Outcome counts say how often a stream had a
    model (`named`), had none (`past_capture`, `not_named`) or was labelled `other`
    because its process had `MAX_MODELS_PER_PROCESS` names already (`capped`).
    """

    def __init__(
        self, per_process: int = MAX_MODELS_PER_PROCESS, processes: int = MAX_PROCESSES
    ) -> None:
        self.per_process = per_process
        self.processes = processes
        self._seen: OrderedDict[int, set[str]] = OrderedDict()

    def label(self, tgid: int, model: str | Unseen) -> tuple[str, str]:
        """(label value, outcome) of a request of process `tgid` naming `model`; the
        value is "" (absent) when the request named none."""
        if isinstance(model, Unseen):
            return "", model.value
        if model == OTHER_MODEL:
            return OTHER_MODEL, "capped"
        seen = self._seen.get(tgid)
        if seen is None:
            seen = self._seen[tgid] = set()
            while len(self._seen) > self.processes:
                self._seen.popitem(last=False)
        else:
            self._seen.move_to_end(tgid)
        if model in seen:
            return model, "named"
        if len(seen) >= self.per_process:
            return OTHER_MODEL, "capped"
        seen.add(model)
        return model, "named"
