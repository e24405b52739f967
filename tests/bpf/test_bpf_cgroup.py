"""cgroup path -> pod UID, container id, runtime, QoS: every kubelet layout, read from the
real-shaped /proc fixtures (tests/fixtures/proc, provenance in its README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bpf.cgroup import CgroupPod, parse_cgroup_path, parse_proc_cgroup

PROC = Path(__file__).parents[1] / "fixtures" / "proc"


def _read(pid: int) -> CgroupPod | None:
    return parse_proc_cgroup((PROC / str(pid) / "cgroup").read_text())


@pytest.mark.parametrize(
    "pid,uid,cid_prefix,runtime,qos",
    [
        (2101, "3fcb4b70-f79a-4ffc-a71b-9592244ececa", "e427f474", "containerd", "burstable"),
        (2102, "23eb7164-3ac5-4727-95d2-5341edc5fe85", "2cc9d354", "containerd", "guaranteed"),
        (2103, "4dfc3c3b-18c1-402b-a946-a04e9ff35ab3", "a5ea88f7", "cri-o", "besteffort"),
        (2104, "4dfc3c3b-18c1-402b-a946-a04e9ff35ab3", "", "cri-o", "besteffort"),
        (2105, "d755df98-8d89-40a3-9903-f4cb5455eb3a", "9476c36e", "containerd", "besteffort"),
        (2106, "5d5428b3-82da-4138-9b1b-a5b4960e55ce", "f49456e1", "", "burstable"),
        (2107, "6c903f6b-e38b-41e7-ae89-e9f2dd288687", "1ecf2f65", "", "besteffort"),
        (2108, "602c16df-f600-4415-812e-df7b27ebd003", "2e3e153a", "docker", "besteffort"),
        (2109, "e141d4ad-2c08-4f4b-82c8-298b35c73779", "3b9cd8e7", "cri-o", "burstable"),
        (2110, "94e5e19e8b2a32bbd0fcdf45e1defb12", "fb8d1495", "containerd", "burstable"),
        (2111, "1db163b0-5071-49dd-b9da-d7930bacb22c", "f970f477", "containerd", "burstable"),
    ],
    ids=[
        "v2 systemd containerd burstable",
        "v2 systemd containerd guaranteed",
        "v2 systemd cri-o besteffort",
        "v2 cri-o conmon (pod, no container)",
        "v2 kind nested kubelet",
        "v2 cgroupfs containerd",
        "v1 cgroupfs docker",
        "v1 hybrid systemd docker",
        "v1 cgroupfs cri-o",
        "static pod config hash",
        "relative to another cgroup namespace",
    ],
)
def test_every_kubelet_layout(pid: int, uid: str, cid_prefix: str, runtime: str, qos: str) -> None:
    got = _read(pid)
    assert got is not None
    assert (got.uid, got.runtime, got.qos) == (uid, runtime, qos)
    if cid_prefix:
        assert got.container_id.startswith(cid_prefix) and len(got.container_id) == 64
    else:
        assert got.container_id == ""


@pytest.mark.parametrize("pid", [2190, 2191, 2192, 2193, 2194])
def test_processes_in_no_pod(pid: int) -> None:
    """Host services, a docker container outside Kubernetes, this machine's own cgroup, a
    desktop session, the root cgroup."""
    assert _read(pid) is None


def test_pod_cgroup_itself_and_nested_cgroups_under_a_container() -> None:
    uid = "3fcb4b70_f79a_4ffc_a71b_9592244ececa"
    pod = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice"
    assert parse_cgroup_path(pod) == CgroupPod(uid.replace("_", "-"), qos="burstable")
    nested = parse_cgroup_path(f"{pod}/cri-containerd-{'ab' * 32}.scope/init.scope")
    assert nested is not None and nested.container_id == "ab" * 32


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage without colons\n",
        "0::/system.slice/pod3fcb4b70-f79a-4ffc-a71b-9592244ececa/x\n",  # not under kubepods
        "0::/kubepods/burstable/pod-not-a-uid/abc\n",
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podxyz.slice\n",
    ],
)
def test_other_text_names_no_pod(text: str) -> None:
    assert parse_proc_cgroup(text) is None
