"""GPU memory and utilisation through NVML, behind the `GpuReader` protocol.

No driver, no library, no device: `read()` raises `GpuUnavailable` with the reason, and
the agent reports the GPU signals as absent (never zeros).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["GpuSample", "GpuReader", "GpuUnavailable", "NvmlReader", "FakeGpuReader"]


class GpuUnavailable(RuntimeError):
    """NVML cannot be used; the message says why."""


@dataclass(frozen=True)
class GpuSample:
    """One GPU. Memory in bytes; `util` 0..1 or None when NVML does not report it;
    `processes` are (host pid, GPU memory bytes or None)."""

    index: int
    uuid: str
    name: str
    mem_total: int
    mem_used: int
    util: float | None = None
    processes: tuple[tuple[int, int | None], ...] = ()


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
                try:
                    procs = tuple(
                        (int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory))
                        for p in nv.nvmlDeviceGetComputeRunningProcesses(h)
                    )
                except Exception:  # noqa: BLE001
                    procs = ()
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


class FakeGpuReader:
    """Canned GPUs for tests of the signals path (this machine has no GPU driver)."""

    def __init__(self, samples: list[GpuSample] | None = None, error: str | None = None) -> None:
        self.samples = list(samples or [])
        self.error = error

    def read(self) -> list[GpuSample]:
        if self.error:
            raise GpuUnavailable(self.error)
        return list(self.samples)
