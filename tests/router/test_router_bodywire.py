"""router/bodywire.py: a request_body chunk read from the wire bytes agrees with protobuf's
parse wherever it reads one, and leaves every other shape (and every garbled one) to protobuf."""

from __future__ import annotations

from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from router.bodywire import request_body
from router.proto import ext_proc_pb2 as pb

_EMPTY_METADATA = b"\x42\x00"  # what Envoy 1.40 appends to each body chunk


def _wire(body: bytes, eos: bool) -> bytes:
    return pb.ProcessingRequest(
        request_body=pb.HttpBody(body=body, end_of_stream=eos)
    ).SerializeToString()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000), st.booleans(), st.booleans())
def test_a_body_chunk_reads_as_protobuf_reads_it(body: bytes, eos: bool, envoy: bool) -> None:
    data = _wire(body, eos) + (_EMPTY_METADATA if envoy else b"")
    got = request_body(data)
    parsed = pb.ProcessingRequest.FromString(data)
    assert got is not None
    assert bytes(got.body) == parsed.request_body.body == body
    assert got.end_of_stream == parsed.request_body.end_of_stream == eos


def test_the_chunk_is_a_view_not_a_copy() -> None:
    data = _wire(b"x" * (1 << 20), False)
    got = request_body(data)
    assert got is not None and got.body.obj is data


def test_other_shapes_go_to_protobuf() -> None:
    headers = pb.ProcessingRequest(request_headers=pb.HttpHeaders(end_of_stream=True))
    with_metadata = pb.ProcessingRequest(request_body=pb.HttpBody(body=b"ab"))
    with_metadata.metadata_context.filter_metadata["f"].fields["k"].string_value = "v"
    response_body = pb.ProcessingRequest(response_body=pb.HttpBody(body=b"ab"))
    for data in (
        headers.SerializeToString(),
        with_metadata.SerializeToString(),  # a metadata_context that says something
        response_body.SerializeToString(),
        _wire(b"ab", True) + b"\x12\x00",  # then request_headers: the oneof changes
        _wire(b"ab", True) + _wire(b"cd", False),  # two request_body fields merge
        b"",
    ):
        assert request_body(data) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_is_never_read_as_a_chunk_protobuf_would_refuse(data: bytes) -> None:
    got = request_body(data)
    if got is None:
        return
    try:
        parsed = pb.ProcessingRequest.FromString(data)
    except DecodeError:
        raise AssertionError(f"read a chunk from bytes protobuf refuses: {data!r}") from None
    assert bytes(got.body) == parsed.request_body.body
    assert got.end_of_stream == parsed.request_body.end_of_stream


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=40), st.integers(0, 200))
def test_a_cut_or_bent_chunk_is_read_as_protobuf_reads_it(body: bytes, cut: int) -> None:
    data = (_wire(body, True) + _EMPTY_METADATA)[: max(1, cut)]
    test_garbage_is_never_read_as_a_chunk_protobuf_would_refuse.hypothesis.inner_test(data)  # type: ignore[attr-defined]
