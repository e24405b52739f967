"""The picker's own copy of Envoy's ext_proc messages (router/proto/): the committed stubs
match the .proto file, the gRPC method and field numbers are Envoy's, the bytes are those the
earlier four-package copy produced, and importing the picker loads nothing from xds-protos
(whose files overwrite opentelemetry-proto's)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FileDescriptor
from google.protobuf.message import Message

import router.proto
from router import extproc
from router.picker import Outcome
from router.proto import ext_proc_pb2
from router.scoring import Decision

PROTO = Path(router.proto.__file__).parent
ROOT = PROTO.parents[1]
FOREIGN = ("envoy", "xds", "udpa", "validate")


def _protoc(*args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT}", *args], check=True, cwd=ROOT
    )


def test_committed_stubs_match_the_protos(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    out = tmp_path / "gen"
    (out / "router" / "proto").mkdir(parents=True)
    files = [f"router/proto/{p}" for p in router.proto.PROTOS]
    _protoc(f"--python_out={out}", f"--pyi_out={out}", *files)
    generated = sorted(p.name for p in (out / "router" / "proto").iterdir())
    committed = sorted(p.name for p in PROTO.glob("*_pb2*"))
    assert generated == committed
    for name in generated:
        assert (out / "router" / "proto" / name).read_text() == (PROTO / name).read_text(), name


def test_the_grpc_method_is_envoys() -> None:
    svc = ext_proc_pb2.DESCRIPTOR.services_by_name["ExternalProcessor"]
    assert svc.full_name == "envoy.service.ext_proc.v3.ExternalProcessor"
    (method,) = svc.methods
    assert (method.name, method.client_streaming, method.server_streaming) == (
        "Process",
        True,
        True,
    )
    assert method.input_type.full_name == "envoy.service.ext_proc.v3.ProcessingRequest"
    assert method.output_type.full_name == "envoy.service.ext_proc.v3.ProcessingResponse"


def test_file_names_are_not_envoys() -> None:
    """Another library's Envoy protos may share the process: no file name in common."""
    assert ext_proc_pb2.DESCRIPTOR.name == "router/proto/ext_proc.proto"


def test_a_picking_response_decodes_by_envoys_field_numbers() -> None:
    """The bytes the picker sends, read back by field number with no schema: Envoy's
    ProcessingResponse.request_headers (1) > HeadersResponse.response (1) >
    CommonResponse.header_mutation (2) / clear_route_cache (5), HeaderMutation.set_headers
    (1) > HeaderValueOption.header (1) / append_action (3), HeaderValue.key (1) /
    raw_value (3); dynamic_metadata (8)."""
    opt = ext_proc_pb2.HeaderValueOption(
        header=ext_proc_pb2.HeaderValue(key="k", raw_value=b"v"),
        append_action=ext_proc_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )
    resp = ext_proc_pb2.ProcessingResponse(
        request_headers=ext_proc_pb2.HeadersResponse(
            response=ext_proc_pb2.CommonResponse(
                header_mutation=ext_proc_pb2.HeaderMutation(set_headers=[opt]),
                clear_route_cache=True,
            )
        )
    )
    header_value = b"\x0a\x01k" + b"\x1a\x01v"
    option = b"\x0a" + bytes([len(header_value)]) + header_value + b"\x18\x02"
    mutation = b"\x0a" + bytes([len(option)]) + option
    common = b"\x12" + bytes([len(mutation)]) + mutation + b"\x28\x01"
    headers = b"\x0a" + bytes([len(common)]) + common
    assert resp.SerializeToString() == b"\x0a" + bytes([len(headers)]) + headers


def test_unknown_fields_survive() -> None:
    """Fields Envoy sends that the copy leaves out (observability_mode, 10) are kept."""
    raw = b"\x50\x01"  # field 10, varint 1
    msg = ext_proc_pb2.ProcessingRequest.FromString(raw)
    assert msg.SerializeToString() == raw


def test_the_picker_imports_nothing_from_envoy_packages() -> None:
    code = "import json, sys, router.extproc, router.run; print(json.dumps(sorted(sys.modules)))"
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    loaded = json.loads(res.stdout)
    assert "router.proto.ext_proc_pb2" in loaded
    foreign = [m for m in loaded if m.split(".")[0] in FOREIGN]
    assert foreign == []


ENVOY_PACKAGES = (
    "envoy.config.core.v3",
    "envoy.type.v3",
    "envoy.extensions.filters.http.ext_proc.v3",
    "envoy.service.ext_proc.v3",
)
"""Envoy's packages of the messages: the earlier copy declared each in its own, this one
declares them all in the last."""

# Golden bytes (hex, deterministic serialization) that the earlier copy of the messages, four
# .proto files in Envoy's four packages (router/proto/{core,http_status,processing_mode,
# ext_proc}.proto at commit 08cca2d), produced for `wire_messages` and for the picker's own
# answers. The stubs now declare everything in envoy.service.ext_proc.v3; the bytes must not
# change, because protobuf's binary encoding carries field numbers and never type names.
WIRE_GOLDEN = {
    "request_headers": "122e0a2c0a1d0a053a706174681a142f76312f636861742f636f6d706c6574696f6e730a0b0a06782d7465787412017642580a560a14656e766f792e6c622e7375627365745f68696e74123e0a3c0a25782d676174657761792d64657374696e6174696f6e2d656e64706f696e742d737562736574121332110a0f1a0d31302e302e302e313a383030305a06080410021801",
    "request_body": "22140a107b226d6f64656c223a227177656e227d1001",
    "request_trailers": "32140a120a100a0b677270632d737461747573120130",
    "response_headers": "1a160a120a100a0b677270632d7374617475731201301801",
    "response_body": "2a0b0a09646174613a20780a0a",
    "response_trailers": "3a00",
    "destination": "0a560a54123c0a350a2f0a1e782d676174657761792d64657374696e6174696f6e2d656e64706f696e741a0d31302e302e302e313a38303030180220011203782d6122120a100a0b677270632d737461747573120130280142430a410a08656e766f792e6c6212352a330a310a1e782d676174657761792d64657374696e6174696f6e2d656e64706f696e74120f1a0d31302e302e302e313a38303030",
    "replaced_body": "1a0a0a0808011a040a027b7d",
    "streamed_body": "220f0a0d1a0b1a090a056368756e6b1001",
    "cleared_body": "12060a041a021001",
    "trailers_answer": "2a060a0412027465",
    "empty_answer": "3200",
    "immediate": "3a560a0308f70312240a220a200a0c636f6e74656e742d747970651a106170706c69636174696f6e2f6a736f6e1a0c7b226572726f72223a7b7d7d2a1b6b767370726561645f726f757465725f6e6f5f656e64706f696e74",
    "processing_mode": "080110021803200528013002",
}
PICKER_GOLDEN = {
    "headers_destination": "0a490a4712430a410a3d0a1e782d676174657761792d64657374696e6174696f6e2d656e64706f696e741a1b31302e302e302e313a383030302c31302e302e302e323a3830303018022801428e010a8b010a08656e766f792e6c62127f2a7d0a3a0a27782d676174657761792d64657374696e6174696f6e2d656e64706f696e742d66616c6c6261636b120f1a0d31302e302e302e323a383030300a3f0a1e782d676174657761792d64657374696e6174696f6e2d656e64706f696e74121d1a1b31302e302e302e313a383030302c31302e302e302e323a38303030",
    "body_destination": "1a490a4712430a410a3d0a1e782d676174657761792d64657374696e6174696f6e2d656e64706f696e741a1b31302e302e302e313a383030302c31302e302e302e323a3830303018022801428e010a8b010a08656e766f792e6c62127f2a7d0a3a0a27782d676174657761792d64657374696e6174696f6e2d656e64706f696e742d66616c6c6261636b120f1a0d31302e302e302e323a383030300a3f0a1e782d676174657761792d64657374696e6174696f6e2d656e64706f696e74121d1a1b31302e302e302e313a383030302c31302e302e302e323a38303030",
    "streamed_request_chunk": "1a0d0a0b1a091a070a056368756e6b",
    "streamed_response_chunk": "22080a061a041a021001",
    # the 429 carries llm-d's x-llm-d-request-dropped-reason (router/objectives.py, issue 27 point 5)
    "immediate_shed": "3ac7010a0308ad03125c0a220a200a0c636f6e74656e742d747970651a106170706c69636174696f6e2f6a736f6e0a360a340a1e782d6c6c6d2d642d726571756573742d64726f707065642d726561736f6e1a1272656a65637465642d7361747572617465641a4c7b226572726f72223a7b226d657373616765223a226b7673707265616420726f757465723a2071756575652066756c6c222c2274797065223a2273686564222c22636f6465223a3432397d7d2a146b767370726561645f726f757465725f73686564",
}
SCHEMA_SHA256 = "518f23e6f48f65cfee1459df62024cea91214dcabc1f9a4687fdde0ca063c059"
"""sha256 of `schema_lines` of the four files at commit 08cca2d, lines joined by newlines
(133 lines: every field, enum value and the method, Envoy's package names cut off)."""
ADDED_SINCE = (
    "ProcessingRequest.AttributesEntry.key=1 9 False False False  ",
    "ProcessingRequest.AttributesEntry.value=2 11 False False True  google.protobuf.Struct",
    "ProcessingRequest.attributes=9 11 True False False  ProcessingRequest.AttributesEntry",
)
"""Declared since that copy, with Envoy's number and type: `ProcessingRequest.attributes`
(the `upstream.address` router/served.py reads)."""


def wire_messages(m: Any) -> dict[str, Message]:
    """One message per shape the picker reads (requests) or writes (responses), with every
    declared field set at least once; `m` is the module (or namespace) holding the stubs."""
    mode = m.ProcessingMode
    hint = struct_pb2.Struct()
    hint.fields[
        "x-gateway-destination-endpoint-subset"
    ].list_value.values.add().string_value = "10.0.0.1:8000"
    dest = struct_pb2.Struct()
    dest.fields["envoy.lb"].struct_value.fields[
        "x-gateway-destination-endpoint"
    ].string_value = "10.0.0.1:8000"
    option = m.HeaderValueOption(
        header=m.HeaderValue(key="x-gateway-destination-endpoint", raw_value=b"10.0.0.1:8000"),
        append_action=m.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
        keep_empty_value=True,
    )
    trailers = m.HeaderMap(headers=[m.HeaderValue(key="grpc-status", value="0")])
    return {
        "request_headers": m.ProcessingRequest(
            request_headers=m.HttpHeaders(
                headers=m.HeaderMap(
                    headers=[
                        m.HeaderValue(key=":path", raw_value=b"/v1/chat/completions"),
                        m.HeaderValue(key="x-text", value="v"),
                    ]
                ),
                end_of_stream=False,
            ),
            metadata_context=m.Metadata(filter_metadata={"envoy.lb.subset_hint": hint}),
            protocol_config=m.ProtocolConfiguration(
                request_body_mode=mode.FULL_DUPLEX_STREAMED,
                response_body_mode=mode.BUFFERED,
                send_body_without_waiting_for_header_response=True,
            ),
        ),
        "request_body": m.ProcessingRequest(
            request_body=m.HttpBody(body=b'{"model":"qwen"}', end_of_stream=True)
        ),
        "request_trailers": m.ProcessingRequest(request_trailers=m.HttpTrailers(trailers=trailers)),
        "response_headers": m.ProcessingRequest(
            response_headers=m.HttpHeaders(headers=trailers, end_of_stream=True)
        ),
        "response_body": m.ProcessingRequest(response_body=m.HttpBody(body=b"data: x\n\n")),
        "response_trailers": m.ProcessingRequest(response_trailers=m.HttpTrailers()),
        "destination": m.ProcessingResponse(
            request_headers=m.HeadersResponse(
                response=m.CommonResponse(
                    header_mutation=m.HeaderMutation(set_headers=[option], remove_headers=["x-a"]),
                    trailers=trailers,
                    clear_route_cache=True,
                )
            ),
            dynamic_metadata=dest,
        ),
        "replaced_body": m.ProcessingResponse(
            request_body=m.BodyResponse(
                response=m.CommonResponse(
                    status=m.CommonResponse.CONTINUE_AND_REPLACE,
                    body_mutation=m.BodyMutation(body=b"{}"),
                )
            )
        ),
        "streamed_body": m.ProcessingResponse(
            response_body=m.BodyResponse(
                response=m.CommonResponse(
                    body_mutation=m.BodyMutation(
                        streamed_response=m.StreamedBodyResponse(body=b"chunk", end_of_stream=True)
                    )
                )
            )
        ),
        "cleared_body": m.ProcessingResponse(
            response_headers=m.HeadersResponse(
                response=m.CommonResponse(body_mutation=m.BodyMutation(clear_body=True))
            )
        ),
        "trailers_answer": m.ProcessingResponse(
            request_trailers=m.TrailersResponse(
                header_mutation=m.HeaderMutation(remove_headers=["te"])
            )
        ),
        "empty_answer": m.ProcessingResponse(response_trailers=m.TrailersResponse()),
        "immediate": m.ProcessingResponse(
            immediate_response=m.ImmediateResponse(
                status=m.HttpStatus(code=m.StatusCode.Value("ServiceUnavailable")),
                headers=m.HeaderMutation(
                    set_headers=[
                        m.HeaderValueOption(
                            header=m.HeaderValue(key="content-type", raw_value=b"application/json")
                        )
                    ]
                ),
                body=b'{"error":{}}',
                details="kvspread_router_no_endpoint",
            )
        ),
        "processing_mode": m.ProcessingMode(
            request_header_mode=mode.SEND,
            response_header_mode=mode.SKIP,
            request_body_mode=mode.BUFFERED_PARTIAL,
            response_body_mode=mode.GRPC,
            request_trailer_mode=mode.SEND,
            response_trailer_mode=mode.SKIP,
        ),
    }


def schema_lines(files: Iterable[FileDescriptor]) -> list[str]:
    """Every message field, enum value and method of `files` with Envoy's package names cut
    off: what must not change when the declarations move between packages."""

    def short(name: str) -> str:
        for package in ENVOY_PACKAGES:
            name = name.removeprefix(package + ".")
        return name

    def message(d: Descriptor) -> Iterator[str]:
        for f in d.fields:
            kind = f.message_type or f.enum_type
            oneof = f.containing_oneof.name if f.containing_oneof else ""
            ref = short(kind.full_name) if kind else ""
            shape = f"{f.type} {f.is_repeated} {f.is_packed} {f.has_presence} {oneof} {ref}"
            yield f"{short(d.full_name)}.{f.name}={f.number} {shape}"
        for nested in d.nested_types:
            yield from message(nested)
        for e in d.enum_types:
            yield from enum(e)

    def enum(e: EnumDescriptor) -> Iterator[str]:
        yield from (f"{short(e.full_name)}.{v.name}={v.number}" for v in e.values)

    lines: list[str] = []
    for fd in files:
        for d in fd.message_types_by_name.values():
            lines.extend(message(d))
        for e in fd.enum_types_by_name.values():
            lines.extend(enum(e))
        for s in fd.services_by_name.values():
            for meth in s.methods:
                lines.append(
                    f"{short(s.full_name)}/{meth.name} {short(meth.input_type.full_name)}"
                    f" {short(meth.output_type.full_name)}"
                    f" {meth.client_streaming} {meth.server_streaming}"
                )
    return sorted(lines)


@pytest.mark.parametrize("name", sorted(WIRE_GOLDEN))
def test_messages_encode_and_parse_as_the_four_package_copy_did(name: str) -> None:
    msg = wire_messages(ext_proc_pb2)[name]
    raw = bytes.fromhex(WIRE_GOLDEN[name])
    assert msg.SerializeToString(deterministic=True) == raw
    parsed = type(msg).FromString(raw)
    assert parsed == msg
    assert parsed.SerializeToString(deterministic=True) == raw


def test_the_pickers_answers_are_the_bytes_they_were() -> None:
    """router/extproc.py's own answers, built by the code that serves Envoy."""
    picked = Decision(
        status=200, reason="picked", chosen="10.0.0.1:8000", fallbacks=("10.0.0.2:8000",)
    )
    shed = Decision(status=429, reason="shed", message="queue full")
    answers = {
        "headers_destination": extproc._destination_answer("headers", Outcome(picked, None, "r1")),
        "body_destination": extproc._destination_answer("body", Outcome(picked, None, "r1")),
        "streamed_request_chunk": extproc._streamed(b"chunk", False, request=True),
        "streamed_response_chunk": extproc._streamed(b"", True, request=False),
        "immediate_shed": extproc._immediate(Outcome(shed, None, "r2")),
    }
    got = {k: v.SerializeToString(deterministic=True).hex() for k, v in answers.items()}
    assert got == PICKER_GOLDEN


def test_only_the_package_names_changed() -> None:
    """Every field's name, number, type and message/enum, every enum value and the method are
    those of the four-package copy."""
    lines = schema_lines([ext_proc_pb2.DESCRIPTOR])
    assert [line for line in lines if line in ADDED_SINCE] == sorted(ADDED_SINCE)
    lines = [line for line in lines if line not in ADDED_SINCE]
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    assert (len(lines), digest) == (133, SCHEMA_SHA256), "\n".join(lines)
