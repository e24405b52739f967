"""KEDA external scaler: the adapter's rules over gRPC (`externalscaler.ExternalScaler`).

Where KEDA owns APIService v1beta1.external.metrics.k8s.io, KEDA's metrics server asks this
scaler instead, through a ScaledObject trigger of type `external` (docs/adapter.md, "With
KEDA installed"). `scaler.py` maps trigger metadata to the same provider read the REST API
makes, so both give identical values and messages.

The stubs `externalscaler_pb2.py`, `externalscaler_pb2_grpc.py` (and `.pyi`) are generated
from `externalscaler.proto` and committed, so that installing and running the adapter needs
only `grpcio` and `protobuf`, no code generation step; `tests/metrics_adapter/test_metrics_adapter_keda.py`
regenerates them with grpcio-tools and fails if they differ. To regenerate, from the
repository root:

    python3 -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. \\
        metrics_adapter/keda/externalscaler.proto
"""

__all__ = ["scaler"]
