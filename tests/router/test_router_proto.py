"""The picker's own copy of Envoy's ext_proc messages (router/proto/): the committed stubs
match the .proto files, the gRPC method and field numbers are Envoy's, and importing the
picker loads nothing from xds-protos (whose files overwrite opentelemetry-proto's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import router.proto
from router.proto import core_pb2, ext_proc_pb2, processing_mode_pb2

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
    for mod in (core_pb2, ext_proc_pb2, processing_mode_pb2):
        assert mod.DESCRIPTOR.name.startswith("router/proto/")


def test_a_picking_response_decodes_by_envoys_field_numbers() -> None:
    """The bytes the picker sends, read back by field number with no schema: Envoy's
    ProcessingResponse.request_headers (1) > HeadersResponse.response (1) >
    CommonResponse.header_mutation (2) / clear_route_cache (5), HeaderMutation.set_headers
    (1) > HeaderValueOption.header (1) / append_action (3), HeaderValue.key (1) /
    raw_value (3); dynamic_metadata (8)."""
    opt = core_pb2.HeaderValueOption(
        header=core_pb2.HeaderValue(key="k", raw_value=b"v"),
        append_action=core_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
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
