"""Real request mixes: ServeGen client folders, Azure-format request CSVs, Mooncake traces.

Three formats drive a service (`kvspread simulate serving --workload SERVICE=PATH`):

- a ServeGen client folder (Alibaba ServeGen, arXiv 2505.09999): per client a
  `chunk-N-trace.csv` (no header; per 600 s window `start_s, rate_rps, cv, family, shape,
  scale`) and a `chunk-N-dataset.json` (per dataset window, each field a discrete
  distribution written as a `{value: probability, ...}` string). Every client in the
  folder contributes. Arrivals are drawn as ServeGen defines them: the window's
  inter-arrival gaps come from its fitted Gamma or Weibull and are rescaled so that they
  span the window at its rate. Each request's sizes come from the distributions of the
  dataset window its arrival falls in (images: draw the count, then each image's tokens).
- a request CSV in the Azure LLM inference trace layout, header
  `TIMESTAMP,ContextTokens,GeneratedTokens` and optionally `NumImages`: arrival times are
  replayed (seconds after the first row; the file wraps around when the run is longer).
  A CSV always starts at its first request: the day offset picks the ServeGen window only.
- a Mooncake trace (`.jsonl` or `.jsonl.xz`; simulator.serving.mooncake): replayed like a
  CSV, and its requests carry the trace's prefix block ids, so the engines' prefix caches
  see the trace's reuse.

One factor (`rate_scale`) scales every rate: a ServeGen window's request count, or for a
CSV, Bernoulli thinning (factor < 1) or the trace superposed with copies of itself shifted
by random offsets (factor > 1). Sim time 0 is trace second `start_s`.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from simulator.serving.config import SimConfig
from simulator.serving.mooncake import (
    MAX_LINES,
    MAX_TOKENS,
    MooncakeError,
    MooncakeWorkload,
    is_mooncake,
    load_mooncake,
    mooncake_request,
)
from simulator.serving.workload import Request

__all__ = [
    "WorkloadError",
    "Discrete",
    "ServeGenWindow",
    "ServeGenClient",
    "ServeGenWorkload",
    "CsvWorkload",
    "BUNDLED",
    "resolve_path",
    "load_workload",
    "workload_requests",
    "expected_requests",
    "MAX_RUN_REQUESTS",
    "parse_distribution",
    "describe",
]

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "workloads"
BUNDLED: dict[str, Path] = {
    "servegen-mm-image": DATA_DIR / "servegen" / "mm-image",
    "servegen-language": DATA_DIR / "servegen" / "language",
    "azure-conv": DATA_DIR / "azure-llm-2023" / "conv.csv",
    "mooncake-conv": DATA_DIR / "mooncake" / "conversation_trace.jsonl.xz",
}
"""Workloads shipped with the simulator (provenance: simulator/data/workloads/SOURCE.md)."""

CSV_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
IMAGE_TOKENS_DEFAULT = 1024  # tokens per image when a CSV gives only NumImages (assumption)
_TRACE_RE = re.compile(r"^chunk-(\d+)-trace\.csv$")
_PAIR_RE = re.compile(r"\s*([-+0-9.eE]+)\s*:\s*([-+0-9.eE]+)\s*")


MAX_IMAGES = 1_000
"""Most images one request may carry (a bound on a malformed trace, far above the
per-prompt limits engines are run with)."""
MAX_RUN_REQUESTS = 5_000_000
"""Most requests one service may send in one run (warm-up included): a whole ServeGen day
at 4x its rate (a day at 1x is 0.7-1.2 million per service) and some 200 times the largest
run in docs/evaluation.md, so that a mistyped --rate-scale or --rate is an error at once
instead of hours of generation and a machine out of memory."""


class WorkloadError(ValueError):
    """A workload path that cannot be read; the message says what is wrong."""


@dataclass(frozen=True)
class Discrete:
    """A discrete distribution: values and their cumulative probabilities."""

    values: np.ndarray
    cum: np.ndarray

    def sample(self, rng: np.random.Generator, n: int | None = None) -> np.ndarray:
        u = rng.random(1 if n is None else n)
        idx = np.minimum(np.searchsorted(self.cum, u, side="right"), len(self.values) - 1)
        return self.values[idx]

    @property
    def mean(self) -> float:
        p = np.diff(np.concatenate(([0.0], self.cum)))
        return float(np.dot(self.values, p))


def parse_distribution(text: str, where: str, most: float = MAX_TOKENS) -> Discrete | None:
    """`"{136: 0.25, 372: 0.75}"` -> Discrete (None when empty), its values in 0..`most`;
    parsed, never evaluated."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise WorkloadError(f"{where}: {text[:40]!r} is not a {{value: probability}} mapping")
    body = body[1:-1].strip()
    if not body:
        return None
    values, probs = [], []
    for part in body.split(","):
        m = _PAIR_RE.fullmatch(part)
        if m is None:
            raise WorkloadError(f"{where}: {part.strip()[:40]!r} is not 'value: probability'")
        values.append(float(m.group(1)))
        probs.append(float(m.group(2)))
    if not all(math.isfinite(v) and 0 <= v <= most for v in values):
        raise WorkloadError(f"{where}: values must be in 0..{most:,}")
    p = np.asarray(probs, dtype=float)
    if not np.isfinite(p).all() or (p < 0).any() or p.sum() <= 0:
        raise WorkloadError(f"{where}: probabilities must be >= 0 with a positive sum")
    order = np.argsort(values)
    v = np.asarray(values, dtype=float)[order]
    return Discrete(v, np.cumsum(p[order] / p.sum()))


@dataclass(frozen=True)
class ServeGenWindow:
    start_s: float
    rate_rps: float
    cv: float
    family: str  # "Gamma", "Weibull" or "" (idle)
    shape: float
    scale: float


@dataclass(frozen=True)
class ServeGenClient:
    """One API client: its rate curve and its per-window size distributions."""

    name: str
    windows: tuple[ServeGenWindow, ...]
    window_s: float
    dataset_starts: tuple[float, ...]
    datasets: tuple[dict[str, Discrete], ...]

    @property
    def span_s(self) -> float:
        return self.windows[-1].start_s + self.window_s if self.windows else 0.0

    def fields_at(self, t: float) -> dict[str, Discrete]:
        """The size distributions of the dataset window `t` falls in; an empty window
        borrows the nearest non-empty one (the client's sizes, not invented ones)."""
        i = int(np.searchsorted(self.dataset_starts, t, side="right")) - 1
        i = max(0, i)
        if self.datasets[i]:
            return self.datasets[i]
        filled = [j for j, d in enumerate(self.datasets) if d]
        j = min(filled, key=lambda j: abs(j - i))
        return self.datasets[j]


@dataclass(frozen=True)
class ServeGenWorkload:
    path: Path
    clients: tuple[ServeGenClient, ...]
    multimodal: bool

    @property
    def span_s(self) -> float:
        return max(c.span_s for c in self.clients)

    def mean_rate(self, start_s: float, end_s: float) -> float:
        """Mean requests/s of all clients over [start, end) (unscaled)."""
        total = 0.0
        for c in self.clients:
            for w in c.windows:
                lo, hi = max(start_s, w.start_s), min(end_s, w.start_s + c.window_s)
                if hi > lo and w.family:
                    total += w.rate_rps * (hi - lo)
        return total / max(end_s - start_s, 1e-9)


@dataclass(frozen=True)
class CsvWorkload:
    path: Path
    t_s: np.ndarray  # seconds after the first request
    context: np.ndarray
    generated: np.ndarray
    images: np.ndarray | None

    @property
    def span_s(self) -> float:
        return float(self.t_s[-1]) + 1.0 if len(self.t_s) else 0.0

    def mean_rate(self, start_s: float, end_s: float) -> float:
        return len(self.t_s) / self.span_s


Workload = ServeGenWorkload | CsvWorkload | MooncakeWorkload


def resolve_path(text: str) -> Path:
    """A bundled workload name or a path that exists."""
    if text in BUNDLED:
        return BUNDLED[text]
    p = Path(text).expanduser()
    if not p.exists():
        raise WorkloadError(
            f"{text}: no such file or folder (or a bundled name: {', '.join(BUNDLED)})"
        )
    return p


def _parse_client(trace: Path, dataset: Path) -> tuple[ServeGenClient, bool]:
    windows: list[ServeGenWindow] = []
    with trace.open(newline="") as f:
        for n, row in enumerate(csv.reader(f), 1):
            if not row:
                continue
            if len(row) != 6:
                raise WorkloadError(
                    f"{trace}:{n}: expected 6 columns "
                    "(start_s, rate_rps, cv, family, shape, scale), got {len(row)}"
                )
            try:
                start, rate, cv = float(row[0]), float(row[1]), float(row[2] or 0)
                shape, scale = float(row[4] or 0), float(row[5] or 0)
            except ValueError:
                raise WorkloadError(f"{trace}:{n}: a number is not a number: {row}") from None
            if (
                not all(math.isfinite(v) for v in (start, rate, cv, shape, scale))
                or min(rate, cv, shape, scale) < 0
            ):
                raise WorkloadError(
                    f"{trace}:{n}: start_s must be finite, rate_rps, cv, shape and scale"
                    f" finite and >= 0: {row}"
                )
            family = row[3].strip()
            if family not in ("", "Gamma", "Weibull"):
                raise WorkloadError(f"{trace}:{n}: unknown arrival family {family!r}")
            windows.append(ServeGenWindow(start, rate, cv, family, shape, scale))
    if not windows:
        raise WorkloadError(f"{trace}: no windows")
    windows.sort(key=lambda w: w.start_s)
    step = windows[1].start_s - windows[0].start_s if len(windows) > 1 else 600.0
    try:
        raw = json.loads(dataset.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise WorkloadError(f"{dataset}: not a ServeGen dataset JSON ({exc})") from None
    if not isinstance(raw, dict) or not raw:
        raise WorkloadError(f"{dataset}: expected {{window_start_s: {{field: ...}}}}")
    starts, sets = [], []
    multimodal = False
    for key in sorted(raw, key=float):
        fields = raw[key]
        if not isinstance(fields, dict):
            raise WorkloadError(f"{dataset}: window {key}: expected a mapping of fields")
        parsed: dict[str, Discrete] = {}
        for name, text in fields.items():
            most = MAX_IMAGES if name == "image_count" else MAX_TOKENS
            d = parse_distribution(str(text), f"{dataset}: window {key} {name}", most)
            if d is not None:
                parsed[name] = d
        multimodal = multimodal or "image_count" in fields
        starts.append(float(key))
        sets.append(parsed if ("output_tokens" in parsed) else {})
    if not any(sets):
        raise WorkloadError(f"{dataset}: no window has token distributions")
    name = trace.name.removesuffix("-trace.csv")
    return ServeGenClient(name, tuple(windows), step, tuple(starts), tuple(sets)), multimodal


def _load_servegen(folder: Path) -> ServeGenWorkload:
    traces = sorted(
        (p for p in folder.iterdir() if _TRACE_RE.match(p.name)),
        key=lambda p: int(_TRACE_RE.match(p.name).group(1)),  # type: ignore[union-attr]
    )
    if not traces:
        raise WorkloadError(
            f"{folder}: not a ServeGen client folder (no chunk-N-trace.csv files); "
            "give a ServeGen folder or an Azure-format CSV"
        )
    clients, mm = [], False
    for t in traces:
        ds = t.with_name(t.name.replace("-trace.csv", "-dataset.json"))
        if not ds.exists():
            raise WorkloadError(f"{t}: its dataset {ds.name} is missing")
        c, is_mm = _parse_client(t, ds)
        clients.append(c)
        mm = mm or is_mm
    return ServeGenWorkload(folder, tuple(clients), mm)


def _timestamp(text: str) -> float:
    """Seconds: a plain number, or an ISO date-time (fractions beyond microseconds cut)."""
    try:
        return float(text)
    except ValueError:
        pass
    s = text.strip()
    if "." in s:
        head, frac = s.split(".", 1)
        s = f"{head}.{frac[:6]}"
    return datetime.fromisoformat(s).timestamp()


def _load_csv(path: Path) -> CsvWorkload:
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or not set(CSV_COLUMNS) <= {h.strip() for h in header}:
            raise WorkloadError(
                f"{path}: unknown workload format: a CSV needs the header "
                f"{','.join(CSV_COLUMNS)}[,NumImages] (got {','.join(header or [])[:60]!r})"
            )
        col = {h.strip(): i for i, h in enumerate(header)}
        ts: list[float] = []
        ctx: list[int] = []
        gen: list[int] = []
        img: list[int] = []
        for n, row in enumerate(reader, 2):
            if not row:
                continue
            if len(ts) >= MAX_LINES:
                raise WorkloadError(f"{path}: more than {MAX_LINES:,} requests")
            try:
                ts.append(_timestamp(row[col["TIMESTAMP"]]))
                ctx.append(int(float(row[col["ContextTokens"]])))
                gen.append(int(float(row[col["GeneratedTokens"]])))
                if "NumImages" in col:
                    img.append(int(float(row[col["NumImages"]] or 0)))
            except (ValueError, IndexError, OverflowError):
                raise WorkloadError(f"{path}:{n}: cannot read {row[:4]}") from None
            counts = (ctx[-1], gen[-1], img[-1] if img else 0)
            if min(counts) < 0:
                raise WorkloadError(
                    f"{path}:{n}: token and image counts must be >= 0, got {row[:4]}"
                )
            if max(ctx[-1], gen[-1]) > MAX_TOKENS or counts[2] > MAX_IMAGES:
                raise WorkloadError(
                    f"{path}:{n}: at most {MAX_TOKENS:,} tokens and {MAX_IMAGES:,} images"
                    f" a request, got {row[:4]}"
                )
            if not math.isfinite(ts[-1]):
                raise WorkloadError(f"{path}:{n}: TIMESTAMP must be finite, got {row[:1]}")
    if not ts:
        raise WorkloadError(f"{path}: no requests")
    t = np.asarray(ts, dtype=float)
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0]
    images = np.asarray(img, dtype=np.int64)[order] if img else None
    return CsvWorkload(
        path,
        t,
        np.asarray(ctx, dtype=np.int64)[order],
        np.asarray(gen, dtype=np.int64)[order],
        images,
    )


@functools.lru_cache(maxsize=16)
def _load_cached(path: str) -> Workload:
    p = Path(path)
    if p.is_dir():
        return _load_servegen(p)
    if p.suffix.lower() == ".csv":
        return _load_csv(p)
    if is_mooncake(p):
        try:
            return load_mooncake(p)
        except MooncakeError as exc:
            raise WorkloadError(str(exc)) from None
    raise WorkloadError(
        f"{p}: unknown workload format: give a ServeGen client folder, an Azure-format "
        f"CSV ({','.join(CSV_COLUMNS)}[,NumImages]) or a Mooncake trace (.jsonl[.xz])"
    )


def load_workload(path: str | Path) -> Workload:
    """Parse a workload (cached: runs in one process share it)."""
    p = resolve_path(str(path))
    try:
        return _load_cached(str(p.resolve()))
    except OSError as exc:
        raise WorkloadError(f"{p}: cannot read ({exc.strerror})") from None


def _count(rng: np.random.Generator, expected: float) -> int:
    """An integer with the given mean: floor plus a Bernoulli of the fraction."""
    base = math.floor(expected)
    return base + int(rng.random() < expected - base)


def _window_arrivals(
    rng: np.random.Generator, w: ServeGenWindow, length: float, rate_scale: float
) -> np.ndarray:
    """ServeGen's window: n = rate x length gaps drawn from the fitted family, rescaled
    so that they span the window; times relative to the window start."""
    if not w.family or w.rate_rps <= 0:
        return np.empty(0)
    n = _count(rng, w.rate_rps * rate_scale * length)
    if n == 0:
        return np.empty(0)
    if w.family == "Weibull" and w.shape > 0:
        gaps = rng.weibull(w.shape, n) * max(w.scale, 1e-12)
    elif w.shape > 0:
        gaps = rng.gamma(w.shape, max(w.scale, 1e-12), n)
    else:  # no fit: the window's CV as a Gamma (1 = Poisson)
        k = 1.0 / max(w.cv, 1e-3) ** 2
        gaps = rng.gamma(k, 1.0 / k, n)
    gaps = np.maximum(gaps, 0.0)
    total = gaps.sum()
    if total <= 0:
        return np.sort(rng.random(n) * length)
    cum = np.cumsum(gaps) * (length / total)
    # the first arrival inside the first gap, the last before the end
    times: np.ndarray = cum - cum[0] * rng.random()
    return times


def _servegen_requests(
    wl: ServeGenWorkload,
    service: str,
    kind: str,
    rng: np.random.Generator,
    start_s: float,
    length_s: float,
    rate_scale: float,
) -> list[Request]:
    out: list[Request] = []
    end_s = start_s + length_s
    for client in wl.clients:
        span = client.span_s
        for w in client.windows:
            # the client's day repeats when the run reaches past its data
            for lap in range(int((end_s - 1e-9) // span) + 1):
                ws = w.start_s + lap * span
                we = ws + client.window_s
                if we <= start_s or ws >= end_s:
                    continue
                times = ws + _window_arrivals(rng, w, client.window_s, rate_scale)
                for t in times[(times >= start_s) & (times < end_s)]:
                    out.append(_servegen_request(client, service, kind, rng, float(t), start_s))
    return out


def _servegen_request(
    client: ServeGenClient,
    service: str,
    kind: str,
    rng: np.random.Generator,
    t: float,
    start_s: float,
) -> Request:
    f = client.fields_at(t % client.span_s)
    out = max(1, int(f["output_tokens"].sample(rng)[0]))
    if "input_tokens" in f:
        text = max(1, int(f["input_tokens"].sample(rng)[0]))
        return Request(0, service, kind, t - start_s, text, (), out)
    text = max(1, int(f["text_tokens"].sample(rng)[0])) if "text_tokens" in f else 1
    n_img = int(f["image_count"].sample(rng)[0]) if "image_count" in f else 0
    images: tuple[int, ...] = ()
    if n_img > 0 and "image_tokens" in f:
        images = tuple(max(1, int(v)) for v in f["image_tokens"].sample(rng, n_img))
    return Request(0, service, kind, t - start_s, text + sum(images), images, out)


def _replays(
    t_s: np.ndarray, span: float, rng: np.random.Generator, length_s: float, rate_scale: float
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """A replayed trace over sim time [0, length): (copy, lap, times, indices kept) per lap
    of each copy (module docstring: thinning below 1, shifted copies above 1; laps when
    the run is longer than the trace)."""
    copies = _count(rng, rate_scale) if rate_scale > 1 else 1
    keep_p = min(1.0, rate_scale)
    for c in range(max(copies, 1)):
        shift = 0.0 if c == 0 else float(rng.random() * span)
        laps = int(math.ceil(length_s / span)) + 1
        for lap in range(-1 if shift else 0, laps):
            t = t_s + shift + lap * span
            sel = np.nonzero((t >= 0) & (t < length_s))[0]
            if keep_p < 1.0:
                sel = sel[rng.random(len(sel)) < keep_p]
            yield c, lap, t, sel


def _csv_request(wl: CsvWorkload, i: int, t: float, service: str, kind: str) -> Request:
    n_img = int(wl.images[i]) if wl.images is not None else 0
    images = (IMAGE_TOKENS_DEFAULT,) * n_img
    prompt = max(1, int(wl.context[i]))
    return Request(
        0,
        service,
        kind,
        t,
        max(prompt, sum(images) + 1),
        images,
        max(1, int(wl.generated[i])),
    )


def _replayed_requests(
    wl: CsvWorkload | MooncakeWorkload,
    service: str,
    kind: str,
    rng: np.random.Generator,
    length_s: float,
    rate_scale: float,
) -> list[Request]:
    """A CSV or Mooncake trace always starts at its first request (module docstring): no
    start offset. A Mooncake copy or later lap chains its ids from its own seed
    (simulator.serving.mooncake: it shares no prompt with the trace itself)."""
    out: list[Request] = []
    for c, lap, t, sel in _replays(wl.t_s, wl.span_s, rng, length_s, rate_scale):
        if isinstance(wl, MooncakeWorkload):
            seed = 0 if (c, lap) == (0, 0) else hash((c, lap))
            out.extend(mooncake_request(wl, int(i), float(t[i]), seed, service, kind) for i in sel)
        else:
            out.extend(_csv_request(wl, int(i), float(t[i]), service, kind) for i in sel)
    return out


def expected_requests(wl: Workload, start_s: float, length_s: float, rate_scale: float) -> float:
    """About how many requests `workload_requests` makes (the larger of the window's and
    the whole trace's mean rate, so that laps past the trace's end count too)."""
    rate = max(wl.mean_rate(start_s, start_s + length_s), wl.mean_rate(0.0, wl.span_s))
    return rate * rate_scale * length_s


def workload_requests(
    wl: Workload,
    service: str,
    kind: str,
    seed: int,
    stream: int,
    start_s: float,
    length_s: float,
    rate_scale: float,
) -> list[Request]:
    """A service's requests over sim time [0, length) = trace time [start, start+length),
    unsorted and unnumbered (the caller merges services)."""
    rng = np.random.default_rng([seed, 31337, stream])
    if isinstance(wl, ServeGenWorkload):
        return _servegen_requests(wl, service, kind, rng, start_s, length_s, rate_scale)
    return _replayed_requests(wl, service, kind, rng, length_s, rate_scale)


def _name_of(path: str) -> str:
    p = resolve_path(path)
    for name, bundled in BUNDLED.items():
        if p.resolve() == bundled.resolve():
            return name
    return str(path)


def _clock(seconds: float) -> str:
    h, rem = divmod(int(round(seconds)) % 86400, 3600)
    return f"{h:02d}:{rem // 60:02d}"


def describe(cfg: SimConfig) -> str:
    """One sentence of the report: which data drives which service, which part of the day,
    the scale factor and the resulting mean rates."""
    start = cfg.workload_start_s
    length = cfg.warmup_s + cfg.duration_s
    parts = []
    for name, spec in cfg.workloads.items():
        wl = load_workload(spec.path)
        if isinstance(wl, ServeGenWorkload):
            day = int(start // 86400)
            when = f"day {day + 1} {_clock(start)}-{_clock(start + length)}"
            fmt = f"ServeGen, {len(wl.clients)} clients"
        else:
            when = (
                "its whole trace from the first request, wrapping"
                if length > wl.span_s
                else "from its first request"
            )
            fmt = "replayed Mooncake trace" if isinstance(wl, MooncakeWorkload) else "replayed CSV"
        rate = wl.mean_rate(start, start + length) * cfg.rate_scale
        parts.append(f"`{name}` <- {_name_of(spec.path)} ({fmt}; {when}; {rate:.2f} req/s)")
    return (
        "real traffic: "
        + ", ".join(parts)
        + f"; every rate x {cfg.rate_scale:g} to fit the cluster"
    )
