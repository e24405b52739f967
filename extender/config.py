"""The extender's configuration: `ExtenderConfig` with one section per YAML mapping.

Each field's docstring says what it means (docs/config.md is generated from them) and each
default's constant says where it comes from. `ExtenderConfig.from_mapping()` (the shared
loader, kvspread.settings.load) parses the YAML strictly: an unknown key is an error listing
the known ones, a wrong type or a value out of range names its dotted key.

    server:
      host: 0.0.0.0
      port: 8888
    kubernetes:
      watch_timeout_s: 300
      node_signals: true
    ledger:
      ttl_s: 30
    explain:
      enabled: true
      max_pods: 256
    scoring:
      weights: {fragmentation: 0.35, load: 0.25, spread: 0.15, modality: 0.15, qos: 0.10,
                contention: 0.5}
      contention_qos: [realtime]
      load_weights: {memory: 0.4, streams: 0.3, image: 0.3}
      util_share: 0.5
      busy_gpu_penalty: 1.0
      gpu_assignment: fewest-pods
      rho_threshold: 0.35
      rho_repulsion: 2.0
      stale_after_s: 300
      max_streams: 256
      normalisation: candidates
      shape_prior:
        - {gpus: 1, memory: whole, weight: 1}
        - {gpus: 1, memory: 24Gi, weight: 1}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import Any, Final, Literal

from kvspread import kube, names
from kvspread.logs import LogLevel
from kvspread.quantity import QUANTITY_FORMAT_HELP, QuantityError, parse_quantity
from kvspread.settings import KubeAccess, bounded, invalid, load, paired, ports, validated
from kvspread.signals import STALE_AFTER_S

__all__ = [
    "ScoringConfig",
    "TermWeights",
    "LoadWeights",
    "PriorShape",
    "Normalisation",
    "GpuAssignment",
    "DEFAULT_GPU_ASSIGNMENT",
    "DEFAULT_TERM_WEIGHTS",
    "DEFAULT_LOAD_WEIGHTS",
    "DEFAULT_UTIL_SHARE",
    "DEFAULT_BUSY_GPU_PENALTY",
    "DEFAULT_CONTENTION_QOS",
    "DEFAULT_RHO_THRESHOLD",
    "DEFAULT_RHO_REPULSION",
    "DEFAULT_STALE_AFTER_S",
    "DEFAULT_MAX_STREAMS",
    "DEFAULT_QOS_P95_CEILING_S",
    "DEFAULT_IDLE_USED_FRACTION",
    "DEFAULT_TIE_BAND",
    "DEFAULT_SHAPE_PRIOR",
    "DEFAULT_SHAPE_PRIOR_WEIGHT",
    "DEFAULT_SHAPE_HALF_LIFE_PODS",
    "DEFAULT_MAX_SHAPES",
    "DEFAULT_NORMALISATION",
    "MIB",
    "ExtenderConfig",
    "ServerConfig",
    "KubernetesConfig",
    "LedgerConfig",
    "ExplainConfig",
    "SignalsConfig",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_LEDGER_TTL_S",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
]

MIB: Final = 2**20

RESERVED_PATHS: Final = ("debug", "healthz", "metrics", "readyz")
"""First path segments the extender serves itself: no verb may take them."""

Normalisation = Literal["candidates", "absolute"]
GpuAssignment = Literal["fewest-pods", "scored"]


@dataclass(frozen=True)
class TermWeights:
    """Weights of the prioritize terms (docs/design.md section 5). Only ratios matter."""

    fragmentation: float = 0.35
    """Weight of the fragmentation term: expected unusable GPU memory after the placement."""
    load: float = 0.25
    """Weight of the load term: memory use, GPU utilisation, streams and image share."""
    spread: float = 0.15
    """Weight of the spread term: replicas of one model repel each other across nodes."""
    modality: float = 0.15
    """Weight of the modality term: vision and text pods go to their node pools."""
    qos: float = 0.10
    """Weight of the QoS term: realtime pods avoid nodes with a high p95 latency."""
    contention: float = 0.5
    """Weight of the contention term: a pod of a QoS class in `contention_qos` avoids nodes
    where the GPU the device plugin will give it is already shared with a computing tenant.
    Only for such pods, so the five weights above still sum to 1 for every other pod."""

    def total(self, contention: bool = False) -> float:
        """Sum of the weights in a node's value: the five terms every pod has, and the
        contention term's for a pod it covers (`contention`)."""
        five = self.fragmentation + self.load + self.spread + self.modality + self.qos
        return five + self.contention if contention else five

    def validate(self) -> None:
        _finite_fields(self, *_WEIGHT_KEYS, at_least=0)
        if self.total() <= 0:
            raise invalid(
                "fragmentation", "at least one weight other than contention > 0", self.fragmentation
            )


@dataclass(frozen=True)
class LoadWeights:
    """Weights of the load weight's parts (docs/design.md section 4)."""

    memory: float = 0.4
    """Weight of the busy part (GPU memory used, and utilisation where measured)."""
    streams: float = 0.3
    """Weight of active streams over `max_streams`."""
    image: float = 0.3
    """Weight of the node's share of image requests."""

    def validate(self) -> None:
        _finite_fields(self, *_LOAD_KEYS, at_least=0)
        if self.memory + self.streams + self.image <= 0:
            raise invalid("memory", "at least one load weight > 0", self.memory)


@dataclass(frozen=True)
class PriorShape:
    """One instance shape of the prior target distribution (docs/design.md section 4)."""

    gpus: int = 1
    """GPUs per instance."""
    memory: str | int = "whole"
    """GPU memory per GPU as a Kubernetes quantity (`24Gi`), or `whole` for whole GPUs (a pod
    without `kvspread.io/gpu-memory`)."""
    weight: float = 1.0
    """Relative weight of this shape in the prior."""
    cpu: str | float = 0
    """CPU per instance as a Kubernetes quantity (`8`, `500m`); 0: CPU is not modelled."""

    @cached_property
    def mem_per_gpu_mib(self) -> float | None:
        """`memory` in MiB; None for whole GPUs."""
        if self.memory == "whole":
            return None
        return float(parse_quantity(self.memory)) / MIB

    @cached_property
    def cpu_milli(self) -> float:
        return float(parse_quantity(self.cpu)) * 1000.0

    def validate(self) -> None:
        bounded(self, "gpus", at_least=1, what="an integer")
        try:
            mem = self.mem_per_gpu_mib
        except QuantityError:
            raise invalid("memory", f"'whole' or {QUANTITY_FORMAT_HELP}", self.memory) from None
        if mem is not None:
            _finite_fields({"memory": mem}, "memory", above=0)
        _finite_fields(self, "weight", above=0)
        try:
            _finite_fields({"cpu": self.cpu_milli}, "cpu", at_least=0)
        except QuantityError:
            raise invalid("cpu", QUANTITY_FORMAT_HELP, self.cpu) from None


DEFAULT_TERM_WEIGHTS: Final = TermWeights()
"""Fragmentation first: it is the term with measured value (FGD, Weng et al., USENIX ATC'23,
cuts unallocated GPUs from 7-9 % to 4.8 % against packing heuristics); load second because
the source design notes rank memory pressure as the main interference; spread, modality and
QoS break ties between nodes that pack equally well. Tuned on the simulator (docs/extender.md).
Contention (0.5, for realtime pods on one GPU only) outvotes fragmentation on purpose: a
replica packed onto a GPU that already computes pays in every step (docs/extender.md)."""

DEFAULT_LOAD_WEIGHTS: Final = LoadWeights()
"""load = 0.4 busy + 0.3 streams/max_streams + 0.3 image share: the weights of the design
notes this project grew from (docs/design.md section 4), whose first part is mem_used/mem_total.
Here that part also carries GPU utilisation where the collector measured it (`util_share`)."""

DEFAULT_UTIL_SHARE: Final = 0.5
"""Share of the load's first part that is GPU utilisation when NVML reports it: busy =
(1 - 0.5) mem_used/mem_total + 0.5 mean_g util_g. Memory use says how much of the GPU is
promised, not whether its SMs are taken: an engine holding 30 % of the memory can keep a
time-sliced GPU busy all the time, and every process added to it slows each step (time-slicing
runs one context at a time). Half and half because neither signal alone describes the
interference; without utilisation the part is memory alone, as in the design notes."""

DEFAULT_BUSY_GPU_PENALTY: Final = 1.0
"""Cost of a busy GPU when the extender picks a node's GPU slot, in units of the pod's demand:
the slot minimises dF + penalty x util_g x demand, so a fully busy GPU must save as much
expected fragmentation as the pod's whole memory before it is preferred to an idle one.
No effect where utilisation is not measured (the Alibaba trace replay)."""

DEFAULT_CONTENTION_QOS: Final = ("realtime",)
"""Realtime pods only. Time-slicing runs one CUDA context at a time, so a replica on a GPU
that another engine or a busy tenant also computes on gets a share of each step's time
(1.17x slower per step in the serving simulation's 16 shared nodes): a latency SLO pays
for it, a throughput SLO much less. Measured in the serving simulation (docs/evaluation.md
section 3, "Placement that keeps replicas off busy shared GPUs"): for every class it spread
the batch replicas too, and the fixed fleet sized for the peak used 11 % more GPU-hours
(3.60 against 3.25 h) for 0.3 pp more realtime attainment than with realtime alone."""

DEFAULT_RHO_THRESHOLD: Final = 0.35
"""Node fragmentation above which replicas of one model repel harder (docs/design.md section 5)."""

DEFAULT_RHO_REPULSION: Final = 2.0
"""Repulsion multiplier slope: repulsion x (1 + 2 rho) above the threshold (docs/design.md 5)."""

DEFAULT_STALE_AFTER_S: Final = STALE_AFTER_S
"""Signals older than this are stale: neutral score, never filtered (docs/design.md section 3).
The one bound of the signals document (kvspread/signals.py), chosen with the collector's
heartbeat: two heartbeats and a cycle."""

DEFAULT_MAX_STREAMS: Final = 256
"""Streams at which a node counts as fully loaded: vLLM's default `--max-num-seqs` (256),
the number of sequences one engine batches at once."""

DEFAULT_QOS_P95_CEILING_S: Final = 0.120
"""p95 latency at which the QoS term reaches 0 for realtime pods: the upper bound of the
`batch` class (50-120 ms, docs/design.md section 2); beyond it a node serves no realtime work."""

DEFAULT_IDLE_USED_FRACTION: Final = 0.05
DEFAULT_TIE_BAND: Final = 0.1
"""A GPU with no kvspread allocation counts as idle (can take a whole-GPU pod) while NVML
shows at most this share of its memory used: the CUDA context and driver reserve a few
hundred MiB on an otherwise empty GPU (about 0.3-0.6 GiB, under 5 % of a 16 GiB card)."""

DEFAULT_SHAPE_PRIOR: Final = (PriorShape(gpus=1, memory="whole", weight=1.0),)
"""Until pods are seen, assume whole single-GPU instances (docs/design.md section 2: a GPU pod
without the memory annotation needs whole GPUs); this makes the fragmentation term prefer
keeping GPUs entirely free, i.e. pack partial instances together."""

DEFAULT_SHAPE_PRIOR_WEIGHT: Final = 10.0
"""Pseudo-count of the prior: after ~10 observed pods the learned shapes dominate."""

DEFAULT_SHAPE_HALF_LIFE_PODS: Final = 1000.0
"""Observed shape counts halve every this many pods, so the distribution follows drift."""

DEFAULT_MAX_SHAPES: Final = 32
"""At most this many distinct shapes are kept (the lightest are dropped): bounds scoring cost."""

DEFAULT_NORMALISATION: Final[Normalisation] = "candidates"
"""`candidates`: the combined score is min-max scaled over the nodes of one request (best 10,
worst 0), as kube-scheduler's own NormalizeScore does; `absolute`: a node's score depends on
that node alone (weighted sum x 10)."""

DEFAULT_GPU_ASSIGNMENT: Final[GpuAssignment] = "fewest-pods"
"""Who picks the GPU inside the chosen node, as far as scoring is concerned. kube-scheduler
binds a pod to a node; the kubelet's device manager asks the device plugin which device to
give it. `fewest-pods`: the NVIDIA device plugin's distributed allocation for time-sliced
replicas (k8s-device-plugin `distributedAlloc`: the GPU with the fewest allocated replicas
first); it ignores GPU memory, so a one-GPU pod fits a node only when every GPU the plugin
may pick (those with the fewest pods) has room, and the fragmentation and busy costs are
those of such a GPU. Applies where the per-GPU pod counts are known (`GpuState.pods`, built
from the signals). `scored`: the GPU slot the scoring picks, for clusters whose device
plugin honours a scheduler's GPU choice (kvspread ships none) and for the trace replay."""

_WEIGHT_KEYS = ("fragmentation", "load", "spread", "modality", "qos", "contention")
_LOAD_KEYS = ("memory", "streams", "image")


@dataclass(frozen=True)
class ScoringConfig:
    """Everything the pure scoring and fit code reads. Frozen; build variants with `with_()`.

    Thread-safe (immutable). Units: seconds, MiB, milli-CPU.
    """

    weights: TermWeights = DEFAULT_TERM_WEIGHTS
    """Weights of the prioritize terms (five for every pod, contention for some)."""
    contention_qos: tuple[str, ...] = DEFAULT_CONTENTION_QOS
    """QoS classes (`kvspread.io/qos`) whose one-GPU pods get the contention term
    (`weights.contention`); [] turns it off."""
    load_weights: LoadWeights = DEFAULT_LOAD_WEIGHTS
    """Weights inside the load term."""
    util_share: float = DEFAULT_UTIL_SHARE
    """Share of the load's memory part taken by measured GPU utilisation (0 = memory only)."""
    busy_gpu_penalty: float = DEFAULT_BUSY_GPU_PENALTY
    """Weight of a GPU's utilisation when choosing the GPU slot (0 = fragmentation only)."""
    gpu_assignment: GpuAssignment = DEFAULT_GPU_ASSIGNMENT
    """How the GPU inside a node is picked: `fewest-pods` (device plugin) or `scored`."""
    rho_threshold: float = DEFAULT_RHO_THRESHOLD
    """rho above which the spread repulsion is multiplied by 1 + rho_repulsion * rho."""
    rho_repulsion: float = DEFAULT_RHO_REPULSION
    """Slope of that repulsion multiplier above `rho_threshold`."""
    stale_after_s: float = DEFAULT_STALE_AFTER_S
    """Age beyond which a node's signals are stale (neutral score, never filtered)."""
    max_streams: float = DEFAULT_MAX_STREAMS
    """Active streams that count as full load (load and QoS terms)."""
    qos_p95_ceiling_s: float = DEFAULT_QOS_P95_CEILING_S
    """p95 latency at which the QoS term reaches 0 for realtime pods."""
    idle_used_fraction: float = DEFAULT_IDLE_USED_FRACTION
    """Share of a GPU's memory NVML may show used while it still counts as idle."""
    shape_prior: tuple[PriorShape, ...] = DEFAULT_SHAPE_PRIOR
    """Instance shapes assumed until pods are seen (list of gpus, memory, weight, cpu)."""
    shape_prior_weight: float = DEFAULT_SHAPE_PRIOR_WEIGHT
    """Pseudo-count of the prior against observed pods."""
    shape_half_life_pods: float = DEFAULT_SHAPE_HALF_LIFE_PODS
    """Observed shape counts halve every this many pods."""
    max_shapes: int = DEFAULT_MAX_SHAPES
    """Distinct shapes kept (the lightest are dropped)."""
    normalisation: Normalisation = DEFAULT_NORMALISATION
    """`candidates` (min-max over one request's nodes) or `absolute` (per node)."""
    tie_band: float = DEFAULT_TIE_BAND
    """Fragmentation terms (0..1) closer than this count as tied for the stable node order,
    among candidates equal on every other term (0 = exact ties only; docs/extender.md)."""

    def with_(self, **changes: Any) -> ScoringConfig:
        """A validated copy with some fields replaced."""
        return validated(replace(self, **changes), "scoring")

    def validate(self) -> None:
        """Ranges of the scalar fields; sections validate themselves. Keys are relative."""
        validated(self.weights, "weights")
        validated(self.load_weights, "load_weights")
        _in_range("rho_threshold", self.rho_threshold, 0.0, 1.0)
        _in_range("util_share", self.util_share, 0.0, 1.0)
        _finite_fields(self, "busy_gpu_penalty", "rho_repulsion", at_least=0)
        for n, qos in enumerate(self.contention_qos):
            if qos not in names.QOS_CLASSES:
                raise invalid(f"contention_qos[{n}]", f"one of {', '.join(names.QOS_CLASSES)}", qos)
        _finite_fields(self, "stale_after_s", "max_streams", "qos_p95_ceiling_s", above=0)
        _in_range("idle_used_fraction", self.idle_used_fraction, 0.0, 1.0)
        _in_range("tie_band", self.tie_band, 0.0, 1.0)
        _finite_fields(self, "shape_prior_weight", at_least=0)
        _finite_fields(self, "shape_half_life_pods", above=0)
        bounded(self, "max_shapes", at_least=1, what="an integer")
        if not self.shape_prior:
            raise invalid("shape_prior", "at least one shape", list(self.shape_prior))
        for n, shape in enumerate(self.shape_prior):
            validated(shape, f"shape_prior[{n}]")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None, where: str = "scoring") -> ScoringConfig:
        """Parse the `scoring:` mapping strictly; missing keys take the defaults."""
        return load(cls, data, where=where)


_finite_fields = partial(bounded, what="a finite number", finite=True)
"""The extender's range checks refuse infinity too, and say so."""


def _in_range(where: str, value: float, lo: float, hi: float) -> None:
    if not lo <= value <= hi:
        raise invalid(where, f"a number between {lo} and {hi}", value)


DEFAULT_HOST: Final = "127.0.0.1"
"""Loopback by default: safe for a laptop and for the sidecar layout; pods on a Service
pass --host 0.0.0.0."""
DEFAULT_PORT: Final = 8888
"""The port kube-scheduler extender examples use (urlPrefix http://127.0.0.1:8888)."""
DEFAULT_WATCH_TIMEOUT_S: Final = 300
"""Server-side watch timeout; client-go's reflector picks 5-10 min, a renewal is cheap."""
DEFAULT_BACKOFF_BASE_S: Final = kube.DEFAULT_BACKOFF_BASE_S
DEFAULT_BACKOFF_MAX_S: Final = kube.DEFAULT_BACKOFF_CAP_S
"""Reconnect backoff, one for list and watch together: 1 s doubling to 30 s with jitter,
reset only after a watch has run healthily for 2 minutes (kvspread/kube.py; client-go's
reflector backs off from 800 ms to 30 s)."""
DEFAULT_LEDGER_TTL_S: Final = 30.0
"""How long a recent placement counts before the pod shows up bound: long enough for
kube-scheduler to bind and the pod watch to deliver it (normally well under a second; 30 s
covers a slow API server), short enough that a pod placed elsewhere does not hold phantom
memory for long."""
DEFAULT_MAX_BODY_BYTES: Final = 256 * 1024 * 1024
"""Largest request body accepted (413 above): a full NodeList of 15,000 nodes at up to
~17 KiB per node (the kubelet's 50 image entries, conditions, labels and the <= 4 KiB
kvspread.io/signals annotation) is ~250 MiB. Names-only requests are a few hundred KiB."""
DEFAULT_MAX_BODIES_BYTES: Final = 512 * 1024 * 1024
"""Request body bytes held over all requests at once (429 above): two full NodeLists of
the largest size, since kube-scheduler sends one extender call at a time per profile; a
flood of large bodies cannot take the extender's memory past it."""
DEFAULT_MAX_CONNECTIONS: Final = 1024
"""Open connections at once: kube-scheduler (a few), Prometheus and probes need a handful
(extender/connections.py)."""
DEFAULT_HEADER_TIMEOUT_S: Final = 30.0
"""Seconds for a request head to arrive whole (kube-scheduler sends it in one write)."""
DEFAULT_BODY_TIMEOUT_S: Final = 60.0
"""Seconds for a request body to arrive whole after its head: a 256 MiB NodeList at
35 Mbit/s; a client that stops half-way cannot hold its connection (and a shutdown) for ever."""
DEFAULT_MAX_HEADER_BYTES: Final = 64 * 1024
"""Largest request head (request line and headers), as the collector's, the router's and
the adapter's servers allow; kube-scheduler's are a few hundred bytes."""
DEFAULT_EXPLAIN_PODS: Final = 256
"""Decisions kept for /debug/explain (least recently decided pods are dropped)."""


@dataclass(frozen=True)
class ServerConfig:
    """How the extender serves kube-scheduler (YAML `server:`)."""

    host: str = DEFAULT_HOST
    """Address to listen on (0.0.0.0 in a pod behind a Service)."""
    port: int = DEFAULT_PORT
    """Port to listen on (0: any free port)."""
    tls_cert: str | None = None
    """PEM certificate: serve HTTPS (with `tls_key`); unset: plain HTTP."""
    tls_key: str | None = None
    """PEM private key of `tls_cert`."""
    log_level: LogLevel = "info"
    """debug, info, warning or error; debug logs one line per decision."""
    standalone: bool = False
    """No cluster: no watches; full-NodeList requests are scored from the body alone."""
    filter_verb: str = "filter"
    """URL path of the filter verb (the scheduler's `filterVerb`)."""
    prioritize_verb: str = "prioritize"
    """URL path of the prioritize verb (the scheduler's `prioritizeVerb`)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Larger request bodies get 413, refused from Content-Length or while streaming
    (never buffered whole); default 256 MiB, a full NodeList of 15,000 nodes."""
    max_bodies_bytes: int = DEFAULT_MAX_BODIES_BYTES
    """Request body bytes held over all requests at once; a request past it gets 429 with
    Retry-After: 1. Never less than `max_body_bytes` in effect (default 512 MiB)."""
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    """Open connections at once; one more is answered 503 and closed (default 1024)."""
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    """Seconds a request head (request line and headers) has to arrive whole; else 408 and
    the connection is closed (default 30)."""
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    """Largest request head (request line and headers); over it 431 (default 65536)."""
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    """Seconds a request body has to arrive whole after its head; else 408 and the
    connection is closed (default 60)."""

    def validate(self) -> None:
        ports(self, "port")
        paired(self, "tls_cert", "tls_key", "a PEM certificate and its private key")
        for key, verb in (
            ("filter_verb", self.filter_verb),
            ("prioritize_verb", self.prioritize_verb),
        ):
            if (
                not verb
                or not all(c.isalnum() or c in "-_./" for c in verb)
                or any(part in ("", ".", "..") for part in verb.split("/"))
            ):
                raise invalid(key, "a URL path segment like 'filter'", verb)
            if verb.split("/")[0] in RESERVED_PATHS:
                raise invalid(
                    key, "a verb other than the server's own " + ", ".join(RESERVED_PATHS), verb
                )
        if self.filter_verb == self.prioritize_verb:
            raise invalid("prioritize_verb", "a verb other than filter_verb", self.prioritize_verb)
        _finite_fields(
            self,
            "max_body_bytes",
            "max_bodies_bytes",
            "header_timeout_s",
            "body_timeout_s",
            above=0,
        )
        bounded(self, "max_connections", at_least=1, what="an integer")
        bounded(self, "max_header_bytes", at_least=1024, what="an integer")


@dataclass(frozen=True)
class KubernetesConfig(KubeAccess):
    """How the extender reaches the API server to watch nodes and pods (YAML `kubernetes:`):
    the shared access keys and its watch timing."""

    watch_timeout_s: int = DEFAULT_WATCH_TIMEOUT_S
    """Server-side timeout of each watch request, seconds; a renewal is cheap."""
    backoff_base_s: float = DEFAULT_BACKOFF_BASE_S
    """First retry delay after a failed list or watch, seconds (doubles, with jitter; one
    backoff for list and watch, reset only after 2 minutes of healthy watching)."""
    backoff_max_s: float = DEFAULT_BACKOFF_MAX_S
    """Longest reconnect delay, seconds."""

    def validate(self) -> None:
        super().validate()
        _finite_fields(self, "watch_timeout_s", "backoff_base_s", "backoff_max_s", above=0)


@dataclass(frozen=True)
class LedgerConfig:
    """Recent placements not yet seen bound (YAML `ledger:`)."""

    ttl_s: float = DEFAULT_LEDGER_TTL_S
    """Seconds a placement counts as allocated before the pod shows up bound."""

    def validate(self) -> None:
        _finite_fields(self, "ttl_s", above=0)


@dataclass(frozen=True)
class ExplainConfig:
    """The `/debug/explain` endpoint (YAML `explain:`)."""

    enabled: bool = True
    """Serve `/debug/explain`; false answers 404 (it shows pod names and node state to
    anyone who can reach the port)."""
    max_pods: int = DEFAULT_EXPLAIN_PODS
    """Decisions kept for `/debug/explain` (least recently decided pods are dropped)."""

    def validate(self) -> None:
        bounded(self, "max_pods", at_least=1, what="an integer")


@dataclass(frozen=True)
class SignalsConfig:
    """How the extender treats nodes whose signals are old (YAML `signals:`)."""

    exclude_after_s: float | None = None
    """Signals older than this fail the filter for GPU pods (the reason names the age);
    unset (default): such nodes pass and rank below every fresh node the pod fits on."""

    def validate(self) -> None:
        if self.exclude_after_s is not None:
            _finite_fields(self, "exclude_after_s", above=0)


@dataclass(frozen=True)
class ExtenderConfig:
    """The whole `kvspread extender serve` configuration: one field per YAML section."""

    server: ServerConfig = ServerConfig()
    """Listening address, TLS, log level, verbs."""
    kubernetes: KubernetesConfig = KubernetesConfig()
    """API server access and watch timing."""
    ledger: LedgerConfig = LedgerConfig()
    """Placements not yet seen bound."""
    explain: ExplainConfig = ExplainConfig()
    """The debug endpoint."""
    signals: SignalsConfig = SignalsConfig()
    """Old signals: rank last (default) or fail the filter past an age."""
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    """Weights, thresholds and the shape prior of the scoring."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> ExtenderConfig:
        """Strict parse of the layered mapping; ConfigError names the dotted key."""
        return load(cls, data)
