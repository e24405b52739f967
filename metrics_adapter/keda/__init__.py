"""KEDA external scaler: the adapter's rules over gRPC (`externalscaler.ExternalScaler`).

Where KEDA owns APIService v1beta1.external.metrics.k8s.io, KEDA's metrics server asks this
scaler instead, through a ScaledObject trigger of type `external` (docs/adapter.md, "With
KEDA installed"). `scaler.py` maps trigger metadata to the same provider read the REST API
makes, so both give identical values and messages.

The message module `externalscaler_pb2.py` (and its `.pyi`) is generated from
`externalscaler.proto` and committed, so that installing and running the adapter needs only
`grpcio` and `protobuf`, no code generation step; `tests/metrics_adapter/test_metrics_adapter_keda.py`
regenerates it with grpcio-tools and fails if it differs. The service itself is served from
the module's descriptor by `kvspread.grpcservice` (no generated `_pb2_grpc.py`). To regenerate,
from the repository root:

    python3 -m grpc_tools.protoc -I. --python_out=. --pyi_out=. \\
        metrics_adapter/keda/externalscaler.proto
"""

__all__ = ["scaler"]
