"""gen_ai.request.model from captured request bytes: the scanner, the path, the per-process
bound, and the tracker's gaps between reads longer than the capture."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpf.events import ConnState, HttpEvent, HttpEventKind
from bpf.model import (
    MAX_MODEL_BYTES,
    MAX_SCAN_BYTES,
    OTHER_MODEL,
    ModelLabels,
    Unseen,
    model_from_path,
    request_model,
    scan_model,
)
from bpf.tracker import ConnTracker

PAST, NOT = Unseen.PAST_CAPTURE, Unseen.NOT_NAMED


@pytest.mark.parametrize(
    ("body", "complete", "want"),
    [
        (b'{"model":"m","stream":true}', True, "m"),
        (
            b' \r\n{ "model" : "meta-llama/Llama-3.1-8B-Instruct" , "x": 1}',
            True,
            "meta-llama/Llama-3.1-8B-Instruct",
        ),
        # openai-python's order: messages first; "model" in a message is not the key
        (
            b'{"messages":[{"role":"user","content":"the \\"model\\": \\"x\\""},'
            b'{"model":"inner"}],"model":"qwen"}',
            True,
            "qwen",
        ),
        (b'{"a":{"model":"x","b":[1,{"model":"y"}]},"model":"z"}', True, "z"),
        (b'{"model":"caf\\u00e9\\/v2\\n"}', True, "caf\u00e9/v2\n"),  # escapes decoded
        (b'{"model":"a","model":"b"}', True, "a"),  # the first key wins
        # cut off by the capture: absent, never a prefix of the name
        (b'{"model":"meta-lla', False, PAST),
        (b'{"model":"meta-lla\\', False, PAST),
        (b'{"model"', False, PAST),
        (b'{"messages":[{"role":"user","content":"long prompt ', False, PAST),
        (b'{"messages":[{"role":"user","content":"model"}],"stream":tr', False, PAST),
        (b"", False, PAST),
        # named nowhere, or not a name
        (b'{"messages":[],"stream":true}', True, NOT),
        (b'{"messages":[{"model":"inner"}]}', False, NOT),  # the object ended
        (b'{"model":null}', True, NOT),
        (b'{"model":7}', True, NOT),
        (b'{"model":["a"]}', True, NOT),
        (b'{"model":""}', True, NOT),
        (b'{"model":"\\ud800"}', True, NOT),  # a lone surrogate is no label value
        (b'{"model":"\xff"}', True, NOT),  # not UTF-8
        (b'{"model":"a\x00b"}', False, PAST),  # raw control bytes: not JSON
        (b'["model","x"]', True, NOT),
        (b"text_input=model", True, NOT),
        (b"", True, NOT),
    ],
)
def test_scan_model(body: bytes, complete: bool, want: str | Unseen) -> None:
    assert scan_model(body, complete) == want


def test_long_names_are_other_and_the_scan_is_bounded() -> None:
    long = "x" * (MAX_MODEL_BYTES + 1)
    assert scan_model(json.dumps({"model": long}).encode(), True) == OTHER_MODEL
    assert scan_model(json.dumps({"model": "x" * MAX_MODEL_BYTES}).encode(), True) != OTHER_MODEL
    # a "model" key past MAX_SCAN_BYTES is not read, even in a body captured whole
    pad = json.dumps({"p": "y" * MAX_SCAN_BYTES, "model": "m"}).encode()
    assert scan_model(pad, True) is PAST


def test_model_from_path() -> None:
    route = "/v2/models/{model}/generate_stream"
    assert model_from_path(route, "/v2/models/ensemble/generate_stream") == "ensemble"
    assert model_from_path("/v1/chat/completions", "/v1/chat/completions") is None
    assert model_from_path(route, "/v2/models/" + "a" * 300 + "/generate_stream") == OTHER_MODEL


def test_request_model_of_captured_requests() -> None:
    triton = b"POST /v2/models/llama/generate_stream?x=1 HTTP/1.1\r\nHost: t\r\n\r\n"
    body = b'{"text_input":"hi","model":"not-this"}'
    assert request_model("/v2/models/{model}/generate_stream", triton + body) == "llama"
    absolute = triton.replace(b"/v2/", b"http://t/v2/")
    assert request_model("/v2/models/{model}/generate_stream", absolute) == "llama"
    chat = b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 99\r\n\r\n"
    assert request_model("/v1/chat/completions", chat + b'{"model":"q"}') == "q"
    assert request_model("/v1/chat/completions", chat + b'{"stream":true}') is NOT  # ended
    assert request_model("/v1/chat/completions", chat + b'{"stream":true,') is PAST
    assert request_model("/v1/chat/completions", chat[:30]) is PAST  # the head cut off


def test_labels_are_bounded_per_process() -> None:
    labels = ModelLabels(per_process=2, processes=2)
    assert labels.label(1, "a") == ("a", "named")
    assert labels.label(1, "b") == ("b", "named")
    assert labels.label(1, "c") == (OTHER_MODEL, "capped")
    assert labels.label(1, "a") == ("a", "named")  # known names stay
    assert labels.label(2, "c") == ("c", "named")  # another process has its own
    assert labels.label(1, PAST) == ("", "past_capture")
    assert labels.label(1, NOT) == ("", "not_named")
    assert labels.label(1, OTHER_MODEL) == (OTHER_MODEL, "capped")
    labels.label(3, "d")  # a third process: the least recently named one is forgotten
    assert list(labels._seen) == [2, 3]
    assert labels.label(1, "c") == ("c", "named")  # forgotten: its names start again


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), _json, max_size=6), st.integers(0, 2000))
def test_prefix_of_any_object_is_its_model_or_absent(obj: dict[str, object], cut: int) -> None:
    """Any prefix of any JSON object gives its "model" string or says it has none: never
    a wrong value (a prefix of the name, an inner object's key)."""
    body = json.dumps(obj, ensure_ascii=bool(cut % 2)).encode()
    want = obj.get("model")
    whole = cut >= len(body)
    got = scan_model(body[:cut], whole)
    if isinstance(got, str):
        assert isinstance(want, str) and got in (want, OTHER_MODEL)
    elif whole and len(body) <= MAX_SCAN_BYTES and isinstance(want, str) and want:
        pytest.fail(f"{body!r}: {got}, want {want!r}")  # a whole body names its model
    elif whole:
        assert got is NOT


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=600), st.booleans())
def test_never_raises_on_any_bytes(data: bytes, complete: bool) -> None:
    got = scan_model(b'{"model"' + data, complete)
    assert isinstance(got, Unseen) or (0 < len(got) <= MAX_MODEL_BYTES or got == OTHER_MODEL)
    assert isinstance(scan_model(data, complete), (str, Unseen))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["/v1/chat/completions", "/v2/models/{model}/generate_stream", "other"]),
       st.binary(max_size=300))  # fmt: skip
def test_request_model_never_raises(route: str, data: bytes) -> None:
    for request in (data, b"POST /v2/models/" + data + b" HTTP/1.1\r\n\r\n" + data):
        got = request_model(route, request)
        assert isinstance(got, Unseen) or 0 < len(got) <= MAX_MODEL_BYTES


def _ev(kind: HttpEventKind, ts: int, data: bytes, total: int | None = None) -> HttpEvent:
    return HttpEvent(
        kind=kind, ts_ns=ts, conn_id=1, tgid=100, fd=5, port=8000,
        total=len(data) if total is None else total,
        prev_state=ConnState.REQUEST if kind != HttpEventKind.REQUEST else ConnState.IDLE,
        prev_end_ns=0, prev_resp_bytes=0, data=data,
    )  # fmt: skip


HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 4000\r\n\r\n"
RESP = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"


@pytest.mark.parametrize(
    ("reads", "want"),
    [
        # the body's reads captured whole: joined
        ([(HEAD, None), (b'{"stream":true,"mod', None), (b'el":"llama"}', None)], "llama"),
        # a read longer than the capture: what follows is another read's start, so a
        # value across the gap would be wrong (here "meta-" + "b\"}")
        ([(HEAD, None), (b'{"model":"meta-', 4000), (b'b"}', None)], PAST),
        ([(HEAD + b'{"model":"meta-', 4000), (b'b"}', None)], PAST),
        # the name before the gap: kept
        ([(HEAD + b'{"model":"m","messages":[', 4000), (b'"x"]}', None)], "m"),
    ],
)
def test_tracker_reads_the_model_before_a_gap(
    reads: list[tuple[bytes, int | None]], want: str | Unseen
) -> None:
    t = ConnTracker()
    (first, total), *more = reads
    t.on_http(_ev(HttpEventKind.REQUEST, 0, first, total))
    for i, (data, total) in enumerate(more, 1):
        t.on_http(_ev(HttpEventKind.REQUEST_MORE, i, data, total))
    (rec,) = t.on_http(_ev(HttpEventKind.RESPONSE_DONE, 10, RESP))
    assert request_model(rec.route, rec.request) == want
