"""kvspread node collector (docs/collector.md): eBPF request and TCP signals, NVML GPU
memory and engine KV-cache metrics -> node signals, Prometheus and OTLP.

Modules, one concept each: `programs/` (BPF C) and `loader` (the only bcc user), `headers`
(header-less mode), `events` (event layouts and decoders), `http` (HTTP/1.1 prefixes),
`tracker` (events -> requests), `attribution` (pid -> pod), `gpu` (NVML), `node` (signals
maths), `publish` (when to write; the Node annotation), `publisher` (write budget, heartbeat
jitter), `publish_crd` (the NodeSignals resource), `stats` and `state` (bounded tables),
`export` (Prometheus, OTLP), `server` (HTTP endpoints), `config`, `agent` (wiring), `cli`.
Engine /metrics are read by the shared parser `kvspread.engine`.
"""

__all__: list[str] = []
