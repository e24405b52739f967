"""Header-less mode: the BTF-generated kernel header tree for bcc."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest

from bpf import headers

BCC_H = """
#ifndef _UAPI__LINUX_BPF_H__
#define _UAPI__LINUX_BPF_H__
#define BPF_PSEUDO_MAP_FD 1
enum bpf_map_type { BPF_MAP_TYPE_UNSPEC, BPF_MAP_TYPE_HASH = 1, };
enum { BPF_F_NO_PREALLOC = (1U << 0), };
struct bpf_insn { __u8 code; };
union bpf_attr { __u32 map_type; };
typedef __u32 bpf_id_t;
typedef int (*bpf_cb_t)(void *);
#endif
"""

VMLINUX = """#ifndef __VMLINUX_H__
#define __VMLINUX_H__

typedef unsigned int __u32;

typedef __u32 u32;

enum bpf_map_type {
	BPF_MAP_TYPE_UNSPEC = 0,
	BPF_MAP_TYPE_HASH = 1,
};

enum {
	BPF_F_NO_PREALLOC = 1,
};

struct bpf_insn {
	__u8 code;
};

struct bpf_insn;

struct task_struct {
	int pid;
	struct {
		int x;
	} nested;
};

typedef __u32 bpf_id_t;

enum sock_state {
	SS_FREE = 0,
};

#endif
"""


def test_bcc_defined_names() -> None:
    names = headers.bcc_defined_names(BCC_H)
    assert {
        "bpf_map_type",
        "BPF_MAP_TYPE_UNSPEC",
        "BPF_MAP_TYPE_HASH",
        "BPF_F_NO_PREALLOC",
        "bpf_insn",
        "bpf_attr",
        "bpf_id_t",
        "bpf_cb_t",
        "BPF_PSEUDO_MAP_FD",
    } <= names
    assert "task_struct" not in names


def test_filter_drops_only_clashing_definitions() -> None:
    out, dropped = headers.filter_vmlinux(VMLINUX, headers.bcc_defined_names(BCC_H))
    assert dropped == 4  # enum bpf_map_type, the anonymous flag enum, struct bpf_insn, typedef
    assert "struct task_struct {" in out and "enum sock_state" in out
    assert "typedef unsigned int __u32;" in out  # basic integer types always stay
    assert "struct bpf_insn;" in out  # forward declarations define nothing
    assert "BPF_MAP_TYPE_HASH" not in out and "bpf_id_t" not in out


def test_autoconf_and_version() -> None:
    text = (
        "# comment\nCONFIG_BPF=y\nCONFIG_NF=m\nCONFIG_HZ=250\nCONFIG_X=0x10\n"
        'CONFIG_S="a b"\n# CONFIG_NO is not set\n'
    )
    out = headers.autoconf_from_config(text)
    for line in (
        "#define CONFIG_BPF 1",
        "#define CONFIG_NF_MODULE 1",
        "#define CONFIG_HZ 250",
        "#define CONFIG_X 0x10",
        '#define CONFIG_S "a b"',
    ):
        assert line in out
    assert "CONFIG_NO" not in out
    assert headers.kernel_version_code("6.18.44-fc-v657") == (6 << 16) + (18 << 8) + 44
    assert headers.kernel_version_code("5.4.300") == (5 << 16) + (4 << 8) + 255
    with pytest.raises(headers.HeaderTreeError):
        headers.kernel_version_code("weird")


def test_extract_bcc_header_from_library_bytes() -> None:
    blob = b"\x7fELF junk\0" + BCC_H.strip().encode() + b"\0more"
    assert headers.extract_bcc_bpf_header(blob).startswith("#ifndef _UAPI__LINUX_BPF_H__")
    with pytest.raises(headers.HeaderTreeError):
        headers.extract_bcc_bpf_header(b"no header here")


def test_needs_header_tree(tmp_path: Path) -> None:
    assert headers.needs_header_tree("6.18.0", tmp_path)
    (tmp_path / "6.18.0" / "build").mkdir(parents=True)
    assert not headers.needs_header_tree("6.18.0", tmp_path)


def _real_inputs() -> headers.TreeSources:
    btf = Path("/sys/kernel/btf/vmlinux")
    if not btf.exists() or shutil.which("bpftool") is None:
        pytest.skip("needs /sys/kernel/btf/vmlinux and bpftool")
    try:
        lib = headers._find_libbcc()
    except headers.HeaderTreeError:
        pytest.skip("libbcc not installed")
    return headers.TreeSources(btf=btf, libbcc=lib)


def test_tree_from_running_kernel_is_cached(tmp_path: Path) -> None:
    src = _real_inputs()
    tree = headers.ensure_tree(tmp_path, src)
    inc = tree / "include"
    assert (tree / "COMPLETE").exists()
    assert tree.name.startswith(os.uname().release)
    filtered = (inc / "vmlinux_bcc.h").read_text()
    assert "struct task_struct {" in filtered and "struct sock {" in filtered
    assert "enum bpf_map_type {" not in filtered  # comes from bcc's own bpf.h
    assert "#define CONFIG_BPF_SYSCALL 1" in (inc / "generated" / "autoconf.h").read_text()
    assert "BPF_LD" in (inc / "linux" / "bpf_common.h").read_text()
    # second call: same tree, no bpftool needed
    again = headers.ensure_tree(
        tmp_path,
        headers.TreeSources(btf=src.btf, libbcc=src.libbcc, bpftool="/nonexistent/bpftool"),
    )
    assert again == tree
    # a different BTF blob (another kernel build) gets its own tree
    other_btf = tmp_path / "other.btf"
    blob = src.btf.read_bytes()
    other_btf.write_bytes(blob[:-1] + bytes([blob[-1] ^ 0xFF]))
    key_a = headers.tree_key("r", src.btf.read_bytes(), "h")
    key_b = headers.tree_key("r", other_btf.read_bytes(), "h")
    assert key_a != key_b


def test_missing_inputs_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(headers.HeaderTreeError, match="BTF"):
        headers.ensure_tree(tmp_path, headers.TreeSources(btf=tmp_path / "nope"))
    btf = tmp_path / "btf"
    btf.write_bytes(b"x")
    lib = tmp_path / "libbcc.so"
    lib.write_bytes(b"\0" + BCC_H.encode() + b"\0")
    with pytest.raises(headers.HeaderTreeError, match="bpftool"):
        headers.ensure_tree(
            tmp_path / "c",
            headers.TreeSources(btf=btf, libbcc=lib, bpftool=str(tmp_path / "no-bpftool")),
        )


def test_config_gz_is_read(tmp_path: Path) -> None:
    cfg = tmp_path / "config.gz"
    cfg.write_bytes(gzip.compress(b"CONFIG_A=y\n"))
    src = _real_inputs()
    tree = headers.ensure_tree(
        tmp_path / "c", headers.TreeSources(btf=src.btf, libbcc=src.libbcc, kernel_config=cfg)
    )
    assert "#define CONFIG_A 1" in (tree / "include" / "generated" / "autoconf.h").read_text()


@pytest.mark.bpf
def test_programs_compiled_against_the_generated_tree(probes: object) -> None:
    """On this machine (no /lib/modules/*/build) bcc used the BTF tree."""
    if not headers.needs_header_tree(os.uname().release):
        pytest.skip("this kernel ships headers; header-less mode not used")
    src = os.environ.get("BCC_KERNEL_SOURCE", "")
    assert src.startswith(str(probes.header_cache))  # type: ignore[attr-defined]
