"""Envoy's ext_proc protocol, the subset the picker speaks, as the project's own .proto files.

The PyPI package `xds-protos` would give the same messages, but it ships its own old copy of
`opentelemetry/proto/**`, which overwrites opentelemetry-proto's files and breaks the OTLP
exporter. So the messages the picker reads or writes are declared here with Envoy's proto
packages, names, numbers and types (`ext_proc.proto`, `core.proto`, `http_status.proto`,
`processing_mode.proto`), under file names of their own so they never collide with Envoy's
in the descriptor pool; the gRPC method stays `/envoy.service.ext_proc.v3.ExternalProcessor/Process`.
The message names are Envoy's, so one process cannot load both these stubs and Envoy's own
Python protos (protobuf refuses the duplicate symbols); the picker runs as its own process.

The `*_pb2.py` and `*_pb2.pyi` message stubs are generated and committed, so
running the picker needs only `grpcio` and `protobuf`; `tests/router/test_router_proto.py`
regenerates them with grpcio-tools and fails if they differ. To regenerate, from the
repository root:

    python3 -m grpc_tools.protoc -I. --python_out=. --pyi_out=. \\
        router/proto/core.proto router/proto/http_status.proto \\
        router/proto/processing_mode.proto router/proto/ext_proc.proto

The service is served from `ext_proc_pb2`'s descriptor by `kvspread.grpcservice` (router/extproc.py
`SERVICE`), so there is no generated `ext_proc_pb2_grpc.py`.

The generated code needs protobuf >= the version of grpcio-tools' protoc that made it (checked
at import); pyproject.toml says so.
"""

PROTOS = ("core.proto", "http_status.proto", "processing_mode.proto", "ext_proc.proto")
"""The .proto files of this package, in the order the stubs are generated."""
