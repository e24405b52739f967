"""GPU memory per pod on shared GPUs (time-slicing, MPS): NVML's per-process memory
joined to pods through each host pid's cgroup.

Pure given the resolver (`bpf.attribution.Attributor.resolve`, which reads the cgroup and
asks the pod table): one `PodGpuMemory` per pod using a GPU, plus one entry for the
processes in no pod (host services, an X server, containers the kubelet did not start),
reported as such rather than dropped. A pod whose processes include one whose memory NVML
does not report has `used_bytes` None: unknown, never a partial sum or 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bpf.attribution import PodRef
from bpf.gpu import GpuProcess, GpuSample

__all__ = ["PodGpuMemory", "pod_memory", "gpu_pod_memory"]

Resolver = Callable[[int], PodRef | None]


@dataclass(frozen=True, slots=True)
class PodGpuMemory:
    """The processes of one pod on one GPU. `uid` "" groups the processes in no pod;
    `namespace`/`name` are "" while the pod table does not know the UID (yet)."""

    uid: str
    namespace: str
    name: str
    used_bytes: int | None
    processes: int

    @property
    def in_pod(self) -> bool:
        return self.uid != ""


def pod_memory(processes: Sequence[GpuProcess], resolve: Resolver) -> tuple[PodGpuMemory, ...]:
    """One GPU's processes summed per pod: named pods by namespace and name, then pods
    known by UID only, then the processes in no pod (when there are any)."""
    refs: dict[str, PodRef | None] = {}
    used: dict[str, int | None] = {}
    count: dict[str, int] = {}
    for p in processes:
        ref = resolve(p.pid)
        key = ref.uid if ref is not None else ""
        if key not in count:
            refs[key], used[key], count[key] = ref, 0, 0
        count[key] += 1
        prev = used[key]
        used[key] = None if prev is None or p.used_bytes is None else prev + p.used_bytes
    out = [
        PodGpuMemory(
            uid=key,
            namespace=ref.namespace if ref else "",
            name=ref.name if ref else "",
            used_bytes=used[key],
            processes=count[key],
        )
        for key, ref in refs.items()
    ]
    return tuple(sorted(out, key=lambda m: (not m.in_pod, not m.name, m.namespace, m.name, m.uid)))


def gpu_pod_memory(
    gpus: Sequence[GpuSample], resolve: Resolver
) -> dict[int, tuple[PodGpuMemory, ...]]:
    """GPU index -> its pods' memory, for the GPUs whose processes NVML listed; a GPU
    whose list could not be read has no entry (absent, not empty)."""
    return {g.index: pod_memory(g.processes, resolve) for g in gpus if g.processes is not None}
