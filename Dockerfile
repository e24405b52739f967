# syntax=docker/dockerfile:1
# kvspread: one image for the scheduler extender, the metrics adapter, the node collector
# and the endpoint picker (router).
#
#   docker build -t ghcr.io/kvspread/kvspread:0.2.0 .
#
# Debian bookworm, because the collector needs bcc (python3-bpfcc, libbpfcc) and bpftool
# from Debian, and bookworm's python3 is 3.11, the version bcc's Python bindings are built
# for. The package lives in a virtual environment created with --system-site-packages, so
# it sees the apt-installed `bcc` module next to its own pip dependencies.
#
# The image runs as the unprivileged user 65532 (extender, adapter). The collector
# DaemonSet overrides that with runAsUser: 0 plus the capabilities it needs (CAP_BPF,
# CAP_PERFMON, CAP_SYS_RESOURCE, CAP_SYS_PTRACE) and hostPID; see manifests/collector/.
#
# Bundled data: .dockerignore leaves simulator/data/traces (the Alibaba GPU trace, whose owners
# ask for study and research use only) out of the build context, so the image does not carry
# it; the cluster parts never read it, and `kvspread simulate placement` in the image says to
# run simulations from a clone instead (docs/data-licences.md). The image carries
# LICENSE and NOTICE under /usr/share/doc/kvspread/.

ARG DEBIAN=bookworm-slim

FROM debian:${DEBIAN} AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv python3-pip \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md LICENSE NOTICE ./
COPY kvspread ./kvspread
COPY extender ./extender
COPY metrics_adapter ./metrics_adapter
COPY bpf ./bpf
COPY simulator ./simulator
COPY observability ./observability
COPY router ./router
RUN python3 -m venv /opt/build \
 && /opt/build/bin/pip install --no-cache-dir --upgrade pip wheel \
 && /opt/build/bin/pip wheel --no-cache-dir --wheel-dir /wheels .

FROM debian:${DEBIAN}
LABEL org.opencontainers.image.title="kvspread" \
      org.opencontainers.image.description="Schedule and autoscale multimodal LLM inference on Kubernetes by GPU memory, KV-cache fragmentation, modality mix and latency." \
      org.opencontainers.image.source="https://github.com/kvspread/kvspread" \
      org.opencontainers.image.version="0.2.0" \
      org.opencontainers.image.licenses="Apache-2.0"
# bcc for the collector's eBPF programs; bpftool for its header-less mode (a kernel header
# tree generated from /sys/kernel/btf/vmlinux where /lib/modules/.../build is absent);
# ca-certificates for TLS to the API server and to OTLP endpoints.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv ca-certificates \
      python3-bpfcc libbpfcc bpfcc-tools bpftool \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /wheels
COPY --from=build /src/LICENSE /src/NOTICE /usr/share/doc/kvspread/
RUN python3 -m venv --system-site-packages /opt/kvspread \
 && /opt/kvspread/bin/pip install --no-cache-dir --no-index --find-links /wheels kvspread \
 && rm -rf /wheels \
 && /opt/kvspread/bin/python -c "import bcc, kvspread, extender, metrics_adapter, bpf, router" \
 && /opt/kvspread/bin/python -c "import router.extproc, opentelemetry.exporter.otlp.proto.http.metric_exporter" \
 && /opt/kvspread/bin/python -c "import sys, simulator.replay.trace as t; sys.exit(t.TRACE_DIR.exists())"
RUN groupadd --system --gid 65532 kvspread \
 && useradd --system --uid 65532 --gid 65532 --home-dir /var/lib/kvspread --create-home \
      --shell /usr/sbin/nologin kvspread \
 && install -d -o 65532 -g 65532 /var/cache/kvspread
ENV PATH=/opt/kvspread/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    XDG_CACHE_HOME=/var/cache/kvspread
USER 65532:65532
WORKDIR /var/lib/kvspread
ENTRYPOINT ["kvspread"]
CMD ["--help"]
