"""Which pod and container a process runs in, from the text of `/proc/<pid>/cgroup`.

Pure parsing, no I/O: `bpf.attribution` reads the file, this module reads the text. The
kubelet names each pod's cgroup after the pod UID and the container runtime adds one
cgroup per container under it. The forms kubelets write:

- systemd driver: `kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/
  <runtime>-<id>.scope`, the UID with `_` for `-` (systemd reads `-` as a slice
  separator); Guaranteed pods have no QoS slice (`kubepods-pod<uid>.slice`); kind and
  other nested kubelets prefix every name (`kubelet.slice/kubelet-kubepods.slice/...`);
- cgroupfs driver: `kubepods/<qos>/pod<uid>/<id>` (Guaranteed: `kubepods/pod<uid>/<id>`);
  CRI-O names the container `crio-<id>` here too;
- runtime prefixes: `cri-containerd-` (containerd), `crio-` (CRI-O; `crio-conmon-` is
  its monitor process, in the pod but in no container), `docker-` (dockershim /
  cri-dockerd); the cgroupfs driver with containerd or docker writes the bare 64-hex id;
- cgroup v2 has one `0::<path>` line; v1 has one `N:<controllers>:<path>` line per
  hierarchy (the first line that names a pod wins, so a hybrid host whose `0::` line is
  `/` still resolves); a collector in its own cgroup namespace sees paths relative to
  its root (`0::/../../kubepods-...`), which parse the same;
- static (mirror) pods carry the 32-hex-digit config hash in place of a UID.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = ["CgroupPod", "parse_cgroup_path", "parse_proc_cgroup"]

_UID: Final = (
    r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
)
# systemd: [prefix-]kubepods[-qos]-pod<uid>.slice ; cgroupfs: pod<uid>
_POD_SLICE: Final = re.compile(rf"(?:.*-)?kubepods(?:-(burstable|besteffort))?-pod({_UID})\.slice")
_POD_DIR: Final = re.compile(rf"pod({_UID})")
_CONTAINER: Final = re.compile(
    r"(cri-containerd-|crio-conmon-|crio-|docker-)?([0-9a-f]{64})(?:\.scope)?"
)
_RUNTIMES: Final = {
    "cri-containerd-": "containerd",
    "crio-": "cri-o",
    "crio-conmon-": "cri-o",
    "docker-": "docker",
    "": "",
}


@dataclass(frozen=True, slots=True)
class CgroupPod:
    """A process's pod as its cgroup names it.

    `uid` in the API's dashed form (or the static pod's 32-hex hash); `container_id` the
    runtime's 64-hex id, "" for a process in the pod but in no container (the pod cgroup
    itself, CRI-O's conmon); `runtime` "containerd" | "cri-o" | "docker", "" where the
    path does not say (the cgroupfs driver's bare id); `qos` the pod's QoS class.
    """

    uid: str
    container_id: str = ""
    runtime: str = ""
    qos: str = "guaranteed"


def _dashed(uid: str) -> str:
    return uid.replace("_", "-")


def parse_cgroup_path(path: str) -> CgroupPod | None:
    """The pod of one cgroup path (`/kubepods/...`, `/kubepods.slice/...`), else None."""
    parts = [p for p in path.strip().split("/") if p and p != ".."]
    for i, seg in enumerate(parts):
        m = _POD_SLICE.fullmatch(seg)
        if m:
            qos = m.group(1) or "guaranteed"
            uid = _dashed(m.group(2))
        else:
            d = _POD_DIR.fullmatch(seg)
            if d is None or i == 0:
                continue
            parent = parts[i - 1]
            if parent in ("burstable", "besteffort") and i >= 2 and parts[i - 2] == "kubepods":
                qos = parent
            elif parent == "kubepods":
                qos = "guaranteed"
            else:
                continue
            uid = _dashed(d.group(1))
        container, runtime = "", ""
        if i + 1 < len(parts):
            c = _CONTAINER.fullmatch(parts[i + 1])
            if c is not None:
                prefix = c.group(1) or ""
                runtime = _RUNTIMES[prefix]
                container = "" if prefix == "crio-conmon-" else c.group(2)
        return CgroupPod(uid=uid, container_id=container, runtime=runtime, qos=qos)
    return None


def parse_proc_cgroup(text: str) -> CgroupPod | None:
    """The pod of a process from the text of its `/proc/<pid>/cgroup` (v1 or v2), else None
    (a host process, a container the kubelet did not start, or text of another shape)."""
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        found = parse_cgroup_path(fields[2])
        if found is not None:
            return found
    return None
