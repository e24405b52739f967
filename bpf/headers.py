"""Header-less mode: a kernel "header tree" for bcc generated from the running kernel's BTF.

bcc compiles BPF C against kernel headers (`/lib/modules/$(uname -r)/build`). Many
production kernels ship none, and headers of another version compile but give wrong
struct offsets. The kernel describes its own types in `/sys/kernel/btf/vmlinux`, so we
build a minimal tree from it:

- `include/vmlinux.h`: `bpftool btf dump file ... format c`, minus every top-level
  declaration that clashes with the uapi `bpf.h` that bcc force-includes (its text is
  read out of `libbcc.so`, where bcc keeps it as a built-in virtual file);
- `include/generated/autoconf.h`: `CONFIG_*` macros from `/proc/config.gz`;
- small stand-ins for the few kernel headers bcc's own helpers include.

The tree is cached on disk under a key made of the kernel release and hashes of the BTF
blob and of bcc's `bpf.h`, and is written to a temporary folder that is renamed into place
only when complete, so a crash never leaves a half tree that later runs would trust.

Pure parts (`bcc_defined_names`, `filter_vmlinux`, `autoconf_from_config`,
`kernel_version_code`) are separate from the I/O (`ensure_tree`).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "HeaderTreeError",
    "TreeSources",
    "needs_header_tree",
    "bcc_defined_names",
    "split_declarations",
    "declared_names",
    "filter_vmlinux",
    "autoconf_from_config",
    "kernel_version_code",
    "extract_bcc_bpf_header",
    "tree_key",
    "ensure_tree",
    "GENERATOR_VERSION",
]

GENERATOR_VERSION = "2"
"""Bumped when the layout of the generated tree changes, so old caches are not reused."""

_BPF_H_GUARD = b"#ifndef _UAPI__LINUX_BPF_H__"

# Integer typedefs that both bcc's bpf.h and vmlinux.h need; bcc's header uses them
# without defining them all, so they are never dropped from vmlinux.h.
_ALWAYS_KEEP = frozenset(
    "__u8 __u16 __u32 __u64 __s8 __s16 __s32 __s64 __be16 __be32 __be64 __le16 __le32 "
    "__le64 __wsum __sum16 u8 u16 u32 u64 s8 s16 s32 s64 __kernel_size_t".split()
)


class HeaderTreeError(RuntimeError):
    """The tree could not be built; the message says which input was missing or bad."""


@dataclass(frozen=True)
class TreeSources:
    """Where the inputs of a tree come from (overridable for tests)."""

    btf: Path = Path("/sys/kernel/btf/vmlinux")
    kernel_config: Path = Path("/proc/config.gz")
    bpftool: str = "bpftool"
    libbcc: Path | None = None
    release: str = ""

    def resolved_release(self) -> str:
        return self.release or os.uname().release


def needs_header_tree(release: str, modules_root: Path = Path("/lib/modules")) -> bool:
    """True when the kernel ships no build tree, so bcc needs the BTF-generated one."""
    return not (modules_root / release / "build").exists()


def _strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def bcc_defined_names(header: str) -> set[str]:
    """Every identifier a C header defines: tags with a body, enum constants, typedefs,
    macros. These must not be defined a second time by vmlinux.h."""
    text = _strip_comments(header)
    names: set[str] = set(re.findall(r"\b(?:struct|union|enum)\s+(\w+)\s*\{", text))
    names |= set(re.findall(r"^\s*#\s*define\s+(\w+)", text, re.M))
    for body in re.findall(r"\benum\b[^{;]*\{(.*?)\}", text, re.S):
        for item in body.split(","):
            m = re.match(r"\s*([A-Za-z_]\w*)", item)
            if m:
                names.add(m.group(1))
    for decl in re.findall(r"\btypedef\b([^;{}]*(?:\{[^{}]*\}[^;{}]*)?);", text, re.S):
        m = re.search(r"(\w+)\s*(?:\[[^\]]*\]\s*)*$", decl.strip())
        fn = re.search(r"\(\s*\*\s*(\w+)\s*\)", decl)
        if fn:
            names.add(fn.group(1))
        elif m:
            names.add(m.group(1))
    return names


def split_declarations(text: str) -> Iterator[str]:
    """Yield the top-level declarations of a bpftool-generated header, one block each.

    bpftool writes one declaration per block, with braces balanced and each top-level
    declaration ending in `;` at depth 0; preprocessor lines and blank lines stand alone.
    """
    block: list[str] = []
    depth = 0
    for line in text.split("\n"):
        block.append(line)
        depth += line.count("{") - line.count("}")
        stripped = line.strip()
        if depth == 0 and (stripped.endswith(";") or stripped == "" or stripped.startswith("#")):
            yield "\n".join(block)
            block = []
    if block:
        yield "\n".join(block)


def declared_names(block: str) -> set[str]:
    """Identifiers one top-level declaration defines (a forward declaration defines none)."""
    names: set[str] = set()
    head = block.lstrip()
    m = re.match(r"(?:typedef\s+)?(?:struct|union|enum)\s+(\w+)\s*\{", head)
    if m:
        names.add(m.group(1))
    if re.match(r"(?:typedef\s+)?enum\b[^;]*\{", head):
        names |= set(re.findall(r"^\s+([A-Za-z_]\w*)\s*(?:=|,)", block, re.M))
    if head.startswith("typedef"):
        if "{" in head:
            m = re.search(r"\}\s*(\w+)\s*;\s*$", head)
        else:
            m = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\(", head) or re.search(
                r"(\w+)\s*(?:\[[^\]]*\]\s*)*;\s*$", head
            )
        if m:
            names.add(m.group(1))
    return names


def filter_vmlinux(vmlinux_h: str, bcc_names: set[str]) -> tuple[str, int]:
    """Drop the declarations of vmlinux.h that would redefine something of bcc's bpf.h.

    Returns the filtered text and how many declarations were dropped.
    """
    clash = bcc_names - _ALWAYS_KEEP
    out: list[str] = []
    dropped = 0
    for block in split_declarations(vmlinux_h):
        names = declared_names(block)
        if names & clash and not names <= _ALWAYS_KEEP:
            dropped += 1
            continue
        out.append(block)
    return "\n".join(out), dropped


def autoconf_from_config(config_text: str) -> str:
    """Turn a kernel `.config` into the `autoconf.h` macros kernel headers test."""
    lines = ["/* generated by kvspread from the running kernel's config */"]
    for raw in config_text.splitlines():
        if not raw.startswith("CONFIG_") or "=" not in raw:
            continue
        name, value = raw.split("=", 1)
        if value == "y":
            lines.append(f"#define {name} 1")
        elif value == "m":
            lines.append(f"#define {name}_MODULE 1")
        elif re.fullmatch(r"-?\d+|0x[0-9a-fA-F]+", value):
            lines.append(f"#define {name} {value}")
        elif value.startswith('"'):
            lines.append(f"#define {name} {value}")
    return "\n".join(lines) + "\n"


def kernel_version_code(release: str) -> int:
    """`LINUX_VERSION_CODE` for a release string such as `6.18.44-fc`."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release)
    if not m:
        raise HeaderTreeError(f"cannot read a kernel version from release {release!r}")
    major, minor, patch = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    return (major << 16) + (minor << 8) + min(patch, 255)


def extract_bcc_bpf_header(libbcc_bytes: bytes) -> str:
    """bcc embeds the uapi bpf.h it force-includes as a NUL-terminated C string."""
    at = libbcc_bytes.find(_BPF_H_GUARD)
    if at < 0:
        raise HeaderTreeError("libbcc does not contain its built-in uapi bpf.h")
    start = libbcc_bytes.rfind(b"\0", 0, at) + 1
    end = libbcc_bytes.find(b"\0", at)
    return libbcc_bytes[start : end if end >= 0 else None].decode("utf-8", "replace")


def _find_libbcc() -> Path:
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
        for name in ("libbcc.so.0", "libbcc.so"):
            p = Path(d) / name
            if p.exists():
                return p
    raise HeaderTreeError("libbcc.so not found (install libbpfcc)")


def tree_key(release: str, btf_bytes: bytes, bcc_header: str) -> str:
    """Cache key: kernel release plus hashes of the BTF blob and bcc's bpf.h."""
    h = hashlib.sha256()
    h.update(btf_bytes)
    h.update(b"\0" + bcc_header.encode())
    h.update(b"\0" + GENERATOR_VERSION.encode())
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", release)
    return f"{safe}-{h.hexdigest()[:16]}"


_KCONFIG_H = """#ifndef __KVSPREAD_KCONFIG_H
#define __KVSPREAD_KCONFIG_H
#include <generated/autoconf.h>
#include <kvspread_compat.h>
#define __ARG_PLACEHOLDER_1 0,
#define __take_second_arg(__ignored, val, ...) val
#define __is_defined(x) ___is_defined(x)
#define ___is_defined(val) ____is_defined(__ARG_PLACEHOLDER_##val)
#define ____is_defined(arg1_or_junk) __take_second_arg(arg1_or_junk 1, 0)
#define __or(x, y) ___or(x, y)
#define ___or(x, y) ____or(__ARG_PLACEHOLDER_##x, y)
#define ____or(arg1_or_junk, y) __take_second_arg(arg1_or_junk 1, y)
#define IS_BUILTIN(option) __is_defined(option)
#define IS_MODULE(option) __is_defined(option##_MODULE)
#define IS_ENABLED(option) __or(IS_BUILTIN(option), IS_MODULE(option))
#endif
"""

_COMPAT_H = """/* Macros kernel code normally gets from <linux/compiler*.h> and friends. */
#ifndef __KVSPREAD_COMPAT_H
#define __KVSPREAD_COMPAT_H
#define __always_inline inline __attribute__((always_inline))
#define noinline __attribute__((noinline))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define htons(x) ((__u16)__builtin_bswap16((__u16)(x)))
#define ntohs(x) htons(x)
#define htonl(x) ((__u32)__builtin_bswap32((__u32)(x)))
#define ntohl(x) htonl(x)
#ifndef NULL
#define NULL ((void *)0)
#endif
#define offsetof(TYPE, MEMBER) __builtin_offsetof(TYPE, MEMBER)
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))
#define AF_INET 2
#define AF_INET6 10
#endif
"""

_TYPES_H = """#ifndef __KVSPREAD_TYPES_H
#define __KVSPREAD_TYPES_H
typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u16 __le16;
typedef __u32 __le32;
typedef __u64 __le64;
typedef __u32 __wsum;
typedef __u16 __sum16;
typedef __u8 u8;
typedef __s8 s8;
typedef __u16 u16;
typedef __s16 s16;
typedef __u32 u32;
typedef __s32 s32;
typedef __u64 u64;
typedef __s64 s64;
#define __bitwise
#define __aligned_u64 __u64 __attribute__((aligned(8)))
#endif
"""

# The classic-BPF instruction encoding (a stable ABI) that bcc's bpf.h includes first.
_BPF_COMMON_H = """#ifndef __LINUX_BPF_COMMON_H__
#define __LINUX_BPF_COMMON_H__
#define BPF_CLASS(code) ((code) & 0x07)
#define BPF_LD 0x00
#define BPF_LDX 0x01
#define BPF_ST 0x02
#define BPF_STX 0x03
#define BPF_ALU 0x04
#define BPF_JMP 0x05
#define BPF_RET 0x06
#define BPF_MISC 0x07
#define BPF_SIZE(code) ((code) & 0x18)
#define BPF_W 0x00
#define BPF_H 0x08
#define BPF_B 0x10
#define BPF_MODE(code) ((code) & 0xe0)
#define BPF_IMM 0x00
#define BPF_ABS 0x20
#define BPF_IND 0x40
#define BPF_MEM 0x60
#define BPF_LEN 0x80
#define BPF_MSH 0xa0
#define BPF_OP(code) ((code) & 0xf0)
#define BPF_ADD 0x00
#define BPF_SUB 0x10
#define BPF_MUL 0x20
#define BPF_DIV 0x30
#define BPF_OR 0x40
#define BPF_AND 0x50
#define BPF_LSH 0x60
#define BPF_RSH 0x70
#define BPF_NEG 0x80
#define BPF_MOD 0x90
#define BPF_XOR 0xa0
#define BPF_JA 0x00
#define BPF_JEQ 0x10
#define BPF_JGT 0x20
#define BPF_JGE 0x30
#define BPF_JSET 0x40
#define BPF_SRC(code) ((code) & 0x08)
#define BPF_K 0x00
#define BPF_X 0x08
#ifndef BPF_MAXINSNS
#define BPF_MAXINSNS 4096
#endif
#endif
"""

_UAPI_BPF_H = """#ifndef __KVSPREAD_UAPI_BPF_H
#define __KVSPREAD_UAPI_BPF_H
/* bcc force-included its own uapi bpf.h; every other kernel type comes from BTF. */
#define BPF_NO_PRESERVE_ACCESS_INDEX
#include <vmlinux_bcc.h>
#endif
"""

# Headers bcc's helpers.h (or common BPF C) include; in the generated tree each only
# pulls in the BTF types.
_STUBS = (
    "uapi/linux/if_packet.h",
    "linux/log2.h",
    "uapi/linux/ptrace.h",
    "uapi/linux/ip.h",
    "uapi/linux/tcp.h",
    "uapi/linux/in.h",
    "net/sock.h",
    "net/inet_sock.h",
    "linux/sched.h",
    "linux/tcp.h",
    "linux/socket.h",
    "linux/fs.h",
    "linux/fdtable.h",
    "linux/net.h",
    "linux/uio.h",
    "net/tcp_states.h",
)


def _write_tree(
    root: Path, vmlinux_h: str, filtered: str, autoconf: str, release: str, bcc_h: str
) -> None:
    inc = root / "include"
    for sub in ("linux", "generated", "uapi/linux", "asm", "net"):
        (inc / sub).mkdir(parents=True, exist_ok=True)
    (inc / "vmlinux.h").write_text(vmlinux_h)
    (inc / "vmlinux_bcc.h").write_text(filtered)
    (inc / "generated" / "autoconf.h").write_text(autoconf)
    (inc / "linux" / "kconfig.h").write_text(_KCONFIG_H)
    (inc / "kvspread_compat.h").write_text(_COMPAT_H)
    (inc / "linux" / "types.h").write_text(_TYPES_H)
    (inc / "linux" / "version.h").write_text(
        f"#define LINUX_VERSION_CODE {kernel_version_code(release)}\n"
        "#define KERNEL_VERSION(a, b, c) (((a) << 16) + ((b) << 8) + ((c) > 255 ? 255 : (c)))\n"
    )
    (inc / "uapi" / "linux" / "bpf.h").write_text(_UAPI_BPF_H)
    (inc / "uapi" / "linux" / "bpf_common.h").write_text(_BPF_COMMON_H)
    (inc / "linux" / "bpf_common.h").write_text(_BPF_COMMON_H)
    (inc / "asm" / "page.h").write_text(
        "#define PAGE_SHIFT 12\n#define PAGE_SIZE (1UL << PAGE_SHIFT)\n"
    )
    for stub in _STUBS:
        (inc / stub).write_text("#include <uapi/linux/bpf.h>\n")
    (root / "bcc_bpf.h").write_text(bcc_h)
    (root / "KEY").write_text(release + "\n")


def ensure_tree(cache_dir: Path, sources: TreeSources = TreeSources()) -> Path:
    """Return a header tree for the running kernel, building it on first use.

    Point bcc at the result with `BCC_KERNEL_SOURCE`. Raises HeaderTreeError naming
    the missing input (no BTF, no bpftool, no libbcc).
    """
    release = sources.resolved_release()
    try:
        btf = sources.btf.read_bytes()
    except OSError as exc:
        raise HeaderTreeError(f"kernel BTF not readable at {sources.btf}: {exc}") from exc
    libbcc = sources.libbcc or _find_libbcc()
    try:
        bcc_h = extract_bcc_bpf_header(libbcc.read_bytes())
    except OSError as exc:
        raise HeaderTreeError(f"cannot read {libbcc}: {exc}") from exc
    target = Path(cache_dir) / tree_key(release, btf, bcc_h)
    if (target / "COMPLETE").exists():
        return target
    bpftool = shutil.which(sources.bpftool) or sources.bpftool
    try:
        dump = subprocess.run(
            [bpftool, "btf", "dump", "file", str(sources.btf), "format", "c"],
            check=True,
            capture_output=True,
            timeout=120,
        ).stdout.decode()
    except (OSError, subprocess.SubprocessError) as exc:
        raise HeaderTreeError(f"bpftool could not dump {sources.btf}: {exc}") from exc
    filtered, _ = filter_vmlinux(dump, bcc_defined_names(bcc_h))
    try:
        raw = sources.kernel_config.read_bytes()
        config_text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
    except OSError:
        config_text = ""  # no config: IS_ENABLED() is false everywhere; BTF still correct
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tree-", dir=cache_dir))
    try:
        _write_tree(tmp, dump, filtered, autoconf_from_config(config_text), release, bcc_h)
        (tmp / "COMPLETE").write_text("ok\n")
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "COMPLETE").exists():  # lost a race to a half tree: replace
                shutil.rmtree(target, ignore_errors=True)
                tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
