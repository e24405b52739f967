"""Envoy's ext_proc protocol, the subset the picker speaks, as the project's own .proto file.

The PyPI package `xds-protos` would give the same messages, but it ships its own old copy of
`opentelemetry/proto/**`, which overwrites opentelemetry-proto's files and breaks the OTLP
exporter. So the messages the picker reads or writes are declared here in one file,
`ext_proc.proto`, with Envoy's names, field numbers and types, under a file name of its own so
it never collides with Envoy's in the descriptor pool.

Envoy spreads these messages over four proto packages; this file declares all of them in the
service's package, `envoy.service.ext_proc.v3`: the helpers Envoy keeps elsewhere (HeaderMap,
HeaderValue, HeaderValueOption and Metadata of `envoy.config.core.v3`, HttpStatus and
StatusCode of `envoy.type.v3`, ProcessingMode of `envoy.extensions.filters.http.ext_proc.v3`)
sit next to the messages that use them, each under a comment naming Envoy's file. Why: one
file gives one set of stubs and one import, instead of four near-identical generated modules.
It changes no byte on the wire: protobuf's binary encoding carries field numbers and never
type names, the picker puts no message in a `google.protobuf.Any` nor uses text or JSON
format, and the gRPC method path `/envoy.service.ext_proc.v3.ExternalProcessor/Process` names
only the service. `tests/router/test_router_proto.py` keeps the bytes the four-package copy
produced and checks that these stubs produce and parse the same. The service's messages keep
Envoy's full names, so one process still cannot load both these stubs and Envoy's own Python
protos (protobuf refuses the duplicate symbols); the picker runs as its own process.

The `ext_proc_pb2.py` and `ext_proc_pb2.pyi` message stubs are generated and committed, so
running the picker needs only `grpcio` and `protobuf`; `tests/router/test_router_proto.py`
regenerates them with grpcio-tools and fails if they differ. To regenerate, from the
repository root:

    python3 -m grpc_tools.protoc -I. --python_out=. --pyi_out=. router/proto/ext_proc.proto

The service is served from `ext_proc_pb2`'s descriptor by `kvspread.grpcservice` (router/extproc.py
`SERVICE`), so there is no generated `ext_proc_pb2_grpc.py`.

The generated code needs protobuf >= the version of grpcio-tools' protoc that made it (checked
at import); pyproject.toml says so.
"""

PROTOS = ("ext_proc.proto",)
"""The .proto files of this package, in the order the stubs are generated."""
