"""Seed lists of both simulations (`--seeds`, YAML `seeds:`): '42..51', '1,5..7' or a list.

One parser for the trace replay and the serving simulation, so both accept the same forms and
refuse the same mistakes (a negative seed, a reversed range) with a configuration error
instead of a failure inside a worker process (numpy's generators take only seeds >= 0).
At most `MAX_SEEDS` seeds: each is a full run per policy (and autoscaler), so `1..100000`
is a typo that would start days of work, refused before any run (and before the range is
expanded: `0..10**18` is refused as fast).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvspread.settings import ConfigError

__all__ = ["parse_seeds", "MAX_SEEDS"]

MAX_SEEDS = 1000
"""The most seeds one command takes (the published tables use 10; 1000 is hours of work)."""


def _seed(value: object, shown: str) -> int:
    seed: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        seed = value
    elif isinstance(value, float) and value.is_integer():
        seed = int(value)
    elif isinstance(value, str):
        try:
            seed = int(value)
        except ValueError:
            try:
                float(value)
            except ValueError:
                raise ConfigError(f"--seeds: {shown!r} is not a seed or a range a..b") from None
    if seed is None or seed < 0:
        raise ConfigError(f"--seeds: {shown!r} is not a seed (a whole number >= 0)")
    return seed


def _check_count(n: int) -> None:
    if n > MAX_SEEDS:
        raise ConfigError(
            f"--seeds: {n} seeds, at most {MAX_SEEDS} (each is a whole run per policy); the "
            "published tables use 10, e.g. --seeds 1..10"
        )


def parse_seeds(text: str | Sequence[object]) -> list[int]:
    """'42..51' / '42,43,50..51' / [42, 43] -> sorted unique seeds; ConfigError otherwise."""
    seeds: set[int] = set()
    if not isinstance(text, str):
        seeds.update(_seed(s, str(s)) for s in text)
    else:
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            if ".." in part:
                a, b = part.split("..", 1)
                lo, hi = _seed(a.strip(), part), _seed(b.strip(), part)
                if hi < lo:
                    raise ConfigError(f"--seeds: {part!r} is a reversed range (write {hi}..{lo})")
                _check_count(len(seeds) + hi - lo + 1)
                seeds.update(range(lo, hi + 1))
            else:
                seeds.add(_seed(part, part))
    _check_count(len(seeds))
    if not seeds:
        raise ConfigError("--seeds: no seed given")
    return sorted(seeds)
