"""GPU memory per pod on shared GPUs: NVML's three process lists merged per pid (on a
small fake of the pynvml module: this machine has no driver), and the join of host pids
to pods through the real-shaped /proc fixtures (tests/fixtures/proc)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bpf.attribution import Attributor, PodMeta
from bpf.gpu import GpuProcess, GpuSample, NvmlReader
from bpf.gpupods import PodGpuMemory, gpu_pod_memory, pod_memory

PROC = Path(__file__).parents[1] / "fixtures" / "proc"
GIB = 1 << 30
CHAT = "3fcb4b70-f79a-4ffc-a71b-9592244ececa"  # pid 2101, v2 systemd containerd
MPS_DAEMON = "23eb7164-3ac5-4727-95d2-5341edc5fe85"  # pid 2102, Guaranteed
SGLANG = "4dfc3c3b-18c1-402b-a946-a04e9ff35ab3"  # pid 2103 and its conmon 2104, CRI-O
EMBED = "d755df98-8d89-40a3-9903-f4cb5455eb3a"  # pid 2105, kind
TRTLLM = "5d5428b3-82da-4138-9b1b-a5b4960e55ce"  # pid 2106, cgroupfs
PODS = {
    CHAT: PodMeta(CHAT, "llm", "vllm-chat-0"),
    MPS_DAEMON: PodMeta(MPS_DAEMON, "nvidia", "mps-control-daemon"),
    SGLANG: PodMeta(SGLANG, "llm", "sglang-vl-0"),
    EMBED: PodMeta(EMBED, "emb", "embed-0"),
}  # TRTLLM is not in the pod table (yet): its UID only


class FakeNvml:
    """The pynvml calls NvmlReader makes, over canned per-GPU process lists (objects with
    `pid` and `usedGpuMemory`, None where NVML reports NVML_VALUE_NOT_AVAILABLE); a list
    given as an exception is raised, as pynvml raises NVMLError_NotSupported."""

    def __init__(self, lists: dict[str, Any]) -> None:
        self.lists = lists

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(total=80 * GIB, used=30 * GIB)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=40)

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return "GPU-8f1c"

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA H100 80GB HBM3"

    def __getattr__(self, fn: str) -> Any:
        listed = self.lists.get(fn, [])

        def call(handle: int) -> list[Any]:
            if isinstance(listed, Exception):
                raise listed
            return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in listed]

        return call


def _read(lists: dict[str, Any]) -> GpuSample:
    reader = NvmlReader()
    reader._nvml = FakeNvml(lists)
    (sample,) = reader.read()
    return sample


def test_nvml_lists_are_merged_per_pid_and_unknown_memory_stays_unknown() -> None:
    """MPS: the compute list holds the MPS server, the MPS list its clients; a process with
    compute and graphics contexts is in both lists and counted once."""
    sample = _read(
        {
            "nvmlDeviceGetComputeRunningProcesses": [(2102, 300 << 20), (2101, None)],
            "nvmlDeviceGetGraphicsRunningProcesses": [(2101, 4 * GIB), (2193, 64 << 20)],
            "nvmlDeviceGetMPSComputeRunningProcesses": [(2105, 6 * GIB), (2106, None)],
        }
    )
    assert sample.uuid == "GPU-8f1c" and sample.name == "NVIDIA H100 80GB HBM3"
    assert sample.processes == (
        GpuProcess(2102, 300 << 20, "compute"),
        GpuProcess(2101, 4 * GIB, "graphics"),  # the figure NVML knows wins
        GpuProcess(2193, 64 << 20, "graphics"),
        GpuProcess(2105, 6 * GIB, "mps"),
        GpuProcess(2106, None, "mps"),
    )


def test_optional_lists_may_fail_the_compute_list_may_not() -> None:
    class NotSupported(Exception):
        pass

    ok = _read(
        {
            "nvmlDeviceGetComputeRunningProcesses": [(2101, GIB)],
            "nvmlDeviceGetGraphicsRunningProcesses": NotSupported(),
            "nvmlDeviceGetMPSComputeRunningProcesses": NotSupported(),
        }
    )
    assert ok.processes == (GpuProcess(2101, GIB),)
    unlisted = _read({"nvmlDeviceGetComputeRunningProcesses": NotSupported()})
    assert unlisted.processes is None  # per-pod memory absent, not "no processes"
    assert unlisted.mem_used == 30 * GIB  # the device figures stay


def _attributor() -> Attributor:
    return Attributor(PROC, PODS.get)


def test_time_sliced_gpu_is_split_per_pod_and_processes_in_no_pod_are_kept() -> None:
    procs = (
        GpuProcess(2101, 20 * GIB),
        GpuProcess(2103, 7 * GIB),
        GpuProcess(2104, 0),  # CRI-O conmon of the same pod: summed into it
        GpuProcess(2193, 256 << 20, "graphics"),  # an X server in a desktop session
        GpuProcess(2191, 1 * GIB),  # a docker container the kubelet did not start
        GpuProcess(999_999, 2 * GIB),  # gone between NVML's list and the cgroup read
    )
    got = pod_memory(procs, _attributor().resolve)
    assert got == (
        PodGpuMemory(SGLANG, "llm", "sglang-vl-0", 7 * GIB, 2),
        PodGpuMemory(CHAT, "llm", "vllm-chat-0", 20 * GIB, 1),
        PodGpuMemory("", "", "", 3 * GIB + (256 << 20), 3),  # in no pod: last
    )
    assert sum(m.used_bytes or 0 for m in got) == sum(p.used_bytes or 0 for p in procs)


def test_mps_server_and_clients_and_an_unknown_figure() -> None:
    procs = (
        GpuProcess(2102, 300 << 20, "compute"),  # nvidia-cuda-mps-server in its pod
        GpuProcess(2105, 6 * GIB, "mps"),
        GpuProcess(2106, None, "mps"),  # NVML does not report this client's memory
    )
    got = {m.uid: m for m in pod_memory(procs, _attributor().resolve)}
    assert got[MPS_DAEMON].used_bytes == 300 << 20
    assert got[EMBED] == PodGpuMemory(EMBED, "emb", "embed-0", 6 * GIB, 1)
    assert got[TRTLLM] == PodGpuMemory(TRTLLM, "", "", None, 1)  # unknown, never 0; no name yet
    assert "" not in got  # no process outside a pod


def test_a_pod_with_one_unknown_process_is_unknown_not_a_partial_sum() -> None:
    procs = (GpuProcess(2103, 7 * GIB), GpuProcess(2104, None))
    (m,) = pod_memory(procs, _attributor().resolve)
    assert (m.uid, m.used_bytes, m.processes) == (SGLANG, None, 2)


def test_gpus_whose_processes_were_not_listed_have_no_entry() -> None:
    gpus = [
        GpuSample(0, "GPU-0", "H100", 80 * GIB, 20 * GIB, None, (GpuProcess(2101, 20 * GIB),)),
        GpuSample(1, "GPU-1", "H100", 80 * GIB, 0, None, ()),
        GpuSample(2, "GPU-2", "H100", 80 * GIB, 9 * GIB, None, None),
    ]
    got = gpu_pod_memory(gpus, _attributor().resolve)
    assert set(got) == {0, 1} and got[1] == () and got[0][0].name == "vllm-chat-0"
