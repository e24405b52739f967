"""GPU memory and utilisation through NVML, behind the `GpuReader` protocol.

No driver, no library, no device: `read()` raises `GpuUnavailable` with the reason, and
the agent reports the GPU signals as absent (never zeros).

Per-process memory (for per-pod memory on shared GPUs) comes from NVML's three process
lists: compute contexts, graphics contexts, and MPS clients (with MPS the compute list
holds the `nvidia-cuda-mps-server`, the MPS list the client processes). NVML gives host
PIDs and `usedGpuMemory` in bytes, None where it cannot tell (pynvml maps
NVML_VALUE_NOT_AVAILABLE to None: Windows WDDM, some MIG and vGPU setups); None stays
"unknown", never 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Protocol

__all__ = [
    "GpuProcess",
    "GpuSample",
    "GpuReader",
    "GpuUnavailable",
    "NvmlReader",
    "FakeGpuReader",
    "PROCESS_KINDS",
]

PROCESS_KINDS: Final = ("compute", "graphics", "mps")
"""Which NVML list a process came from: nvmlDeviceGetComputeRunningProcesses,
nvmlDeviceGetGraphicsRunningProcesses, nvmlDeviceGetMPSComputeRunningProcesses."""


class GpuUnavailable(RuntimeError):
    """NVML cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One process with a context on a GPU: host pid, its GPU memory in bytes (None:
    NVML does not report it) and the NVML list it came from (`PROCESS_KINDS`)."""

    pid: int
    used_bytes: int | None
    kind: str = "compute"


@dataclass(frozen=True)
class GpuSample:
    """One GPU. Memory in bytes; `util` 0..1 or None when NVML does not report it;
    `processes` the processes using it, None when NVML could not list them (then
    per-pod memory is absent, not empty)."""

    index: int
    uuid: str
    name: str
    mem_total: int
    mem_used: int
    util: float | None = None
    processes: tuple[GpuProcess, ...] | None = None


class GpuReader(Protocol):
    def read(self) -> list[GpuSample]:
        """Every GPU of the node; raises GpuUnavailable when NVML cannot answer."""
        ...


class NvmlReader:
    """pynvml (`nvidia-ml-py`). Initialised on first read and again after a failure."""

    def __init__(self) -> None:
        self._nvml: Any = None

    def _init(self) -> Any:
        if self._nvml is not None:
            return self._nvml
        try:
            import pynvml
        except ImportError as exc:
            raise GpuUnavailable(f"pynvml not installed: {exc}") from exc
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - NVMLError subclasses per cause
            raise GpuUnavailable(f"NVML init failed: {exc}") from exc
        self._nvml = pynvml
        return pynvml

    def read(self) -> list[GpuSample]:
        nv = self._init()
        try:
            out = []
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                try:
                    util: float | None = nv.nvmlDeviceGetUtilizationRates(h).gpu / 100.0
                except Exception:  # noqa: BLE001 - not supported on some devices (MIG)
                    util = None
                procs = _processes(nv, h)
                uuid = nv.nvmlDeviceGetUUID(h)
                name = nv.nvmlDeviceGetName(h)
                out.append(
                    GpuSample(
                        index=i,
                        uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                        name=name.decode() if isinstance(name, bytes) else str(name),
                        mem_total=int(mem.total),
                        mem_used=int(mem.used),
                        util=util,
                        processes=procs,
                    )
                )
            if not out:
                raise GpuUnavailable("NVML reports no GPUs")
            return out
        except GpuUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001
            self._nvml = None  # re-initialise next time (driver restart)
            raise GpuUnavailable(f"NVML query failed: {exc}") from exc


_LISTS: Final = (
    ("compute", "nvmlDeviceGetComputeRunningProcesses"),
    ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
    ("mps", "nvmlDeviceGetMPSComputeRunningProcesses"),
)


def _processes(nv: Any, handle: Any) -> tuple[GpuProcess, ...] | None:
    """Every process of the three NVML lists, one entry per pid (a process with compute
    and graphics contexts is in both lists with the same memory: the first with a known
    figure is kept). None when the compute list cannot be read; the graphics and MPS lists
    are optional (NotSupported on many GPUs and drivers)."""
    seen: dict[int, GpuProcess] = {}
    for kind, fn in _LISTS:
        try:
            listed = getattr(nv, fn)(handle)
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported, old driver, no symbol
            if kind == "compute":
                return None
            continue
        for p in listed:
            mem = getattr(p, "usedGpuMemory", None)
            proc = GpuProcess(int(p.pid), None if mem is None else int(mem), kind)
            prev = seen.get(proc.pid)
            if prev is None or (prev.used_bytes is None and proc.used_bytes is not None):
                seen[proc.pid] = proc
    return tuple(seen.values())


class FakeGpuReader:
    """Canned GPUs for tests of the signals path (this machine has no GPU driver)."""

    def __init__(self, samples: list[GpuSample] | None = None, error: str | None = None) -> None:
        self.samples = list(samples or [])
        self.error = error

    def read(self) -> list[GpuSample]:
        if self.error:
            raise GpuUnavailable(self.error)
        return list(self.samples)
