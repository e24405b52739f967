"""Kubernetes resource quantities (`24Gi`, `1500m`, `1e3`), parsed and formatted.

The grammar is the one of k8s.io/apimachinery `resource.Quantity`: a signed decimal
number, then an optional binary suffix (Ki Mi Gi Ti Pi Ei), decimal suffix
(n u m "" k M G T P E) or decimal exponent (e3, E-2).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

__all__ = ["QuantityError", "parse_quantity", "format_quantity", "QUANTITY_FORMAT_HELP"]

QUANTITY_FORMAT_HELP = (
    "a Kubernetes quantity: a number with an optional suffix, e.g. 24Gi, 16000Mi, 40G or 2.5e10"
)

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_RE = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[numkMGTPE]?)$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(text: str | int | float) -> Decimal:
    """Parse a quantity to an exact Decimal in base units (bytes, cores, ...).

    Raises QuantityError with the offending text for anything else.
    """
    if isinstance(text, bool):
        raise QuantityError(f"{text!r} is not {QUANTITY_FORMAT_HELP}")
    if isinstance(text, int | float):
        if isinstance(text, float) and not math.isfinite(text):
            raise QuantityError(f"{text!r} is not {QUANTITY_FORMAT_HELP}")
        return Decimal(str(text))
    if not isinstance(text, str):
        raise QuantityError(f"{text!r} is not {QUANTITY_FORMAT_HELP}")
    m = _RE.match(text.strip())
    if not m or len(text) > 64:
        raise QuantityError(f"{text!r} is not {QUANTITY_FORMAT_HELP}")
    try:
        num = Decimal(m.group("num"))
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f"{text!r} is not {QUANTITY_FORMAT_HELP}") from exc
    suffix = m.group("suffix")
    if suffix in _BINARY:
        return num * _BINARY[suffix]
    if len(suffix) > 1 and suffix[0] in "eE":  # a decimal exponent; "E" alone is exa
        exp = int(suffix[1:])
        if abs(exp) > 30:
            raise QuantityError(f"{text!r}: exponent out of range")
        return num.scaleb(exp)
    return num * _DECIMAL[suffix]


def format_quantity(value: float | Decimal) -> str:
    """Format a value as the canonical decimal quantity the API server would print.

    Integers print plainly ("42"); fractional values use milli-units ("1500m") when that
    is exact to a thousandth, else nano-units ("1234567n"), as resource.Quantity does for
    DecimalSI values. NaN and infinities are refused: they are not quantities.
    """
    d = Decimal(str(value)) if not isinstance(value, Decimal) else value
    if not d.is_finite():
        raise QuantityError(f"{value!r} cannot be written as a quantity")
    if d == d.to_integral_value():
        return str(int(d))
    milli = d * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    micro = d * 1_000_000
    if micro == micro.to_integral_value():
        return f"{int(micro)}u"
    nano = (d * 1_000_000_000).to_integral_value()
    if nano == 0 and d != 0:
        return "0"
    return f"{int(nano)}n"
