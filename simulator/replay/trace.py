"""Load and validate Alibaba GPU-trace ("openb") node and pod lists.

The copy lives in the repository's `simulator/data/traces/alibaba-gpu-v2023/` (see SOURCE.md
there for origin and licence), not in the wheel or the image: its owners ask for study and
research use only, which an Apache-2.0 package would pass on to whoever mirrors it. It is
found in the package's own folder (a checkout on PYTHONPATH, an editable install) or in the
clone that `pip install .` was run from (PEP 610's direct_url.json names it), so
`pip install . && kvspread simulate` works from a clone. A trace is named either by its short bundled name (`default`,
`gpushare40`, `multigpu20`, ...) or by a path to any CSV in the same format. Rows are checked
as they are read; a bad file raises `TraceError` naming the file, the line and the column,
never a bare KeyError or ValueError.

Conversions follow the FGD artifact's CSV-to-pod step: `gpu_milli` above 1000 counts as 1000,
a pod with `num_gpu == 0` carries no GPU share, and `gpu_spec` is a `|`-separated list of
allowed GPU models (empty: any model).
"""

from __future__ import annotations

import csv
import importlib.metadata
import json
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "TRACE_DIR",
    "TraceError",
    "NodeList",
    "PodList",
    "bundled_pod_lists",
    "resolve_pod_list",
    "load_nodes",
    "load_pods",
]

TRACE_IN_REPO = Path("simulator", "data", "traces", "alibaba-gpu-v2023")
"""Where the trace is, relative to a checkout's root."""


def install_source() -> Path | None:
    """The local folder `pip install` built kvspread from (PEP 610 `direct_url.json`, a
    `dir_info` URL); None for a wheel, an index or an editable install's own folder."""
    try:
        text = importlib.metadata.distribution("kvspread").read_text("direct_url.json")
        doc = json.loads(text or "{}")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
    url = str(doc.get("url", "")) if isinstance(doc, dict) else ""
    if "dir_info" not in doc or not url.startswith("file:"):
        return None
    return Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))


def find_trace_dir(package_root: Path = Path(__file__).parents[2]) -> Path:
    """The package's own trace folder where it exists (a checkout), else the one of the
    clone it was installed from, else the package's (absent: `require_trace_data` says)."""
    own = package_root / TRACE_IN_REPO
    if own.is_dir():
        return own
    source = install_source()
    if source is not None and (source / TRACE_IN_REPO).is_dir():
        return source / TRACE_IN_REPO
    return own


TRACE_DIR = find_trace_dir()
DEFAULT_NODE_LIST = TRACE_DIR / "openb_node_list_gpu_node.csv"
MILLI = 1000
MAX_GPUS_PER_NODE = 8

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(ValueError):
    """A trace file is missing or malformed; the message names file, line and column."""


@dataclass(frozen=True)
class NodeList:
    """GPU nodes as parallel arrays (one entry per node, in file order).

    `models` holds the distinct GPU model names; `model_id[i]` indexes it.
    """

    path: Path
    names: tuple[str, ...]
    cpu_milli: np.ndarray  # int64
    memory_mib: np.ndarray  # int64
    gpus: np.ndarray  # int64, 1..8
    model_id: np.ndarray  # int64 index into models
    models: tuple[str, ...]

    @property
    def total_gpus(self) -> int:
        return int(self.gpus.sum())

    def __len__(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class PodList:
    """Pods as parallel arrays, in file order.

    `gpu_milli` is per GPU (1000 = a whole GPU) and 0 for CPU-only pods; `spec_id[i]` indexes
    `specs`, where spec 0 is always the empty spec (any GPU model).
    """

    path: Path
    name: str
    pod_names: tuple[str, ...]
    cpu_milli: np.ndarray  # int64
    memory_mib: np.ndarray  # int64
    num_gpu: np.ndarray  # int64
    gpu_milli: np.ndarray  # int64, 0..1000
    spec_id: np.ndarray  # int64
    specs: tuple[tuple[str, ...], ...]

    @property
    def total_gpu_milli(self) -> np.ndarray:
        total: np.ndarray = self.num_gpu * self.gpu_milli
        return total

    def __len__(self) -> int:
        return len(self.pod_names)


def bundled_pod_lists() -> list[str]:
    """Short names of the bundled pod lists (`default`, `gpushare20`, ...), sorted."""
    prefix = "openb_pod_list_"
    return sorted(p.stem[len(prefix) :] for p in TRACE_DIR.glob(prefix + "*.csv"))


def resolve_pod_list(trace: str) -> tuple[str, Path]:
    """Map a bundled name or a CSV path to (display name, path); TraceError if neither."""
    candidate = TRACE_DIR / f"openb_pod_list_{trace}.csv"
    if "/" not in trace and not trace.endswith(".csv") and candidate.is_file():
        return trace, candidate
    path = Path(trace)
    if path.is_file():
        stem = path.stem
        return (
            stem[len("openb_pod_list_") :] if stem.startswith("openb_pod_list_") else stem
        ), path
    names = ", ".join(bundled_pod_lists())
    raise TraceError(f"trace {trace!r}: not a bundled trace name ({names}) and not a CSV file")


def _read_rows(path: Path, required: tuple[str, ...]) -> tuple[list[str], list[dict[str, str]]]:
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            header = list(reader.fieldnames or [])
            missing = [c for c in required if c not in header]
            if missing:
                raise TraceError(
                    f"{path}: header lacks column(s) {', '.join(missing)} "
                    f"(expected at least {','.join(required)})"
                )
            rows = list(reader)
    except FileNotFoundError as exc:
        raise TraceError(f"{path}: file does not exist") from exc
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not a UTF-8 text CSV ({exc})") from exc
    except csv.Error as exc:
        raise TraceError(f"{path}: malformed CSV: {exc}") from exc
    if not rows:
        raise TraceError(f"{path}: no data rows")
    return header, rows


def _int(path: Path, line: int, row: dict[str, str], col: str, lo: int, hi: int | None) -> int:
    raw = row.get(col)
    if raw is None or raw.strip() == "":
        raise TraceError(f"{path}:{line}: column {col!r} is empty")
    try:
        value = int(float(raw)) if "." in raw or "e" in raw.lower() else int(raw)
    except ValueError as exc:
        raise TraceError(f"{path}:{line}: column {col!r} is not a number: {raw!r}") from exc
    if value < lo or (hi is not None and value > hi):
        bound = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise TraceError(f"{path}:{line}: column {col!r} must be {bound}, got {value}")
    return value


def load_nodes(path: str | Path | None = None) -> NodeList:
    """Read a node list (`sn,cpu_milli,memory_mib,gpu,model`); nodes without GPUs are skipped,
    as the FGD replay uses GPU nodes only."""
    p = Path(path) if path is not None else DEFAULT_NODE_LIST
    _, rows = _read_rows(p, NODE_COLUMNS)
    names: list[str] = []
    cpu: list[int] = []
    mem: list[int] = []
    gpus: list[int] = []
    model_ids: list[int] = []
    models: dict[str, int] = {}
    for i, row in enumerate(rows, start=2):
        n_gpu = _int(p, i, row, "gpu", 0, MAX_GPUS_PER_NODE)
        if n_gpu == 0:
            continue
        model = (row.get("model") or "").strip()
        if not model:
            raise TraceError(f"{p}:{i}: node with {n_gpu} GPU(s) has an empty 'model'")
        names.append((row.get("sn") or f"node-{i}").strip())
        cpu.append(_int(p, i, row, "cpu_milli", 1, None))
        mem.append(_int(p, i, row, "memory_mib", 1, None))
        gpus.append(n_gpu)
        model_ids.append(models.setdefault(model, len(models)))
    if not names:
        raise TraceError(f"{p}: no node with a GPU")
    return NodeList(
        path=p,
        names=tuple(names),
        cpu_milli=np.array(cpu, dtype=np.int64),
        memory_mib=np.array(mem, dtype=np.int64),
        gpus=np.array(gpus, dtype=np.int64),
        model_id=np.array(model_ids, dtype=np.int64),
        models=tuple(models),
    )


def load_pods(trace: str | Path) -> PodList:
    """Read a pod list by bundled name or path; see the module docstring for conversions."""
    name, p = resolve_pod_list(str(trace))
    header, rows = _read_rows(p, POD_COLUMNS)
    has_spec = "gpu_spec" in header
    specs: dict[tuple[str, ...], int] = {(): 0}
    names: list[str] = []
    cols: dict[str, list[int]] = {k: [] for k in ("cpu", "mem", "num", "milli", "spec")}
    for i, row in enumerate(rows, start=2):
        num = _int(p, i, row, "num_gpu", 0, MAX_GPUS_PER_NODE)
        milli = _int(p, i, row, "gpu_milli", 0, None)
        if num > 0 and milli == 0:
            raise TraceError(f"{p}:{i}: pod asks for {num} GPU(s) with gpu_milli 0")
        milli = min(milli, MILLI) if num > 0 else 0
        if num > 1 and milli < MILLI:
            raise TraceError(
                f"{p}:{i}: a pod with {num} GPUs must use whole GPUs (gpu_milli 1000), got {milli}"
            )
        raw_spec = (row.get("gpu_spec") or "") if has_spec else ""
        spec = tuple(sorted({s.strip() for s in raw_spec.split("|") if s.strip()}))
        if num == 0:
            spec = ()
        names.append((row.get("name") or f"pod-{i}").strip())
        cols["cpu"].append(_int(p, i, row, "cpu_milli", 0, None))
        cols["mem"].append(_int(p, i, row, "memory_mib", 0, None))
        cols["num"].append(num)
        cols["milli"].append(milli)
        cols["spec"].append(specs.setdefault(spec, len(specs)))
    if not any(n > 0 for n in cols["num"]):
        raise TraceError(f"{p}: no pod asks for a GPU, so GPU demand can never arrive")
    return PodList(
        path=p,
        name=name,
        pod_names=tuple(names),
        cpu_milli=np.array(cols["cpu"], dtype=np.int64),
        memory_mib=np.array(cols["mem"], dtype=np.int64),
        num_gpu=np.array(cols["num"], dtype=np.int64),
        gpu_milli=np.array(cols["milli"], dtype=np.int64),
        spec_id=np.array(cols["spec"], dtype=np.int64),
        specs=tuple(specs),
    )
